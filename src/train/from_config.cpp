#include "qkv/train/from_config.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/io/config.h"
#include "qkv/io/file.h"
#include "qkv/train/task_registry.h"

namespace qkv::train {

namespace fs = std::filesystem;

namespace {

// "8.94M parameters"
std::string parameters(TrainingTask& t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fM parameters", static_cast<double>(t.model().module().num_parameters()) / 1e6);
  return buf;
}

}  // namespace

const char* rate_unit(const nlohmann::json& config) {
  const std::string task = io::get_or(config, "task", "");
  for (const TaskType& t : task_types())
    if (t.name == task) return t.rate_unit;
  return "tokens";
}

namespace {

// A data-parallel rank other than 0 builds its task in a folder of its own (tokenizer training
// writes there), removed when training ends: only rank 0 writes to the output folder.
struct PrivateDir {
  fs::path path;
  explicit PrivateDir(int rank) {
    path = fs::temp_directory_path() /
           ("qkv-rank" + std::to_string(rank) + "-" + std::to_string(static_cast<long long>(::getpid())));
    fs::create_directories(path);
  }
  ~PrivateDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// The tokenizer files a task leaves in its output folder, which rank 0 hands to the others so that
// every rank holds its tokenizer (reused, not trained again: SentencePiece's training need not be
// bit-for-bit repeatable, and on --resume rank 0's is the one the checkpoint was trained with).
constexpr const char* kTokenizerFiles[] = {"spm.model", "spm.vocab", "spm.json"};

}  // namespace

TrainResult train_from_config(const nlohmann::json& config, const std::string& config_name, const std::string& base_dir,
                              const TrainerOptions& opt, const std::function<void(const std::string&)>& announce) {
  const TaskType& type = task_type(io::get_or(config, "task", ""), config_name);
  distributed::Communicator* comm = opt.comm && opt.comm->size() > 1 ? opt.comm : nullptr;
  const bool lead = !comm || comm->rank() == 0;
  // Builds the task with its output folder; says what it trains: "GPT (…): 0.80M parameters;
  // 1003854 train / 111540 val tokens; 2 threads → out/shakespeare-char".
  std::string about;
  auto build = [&](const std::string& out, bool resume, bool verbose) -> BuiltTask {
    const std::string threads = std::to_string(requested_threads()) + " threads" +
                                (comm ? " × " + std::to_string(comm->size()) + " processes (" + comm->describe() + ")" : "");
    BuiltTask b = type.build(TaskArgs{config, base_dir, out, resume, verbose});
    about = detail::concat(b.task->model().describe(), ": ", parameters(*b.task), "; ",
                           b.data.empty() ? "" : b.data + "; ", threads, " → ", opt.out_dir);
    return b;
  };

  BuiltTask t;
  std::unique_ptr<PrivateDir> own;
  if (lead) t = build(opt.out_dir, opt.resume, !opt.quiet);
  if (comm) {
    if (!lead) own = std::make_unique<PrivateDir>(comm->rank());
    bool have_model = false;
    for (const char* name : kTokenizerFiles) {
      const fs::path from = fs::path(opt.out_dir) / name;
      std::string bytes = lead && fs::exists(from) ? io::read_file(from.string()) : std::string();
      distributed::broadcast_string(*comm, bytes, 0);
      if (!lead && !bytes.empty()) {
        io::write_file_atomic((own->path / name).string(), bytes);
        have_model |= std::string(name) == "spm.model";
      }
    }
    if (!lead) t = build(own->path.string(), have_model, false);
  }
  if (lead && announce) announce(about);
  return run_training(*t.task, *t.config, opt);
}

}  // namespace qkv::train
