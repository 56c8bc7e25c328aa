// Character-level tokenizer (nanoGPT's shakespeare_char): the vocabulary is the sorted set of the
// Unicode characters (code points, UTF-8) of the training text; id = rank in that order. For Tiny
// Shakespeare that is 65 characters, the same ids as nanoGPT's prepare.py.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace qkv::text {

class CharTokenizer {
 public:
  CharTokenizer() = default;
  // The vocabulary of `text` (invalid UTF-8: an error naming the byte offset).
  static CharTokenizer from_text(std::string_view text);
  static CharTokenizer from_json(const nlohmann::json& j);  // {"type": "char", "chars": ["\n", " ", "!", …]}
  nlohmann::json to_json() const;

  // A character outside the vocabulary: an error naming it and its position.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_one(int32_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }

 private:
  std::vector<std::string> chars_;      // id → UTF-8 character
  std::vector<char32_t> codepoints_;    // id → code point (sorted)
};


}  // namespace qkv::text
