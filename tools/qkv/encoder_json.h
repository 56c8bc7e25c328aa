// The encoders' answers as JSON, the pipelines' shapes (qkv classify-text --json and /v1/classify):
//   text classification   [{"label", "score"}, …] best first
//   token classification  [{"entity", "score", "index", "word"}, …], or with "simple" aggregation
//                         [{"entity_group", "score", "word"}, …]
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/decode/classify.h"

namespace qkv::cli {

inline nlohmann::json label_scores_json(const std::vector<decode::LabelScore>& scores) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : scores) list.push_back({{"label", s.label}, {"score", s.score}});
  return list;
}

inline nlohmann::json entities_json(const std::vector<decode::TokenEntity>& entities) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : entities) {
    if (e.index < 0)
      list.push_back({{"entity_group", e.entity}, {"score", e.score}, {"word", e.word}});
    else
      list.push_back({{"entity", e.entity}, {"score", e.score}, {"index", e.index}, {"word", e.word}});
  }
  return list;
}

}  // namespace qkv::cli
