#include "qkv/text/unicode.h"

#include <algorithm>

#include "hf_unicode.h"

namespace qkv::text {

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0, n = 0; i < s.size(); i += n) hf::append_lowercase(out, hf::decode_at(s, i, &n));
  return out;
}

std::string valid_utf8(std::string_view s) { return hf::valid_utf8(s); }

size_t code_points(std::string_view s, size_t byte) {
  size_t n = 0;
  for (size_t i = 0; i < std::min(byte, s.size()); ++i) n += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  return n;
}

size_t char_start_before(std::string_view s, size_t byte) {
  size_t k = std::min(byte, s.size()) - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

size_t byte_of_code_point(std::string_view s, size_t index) {
  for (size_t i = 0, n = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == index) return i;
  return s.size();
}

std::vector<std::pair<char32_t, size_t>> code_points_of(std::string_view s) {
  std::vector<std::pair<char32_t, size_t>> out;
  for (size_t i = 0, n = 0; i < s.size(); i += n) out.emplace_back(hf::decode_at(s, i, &n), i);
  return out;
}

bool is_space(char32_t c) { return hf::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

bool is_word_char(char32_t c) { return c == U'_' || hf::is_alphanumeric(c); }

std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> out;
  size_t begin = std::string_view::npos;
  for (const auto& [c, at] : code_points_of(s)) {
    if (is_space(c)) {
      if (begin != std::string_view::npos) out.emplace_back(s.substr(begin, at - begin));
      begin = std::string_view::npos;
    } else if (begin == std::string_view::npos) {
      begin = at;
    }
  }
  if (begin != std::string_view::npos) out.emplace_back(s.substr(begin));
  return out;
}

}  // namespace qkv::text
