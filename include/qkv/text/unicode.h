// The text questions the pipelines ask beyond the tokenizer: Python's str.lower(), input made valid
// UTF-8 as the tokenizers make it, a byte offset as Python's (code point) index and back, and the
// character classes Python's str.split() and re's \w read.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
// The byte at which Python's index `index` (code points) of s starts; s.size() for index ≥ the count.
size_t byte_of_code_point(std::string_view s, size_t index);

// The code points of s (valid UTF-8), each with the byte it starts at.
std::vector<std::pair<char32_t, size_t>> code_points_of(std::string_view s);
// Python's str.isspace() for one character (the White_Space property, and U+001C … U+001F).
bool is_space(char32_t c);
// A character re's \w matches in a str pattern: a letter, a number (L*, N*) or "_".
bool is_word_char(char32_t c);
// Python's s.split(): the runs of s between whitespace (is_space), none empty.
std::vector<std::string> split_whitespace(std::string_view s);

}  // namespace qkv::text
