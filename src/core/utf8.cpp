#include "qkv/core/utf8.h"

#include "qkv/core/error.h"

namespace qkv::utf8 {

// Lead byte → length and payload bits; every continuation byte 10xxxxxx; then the value must need
// that many bytes (no overlong form), lie outside the surrogates D800–DFFF and not exceed 10FFFF.
CodePoint decode_one(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1};
  size_t len;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2, cp = b0 & 0x1F;
  else if (b0 >= 0xE0 && b0 <= 0xEF) len = 3, cp = b0 & 0x0F;
  else if (b0 >= 0xF0 && b0 <= 0xF4) len = 4, cp = b0 & 0x07;
  else return {kInvalid, 1};
  if (i + len > s.size()) return {kInvalid, 1};
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return {kInvalid, 1};
  if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return {kInvalid, 1};
  return {cp, len};
}

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const CodePoint c = decode_one(s, i);
    QKV_CHECK(c.valid(), "invalid UTF-8 at byte ", i);
    out.push_back(c.value);
    i += c.length;
  }
  return out;
}

std::string encode(char32_t cp) {
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

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += decode_one(s, i).length) ++n;
  return n;
}

size_t boundary_at_or_after(std::string_view s, size_t i) {
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return i;
}

size_t replace_invalid(std::string& s) {
  size_t i = 0;  // the valid prefix, untouched
  for (CodePoint cp; i < s.size() && (cp = decode_one(s, i)).valid();) i += cp.length;
  if (i == s.size()) return 0;
  std::string out(s, 0, i);
  size_t bad = 0;
  while (i < s.size()) {
    const CodePoint cp = decode_one(s, i);
    if (cp.valid()) out.append(s, i, cp.length);
    else out += "\xEF\xBF\xBD", ++bad;
    i += cp.length;
  }
  s = std::move(out);
  return bad;
}

}  // namespace qkv::utf8
