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
#include "qkv/ops/autocast.h"
#include "qkv/train/checkpoint.h"
#include "qkv/train/progress.h"
#include "qkv/viz/png.h"
#include "qkv/viz/svg.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- config ------------------------------------------------------------------------------------

TrainConfig TrainConfig::from_json(const json& j) {
  QKV_CHECK(j.is_object(), "train config: expected a JSON object, got ", j.dump());
  TrainConfig c;
  for (auto& [key, v] : j.items()) {
    auto integer = [&](int64_t& dst, int64_t min) {
      QKV_CHECK(v.is_number_integer() && v.get<int64_t>() >= min, "train config: \"", key, "\" must be an integer ≥ ",
                min, ", got ", v.dump());
      dst = v.get<int64_t>();
    };
    auto real = [&](double& dst, double min, double max) {
      QKV_CHECK(v.is_number() && v.get<double>() >= min && v.get<double>() <= max, "train config: \"", key,
                "\" must be a number in [", min, ", ", max, "], got ", v.dump());
      dst = v.get<double>();
    };
    auto choice = [&](std::string& dst, std::initializer_list<const char*> options) {
      std::string all;
      bool ok = false;
      for (const char* o : options) {
        all += std::string(all.empty() ? "" : ", ") + o;
        ok = ok || (v.is_string() && v.get<std::string>() == o);
      }
      QKV_CHECK(ok, "train config: \"", key, "\" must be one of ", all, ", got ", v.dump());
      dst = v.get<std::string>();
    };
    if (key == "max_iters") integer(c.max_iters, 0);
    else if (key == "batch_size") integer(c.batch_size, 1);
    else if (key == "gradient_accumulation_steps") integer(c.gradient_accumulation_steps, 1);
    else if (key == "optimizer") choice(c.optimizer, {"adamw", "adam"});
    else if (key == "learning_rate") real(c.learning_rate, 0, 10);
    else if (key == "min_lr") real(c.min_lr, 0, 10);
    else if (key == "schedule") choice(c.schedule, {"cosine", "constant", "inverse_sqrt"});
    else if (key == "warmup_iters") integer(c.warmup_iters, 0);
    else if (key == "lr_decay_iters") integer(c.lr_decay_iters, 0);
    else if (key == "beta1") real(c.beta1, 0, 0.999999);
    else if (key == "beta2") real(c.beta2, 0, 0.999999);
    else if (key == "eps") real(c.eps, 0, 1);
    else if (key == "weight_decay") real(c.weight_decay, 0, 10);
    else if (key == "grad_clip") real(c.grad_clip, 0, 1e30);
    else if (key == "eval_interval") integer(c.eval_interval, 0);
    else if (key == "eval_iters") integer(c.eval_iters, 1);
    else if (key == "log_interval") integer(c.log_interval, 1);
    else if (key == "checkpoint_interval") integer(c.checkpoint_interval, 0);
    else if (key == "keep_checkpoints") integer(c.keep_checkpoints, 0);
    else if (key == "seed") {
      QKV_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                "train config: \"seed\" must be a non-negative integer, got ", v.dump());
      c.seed = v.get<uint64_t>();
    } else if (key == "dtype") choice(c.dtype, {"f32", "bf16"});
    else if (key == "label_smoothing") real(c.label_smoothing, 0, 0.999);
    else if (key == "model_dtype") choice(c.model_dtype, {"f32", "f16", "bf16"});
    else
      QKV_CHECK(false, "train config: unknown key \"", key, "\" (known: ", TrainConfig().to_json().dump(), ")");
  }
  return c;
}

json TrainConfig::to_json() const {
  return {{"max_iters", max_iters},
          {"batch_size", batch_size},
          {"gradient_accumulation_steps", gradient_accumulation_steps},
          {"optimizer", optimizer},
          {"learning_rate", learning_rate},
          {"min_lr", min_lr},
          {"schedule", schedule},
          {"warmup_iters", warmup_iters},
          {"lr_decay_iters", lr_decay_iters},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"grad_clip", grad_clip},
          {"eval_interval", eval_interval},
          {"eval_iters", eval_iters},
          {"log_interval", log_interval},
          {"checkpoint_interval", checkpoint_interval},
          {"keep_checkpoints", keep_checkpoints},
          {"seed", seed},
          {"dtype", dtype},
          {"label_smoothing", label_smoothing},
          {"model_dtype", model_dtype}};
}

