// The text questions the pipelines ask beyond the tokenizer: Python's str.lower(), input made valid
// UTF-8 as the tokenizers make it, and a byte offset as Python's (code point) index.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qkv::text {

// Each character's full lowercase (Python's str.lower and Rust's char::to_lowercase: U+0130 becomes
// "i\u0307"; not the final-sigma rule). `s` valid UTF-8.
std::string lowercase(std::string_view s);
// Each maximal invalid stretch replaced by one U+FFFD, as HfTokenizer::encode replaces it (Python's
// bytes.decode("utf-8", errors="replace")); valid text as it is.
std::string valid_utf8(std::string_view s);
// The number of code points in s[0, byte) — Python's index of the character starting at byte.
size_t code_points(std::string_view s, size_t byte);
// The first byte of the character that ends just before s[byte] (0 < byte ≤ s.size()).
size_t char_start_before(std::string_view s, size_t byte);

}  // namespace qkv::text
