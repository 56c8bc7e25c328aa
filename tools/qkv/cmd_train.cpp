// qkv train CONFIG — trains the model a JSON config describes (configs/*.json): a GPT language
// model ("task": "lm"), a translation model ("task": "translation"), an image classifier ("task":
// "image_classification"), an image captioner ("task": "captioning") or an encoder's text classifier,
// fine-tuned from a converted checkpoint ("task": "text_classification"). Progress bar, periodic
// evaluation, checkpoints, metrics and a loss plot go to --out; --resume continues exactly where a run stopped; Ctrl-C saves a checkpoint and exits.
// Under mpirun -np N it trains one model data-parallel on N processes (train/data_parallel.h).
//
// qkv data prepare CONFIG — the data half of a training run, without the training: a translation
// config's dev/test split (dev.src/.ref, test.src/.ref) and its SentencePiece model in the output
// folder, in seconds; `qkv eval --src out/<config>/test.src …` works after it, and a later
// `qkv train` of the same config and folder reuses the tokenizer. (Registered by add_train: the
// two share the config handling.)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "options.h"
#include "qkv/core/error.h"
#include "qkv/distributed/communicator.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/io/config.h"
#include "qkv/train/from_config.h"
#include "qkv/train/task_registry.h"

namespace qkv::cli {

namespace fs = std::filesystem;
using nlohmann::json;

// "train.max_iters=100": sets config["train"]["max_iters"] = 100 (the value parsed as JSON, else a string).
void apply_override(json& config, const std::string& kv) {
  const auto eq = kv.find('=');
  QKV_CHECK(eq != std::string::npos && eq > 0, "--set expects KEY=VALUE (e.g. train.max_iters=100), got \"", kv, "\"");
  const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
  json* node = &config;
  size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    QKV_CHECK(!part.empty(), "--set: bad key \"", key, "\"");
    if (dot == std::string::npos) {
      try {
        (*node)[part] = io::parse_json(value, "--set " + key);
      } catch (const json::exception&) {
        (*node)[part] = value;
      }
      return;
    }
    json& next = (*node)[part];
    if (next.is_null()) next = json::object();
    QKV_CHECK(next.is_object(), "--set: \"", key.substr(0, dot), "\" is not a section of the config");
    node = &next;
    start = dot + 1;
  }
}

json load_config(const std::string& path, const std::vector<std::string>& overrides) {
  json config;
  try {
    config = io::parse_json(io::read_file(path, io::kMaxConfigBytes, "config"), "config '" + path + "'");
  } catch (const json::exception& e) {
    QKV_CHECK(false, "config '", path, "' is not valid JSON: ", e.what());
  }
  QKV_CHECK(config.is_object(), "config '", path, "' must be a JSON object");
  for (const auto& kv : overrides) apply_override(config, kv);
  return config;
}

namespace {

struct TrainArgs {
  std::string config, out;
  bool resume = false, quiet = false;
  std::vector<std::string> set;
  int threads = 0;
  std::string device = "cpu";
};

// The step of the last row of <out>/metrics.jsonl that holds `key` (an evaluation's metric); −1: none.
int64_t last_evaluation_step(const std::string& out, const std::string& key) {
  int64_t step = -1;
  std::error_code ec;
  const fs::path path = fs::path(out) / "metrics.jsonl";
  if (!fs::is_regular_file(path, ec)) return step;
  try {
    const std::string text = io::read_file(path.string(), io::kMaxConfigBytes * 64, "metrics");
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const json row = json::parse(text.substr(start, end - start), nullptr, false);
      if (row.is_object() && row.contains(key) && row.contains("step") && row["step"].is_number_integer())
        step = row["step"].get<int64_t>();
      start = end + 1;
    }
  } catch (const std::exception&) {
    return -1;  // only a summary line: no step rather than no summary
  }
  return step;
}

// One process's run; `comm`: the job it is part of (mpirun), or null alone.
int run_train(const TrainArgs& a, distributed::Communicator* comm) {
  json config = load_config(a.config, a.set);
  const std::string out = a.out.empty() ? (fs::path("out") / fs::path(a.config).stem()).string() : a.out;
  const std::string base = fs::path(a.config).parent_path().string();
  train::TrainerOptions o;
  o.out_dir = out, o.resume = a.resume, o.full_config = config, o.quiet = a.quiet, o.comm = comm;
  o.device = device_from(a.device, "train");
  const train::TrainResult r = train::train_from_config(
      config, a.config, base, o, [](const std::string& line) { std::fprintf(stderr, "qkv train: %s\n", line.c_str()); });
  if (comm && comm->rank() != 0) return r.interrupted ? 130 : 0;
  std::string ev;
  for (auto& [k, v] : r.last_eval) ev += " " + k + " " + std::to_string(v);
  if (!r.interrupted) {  // the final evaluation ran at the last step
    const std::string replayed =
        r.recorded_steps > 0 ? " (" + std::to_string(r.recorded_steps) + " steps replayed from one CUDA graph)" : "";
    std::fprintf(stderr, "done at step %lld%s%s; %.0f %s/s%s; model: %s/model.safetensors\n",
                 static_cast<long long>(r.steps_done), ev.empty() ? "" : ":", ev.c_str(), r.tokens_per_second, train::rate_unit(config),
                 replayed.c_str(), out.c_str());
    if (r.best_step >= 0)  // keep_best or early stopping (issue 49)
      std::fprintf(stderr, "best evaluation: step %lld (%.4f); model: %s/best.safetensors\n",
                   static_cast<long long>(r.best_step), r.best_value, out.c_str());
  } else {  // stopped between evaluations: the last step's loss, and the last evaluation with its own step
    const int64_t at = r.last_eval.empty() ? -1 : last_evaluation_step(out, r.last_eval.front().first);
    std::string last = r.last_eval.empty() ? std::string()
                       : at >= 0            ? "; last evaluation (step " + std::to_string(at) + "):" + ev
                                            : "; last evaluation:" + ev;
    std::fprintf(stderr, "stopped at step %lld: loss %.4f%s; %.0f %s/s; model: %s/model.safetensors\n",
                 static_cast<long long>(r.steps_done), r.last_loss, last.c_str(), r.tokens_per_second,
                 train::rate_unit(config), out.c_str());
  }
  return r.interrupted ? 130 : 0;
}

}  // namespace

