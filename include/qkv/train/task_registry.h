// The training tasks qkv knows, by name: what a config's "task" refers to (as the model registry,
// models/registry.h, is for "model": {"type": …}). src/train/task_registry.cpp lists them, one
// entry each; train_from_config looks the name up here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/train/trainer.h"

namespace qkv::train {

// What a task's builder is given: the whole config, where its relative paths start, the folder
// its files go to (tokenizer training writes there), whether the run resumes (reuse the folder's
// tokenizer), and whether it may say what it does on stderr.
struct TaskArgs {
  const nlohmann::json& config;
  const std::string& base_dir;
  const std::string& out_dir;
  bool resume = false;
  bool verbose = false;
};

// A built task, its "train" section, and a few words on its data for the announcement
// ("1003854 train / 111540 val tokens"; empty when there is nothing short to say).
struct BuiltTask {
  std::unique_ptr<TrainingTask> task;
  const TrainConfig* config = nullptr;
  std::string data;
};

struct TaskType {
  std::string name;         // "lm"
  std::string description;  // one line, for messages
  const char* rate_unit;    // what TrainResult::tokens_per_second counts: "tokens" or "images"
  std::function<BuiltTask(const TaskArgs&)> build;
};

// Every registered task, in registration order.
const std::vector<TaskType>& task_types();
// The task called `name`; an unknown name is a qkv::Error naming `config_name` and the known ones.
const TaskType& task_type(const std::string& name, const std::string& config_name);

}  // namespace qkv::train
