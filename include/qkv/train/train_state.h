// Where a run stands, saved in every checkpoint's metadata as "train_state" and read back by
// --resume: the step to run next, the optimizer's step count, the task's random stream, the time
// and tokens so far, and the metrics rows before the step.
//
// On disk (a JSON object; checkpoints of every qkv version read):
//   {"step": 500, "optimizer_steps": 500, "rng": <uint64>, "elapsed_s": 81.2, "tokens": 1234567,
//    "metrics": [{"step": 0, …}, …]}
// elapsed_s and tokens may be missing (0); metrics too, in checkpoints from before the rows
// travelled with them (the rows then come from metrics.jsonl).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv::train {

struct TrainState {
  int64_t step = 0;             // the next step to run (every step before it is done)
  int64_t optimizer_steps = 0;  // Adam's t (bias correction)
  uint64_t rng = 0;             // TrainingTask::rng_state()
  double elapsed_s = 0;         // training time so far, over every resumed part
  int64_t tokens = 0;           // target tokens (images) trained on so far
  std::optional<std::vector<nlohmann::json>> metrics;  // the metrics rows before `step`

  nlohmann::json to_json() const;
  // A damaged state (step, optimizer_steps or rng missing, negative or not integers) is a
  // qkv::Error naming `where` (the checkpoint's path).
  static TrainState from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace qkv::train
