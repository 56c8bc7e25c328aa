#include "hf_unicode.h"

#include <cstdlib>
#include <utf8proc.h>

#include "qkv/core/error.h"

namespace qkv::text::hf {

std::string valid_utf8(std::string_view s) {
  std::string out;
  bool copied = false;
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (copied) out.push_back(s[i]);
      ++i;
      continue;
    }
    // The lead byte's length and the range its first continuation byte must fall in (Unicode's
    // table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF).
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;
    else if (b == 0xED) need = 2, hi = 0x9F;
    else if (b >= 0xE1 && b <= 0xEF) need = 2;
    else if (b == 0xF0) need = 3, lo = 0x90;
    else if (b == 0xF4) need = 3, hi = 0x8F;
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    size_t k = 0;  // continuation bytes that fit
    while (need > 0 && k < need && i + 1 + k < s.size()) {
      const auto c = static_cast<unsigned char>(s[i + 1 + k]);
      const unsigned char l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
      if (c < l || c > h) break;
      ++k;
    }
    if (need > 0 && k == need) {
      if (copied) out.append(s.substr(i, need + 1));
      i += need + 1;
      continue;
    }
    // the maximal subpart: the lead byte and the continuation bytes that fitted
    if (!copied) {
      out.assign(s.substr(0, i));
      copied = true;
    }
    out += "\xEF\xBF\xBD";
    i += need > 0 ? 1 + k : 1;
  }
  return copied ? out : std::string(s);
}

char32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return *len = 1, b;
  if (b < 0xE0) return *len = 2, ((b & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
  if (b < 0xF0) return *len = 3, ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
  *len = 4;
  return ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool is_alphanumeric(char32_t c) {
  const auto k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

bool is_other(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
         k == UTF8PROC_CATEGORY_CO;
}

bool is_punctuation(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_mark_nonspacing(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_mark(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME;
}

bool is_numeric(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

void append_lowercase(std::string& out, char32_t c) {
  if (c == 0x130) {
    out += "i\xCC\x87";
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

size_t grapheme_end(std::string_view s, size_t i) {
  size_t n = 0;
  auto prev = static_cast<utf8proc_int32_t>(decode_at(s, i, &n));
  utf8proc_int32_t state = 0;
  for (i += n; i < s.size(); i += n) {
    const auto c = static_cast<utf8proc_int32_t>(decode_at(s, i, &n));
    if (utf8proc_grapheme_break_stateful(prev, c, &state)) break;
    prev = c;
  }
  return i;
}

std::string normalize(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  if (s.empty()) return {};
  utf8proc_uint8_t* dst = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &dst, static_cast<utf8proc_option_t>(options));
  QKV_CHECK(n >= 0, "tokenizer: Unicode normalization failed: ", utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

}  // namespace qkv::text::hf