namespace {

struct DataArgs {
  std::string config, out;
  std::vector<std::string> set;
};

// Builds the config's task as `qkv train` would (the data read and split, the tokenizer trained or
// reused, the model made) and stops there; lists what the output folder holds.
int run_data_prepare(const DataArgs& a) {
  json config = load_config(a.config, a.set);
  const std::string out = a.out.empty() ? (fs::path("out") / fs::path(a.config).stem()).string() : a.out;
  const std::string base = fs::path(a.config).parent_path().string();
  const train::TaskType& type = train::task_type(io::get_or(config, "task", ""), a.config);
  const auto t0 = std::chrono::steady_clock::now();
  const train::BuiltTask built = type.build(train::TaskArgs{config, base, out, false, true});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(out, ec))
    for (const auto& e : fs::directory_iterator(out, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::printf("%s (%s)%s%s: ready in %.1f s\n", a.config.c_str(), type.description.c_str(),
              built.data.empty() ? "" : ", ", built.data.c_str(), secs);
  if (files.empty()) {
    std::printf("nothing to write: the task reads its data as it is (no split files or tokenizer of its own)\n");
  } else {
    std::printf("%s:", out.c_str());
    for (const auto& f : files) std::printf(" %s", f.c_str());
    std::printf("\n");
    if (fs::exists(fs::path(out) / "test.src"))
      std::printf("e.g. qkv eval --src %s --ref %s\n", (fs::path(out) / "test.src").c_str(),
                  (fs::path(out) / "test.ref").c_str());
  }
  return 0;
}

void add_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare a config's data without training: qkv data prepare CONFIG");
  data->require_subcommand(1);
  auto* prep = data->add_subcommand(
      "prepare", "Split a config's data and train its tokenizer (as qkv train does first), then stop");
  auto a = std::make_shared<DataArgs>();
  prep->add_option("config", a->config, "the config file, e.g. configs/tatoeba-en-fr.json")
      ->required()
      ->check(CLI::ExistingFile);
  prep->add_option("-o,--out", a->out, "output folder (default: out/<config name>, as qkv train)");
  prep->add_option("--set", a->set, "override a config value, e.g. --set data.split.seed=2 (repeatable)");
  prep->footer("Example: qkv data prepare configs/tatoeba-en-fr.json   # out/tatoeba-en-fr/{dev,test}.{src,ref}, spm.model\n"
               "         qkv eval --src out/tatoeba-en-fr/test.src --ref out/tatoeba-en-fr/test.ref");
  register_runner(prep, [a] { return run_data_prepare(*a); });
}

}  // namespace

void add_train(CLI::App& app) {
  add_data(app);  // qkv data prepare: the same configs, stopping before training
  auto* sub = app.add_subcommand(
      "train", "Train a model from a JSON config (see configs/); under mpirun -np N, one model on N processes");
  auto a = std::make_shared<TrainArgs>();
  sub->add_option("config", a->config, "the config file, e.g. configs/shakespeare-char.json")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-o,--out", a->out, "output folder (default: out/<config name>)");
  sub->add_flag("--resume", a->resume, "continue from <out>/checkpoint.safetensors");
  sub->add_option("--set", a->set, "override a config value, e.g. --set train.max_iters=100 (repeatable)");
  add_threads_option(sub, a->threads);
  add_device_option(sub, a->device, "train (any task)");
  sub->add_flag("-q,--quiet", a->quiet, "no progress bar");
  std::string tasks = "Tasks (the config's \"task\"):\n";
  for (const train::TaskType& t : train::task_types()) tasks += "  " + t.name + ": " + t.description + "\n";
  sub->footer(tasks +
              "\nOn a GPU, QKV_CUDA_GRAPHS=1 records the second step as one CUDA graph and replays it for the rest "
              "(a task whose batches keep one shape: lm, image_classification; docs/CUDA.md, \"CUDA graphs\"); "
              "unset, only decoding steps are graphs, and 0 turns those off too.");
  register_runner(sub, [a] {
    // Under mpirun the processes of one machine share its cores (unless the launcher bound each to
    // cores of its own), and an error on one rank ends them all, with its message.
    distributed::Communicator& world = distributed::world();
    if (world.size() == 1) {
      use_threads(a->threads);
      return run_train(*a, nullptr);
    }
    if (a->threads == 0 && !std::getenv("OMP_NUM_THREADS")) {
      const int cores = omp_get_num_procs();  // the cores this process may run on
      const int all = static_cast<int>(std::thread::hardware_concurrency());
      a->threads = cores < all ? cores : std::max(1, cores / world.local_size());
    }
    use_threads(a->threads);
    try {
      return run_train(*a, &world);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "qkv: error (rank %d of %d): %s\n", world.rank(), world.size(), e.what());
      std::fflush(stderr);
      world.abort(1);
    }
    return 1;  // (abort does not return)
  });
}

}  // namespace qkv::cli
