#include "qkv/train/step_graph.h"

#include "qkv/core/cuda.h"
#include "qkv/core/rng.h"
#include "qkv/ops/clip.h"

namespace qkv::train {

bool step_graphs_wanted(Device device) {
  return !device.is_cpu() && cuda::graph_use() == cuda::GraphUse::decoding_and_training;
}

std::string StepGraph::refusal(TrainingTask& task, bool data_parallel) {
  if (!task.has_fixed_shape_batches())
    return "the task's micro-batches change shape from step to step (a recording replays one shape)";
  if (data_parallel) return "the run is data-parallel (mpirun: its gradients' collectives are not recorded)";
  return "";
}

StepGraph::StepGraph(TrainingTask& task, const TrainConfig& cfg, Adam& adam, AutocastWeights& casts, Mode mode)
    : task_(task), cfg_(cfg), adam_(adam), casts_(casts), mode_(mode), gen_(task.dropout_generator()) {
  const std::string why = refusal(task, false);
  QKV_CHECK(why.empty(), "train: a step cannot be recorded: ", why);
  const Device d = task.device();
  QKV_CHECK(mode == Mode::emulated || !d.is_cpu(), "train: a CUDA graph records a step on a GPU, not on the ", d.str());
  if (mode == Mode::graph) graph_ = std::make_unique<cuda::Graph>(d.index);
  adam_.keep_step_numbers_on_device();
  outputs_ = Tensor::zeros({cfg.gradient_accumulation_steps + 2}, DType::f32, d);
  offset_word_ = Tensor::zeros({2}, DType::i32, d);
}

StepGraph::~StepGraph() = default;

// The word every draw of the recorded step adds to its counters (kernels/dropout_mask.h).
const uint64_t* StepGraph::offset_word() const {
  return reinterpret_cast<const uint64_t*>(offset_word_.data<int32_t>());
}

void StepGraph::set_offset(uint64_t offset) {
  offset_word_.copy_(Tensor::from_blob(&offset, {2}, DType::i32));
}

// One step's device work, as train_step (trainer.cpp) queues it in a process alone: each micro-batch's
// forward and backward, its loss copied into outputs_; clipping's [‖g‖, factor] beside them; the
// update, reading the step's numbers from the device; the gradients dropped (set_to_none).
void StepGraph::work() {
  const int64_t accum = cfg_.gradient_accumulation_steps;
  {
    const AutocastWeights::Scope weights_bf16 = casts_.scope(cfg_.autocast);
    for (int64_t micro = 0; micro < accum; ++micro) {
      Autocast autocast(cfg_.autocast);
      const Tensor loss = task_.micro_loss(inputs_[static_cast<size_t>(micro)], 1.0, accum);
      outputs_.slice(0, micro, micro + 1).copy_(loss.reshape({1}));
    }
  }
  const Tensor clip = cfg_.grad_clip > 0
                          ? clip_coefficient(gradients(task_.model().module().parameters()), cfg_.grad_clip)
                          : Tensor();
  if (clip.defined()) outputs_.slice(0, accum, accum + 2).copy_(clip);
  adam_.update(clip.defined() ? clip.slice(0, 1, 2) : Tensor(), &casts_);
  adam_.zero_grad();
}

void StepGraph::record() {
  Generator& shared = default_generator();
  const uint64_t shared_before = shared.counter();
  recorded_counter_ = gen_ ? gen_->counter() : 0;
  recorded_lr_ = adam_.lr(), recorded_t_ = adam_.steps();
  // A capture runs nothing: where it cannot be made, the host state goes back to the step's start —
  // the generators, Adam's t (the trainer's eager step counts it again), the gradients the recording
  // made, and autocast's copies, which the recording may have noted as cast — and Refused says why.
  // (The emulation's recording ran the step: there is no going back, and the error stays an error.)
  auto refuse = [&](const std::string& why) {
    if (gen_) gen_->set_counter_offset(nullptr);
    if (mode_ == Mode::emulated) throw Error(why);
    if (gen_) gen_->set_counter(recorded_counter_);
    shared.set_counter(shared_before);
    adam_.set_steps(recorded_t_ - 1);
    adam_.zero_grad();
    for (const Tensor& p : task_.model().module().parameters()) ++p.impl().storage->writes;
    throw Refused(why);
  };
  set_offset(0);
  if (gen_) gen_->set_counter_offset(offset_word());
  try {
    if (mode_ == Mode::graph) {
      graph_->capture([this] { work(); });
    } else {
      const cuda::EmulatedCapture no_host_reads;  // (what the capture would refuse)
      work();
    }
  } catch (const std::exception& e) {  // (qkv's errors, and a library's: TMA's encoding, an allocation)
    refuse(e.what());
  }
  if (gen_) gen_->set_counter_offset(nullptr);
  if (shared.counter() != shared_before)
    refuse("train: the recorded step drew from the default generator, whose counter a replay does not move "
           "(the model's dropout must draw from the task's generator)");
  span_ = gen_ ? gen_->counter() - recorded_counter_ : 0;
  recorded_ = true;
}

void StepGraph::replay() {
  if (mode_ == Mode::graph) return graph_->replay();
  // The emulation: the recorded step's host code again, with the host state of the recording.
  const float lr = adam_.lr();
  const int64_t t = adam_.steps();
  adam_.set_lr(recorded_lr_), adam_.set_steps(recorded_t_);
  if (gen_) {
    gen_->set_counter(recorded_counter_);
    gen_->set_counter_offset(offset_word());
  }
  try {
    const cuda::EmulatedCapture no_host_reads;
    work();
  } catch (...) {
    if (gen_) gen_->set_counter_offset(nullptr);
    adam_.set_lr(lr), adam_.set_steps(t);
    throw;
  }
  if (gen_) gen_->set_counter_offset(nullptr);
  adam_.set_lr(lr), adam_.set_steps(t);
}

StepGraph::Outcome StepGraph::run(int64_t step, double lr) {
  const int64_t accum = cfg_.gradient_accumulation_steps;
  Outcome out;
  // the micro-batches, into the tensors the recording reads
  const bool first = inputs_.empty();
  for (int64_t micro = 0; micro < accum; ++micro) {
    const TrainingTask::MicroBatch b = task_.micro_batch(step, micro, accum);
    QKV_CHECK(b.share == 1.0, "train: a recorded step's micro-batch is a process's share of it");
    if (first) {
      inputs_.emplace_back();
      for (const Tensor& x : b.inputs) inputs_.back().push_back(Tensor::empty(x.shape(), x.dtype(), task_.device()));
    }
    std::vector<Tensor>& in = inputs_[static_cast<size_t>(micro)];
    QKV_CHECK(in.size() == b.inputs.size(), "train: micro-batch ", micro, " of step ", step, " has ",
              b.inputs.size(), " inputs, the recorded step ", in.size());
    for (size_t k = 0; k < in.size(); ++k) {
      QKV_CHECK(b.inputs[k].shape() == in[k].shape() && b.inputs[k].dtype() == in[k].dtype(), "train: micro-batch ",
                micro, " of step ", step, ": input ", k, " is ", b.inputs[k].str(), ", the recorded step's ",
                in[k].str(), " (a recorded step replays one shape)");
      in[k].copy_(b.inputs[k]);
    }
    out.tokens += b.tokens;
  }
  // the step's numbers: Adam's lr and t, dropout's counter offset
  adam_.set_lr(static_cast<float>(lr));
  adam_.advance();
  const uint64_t start = gen_ ? gen_->counter() : 0;
  if (!recorded_) {
    record();
    if (mode_ == Mode::graph) replay();  // (a capture runs nothing; the emulation's recording ran the step)
  } else {
    set_offset(start - recorded_counter_);
    replay();
  }
  if (gen_) gen_->set_counter(start + span_);
  // the losses and clipping's numbers, in one read (it waits for the step)
  const Tensor host = outputs_.to(Device::cpu());
  const float* v = host.data();
  for (int64_t micro = 0; micro < accum; ++micro)
    out.loss += static_cast<double>(v[micro]) / static_cast<double>(accum);  // (as train_step sums them)
  out.grad_norm = cfg_.grad_clip > 0 ? static_cast<double>(v[accum]) : 0.0;
  return out;
}

}  // namespace qkv::train
