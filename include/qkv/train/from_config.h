// Training what a JSON config describes (configs/*.json): its "task" picks the training task —
// "lm" (a GPT), "translation", "image_classification" or "captioning" — which reads the rest of
// the config, and run_training trains it. `qkv train` and Python's qkv.train both come here.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/train/trainer.h"

namespace qkv::train {

// config_name: what messages call the config (its path); base_dir: where its relative data paths
// start (the config file's folder). `announce` (optional) is told one line before training starts:
// the model, its parameters, its data, the threads and the output folder. An unknown task is a
// qkv::Error naming the config, the task and the five known.
TrainResult train_from_config(const nlohmann::json& config, const std::string& config_name, const std::string& base_dir,
                              const TrainerOptions& opt,
                              const std::function<void(const std::string&)>& announce = nullptr);

// "tokens" or "images": what TrainResult::tokens_per_second counts for this config's task.
const char* rate_unit(const nlohmann::json& config);

}  // namespace qkv::train
