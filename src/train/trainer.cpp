#include "qkv/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"
#include "qkv/models/model_file.h"
#include "qkv/io/progress.h"
#include "qkv/train/data_parallel.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::train {

namespace fs = std::filesystem;
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

std::vector<ParamGroup> TrainingTask::param_groups(float wd) {
  return decay_matrices_only(model().module().named_parameters(), wd);
}

// ---- metrics -----------------------------------------------------------------------------------

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C kills at once
}

std::string fmt(double v, const char* f = "%.4g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Rows of {"step": …, name: value, …}, written as JSONL and CSV, plotted as loss curves.
class Metrics {
 public:
  explicit Metrics(std::string dir) : dir_(std::move(dir)) {}

  void load_until(int64_t step) {  // a resumed run keeps the rows before its first step
    std::ifstream in(path("metrics.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        json r = io::parse_json(line, path("metrics.jsonl"));
        if (io::get_or(r, "step", int64_t{-1}) < step) rows_.push_back(r);  // the resumed run redoes step's evaluation
      } catch (const std::exception&) {
        // a torn last line (killed mid-write before atomic writes) is skipped
      }
    }
  }
  // The rows a checkpoint carries (every row before its step): restored on --resume, so that a kill
  // between writing the checkpoint and writing metrics.jsonl loses nothing.
  void restore(const json& rows, int64_t step) {
    rows_.clear();
    for (const json& r : rows)
      if (r.is_object() && io::get_or(r, "step", int64_t{-1}) < step) rows_.push_back(r);
  }
  const std::vector<json>& rows() const { return rows_; }
  void add(json row) { rows_.push_back(std::move(row)); }

  void write() const {
    std::string jsonl, csv;
    std::vector<std::string> cols = {"step"};
    for (const json& r : rows_) {
      jsonl += r.dump() + "\n";
      for (auto& [k, v] : r.items())
        if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
    }
    for (size_t i = 0; i < cols.size(); ++i) csv += (i ? "," : "") + cols[i];
    csv += "\n";
    for (const json& r : rows_) {
      for (size_t i = 0; i < cols.size(); ++i) {
        if (i) csv += ",";
        if (r.contains(cols[i])) csv += r[cols[i]].is_string() ? r[cols[i]].get<std::string>() : r[cols[i]].dump();
      }
      csv += "\n";
    }
    io::write_file_atomic(path("metrics.jsonl"), jsonl);
    io::write_file_atomic(path("metrics.csv"), csv);
    const std::string svg = plot();
    io::write_file_atomic(path("loss.svg"), svg);
    viz::write_picture(path("loss.png"), svg);
  }

 private:
  std::string plot() const {
    viz::Series train{"train loss (per step)", {}, {}};
    std::map<std::string, viz::Series> evals;
    for (const json& r : rows_) {
      const auto step = static_cast<double>(io::get_or(r, "step", int64_t{0}));
      if (r.contains("loss")) train.x.push_back(step), train.y.push_back(r["loss"].get<double>());
      for (auto& [k, v] : r.items())
        if (k.ends_with("_loss") && v.is_number()) {
          auto& s = evals[k];
          s.name = k == "val_loss" ? "validation loss" : k == "train_loss" ? "train loss (eval)" : k;
          s.x.push_back(step), s.y.push_back(v.get<double>());
        }
    }
    std::vector<viz::Series> series;
    if (!train.x.empty()) series.push_back(train);
    for (auto& [k, s] : evals) series.push_back(s);
    viz::LinePlotOptions o;
    o.title = "Training loss";
    o.x_label = "step";
    o.y_label = "cross-entropy (nats/token)";
    return viz::line_plot_svg(series, o);
  }
  std::string path(const char* name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
  std::vector<json> rows_;
};

}  // namespace

// ---- the loop ----------------------------------------------------------------------------------

TrainResult run_training(TrainingTask& task, const TrainConfig& cfg, const TrainerOptions& opt) {
  QKV_CHECK(!opt.out_dir.empty(), "train: no output directory");
  // Data-parallel: every rank runs this loop on its shard; rank 0 (the lead) alone writes and prints.
  distributed::Communicator* comm = opt.comm && opt.comm->size() > 1 ? opt.comm : nullptr;
  const bool lead = !comm || comm->rank() == 0;
  const bool quiet = opt.quiet || !lead;
  if (comm) {
    QKV_CHECK(task.supports_data_parallel(), "train: this task cannot be split over processes (it does not ",
              "implement TrainingTask::supports_data_parallel)");
    task.set_data_shard({comm->rank(), comm->size()});
  }
  g_interrupted = false;
  // from here on, Ctrl-C means "save and stop"; the previous handler comes back however we leave
  // (data-parallel: the job's processes keep SIGINT and SIGTERM blocked, and the loop asks the
  // communicator for them every step — distributed/communicator.h)
  struct RestoreSigint {
    void (*prev)(int);
    ~RestoreSigint() { std::signal(SIGINT, prev); }
  } restore{std::signal(SIGINT, on_sigint)};
  std::error_code ec;
  if (lead) {
    fs::create_directories(opt.out_dir, ec);
    QKV_CHECK(!ec, "train: cannot create output directory '", opt.out_dir, "': ", ec.message());
    if (const int n = io::remove_stale_temporaries(opt.out_dir); n > 0 && !quiet)
      std::fprintf(stderr, "train: removed %d temporary file%s left by a killed run in %s\n", n, n > 1 ? "s" : "",
                   opt.out_dir.c_str());
  }
  const std::string ckpt_path = (fs::path(opt.out_dir) / "checkpoint.safetensors").string();
  const std::string model_path = (fs::path(opt.out_dir) / "model.safetensors").string();

  nn::Module& model = task.model().module();
  if (!opt.device.is_cpu()) {
    // The parameters move before the optimizer makes its state beside them (and before --resume
    // copies a checkpoint's values into them).
    QKV_CHECK(task.supports_device(opt.device), "train: this task cannot train on ", opt.device.str(),
              " yet (the language-model and translation tasks can; docs/CUDA.md)");
    QKV_CHECK(!comm, "train: data-parallel training (mpirun) runs on the CPU only so far, not on ",
              opt.device.str());
    model.to(opt.device);
    task.set_device(opt.device);
  }
  AdamOptions ao;
  ao.lr = static_cast<float>(cfg.learning_rate), ao.beta1 = static_cast<float>(cfg.beta1);
  ao.beta2 = static_cast<float>(cfg.beta2), ao.eps = static_cast<float>(cfg.eps);
  ao.decoupled_weight_decay = cfg.optimizer == Optimizer::adamw;
  Adam adam(task.param_groups(static_cast<float>(cfg.weight_decay)), ao);
  LrSchedule sched;
  sched.kind = cfg.schedule, sched.lr = cfg.learning_rate, sched.min_lr = cfg.min_lr;
  sched.warmup_steps = cfg.warmup_iters, sched.decay_steps = cfg.lr_decay_iters;
  sched.d_model = task.model().width();  // inverse_sqrt: d_model for a Transformer, n_embd for a GPT

  json meta = task.model_metadata();
  meta["config"] = opt.full_config;
  Metrics metrics(opt.out_dir);
  int64_t start = 0;
  double elapsed_before = 0;
  int64_t tokens_seen = 0;
  // Every rank must have built the same model and tokenizer as rank 0 (the same config, data and
  // deterministic tokenizer training); a difference would otherwise show as silently wrong sums.
  if (comm) {
    std::string lead_meta = lead ? meta.dump() : "";
    distributed::broadcast_string(*comm, lead_meta, 0);
    QKV_CHECK(lead_meta == meta.dump(), "train: rank ", comm->rank(), " built a different model or tokenizer than ",
              "rank 0 (are all ranks running the same qkv, config and data files?)");
  }
  if (opt.resume) {
    // Rank 0 reads the checkpoint; the others receive its weights, optimizer state and training
    // state (the checkpoint need not be on their machines).
    json st;
    if (lead) {
      QKV_CHECK(fs::exists(ckpt_path), "train --resume: no checkpoint at '", ckpt_path, "'");
      models::ModelFile ck = models::load_model_file(ckpt_path);
      QKV_CHECK(ck.meta.contains("train_state"), "'", ckpt_path, "' is a model file without training state");
      QKV_CHECK(ck.meta["model_type"] == meta["model_type"], "train --resume: '", ckpt_path, "' holds a ",
                ck.meta["model_type"].dump(), " model; the config describes a ", meta["model_type"].dump(), " model");
      QKV_CHECK(ck.meta["model"] == meta["model"] && ck.meta["tokenizer"] == meta["tokenizer"],
                "train --resume: the checkpoint was trained with another model or tokenizer (checkpoint: ",
                ck.meta["model"].dump(), "; config: ", meta["model"].dump(), ")");
      models::load_parameters(model, ck);
      st = ck.meta["train_state"];
      start = io::get_or(st, "step", int64_t{-1});
      const int64_t opt_steps = io::get_or(st, "optimizer_steps", int64_t{-1});
      QKV_CHECK(start >= 0 && opt_steps >= 0 && st.contains("rng") && st["rng"].is_number_unsigned(), "'", ckpt_path,
                "': a damaged training state (step, optimizer_steps and rng must be non-negative integers): ",
                st.dump().substr(0, 200));
      adam.load_state(ck.optimizer, opt_steps);
    }
    if (comm) {
      std::string state = lead ? st.dump() : "";
      distributed::broadcast_string(*comm, state, 0);
      st = io::parse_json(state, "the training state");
      for (auto& [name, t] : adam.state())
        comm->broadcast(t.data(), t.numel() * static_cast<int64_t>(sizeof(float)), 0);
      adam.set_steps(io::get_or(st, "optimizer_steps", int64_t{0}));
      start = io::get_or(st, "step", int64_t{0});
    }
    task.set_rng_state(st["rng"].get<uint64_t>());
    elapsed_before = io::get_or(st, "elapsed_s", 0.0);
    tokens_seen = io::get_or(st, "tokens", int64_t{0});
    if (st.contains("metrics") && st["metrics"].is_array()) metrics.restore(st["metrics"], start);
    else if (lead) metrics.load_until(start);  // a checkpoint from before the metrics travelled with it
    if (lead) std::fprintf(stderr, "resuming from %s at step %lld\n", ckpt_path.c_str(), static_cast<long long>(start));
  }
  // Data-parallel: rank 0's weights everywhere (the same as each rank's own when they were built
  // from the same seed, and the checkpoint's on --resume), and a reducer for the gradients.
  std::unique_ptr<GradientReducer> reducer;
  if (comm) {
    broadcast_parameters(model.parameters(), *comm, 0);
    if (cfg.gradient_sync != GradientSync::none)
      reducer = std::make_unique<GradientReducer>(
          model.parameters(), *comm, static_cast<int64_t>(cfg.bucket_cap_mb * 1024 * 1024),
          cfg.gradient_sync == GradientSync::overlap ? GradientReducer::Mode::overlap
                                                     : GradientReducer::Mode::after_backward);
  }

  // model-<step>.safetensors (f32) for checkpoint averaging; only the newest keep_checkpoints stay.
  auto keep_numbered = [&](int64_t step, const json& mm) {
    models::save_model_file((fs::path(opt.out_dir) / ("model-" + std::to_string(step) + ".safetensors")).string(), model,
                            mm);
    std::vector<std::pair<int64_t, fs::path>> kept;
    for (auto& e : fs::directory_iterator(opt.out_dir)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("model-") && name.ends_with(".safetensors") && name.size() > 18) {
        const std::string digits = name.substr(6, name.size() - 18);
        if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos)
          kept.emplace_back(std::stoll(digits), e.path());
      }
    }
    std::sort(kept.begin(), kept.end());
    for (size_t i = 0; i + static_cast<size_t>(cfg.keep_checkpoints) < kept.size(); ++i) fs::remove(kept[i].second);
  };
  // The checkpoint is the run's state, all of it in one atomic file: weights, optimizer, data
  // position, random stream and the metrics so far. model.safetensors, metrics.jsonl/.csv and the
  // plots are derived from it after it is written, so a kill at any instant leaves the old state
  // or the new one, and --resume rewrites whatever derived file lags.
  auto save = [&](int64_t step, double elapsed) {
    if (!lead) return;
    json m = meta;
    m["train_state"] = {{"step", step},         {"optimizer_steps", adam.steps()}, {"rng", task.rng_state()},
                        {"elapsed_s", elapsed}, {"tokens", tokens_seen},           {"metrics", metrics.rows()}};
    models::save_model_file(ckpt_path, model, m, io::StoreAs::kF32, adam.state());
    json mm = meta;
    mm["trained_steps"] = step;
    models::save_model_file(model_path, model, mm, cfg.model_dtype);
    if (cfg.keep_checkpoints > 0) keep_numbered(step, mm);
    metrics.write();
  };

  TrainResult res;
  bool stop = false;  // on_metrics asked to stop
  auto add_row = [&](const json& row) {
    if (!lead) return;
    metrics.add(row);
    if (opt.on_metrics && !opt.on_metrics(row)) stop = true;
  };
  io::ProgressBar bar("train", cfg.max_iters, start);
  if (quiet) bar.mute();
  auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  auto run_eval = [&](int64_t step) {
    model.eval();
    auto ev = task.evaluate(step);
    model.train();
    json row = {{"step", step}};
    std::string line = "step " + std::to_string(step) + ":";
    for (auto& [k, v] : ev) {
      row[k] = v;
      line += " " + k + " " + fmt(v, "%.4f");
    }
    row["elapsed_s"] = elapsed();
    add_row(row);
    if (!quiet) bar.write(line);
    res.last_eval = ev;
  };

  model.train();
  double tok_rate = 0;
  int64_t step = start;
  for (; step < cfg.max_iters; ++step) {
    if (cfg.eval_interval > 0 && step % cfg.eval_interval == 0) run_eval(step);
    const double lr = sched.at(step);
    adam.set_lr(static_cast<float>(lr));
    const auto t0 = std::chrono::steady_clock::now();
    double loss = 0;
    int64_t tokens = 0;
    for (int64_t micro = 0; micro < cfg.gradient_accumulation_steps; ++micro) {
      // data-parallel: the last micro-batch's backward also sums the gradients over the ranks
      if (reducer) reducer->sync_next_backward(micro + 1 == cfg.gradient_accumulation_steps);
      // dtype bf16: mixed precision (bf16 GEMMs in forward and backward, f32 master weights)
      Autocast autocast(cfg.autocast);
      StepStats s = task.train_micro_step(step, micro, cfg.gradient_accumulation_steps);
      loss += s.share * s.loss / static_cast<double>(cfg.gradient_accumulation_steps);
      tokens += s.tokens;
    }
    bool stop_all = g_interrupted || stop;
    if (comm) {
      // Ctrl-C, or mpirun stopping the job (SIGTERM to every rank): the ranks agree, through the
      // sum below, to stop after this step, and rank 0 saves — if mpirun waits that long; either
      // way the last checkpoint on disk is whole.
      stop_all = comm->stop_signal_received() || stop_all;
      if (reducer) reducer->finish();  // the summed gradients are in .grad
      // the global loss and tokens for the log, and whether any rank was asked to stop
      double sums[3] = {loss, static_cast<double>(tokens), stop_all ? 1.0 : 0.0};
      comm->all_reduce_sum(sums, 3);
      loss = sums[0], tokens = static_cast<int64_t>(sums[1]), stop_all = sums[2] > 0;
    }
    QKV_CHECK(std::isfinite(loss), "train: the loss became ", loss, " at step ", step,
              " (try a lower learning_rate or grad_clip)");
    const double norm = cfg.grad_clip > 0 ? clip_grad_norm_(model.parameters(), cfg.grad_clip) : 0.0;
    adam.step();
    adam.zero_grad();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokens_seen += tokens;
    const double rate = static_cast<double>(tokens) / std::max(dt, 1e-9);
    tok_rate = tok_rate == 0 ? rate : 0.9 * tok_rate + 0.1 * rate;
    res.last_loss = loss;
    if (step % cfg.log_interval == 0 || step + 1 == cfg.max_iters) {
      json row = {{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm}, {"tokens_per_s", rate},
                  {"elapsed_s", elapsed()}};
      if (comm) row["step_s"] = dt;
      if (reducer) {  // seconds in collectives, and of those, waited for after backward
        row["allreduce_s"] = reducer->last_comm_seconds(), row["allreduce_wait_s"] = reducer->last_wait_seconds();
      }
      add_row(row);
    }
    bar.set_postfix({{"loss", fmt(loss, "%.4f")}, {"lr", fmt(lr, "%.2e")}, {std::string(task.unit()) + "/s", io::ProgressBar::format_rate(tok_rate)}});
    bar.update(1);
    if (cfg.checkpoint_interval > 0 && (step + 1) % cfg.checkpoint_interval == 0 && step + 1 < cfg.max_iters)
      save(step + 1, elapsed());
    if (stop_all) {
      ++step;
      res.interrupted = true;
      break;
    }
  }
  if (!res.interrupted && cfg.eval_interval > 0) run_eval(step);
  bar.close();
  save(step, elapsed());
  res.steps_done = step;
  res.tokens_per_second = tok_rate;
  if (res.interrupted && lead)
    std::fprintf(stderr, "interrupted: saved %s at step %lld; continue with --resume\n", ckpt_path.c_str(),
                 static_cast<long long>(step));
  return res;
}

}  // namespace qkv::train
