#include "qkv/train/train_state.h"

#include "qkv/core/error.h"
#include "qkv/io/config.h"

namespace qkv::train {

using nlohmann::json;

json TrainState::to_json() const {
  json j = {{"step", step}, {"optimizer_steps", optimizer_steps}, {"rng", rng}, {"elapsed_s", elapsed_s},
            {"tokens", tokens}};
  if (metrics) j["metrics"] = *metrics;
  return j;
}

TrainState TrainState::from_json(const json& j, const std::string& where) {
  TrainState s;
  QKV_CHECK(j.is_object(), "'", where, "': a damaged training state (not an object): ", j.dump().substr(0, 200));
  s.step = io::get_or(j, "step", int64_t{-1});
  s.optimizer_steps = io::get_or(j, "optimizer_steps", int64_t{-1});
  QKV_CHECK(s.step >= 0 && s.optimizer_steps >= 0 && j.contains("rng") && j["rng"].is_number_unsigned(), "'", where,
            "': a damaged training state (step, optimizer_steps and rng must be non-negative integers): ",
            j.dump().substr(0, 200));
  s.rng = j["rng"].get<uint64_t>();
  s.elapsed_s = io::get_or(j, "elapsed_s", 0.0);
  s.tokens = io::get_or(j, "tokens", int64_t{0});
  if (j.contains("metrics") && j["metrics"].is_array()) s.metrics = j["metrics"].get<std::vector<json>>();
  return s;
}

}  // namespace qkv::train
