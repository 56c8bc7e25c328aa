// The training loop shared by every model qkv trains (language models, translators, image
// classifiers, captioners): optimizer and schedule, gradient accumulation and clipping, a progress bar with loss,
// tokens/s, learning rate and ETA, periodic evaluation, metrics (JSONL + CSV) and a loss-curve plot
// (SVG), atomic checkpoints, exact --resume, and Ctrl-C that saves and exits cleanly.
//
// What differs between models lives in a TrainingTask: how to run one micro-batch forward and
// backward, how to evaluate, and what to store in the model file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/rng.h"
#include "qkv/distributed/communicator.h"
#include "qkv/io/config.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/model.h"
#include "qkv/ops/autocast.h"
#include "qkv/train/optim.h"

namespace qkv::train {

enum class GradientSync : uint8_t { overlap, after_backward, none };
constexpr EnumTable<GradientSync, 3> enum_table(GradientSync) {
  return {"gradient sync", {{{GradientSync::overlap, "overlap"}, {GradientSync::after_backward, "after_backward"},
                             {GradientSync::none, "none"}}}};
}

// The "train" section of a config. Names follow nanoGPT's train.py where it has one.
struct TrainConfig {
  int64_t max_iters = 2000;
  int64_t batch_size = 12;                  // sequences (LM) or the token budget per batch (translation)
  int64_t gradient_accumulation_steps = 1;
  Optimizer optimizer = Optimizer::adamw;   // adamw (decoupled decay) | adam (L2 decay, the paper)
  double learning_rate = 1e-3, min_lr = 1e-4;
  Schedule schedule = Schedule::cosine;     // cosine | constant | inverse_sqrt (the paper's)
  int64_t warmup_iters = 100, lr_decay_iters = 2000;
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, grad_clip = 1.0;
  int64_t eval_interval = 250, eval_iters = 200, log_interval = 10, checkpoint_interval = 500;
  int64_t keep_checkpoints = 0;  // > 0: also keep model-<step>.safetensors (f32) of the last N saves, for `qkv average`
  uint64_t seed = 1337;
  // JSON "dtype": the dtype linear layers compute in — bf16 is mixed precision (bf16 matmuls, f32
  // master weights), as torch.autocast
  AutocastDType autocast = AutocastDType::f32;
  double label_smoothing = 0.0;             // ε of the cross-entropy (translation: 0.1, as the paper)
  // JSON "model_dtype": how model.safetensors stores the weights (f32 | f16 | bf16)
  io::StoreAs model_dtype = io::StoreAs::kF32;
  // Data-parallel runs (mpirun): gradients are summed over the ranks in buckets of about this many
  // MB, each sent as soon as backward has filled it (DistributedDataParallel's bucket_cap_mb; its
  // 25 MB default would make a small CPU model one or two buckets and hide little)
  double bucket_cap_mb = 4;
  // How the gradients travel: "overlap" (buckets sent while backward runs), "after_backward" (all
  // at once after it), or "none" — no communication at all, the ranks drifting apart: a
  // benchmarking switch, to time what communication costs and what overlap hides.
  GradientSync gradient_sync = GradientSync::overlap;
  // The best model and early stopping (the HF Trainer's names; Marian's --keep-best and
  // --early-stopping): at each evaluation, metric_for_best_model (a key of the evaluation's row:
  // val_loss, val_bleu, val_acc, …) improves when it beats the best so far by more than
  // early_stopping_threshold — lower is better for names ending in "loss", "perplexity" or "ppl",
  // higher otherwise, unless greater_is_better (true | false; null: that rule) says. keep_best
  // writes best.safetensors (a model file like model.safetensors, with "best": {metric, value,
  // step}) at each improvement; early_stopping_patience = N > 0 stops the run after N evaluations
  // in a row without one (and keeps the best as well). A resumed run picks up both from its rows.
  std::string metric_for_best_model = "val_loss";
  nlohmann::json greater_is_better;  // null (the name decides) | true | false
  double early_stopping_threshold = 0;
  int64_t early_stopping_patience = 0;
  bool keep_best = false;

  static const io::Fields<TrainConfig>& fields();  // the keys of the "train" section
  static TrainConfig from_json(const nlohmann::json& j) { return fields().from_json(j); }
  nlohmann::json to_json() const { return fields().to_json(*this); }
};

// A config's "model" section: {"type": a registered model type (default `default_type`), the rest
// its hyper-parameters}. Returns the type and the hyper-parameters (what models::build_* take).
std::pair<std::string, nlohmann::json> model_section(const nlohmann::json& model, const std::string& default_type);

struct StepStats {
  double loss = 0;     // this micro-batch's mean loss (before dividing by the accumulation steps)
  int64_t tokens = 0;  // target tokens in it (images, for a classifier)
  // Data-parallel: this rank's shard's share of the whole micro-batch's loss (its fraction of the
  // rows or target tokens); backward ran on share · loss, so the ranks' gradients sum to one
  // process's. 1 in one process.
  double share = 1;
};

// Which rows of every global batch this process trains on: rank `rank` of `world` takes rows
// [first(B), first(B) + count(B)) of a batch of B — contiguous, as even as B allows.
struct DataShard {
  int rank = 0, world = 1;
  int64_t first(int64_t B) const { return B * rank / world; }
  int64_t count(int64_t B) const { return B * (rank + 1) / world - first(B); }
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;
  // The model being trained (its parameters, its width for the schedule, its metadata).
  virtual models::Model& model() = 0;
  // Forward and backward of micro-batch `micro` (of `accum`) of step `step`, gradients accumulating;
  // the batch must depend only on (seed, step, micro), so a resumed run sees the same data.
  virtual StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) = 0;
  // Metrics at an evaluation point, e.g. {"val_loss": …, "train_loss_eval": …}; the model is in eval mode.
  virtual std::vector<std::pair<std::string, double>> evaluate(int64_t step) = 0;
  // model_type, model hyper-parameters and tokenizer, stored in every model file and checkpoint.
  virtual nlohmann::json model_metadata() const = 0;
  // The state of the task's own random stream (dropout), saved for an exact resume.
  virtual uint64_t rng_state() const { return 0; }
  virtual void set_rng_state(uint64_t) {}
  // Parameter groups for weight decay (default: decay on matrices only).
  virtual std::vector<ParamGroup> param_groups(float weight_decay);
  // What StepStats::tokens counts, for the progress bar's rate: "tok", or "img" for images.
  virtual const char* unit() const { return "tok"; }

