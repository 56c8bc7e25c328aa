#include "qkv/train/from_config.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/io/config.h"
#include "qkv/io/file.h"
#include "qkv/train/caption_task.h"
#include "qkv/train/image_task.h"
#include "qkv/train/lm_task.h"
#include "qkv/train/translation_task.h"

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
  return task == "image_classification" || task == "captioning" ? "images" : "tokens";
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
  const std::string task = io::get_or(config, "task", "");
  QKV_CHECK(task == "lm" || task == "translation" || task == "image_classification" || task == "captioning",
            "config '", config_name, "': unknown \"task\" \"", task,
            "\" (expected \"lm\", \"translation\", \"image_classification\" or \"captioning\")");
  distributed::Communicator* comm = opt.comm && opt.comm->size() > 1 ? opt.comm : nullptr;
  const bool lead = !comm || comm->rank() == 0;
  // Builds the task with its output folder; says what it trains.
  struct Built {
    std::unique_ptr<TrainingTask> task;
    const TrainConfig* cfg = nullptr;
    std::string about;
  };
  auto built = [](auto task, std::string about) {
    const TrainConfig* cfg = &task->train_config();
    return Built{std::move(task), cfg, std::move(about)};
  };
  auto build = [&](const std::string& out, bool resume, bool verbose) -> Built {
    const std::string threads = std::to_string(num_threads()) + " threads" +
                                (comm ? " × " + std::to_string(comm->size()) + " processes (" + comm->describe() + ")" : "");
    if (task == "lm") {
      auto lm = std::make_unique<LMTask>(config, base_dir, out, resume);
      std::string about = detail::concat(lm->model().describe(), ": ", parameters(*lm), "; ", lm->data().train.size(),
                                         " train / ", lm->data().val.size(), " val tokens; ", threads, " → ", opt.out_dir);
      return built(std::move(lm), about);
    }
    if (task == "image_classification") {
      auto it = std::make_unique<ImageTask>(config, base_dir);
      std::string about = detail::concat(it->model().describe(), ": ", parameters(*it), "; ", it->train_set().size(),
                                         " train / ", it->eval_set().size(), " ",
                                         it->evaluates_on_test() ? "test" : "held-out", " images; ", threads, " → ",
                                         opt.out_dir);
      return built(std::move(it), about);
    }
    if (task == "captioning") {
      auto ct = std::make_unique<CaptionTask>(config, base_dir, out, resume, verbose);
      std::string about = detail::concat(ct->model().describe(), ": ", parameters(*ct), "; ", threads, " → ", opt.out_dir);
      return built(std::move(ct), about);
    }
    auto tt = std::make_unique<TranslationTask>(config, base_dir, out, resume, verbose);
    std::string about = detail::concat(tt->model().describe(), ": ", parameters(*tt), "; ", threads, " → ", opt.out_dir);
    return built(std::move(tt), about);
  };

  Built t;
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
  if (lead && announce) announce(t.about);
  return run_training(*t.task, *t.cfg, opt);
}

}  // namespace qkv::train
