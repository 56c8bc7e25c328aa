// UTF-8, once: decoding a code point with full validation (as Python's "utf-8" codec: no overlong
// forms, no surrogates, nothing past U+10FFFF, no truncated sequences), encoding one, counting and
// cutting text on code-point boundaries. Tokenizers, BLEU/chrF, SVG text and the progress bar all
// read text through it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::utf8 {

// What an invalid byte decodes to (each byte of an invalid sequence counts as one "character").
inline constexpr char32_t kInvalid = 0x110000;

struct CodePoint {
  char32_t value;  // kInvalid for an invalid byte
  size_t length;   // bytes: 1 … 4 (1 for an invalid byte)
  bool valid() const { return value != kInvalid; }
};

// The code point that starts at byte i (i < s.size()).
CodePoint decode_one(std::string_view s, size_t i);
// Every code point of s; invalid UTF-8 is a qkv::Error naming the byte offset.
std::vector<char32_t> decode(std::string_view s);
// The UTF-8 bytes of one code point (≤ U+10FFFF).
std::string encode(char32_t cp);
// Code points in s, an invalid byte counting as one.
size_t length(std::string_view s);
// The first code-point boundary at or after byte i (a cut there never splits a character).
size_t boundary_at_or_after(std::string_view s, size_t i);
// Replaces each invalid byte of s by U+FFFD, in one pass; returns how many were replaced (s is left
// untouched, and not copied, when it is valid).
size_t replace_invalid(std::string& s);

}  // namespace qkv::utf8