  // ---- recorded steps (train/step_graph.h) ----------------------------------------------------
  // A step graph records one step's device work and replays it, its inputs copied into the tensors
  // the recording read: it needs micro-batches of one shape, and train_micro_step in two halves —
  // the batch on the host, and the device's work on it. A task that has them says so and overrides
  // the three below; train_micro_step must then be micro_batch, its inputs moved to device(),
  // micro_loss, and the loss read.
  struct MicroBatch {
    std::vector<Tensor> inputs;  // host tensors, of one shape at every (step, micro)
    int64_t tokens = 0;          // StepStats::tokens
    double share = 1;            // StepStats::share
  };
  virtual bool has_fixed_shape_batches() const { return false; }
  // Micro-batch `micro` (of `accum`) of step `step`, on the host (the same for the same arguments).
  virtual MicroBatch micro_batch(int64_t step, int64_t micro, int64_t accum);
  // Forward and backward of a micro-batch whose inputs are on device() (micro_batch's, moved there),
  // the gradients accumulating: its mean loss, on the device, not read.
  virtual Tensor micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum);
  // The generator the model's dropout draws from (the task's own stream), or null where it has none.
  virtual Generator* dropout_generator() { return nullptr; }

  // The device the model trains on (TrainerOptions::device), set by the trainer after it moved the
  // model there; the task moves its batches to device() (or its model moves its inputs to its
  // weights'). Every task trains on every device a build has.
  void set_device(Device d) { device_ = d; }
  Device device() const { return device_; }
  // Data-parallel training (train/data_parallel.h): from now on train_micro_step runs on `shard`'s
  // rows of each micro-batch (shard_rows), scales its loss by the rows' share (StepStats::share,
  // backward_share), and draws its dropout as those rows would in one process. Every task does.
  void set_data_shard(DataShard shard) { shard_ = shard; }
  const DataShard& data_shard() const { return shard_; }

 protected:
  DataShard shard_;
  Device device_ = Device::cpu();

  // This process's rows [first, first + count) of a micro-batch of B — all of them in one process
  // — with `gen`, the task's dropout stream, set to draw as those rows would in one process
  // (Generator::set_shard). A batch too small to give every process a row is an error naming `task`.
  struct Rows {
    int64_t first, count;
  };
  Rows shard_rows(int64_t B, Generator& gen, const char* task) const;
  // Backward of loss · share / accum: this micro-batch's part of the step's gradient (share: the
  // shard's fraction of the micro-batch's loss, 1 in one process).
  static void backward_share(const Tensor& loss, double share, int64_t accum);
};

struct TrainerOptions {
  std::string out_dir;        // checkpoint.safetensors, model.safetensors, metrics.jsonl/.csv, loss.svg
  bool resume = false;        // continue from out_dir/checkpoint.safetensors
  nlohmann::json full_config; // stored in the model files
  bool quiet = false;         // no progress bar
  // Sees every row written to metrics.jsonl as it is written — the logged steps ({"step", "loss",
  // "lr", "grad_norm", "tokens_per_s", "elapsed_s"}) and the evaluations ({"step", metrics…}).
  // Returning false stops the run as Ctrl-C does (a checkpoint is saved; TrainResult::interrupted).
  std::function<bool(const nlohmann::json& row)> on_metrics;
  // The processes training together (distributed/communicator.h; `qkv train` passes distributed::world() when
  // mpirun started it). Null: this process alone. With several, rank 0 alone writes files, prints
  // and calls on_metrics; every rank must run the same config.
  distributed::Communicator* comm = nullptr;
  // Where the model trains (`qkv train --device cuda`): the trainer moves its parameters there (the
  // optimizer's state is made there), the task its batches; checkpoints and model files are the
  // CPU's format either way.
  Device device = Device::cpu();
  // Recorded steps (train/step_graph.h): `automatic` — on a GPU with QKV_CUDA_GRAPHS=1, for a task
  // whose batches have one shape, in one process —, `off`, or `on`: wherever they can be (on the
  // CPU the recording is emulated: each replay runs the recorded step's host code again with the
  // host state of the recording, so every number that changes between steps must travel as a
  // graph's would — the tests' way to check a step graph without a GPU).
  enum class StepGraphs : uint8_t { automatic, off, on };
  StepGraphs step_graphs = StepGraphs::automatic;
};

struct TrainResult {
  int64_t steps_done = 0;
  bool interrupted = false;
  bool early_stopped = false;  // early_stopping_patience evaluations passed without an improvement
  // the best evaluation of metric_for_best_model (best_step −1: no evaluation had it)
  int64_t best_step = -1;
  double best_value = 0;
  double last_loss = 0, tokens_per_second = 0;
  int64_t recorded_steps = 0;  // steps run as a replay of a recorded step (train/step_graph.h)
  std::vector<std::pair<std::string, double>> last_eval;
};

TrainResult run_training(TrainingTask& task, const TrainConfig& cfg, const TrainerOptions& opt);

}  // namespace qkv::train
