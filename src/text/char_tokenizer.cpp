#include "qkv/text/char_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::text {

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    QKV_CHECK(len > 0 && i + len <= s.size(), "invalid UTF-8 at byte ", i);
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      QKV_CHECK((cc >> 6) == 2, "invalid UTF-8 at byte ", i + k);
      cp = (cp << 6) | (cc & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  std::vector<uint32_t> cps = utf8_decode(text);
  std::sort(cps.begin(), cps.end());
  cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
  QKV_CHECK(!cps.empty(), "CharTokenizer: the training text is empty");
  CharTokenizer t;
  t.codepoints_ = cps;
  for (uint32_t cp : cps) t.chars_.push_back(utf8_encode(cp));
  return t;
}

CharTokenizer CharTokenizer::from_json(const nlohmann::json& j) {
  QKV_CHECK(j.is_object() && j.value("type", "") == "char" && j.contains("chars") && j.at("chars").is_array(),
            "CharTokenizer: expected {\"type\": \"char\", \"chars\": [...]}, got ", j.dump().substr(0, 200));
  CharTokenizer t;
  for (const auto& c : j.at("chars")) {
    QKV_CHECK(c.is_string(), "CharTokenizer: vocabulary entries must be strings, got ", c.dump());
    std::vector<uint32_t> cp = utf8_decode(c.get<std::string>());
    QKV_CHECK(cp.size() == 1, "CharTokenizer: vocabulary entry ", c.dump(), " is not one character");
    QKV_CHECK(t.codepoints_.empty() || t.codepoints_.back() < cp[0], "CharTokenizer: vocabulary is not sorted and unique at ",
              c.dump());
    t.codepoints_.push_back(cp[0]);
    t.chars_.push_back(c.get<std::string>());
  }
  QKV_CHECK(!t.chars_.empty(), "CharTokenizer: empty vocabulary");
  return t;
}

nlohmann::json CharTokenizer::to_json() const { return {{"type", "char"}, {"chars", chars_}}; }

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> cps = utf8_decode(text);
  std::vector<int32_t> ids;
  ids.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    auto it = std::lower_bound(codepoints_.begin(), codepoints_.end(), cps[i]);
    if (it == codepoints_.end() || *it != cps[i]) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", cps[i]);
      std::string shown = cps[i] == '\n' ? "\\n" : cps[i] == '\t' ? "\\t" : utf8_encode(cps[i]);
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
