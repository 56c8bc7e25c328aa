#include "qkv/train/from_config.h"

#include <cstdio>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/io/config.h"
#include "qkv/train/caption_task.h"
#include "qkv/train/image_task.h"
#include "qkv/train/lm_task.h"
#include "qkv/train/translation_task.h"

namespace qkv::train {

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

TrainResult train_from_config(const nlohmann::json& config, const std::string& config_name, const std::string& base_dir,
                              const TrainerOptions& opt, const std::function<void(const std::string&)>& announce) {
  const std::string task = io::get_or(config, "task", "");
  QKV_CHECK(task == "lm" || task == "translation" || task == "image_classification" || task == "captioning",
            "config '", config_name, "': unknown \"task\" \"", task,
            "\" (expected \"lm\", \"translation\", \"image_classification\" or \"captioning\")");
  const std::string& out = opt.out_dir;
  auto tell = [&](const std::string& line) {
    if (announce) announce(line);
  };
  if (task == "lm") {
    LMTask lm(config, base_dir, out, opt.resume);
    tell(detail::concat(lm.model().describe(), ": ", parameters(lm), "; ",
                        lm.data().train.size(), " train / ", lm.data().val.size(), " val tokens; ", num_threads(),
                        " threads → ", out));
    return run_training(lm, lm.train_config(), opt);
  }
  if (task == "image_classification") {
    ImageTask it(config, base_dir);
    tell(detail::concat(it.model().describe(), ": ", parameters(it), "; ",
                        it.train_set().size(), " train / ", it.eval_set().size(), " ",
                        it.evaluates_on_test() ? "test" : "held-out", " images; ", num_threads(), " threads → ", out));
    return run_training(it, it.train_config(), opt);
  }
  if (task == "captioning") {
    CaptionTask ct(config, base_dir, out, opt.resume, !opt.quiet);
    tell(detail::concat(ct.model().describe(), ": ", parameters(ct), "; ", num_threads(),
                        " threads → ", out));
    return run_training(ct, ct.train_config(), opt);
  }
  TranslationTask tt(config, base_dir, out, opt.resume, !opt.quiet);
  tell(detail::concat(tt.model().describe(), ": ", parameters(tt), "; ", num_threads(),
                      " threads → ", out));
  return run_training(tt, tt.train_config(), opt);
}

}  // namespace qkv::train
