#include "qkv/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "metrics.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/io/progress.h"
#include "qkv/models/model_file.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"
#include "qkv/ops/clip.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/data_parallel.h"
#include "qkv/train/run_context.h"
#include "qkv/train/step_graph.h"
#include "qkv/train/train_state.h"

namespace qkv::train {

using nlohmann::json;

// ---- config ------------------------------------------------------------------------------------

const io::Fields<TrainConfig>& TrainConfig::fields() {
  using F = io::Fields<TrainConfig>;
  using C = TrainConfig;
  static const F f("train config",
                   {
                       F::integer("max_iters", &C::max_iters, 0),
                       F::integer("batch_size", &C::batch_size, 1),
                       // at most 1024 micro-batches a step: nanoGPT's GPT-2 recipe takes 40 (5 × 8 GPUs);
                       // 10⁹ made one optimizer step take days (issue 43)
                       F::integer("gradient_accumulation_steps", &C::gradient_accumulation_steps, 1, 1024),
                       F::choice("optimizer", &C::optimizer),
                       F::number("learning_rate", &C::learning_rate, 0, 10),
                       F::number("min_lr", &C::min_lr, 0, 10),
                       F::choice("schedule", &C::schedule),
                       F::integer("warmup_iters", &C::warmup_iters, 0),
                       F::integer("lr_decay_iters", &C::lr_decay_iters, 0),
                       F::number("beta1", &C::beta1, 0, 0.999999),
                       F::number("beta2", &C::beta2, 0, 0.999999),
                       F::number("eps", &C::eps, 0, 1),
                       F::number("weight_decay", &C::weight_decay, 0, 10),
                       F::number("grad_clip", &C::grad_clip, 0, 1e30),
                       F::integer("eval_interval", &C::eval_interval, 0),
                       F::integer("eval_iters", &C::eval_iters, 1),
                       F::integer("log_interval", &C::log_interval, 1),
                       F::integer("checkpoint_interval", &C::checkpoint_interval, 0),
                       F::integer("keep_checkpoints", &C::keep_checkpoints, 0),
                       F::unsigned_integer("seed", &C::seed),
                       F::choice("dtype", &C::autocast),
                       F::number("label_smoothing", &C::label_smoothing, 0, 0.999),
                       F::choice("model_dtype", &C::model_dtype, {io::StoreAs::kF32, io::StoreAs::kF16, io::StoreAs::kBF16}),
                       F::number("bucket_cap_mb", &C::bucket_cap_mb, 0.001, 1e6),
                       F::choice("gradient_sync", &C::gradient_sync),
                       F::text("metric_for_best_model", &C::metric_for_best_model),
                       F::any("greater_is_better", &C::greater_is_better),
                       F::number("early_stopping_threshold", &C::early_stopping_threshold, 0, 1e30),
                       F::integer("early_stopping_patience", &C::early_stopping_patience, 0),
                       F::boolean("keep_best", &C::keep_best),
                   });
  return f;
}

std::pair<std::string, json> model_section(const json& model, const std::string& default_type) {
  QKV_CHECK(model.is_object(), "the config's \"model\" must be an object, got ", model.dump());
  json hyper = model;
  std::string type = default_type;
  if (hyper.contains("type")) {
    QKV_CHECK(hyper["type"].is_string(), "model.type must be a model type's name, got ", hyper["type"].dump());
    type = hyper["type"].get<std::string>();
    hyper.erase("type");
  }
  return {type, hyper};
}

TrainingTask::Rows TrainingTask::shard_rows(int64_t B, Generator& gen, const char* task) const {
  const Rows r{shard_.first(B), shard_.count(B)};
  QKV_CHECK(r.count > 0, task, ": batch_size ", B, " cannot be split over ", shard_.world, " processes");
  if (shard_.world > 1)
    gen.set_shard(static_cast<uint64_t>(r.first), static_cast<uint64_t>(r.count), static_cast<uint64_t>(B));
  return r;
}

void TrainingTask::backward_share(const Tensor& loss, double share, int64_t accum) {
  if (share == 1.0 && accum == 1) return loss.backward();
  mul(loss, static_cast<float>(share) / static_cast<float>(accum)).backward();
}

TrainingTask::MicroBatch TrainingTask::micro_batch(int64_t, int64_t, int64_t) {
  QKV_CHECK(false, "train: this task's micro-batches are not of one shape (no recorded steps)");
  return {};
}

Tensor TrainingTask::micro_loss(const std::vector<Tensor>&, double, int64_t) {
  QKV_CHECK(false, "train: this task's micro-batches are not of one shape (no recorded steps)");
  return {};
}

std::vector<ParamGroup> TrainingTask::param_groups(float wd) {
  return decay_matrices_only(model().module().named_parameters(), wd);
}

// ---- the loop ----------------------------------------------------------------------------------

namespace {

std::string fmt(double v, const char* f = "%.4g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

Adam make_optimizer(TrainingTask& task, const TrainConfig& cfg) {
  AdamOptions ao;
  ao.lr = static_cast<float>(cfg.learning_rate), ao.beta1 = static_cast<float>(cfg.beta1);
  ao.beta2 = static_cast<float>(cfg.beta2), ao.eps = static_cast<float>(cfg.eps);
  ao.decoupled_weight_decay = cfg.optimizer == Optimizer::adamw;
  return Adam(task.param_groups(static_cast<float>(cfg.weight_decay)), ao);
}

LrSchedule make_schedule(TrainingTask& task, const TrainConfig& cfg) {
  LrSchedule sched;
  sched.kind = cfg.schedule, sched.lr = cfg.learning_rate, sched.min_lr = cfg.min_lr;
  sched.warmup_steps = cfg.warmup_iters, sched.decay_steps = cfg.lr_decay_iters;
  sched.d_model = task.model().width();  // inverse_sqrt: d_model for a Transformer, n_embd for a GPT
  return sched;
}

// The parameters move before the optimizer makes its state beside them (and before --resume
// copies a checkpoint's values into them); the task moves its batches.
void move_to_device(TrainingTask& task, const RunContext& run, Device device) {
  if (device.is_cpu()) return;
  QKV_CHECK(!run.comm(), "train: data-parallel training (mpirun) runs on the CPU only so far, not on ", device.str());
  task.model().module().to(device);
  task.set_device(device);
}

// Data-parallel: every rank trains on its shard of each batch.
void shard_data(TrainingTask& task, const RunContext& run) {
  if (run.comm()) task.set_data_shard({run.comm()->rank(), run.comm()->size()});
}

// Data-parallel: rank 0's weights everywhere (the same as each rank's own when they were built
// from the same seed, and the checkpoint's on --resume), and a reducer for the gradients.
std::unique_ptr<GradientReducer> start_data_parallel(nn::Module& model, const RunContext& run, const TrainConfig& cfg) {
  if (!run.comm()) return nullptr;
  broadcast_parameters(model.parameters(), *run.comm(), 0);
  if (cfg.gradient_sync == GradientSync::none) return nullptr;
  return std::make_unique<GradientReducer>(model.parameters(), *run.comm(),
                                           static_cast<int64_t>(cfg.bucket_cap_mb * 1024 * 1024),
                                           cfg.gradient_sync == GradientSync::overlap
                                               ? GradientReducer::Mode::overlap
                                               : GradientReducer::Mode::after_backward);
}

// One optimizer step's figures.
struct StepResult {
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0;
  int64_t tokens = 0;
  bool stop = false;  // some rank was asked to stop after this step
};

// The loop's body: gradient_accumulation_steps micro-batches forward and backward (the gradients
// summed over the ranks with the last), clipping, the optimizer step.
StepResult train_step(TrainingTask& task, const TrainConfig& cfg, const RunContext& run, Adam& adam,
                      AutocastWeights& casts, const LrSchedule& sched, GradientReducer* reducer, int64_t step,
                      bool stop_requested) {
  StepResult r;
  r.lr = sched.at(step);
  adam.set_lr(static_cast<float>(r.lr));
  const auto t0 = std::chrono::steady_clock::now();
  {
    // dtype bf16: the weights' bf16 copies, made once for all the step's passes (ops/autocast.h)
    const AutocastWeights::Scope weights_bf16 = casts.scope(cfg.autocast);
    for (int64_t micro = 0; micro < cfg.gradient_accumulation_steps; ++micro) {
      // data-parallel: the last micro-batch's backward also sums the gradients over the ranks
      if (reducer) reducer->sync_next_backward(micro + 1 == cfg.gradient_accumulation_steps);
      // dtype bf16: mixed precision (bf16 GEMMs in forward and backward, f32 master weights)
      Autocast autocast(cfg.autocast);
      StepStats s = task.train_micro_step(step, micro, cfg.gradient_accumulation_steps);
      r.loss += s.share * s.loss / static_cast<double>(cfg.gradient_accumulation_steps);
      r.tokens += s.tokens;
    }
  }  // (the scope ends before the optimizer changes the weights)
  if (reducer) reducer->finish();  // the summed gradients are in .grad
  // the global loss and tokens for the log, and whether any rank was asked to stop
  r.stop = run.any_rank_stops(stop_requested, r.loss, r.tokens);
  QKV_CHECK(std::isfinite(r.loss), "train: the loss became ", r.loss, " at step ", step,
            " (try a lower learning_rate or grad_clip)");
  nn::Module& model = task.model().module();
  // clipping's [‖g‖, factor] stay on the parameters' device for Adam's list update; ‖g‖ is read once
  // the whole step is queued (on a GPU the host never waits inside a step, past the loss)
  const Tensor clip = cfg.grad_clip > 0 ? clip_coefficient(gradients(model.parameters()), cfg.grad_clip) : Tensor();
  // (and, in bf16, the weights' copies for the next step's passes in the same pass: ops/autocast.h)
  adam.step(clip.defined() ? clip.slice(0, 1, 2) : Tensor(), &casts);
  adam.zero_grad();
  r.grad_norm = clip.defined() ? clip.slice(0, 0, 1).item() : 0.0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// The loop's body as a replay of the recorded step (train/step_graph.h): the same figures, one read of
// the device a step.
StepResult graph_step(StepGraph& graph, const LrSchedule& sched, const RunContext& run, int64_t step,
                      bool stop_requested) {
  StepResult r;
  r.lr = sched.at(step);
  const auto t0 = std::chrono::steady_clock::now();
  const StepGraph::Outcome o = graph.run(step, r.lr);
  r.loss = o.loss, r.grad_norm = o.grad_norm, r.tokens = o.tokens;
  r.stop = run.any_rank_stops(stop_requested, r.loss, r.tokens);
  QKV_CHECK(std::isfinite(r.loss), "train: the loss became ", r.loss, " at step ", step,
            " (try a lower learning_rate or grad_clip)");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// The best evaluation so far and how many evaluations since have not beaten it (issue 49).
class BestModel {
 public:
  explicit BestModel(const TrainConfig& cfg) : metric_(cfg.metric_for_best_model), cfg_(cfg) {
    QKV_CHECK(!metric_.empty(), "train: metric_for_best_model must name an evaluation metric (val_loss, val_bleu, …)");
    QKV_CHECK(cfg.greater_is_better.is_null() || cfg.greater_is_better.is_boolean(),
              "train: greater_is_better must be true, false or null (the metric's name decides), got ",
              cfg.greater_is_better.dump());
    auto ends = [&](const char* e) { return metric_.ends_with(e); };
    greater_ = cfg.greater_is_better.is_boolean() ? cfg.greater_is_better.get<bool>()
                                                  : !(ends("loss") || ends("perplexity") || ends("ppl"));
  }
  bool active() const { return cfg_.keep_best || cfg_.early_stopping_patience > 0; }
  const std::string& metric() const { return metric_; }
  bool greater() const { return greater_; }
  // An evaluation's row: true when it improved on the best (the first evaluation always does). A
  // row without the metric is an error naming the metrics there are — from the first evaluation.
  bool add(const json& row) {
    if (!row.contains(metric_) || !row[metric_].is_number()) {
      std::string have;
      for (auto& [k, v] : row.items())
        if (k != "step" && k != "elapsed_s") have += (have.empty() ? "" : ", ") + k;
      throw Error(detail::concat("train: metric_for_best_model \"", metric_, "\" is not among this task's evaluation "
                                 "metrics (", have, ")"));
    }
    const double v = row[metric_].get<double>();
    const bool better = step_ < 0 || (greater_ ? v > value_ + cfg_.early_stopping_threshold
                                               : v < value_ - cfg_.early_stopping_threshold);
    if (better) value_ = v, step_ = row.value("step", int64_t{0}), stalls_ = 0;
    else ++stalls_;
    return better;
  }
  // A resumed run: the evaluations before its step, in order.
  void replay(const std::vector<json>& rows) {
    for (const json& r : rows)
      if (r.contains(metric_) && r[metric_].is_number()) add(r);
  }
  bool exhausted() const { return cfg_.early_stopping_patience > 0 && stalls_ >= cfg_.early_stopping_patience; }
  int64_t step() const { return step_; }
  double value() const { return value_; }
  int64_t stalls() const { return stalls_; }

 private:
  std::string metric_;
  const TrainConfig& cfg_;
  bool greater_ = false;
  double value_ = 0;
  int64_t step_ = -1, stalls_ = 0;
};

}  // namespace

TrainResult run_training(TrainingTask& task, const TrainConfig& cfg, const TrainerOptions& opt) {
  // Data-parallel: every rank runs this loop on its shard; rank 0 (the lead) alone writes and prints.
  // From here on Ctrl-C means "save and stop"; the previous handler comes back however we leave.
  RunContext run(opt.comm, opt.out_dir, opt.quiet);
  shard_data(task, run);
  run.prepare_output_folder();
  move_to_device(task, run, opt.device);
  nn::Module& model = task.model().module();
  Adam adam = make_optimizer(task, cfg);
  const LrSchedule sched = make_schedule(task, cfg);
  json meta = task.model_metadata();
  meta["config"] = opt.full_config;
  Checkpoint checkpoint(run, model, adam, std::move(meta), cfg.model_dtype, cfg.keep_checkpoints);
  checkpoint.check_ranks_agree();

  Metrics metrics(opt.out_dir);
  TrainState state;  // where the run stands: step, tokens, time (its rng and optimizer steps when saved)
  if (opt.resume) {
    state = checkpoint.resume();
    task.set_rng_state(state.rng);
    if (state.metrics) metrics.restore(json(*state.metrics), state.step);
    else if (run.lead()) metrics.load_until(state.step);  // a checkpoint from before the metrics travelled with it
    if (run.lead())
      std::fprintf(stderr, "resuming from %s at step %lld\n", checkpoint.path().c_str(),
                   static_cast<long long>(state.step));
  }
  std::unique_ptr<GradientReducer> reducer = start_data_parallel(model, run, cfg);
  BestModel best(cfg);
  if (best.active()) best.replay(metrics.rows());
  bool early_stop = false;  // the lead's verdict, agreed on by every rank at the next evaluation

  const double elapsed_before = state.elapsed_s;
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  // The checkpoint (with the metrics so far), then the metrics files derived from the same rows.
  auto save = [&](int64_t step) {
    if (!run.lead()) return;
    TrainState s{step, adam.steps(), task.rng_state(), elapsed(), state.tokens, metrics.rows()};
    checkpoint.save(s);
    metrics.write();
  };
  TrainResult res;
  bool stop_requested = false;  // on_metrics asked to stop
  auto add_row = [&](const json& row) {
    if (!run.lead()) return;
    metrics.add(row);
    if (opt.on_metrics && !opt.on_metrics(row)) stop_requested = true;
  };
  io::ProgressBar bar("train", cfg.max_iters, state.step);
  if (run.quiet()) bar.mute();
  // The evaluation bars inside the task print nothing where the train bar prints nothing.
  const io::ProgressBar::MutedScope mute_bars(run.quiet());
  auto evaluate = [&](int64_t step) {
    const auto t0 = std::chrono::steady_clock::now();
    model.eval();
    {
      const ThreadBudget threads;  // the cores free now, as for a step (below)
      res.last_eval = task.evaluate(step);
    }
    model.train();
    // the ETA is the training steps' (the step-0 evaluation is not a step)
    bar.exclude(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    json row = {{"step", step}};
    std::string line = "step " + std::to_string(step) + ":";
    for (auto& [k, v] : res.last_eval) row[k] = v, line += " " + k + " " + fmt(v, "%.4f");
    row["elapsed_s"] = elapsed();
    add_row(row);
    // the best model so far and early stopping: the lead decides, every rank stops with it
    bool stop = false;
    if (best.active() && run.lead()) {
      if (best.add(row)) {
        json mm = checkpoint.meta();
        mm["trained_steps"] = step;
        mm["best"] = {{"metric", best.metric()}, {"value", best.value()}, {"step", step}};
        models::save_model_file(run.path("best.safetensors"), model, mm, cfg.model_dtype);
        line += "  (best " + best.metric() + ": best.safetensors)";
      } else if (cfg.early_stopping_patience > 0) {
        line += detail::concat("  (", best.metric(), " not better than ", fmt(best.value(), "%.4f"), " at step ",
                               best.step(), ": ", best.stalls(), " of ", cfg.early_stopping_patience,
                               " evaluations of patience)");
      }
      stop = best.exhausted();
    }
    if (!run.quiet()) bar.write(line);
    if (best.active() && run.comm()) {
      uint8_t s = stop ? 1 : 0;
      run.comm()->broadcast(&s, 1, 0);
      stop = s != 0;
    }
    early_stop = stop;
  };

  model.train();
  AutocastWeights casts(model.parameters());  // dtype bf16: the weights linear casts, once a step
  // Recorded steps (train/step_graph.h): the run's first step eager, the next recorded, the rest replays.
  const bool graphs_asked = opt.step_graphs == TrainerOptions::StepGraphs::on ||
                            (opt.step_graphs == TrainerOptions::StepGraphs::automatic && step_graphs_wanted(opt.device));
  bool graphs = graphs_asked;
  std::unique_ptr<StepGraph> graph;
  auto graphs_off = [&](const std::string& why) {
    graphs = false;
    // (said even with -q: the user asked for graphs)
    const std::string line = "train: steps not recorded (CUDA graphs): " + why + "; each step runs as usual";
    if (run.lead() && run.quiet()) std::fprintf(stderr, "%s\n", line.c_str());
    else if (run.lead()) bar.write(line);
  };
  if (graphs_asked) {
    const std::string why = StepGraph::refusal(task, run.comm() != nullptr);
    if (!why.empty()) graphs_off(why);
  }
  double tok_rate = 0;
  const int64_t first_step = state.step;
  int64_t step = state.step;
  for (; step < cfg.max_iters; ++step) {
    if (cfg.eval_interval > 0 && step % cfg.eval_interval == 0) {
      evaluate(step);
      if (early_stop) break;  // this step's weights were evaluated: nothing to train or evaluate again
    }
    // Each step on the cores free as it starts (core/thread_budget.h): beside a busy core, OpenMP's
    // even split waits at every region for the thread that shares it, and 2 threads trained at
    // 0.4–0.6× the speed of 1. A quiet machine keeps every thread. (Sums split over another number
    // of threads round differently: a run is reproducible bit for bit at a fixed count —
    // QKV_THREAD_BUDGET=off, or --threads 1.)
    StepResult r;
    {
      const ThreadBudget threads;
      bool done = false;
      if (graphs && step > first_step) {
        try {
          if (!graph)
            graph = std::make_unique<StepGraph>(task, cfg, adam, casts,
                                                opt.device.is_cpu() ? StepGraph::Mode::emulated : StepGraph::Mode::graph);
          r = graph_step(*graph, sched, run, step, stop_requested);
          done = true;
          ++res.recorded_steps;
        } catch (const StepGraph::Refused& e) {
          graph.reset();
          graphs_off(e.what());
        }
      }
      if (!done) r = train_step(task, cfg, run, adam, casts, sched, reducer.get(), step, stop_requested);
    }
    state.tokens += r.tokens;
    const double rate = static_cast<double>(r.tokens) / std::max(r.seconds, 1e-9);
    tok_rate = tok_rate == 0 ? rate : 0.9 * tok_rate + 0.1 * rate;
    res.last_loss = r.loss;
    if (step % cfg.log_interval == 0 || step + 1 == cfg.max_iters) {
      json row = {{"step", step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                  {"tokens_per_s", rate}, {"elapsed_s", elapsed()}};
      if (run.comm()) row["step_s"] = r.seconds;
      if (reducer)  // seconds in collectives, and of those, waited for after backward
        row["allreduce_s"] = reducer->last_comm_seconds(), row["allreduce_wait_s"] = reducer->last_wait_seconds();
      add_row(row);
    }
    bar.set_postfix({{"loss", fmt(r.loss, "%.4f")}, {"lr", fmt(r.lr, "%.2e")},
                     {std::string(task.unit()) + "/s", io::ProgressBar::format_rate(tok_rate)}});
    bar.update(1);
    if (cfg.checkpoint_interval > 0 && (step + 1) % cfg.checkpoint_interval == 0 && step + 1 < cfg.max_iters)
      save(step + 1);
    if (r.stop) {
      ++step;
      res.interrupted = true;
      break;
    }
  }
  if (!res.interrupted && !early_stop && cfg.eval_interval > 0) evaluate(step);
  bar.close();
  save(step);
  res.steps_done = step;
  res.tokens_per_second = tok_rate;
  res.early_stopped = early_stop;
  if (best.step() >= 0) res.best_step = best.step(), res.best_value = best.value();
  if (early_stop && run.lead())  // said even with -q, as an interruption is
    std::fprintf(stderr,
                 "early stopping at step %lld: %s has not improved (by more than %g) for %lld evaluations; the best, "
                 "%.4f at step %lld, is %s\n",
                 static_cast<long long>(step), best.metric().c_str(), cfg.early_stopping_threshold,
                 static_cast<long long>(best.stalls()), best.value(), static_cast<long long>(best.step()),
                 run.path("best.safetensors").c_str());
  if (res.interrupted && run.lead())
    std::fprintf(stderr, "interrupted: saved %s at step %lld; continue with --resume\n", checkpoint.path().c_str(),
                 static_cast<long long>(step));
  return res;
}

}  // namespace qkv::train