std::vector<ParamGroup> TrainingTask::param_groups(float wd) { return decay_matrices_only(model().named_parameters(), wd); }

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
        json r = json::parse(line);
        if (r.value("step", int64_t{-1}) < step) rows_.push_back(r);  // the resumed run redoes step's evaluation
      } catch (const std::exception&) {
        // a torn last line (killed mid-write before atomic writes) is skipped
      }
    }
  }
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
      const auto step = static_cast<double>(r.value("step", int64_t{0}));
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
  g_interrupted = false;
  // from here on, Ctrl-C means "save and stop"; the previous handler comes back however we leave
  struct RestoreSigint {
    void (*prev)(int);
    ~RestoreSigint() { std::signal(SIGINT, prev); }
  } restore{std::signal(SIGINT, on_sigint)};
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  QKV_CHECK(!ec, "train: cannot create output directory '", opt.out_dir, "': ", ec.message());
  const std::string ckpt_path = (fs::path(opt.out_dir) / "checkpoint.safetensors").string();
  const std::string model_path = (fs::path(opt.out_dir) / "model.safetensors").string();

  nn::Module& model = task.model();
  AdamOptions ao;
  ao.lr = static_cast<float>(cfg.learning_rate), ao.beta1 = static_cast<float>(cfg.beta1);
  ao.beta2 = static_cast<float>(cfg.beta2), ao.eps = static_cast<float>(cfg.eps);
  ao.decoupled_weight_decay = cfg.optimizer == "adamw";
  Adam adam(task.param_groups(static_cast<float>(cfg.weight_decay)), ao);
  LrSchedule sched;
  sched.kind = cfg.schedule, sched.lr = cfg.learning_rate, sched.min_lr = cfg.min_lr;
  sched.warmup_steps = cfg.warmup_iters, sched.decay_steps = cfg.lr_decay_iters;
  if (cfg.schedule == "inverse_sqrt") sched.d_model = task.model_metadata()["model"].value("d_model", int64_t{512});

  json meta = task.model_metadata();
  meta["config"] = opt.full_config;
  Metrics metrics(opt.out_dir);
  int64_t start = 0;
  double elapsed_before = 0;
  int64_t tokens_seen = 0;
  if (opt.resume) {
    QKV_CHECK(fs::exists(ckpt_path), "train --resume: no checkpoint at '", ckpt_path, "'");
    ModelFile ck = load_model_file(ckpt_path);
    QKV_CHECK(ck.meta.contains("train_state"), "'", ckpt_path, "' is a model file without training state");
    QKV_CHECK(ck.meta["model_type"] == meta["model_type"] && ck.meta["model"] == meta["model"] &&
                  ck.meta["tokenizer"] == meta["tokenizer"],
              "train --resume: the checkpoint was trained with another model or tokenizer (checkpoint: ",
              ck.meta["model"].dump(), "; config: ", meta["model"].dump(), ")");
    load_parameters(model, ck);
    const json& st = ck.meta["train_state"];
    start = st.at("step").get<int64_t>();
    adam.load_state(ck.optimizer, st.at("optimizer_steps").get<int64_t>());
    task.set_rng_state(st.at("rng").get<uint64_t>());
    elapsed_before = st.value("elapsed_s", 0.0);
    tokens_seen = st.value("tokens", int64_t{0});
    metrics.load_until(start);
    std::fprintf(stderr, "resuming from %s at step %lld\n", ckpt_path.c_str(), static_cast<long long>(start));
  }

  // model-<step>.safetensors (f32) for checkpoint averaging; only the newest keep_checkpoints stay.
  auto keep_numbered = [&](int64_t step, const json& mm) {
    save_model_file((fs::path(opt.out_dir) / ("model-" + std::to_string(step) + ".safetensors")).string(), model, mm);
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
  auto save = [&](int64_t step, double elapsed) {
    json m = meta;
    m["train_state"] = {{"step", step},          {"optimizer_steps", adam.steps()}, {"rng", task.rng_state()},
                        {"elapsed_s", elapsed},  {"tokens", tokens_seen}};
    save_model_file(ckpt_path, model, m, io::StoreAs::kF32, adam.state());
    json mm = meta;
    mm["trained_steps"] = step;
    save_model_file(model_path, model, mm, io::store_as(cfg.model_dtype));
    if (cfg.keep_checkpoints > 0) keep_numbered(step, mm);
    metrics.write();
  };

  TrainResult res;
  ProgressBar bar("train", cfg.max_iters, start);
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
    metrics.add(row);
    if (!opt.quiet) bar.write(line);
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
      // dtype bf16: mixed precision (bf16 GEMMs in forward and backward, f32 master weights)
      Autocast autocast(cfg.dtype);
      StepStats s = task.train_micro_step(step, micro, cfg.gradient_accumulation_steps);
      loss += s.loss / static_cast<double>(cfg.gradient_accumulation_steps);
      tokens += s.tokens;
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
    if (step % cfg.log_interval == 0 || step + 1 == cfg.max_iters)
      metrics.add({{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm}, {"tokens_per_s", rate},
                   {"elapsed_s", elapsed()}});
    bar.set_postfix({{"loss", fmt(loss, "%.4f")}, {"lr", fmt(lr, "%.2e")}, {"tok/s", ProgressBar::format_rate(tok_rate)}});
    bar.update(1);
    if (cfg.checkpoint_interval > 0 && (step + 1) % cfg.checkpoint_interval == 0 && step + 1 < cfg.max_iters)
      save(step + 1, elapsed());
    if (g_interrupted) {
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
  if (res.interrupted)
    std::fprintf(stderr, "interrupted: saved %s at step %lld; continue with --resume\n", ckpt_path.c_str(),
                 static_cast<long long>(step));
  return res;
}

}  // namespace qkv::train
