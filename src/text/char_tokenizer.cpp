#include "qkv/text/char_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/core/utf8.h"
#include "qkv/io/config.h"

namespace qkv::text {

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  std::vector<char32_t> cps = utf8::decode(text);
  std::sort(cps.begin(), cps.end());
  cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
  QKV_CHECK(!cps.empty(), "CharTokenizer: the training text is empty");
  CharTokenizer t;
  t.codepoints_ = cps;
  for (char32_t cp : cps) t.chars_.push_back(utf8::encode(cp));
  return t;
}

CharTokenizer CharTokenizer::from_json(const nlohmann::json& j) {
  QKV_CHECK(j.is_object() && io::get_or(j, "type", "") == "char" && j.contains("chars") && j.at("chars").is_array(),
            "CharTokenizer: expected {\"type\": \"char\", \"chars\": [...]}, got ", excerpt(j.dump(), 200));
  CharTokenizer t;
  for (const auto& c : j.at("chars")) {
    QKV_CHECK(c.is_string(), "CharTokenizer: vocabulary entries must be strings, got ", excerpt(c.dump()));
    std::vector<char32_t> cp = utf8::decode(c.get<std::string>());
    QKV_CHECK(cp.size() == 1, "CharTokenizer: vocabulary entry ", excerpt(c.dump()), " is not one character");
    QKV_CHECK(t.codepoints_.empty() || t.codepoints_.back() < cp[0], "CharTokenizer: vocabulary is not sorted and unique at ",
              excerpt(c.dump()));
    t.codepoints_.push_back(cp[0]);
    t.chars_.push_back(c.get<std::string>());
  }
  QKV_CHECK(!t.chars_.empty(), "CharTokenizer: empty vocabulary");
  return t;
}

nlohmann::json CharTokenizer::to_json() const { return {{"type", "char"}, {"chars", chars_}}; }

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<char32_t> cps = utf8::decode(text);
  std::vector<int32_t> ids;
  ids.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    auto it = std::lower_bound(codepoints_.begin(), codepoints_.end(), cps[i]);
    if (it == codepoints_.end() || *it != cps[i]) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(cps[i]));
      std::string shown = cps[i] == '\n' ? "\\n" : cps[i] == '\t' ? "\\t" : utf8::encode(cps[i]);
      QKV_CHECK(false, "character '", shown, "' (", hex, ") at position ", i,
                " is not in the model's vocabulary of ", chars_.size(), " characters");
    }
    ids.push_back(static_cast<int32_t>(it - codepoints_.begin()));
  }
  return ids;
}

std::string CharTokenizer::decode_one(int32_t id) const {
  QKV_CHECK(id >= 0 && id < vocab_size(), "CharTokenizer: id ", id, " out of range [0, ", vocab_size(), ")");
  return chars_[static_cast<size_t>(id)];
}

std::string CharTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) s += decode_one(id);
  return s;
}

}  // namespace qkv::text
