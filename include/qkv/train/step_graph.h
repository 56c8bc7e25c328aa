// A whole training step recorded once and replayed: its micro-batches' forwards and backwards,
// clipping and the optimizer's update as one CUDA graph (core/cuda.h's Graph) — what PyTorch gets
// from capturing a step whole (torch.cuda.graphs, torch.compile's mode="reduce-overhead"). A small
// GPT's step is some 150–450 kernels, each a few microseconds of arithmetic after a host launch of
// about as many (docs/CUDA.md, "Measured": the GPT at 0.62× torch.compile in bf16); a replay is one
// launch.
//
// A recording bakes every kernel's arguments in, so whatever changes between steps must live in
// device memory the kernels read when they run, written before each replay:
//   the micro-batches     copied into the input tensors the recording read (TrainingTask::micro_batch)
//   the learning rate, t  Adam's per-step numbers (train/optim.h's advance(): lr/(1 − β₁ᵗ), 1/√(1 − β₂ᵗ),
//                         1 − lr·λ, one row a weight-decay group)
//   dropout's counters    the recorded counters plus one word, (the task generator's counter as this
//                         step starts) − (its counter as the recorded step started)
//                         (kernels/dropout_mask.h's offset; Generator::set_counter_offset)
// so a replay draws exactly the masks, and computes exactly the numbers, the step would run eagerly;
// the generator's counter then moves past the step, as it would. The losses and clipping's
// [‖g‖, factor] land in one output tensor, read once a step.
//
//   step k (first of a run):  eager, as always (warm-up: cuBLAS's handles, autocast's bf16 copies,
//                             the optimizer's state)
//   step k + 1:               recorded, then replayed
//   later steps:              replayed
//
// On the CPU there is no graph, and the recording is emulated (TrainerOptions::StepGraphs::on, the
// tests' way): the recorded step's host code runs again at every replay with the host state of the
// recording — the generator's counter, Adam's lr and t — so that a number that did not travel through
// device memory repeats the recorded step's, as a graph's would, and the steps differ from the eager
// ones. What a recording cannot hold — a task whose batches change shape, a data-parallel run (its
// collectives), a model drawing dropout from the default generator — refuses it (refusal(), or
// StepGraph::Refused while recording: the trainer then goes on eagerly and says why).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/cuda.h"
#include "qkv/ops/autocast.h"
#include "qkv/train/optim.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// Whether steps on `device` are recorded when TrainerOptions::step_graphs is automatic:
// QKV_CUDA_GRAPHS=1 on a GPU (opt-in until timed there; unset, only decoding steps are graphs).
bool step_graphs_wanted(Device device);

class StepGraph {
 public:
  enum class Mode : uint8_t { graph, emulated };  // a CUDA graph, or the CPU's emulation (above)

  // Why steps of `task` cannot be recorded, in a data-parallel run (mpirun: a communicator, however
  // many processes) or not (empty: they can).
  static std::string refusal(TrainingTask& task, bool data_parallel);

  // The recording could not be made (a wait for the GPU, a host copy, a draw from the default
  // generator inside the step): nothing of the step ran, and the host state is as it was before.
  struct Refused : Error {
    using Error::Error;
  };

  // For `task` (its model, its device, its dropout generator), the optimizer, autocast's weights and
  // the run's config (accumulation steps, clipping, autocast dtype); nothing is recorded yet.
  StepGraph(TrainingTask& task, const TrainConfig& cfg, Adam& adam, AutocastWeights& casts, Mode mode);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  struct Outcome {
    double loss = 0;       // the micro-batches' losses' mean (as the eager step sums them)
    double grad_norm = 0;  // ‖g‖ before clipping (0 without clipping)
    int64_t tokens = 0;
  };
  // Step `step` at learning rate `lr`: its micro-batches copied in, the step's numbers written, the
  // recorded step replayed (recorded first, the first time); the outcome read from the device.
  Outcome run(int64_t step, double lr);
  bool recorded() const { return recorded_; }

 private:
  void work();  // the step's device work: what is recorded
  void record();
  void replay();
  const uint64_t* offset_word() const;  // offset_word_'s u64, where the kernels read it
  void set_offset(uint64_t offset);

  TrainingTask& task_;
  const TrainConfig& cfg_;
  Adam& adam_;
  AutocastWeights& casts_;
  Mode mode_;
  Generator* gen_;
  std::vector<std::vector<Tensor>> inputs_;  // [micro][input], on the task's device
  std::vector<int64_t> tokens_;              // each micro-batch's
  Tensor outputs_;                           // [accum + 2]: the micro-batches' losses, ‖g‖, clipping's factor
  Tensor offset_word_;                       // [2] i32: one u64, dropout's counter offset
  std::unique_ptr<cuda::Graph> graph_;
  bool recorded_ = false;
  uint64_t recorded_counter_ = 0, span_ = 0;  // the generator's counter as the recorded step began; its draws
  float recorded_lr_ = 0;                     // (the emulation: Adam's host numbers at the recording)
  int64_t recorded_t_ = 0;
};

}  // namespace qkv::train
