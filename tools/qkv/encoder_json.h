// The encoders' answers as JSON, the pipelines' shapes (qkv classify-text --json and /v1/classify):
//   text classification   [{"label", "score"}, …] best first
//   token classification  [{"entity", "score", "index", "word", "start", "end"}, …], or with "simple"
//                         aggregation [{"entity_group", "score", "word", "start", "end"}, …] (start,
//                         end in characters of the text)
//   question answering    {"score", "start", "end", "answer"} (start, end in characters of the
//                         context), or a list of them best first where more than one is left
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/decode/classify.h"
#include "qkv/decode/question_answering.h"
#include "qkv/text/unicode.h"

namespace qkv::cli {

inline nlohmann::json label_scores_json(const std::vector<decode::LabelScore>& scores) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : scores) list.push_back({{"label", s.label}, {"score", s.score}});
  return list;
}

// `text`: the text as the entities' byte offsets count it (made valid UTF-8).
inline nlohmann::json entities_json(const std::vector<decode::TokenEntity>& entities, const std::string& text) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : entities) {
    nlohmann::json one =
        e.index < 0 ? nlohmann::json{{"entity_group", e.entity}, {"score", e.score}, {"word", e.word}}
                    : nlohmann::json{{"entity", e.entity}, {"score", e.score}, {"index", e.index}, {"word", e.word}};
    one["start"] = text::code_points(text, e.start), one["end"] = text::code_points(text, e.end);
    list.push_back(std::move(one));
  }
  return list;
}

// `context`: the context as the answers' byte offsets count it (made valid UTF-8).
inline nlohmann::json answers_json(const std::vector<decode::Answer>& answers, const std::string& context) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& x : answers)
    list.push_back({{"score", x.score},
                    {"start", text::code_points(context, x.start)},
                    {"end", text::code_points(context, x.end)},
                    {"answer", x.answer}});
  return list.size() == 1 ? list[0] : list;
}

}  // namespace qkv::cli
