#include "qkv/io/base64.h"

#include "qkv/core/error.h"

namespace qkv::io {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

// Every 3 bytes b₀b₁b₂ → 4 characters of 6 bits each; a short tail is padded with '='.
std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (const size_t rest = in.size() - i; rest > 0) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (rest == 2) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view in, std::string_view what) {
  QKV_CHECK(in.size() % 4 == 0, what, ": base64 length ", in.size(), " is not a multiple of 4");
  auto value = [&](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return uint32_t(c - 'A');
    if (c >= 'a' && c <= 'z') return uint32_t(c - 'a' + 26);
    if (c >= '0' && c <= '9') return uint32_t(c - '0' + 52);
    if (c == '+') return 62;
    if (c == '/') return 63;
    QKV_CHECK(false, what, ": invalid base64 character '", c, "'");
    return 0;
  };
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=') : 0;
    QKV_CHECK(in[i] != '=' && in[i + 1] != '=' && !(pad == 1 && in[i + 2] == '='), what, ": misplaced base64 padding");
    uint32_t v = (value(in[i]) << 18) | (value(in[i + 1]) << 12);
    if (pad < 2) v |= value(in[i + 2]) << 6;
    if (pad < 1) v |= value(in[i + 3]);
    out += char((v >> 16) & 255);
    if (pad < 2) out += char((v >> 8) & 255);
    if (pad < 1) out += char(v & 255);
  }
  return out;
}

}  // namespace qkv::io
