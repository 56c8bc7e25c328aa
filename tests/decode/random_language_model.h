// A language model of the registry with random weights, in eval mode (the decoding tests' models).
#pragma once

#include <memory>
#include <string>

#include "qkv/models/registry.h"

namespace qkv::testing {

inline std::unique_ptr<models::Model> random_model(const std::string& type, const nlohmann::json& config, uint64_t seed) {
  Generator g(seed);
  auto m = models::model_type(type).build(config, &g);
  m->module().eval();
  return m;
}

inline models::LanguageModel& lm(const std::unique_ptr<models::Model>& m) {
  return dynamic_cast<models::LanguageModel&>(*m);
}

}  // namespace qkv::testing
