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

}  // namespace qkv::text
