// IEEE 754 binary16 ("half", safetensors' F16) ↔ f32. f32 → f16 rounds to nearest even, overflows to
// ±inf (65520 and above), keeps subnormals (down to 2^-24) and signed zeros; NaN stays a quiet NaN.
// f16 → f32 is exact. (bfloat16 lives in dtype.h.)
#pragma once

#include <cstdint>
#include <cstring>

namespace qkv {

struct f16 {
  uint16_t bits;
};

inline f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)  // NaN: quiet, with the top payload bits
    return f16{static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};
  if (a >= 0x47800000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // ≥ 2^16 (and inf) → inf
  if (a >= 0x38800000u) {
    // Normal f16 (≥ 2^-14): rebias the exponent, round the 13 dropped bits to nearest even. A carry
    // out of the mantissa bumps the exponent, which is right, up to [65520, 65536) → inf.
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1u);
    return f16{static_cast<uint16_t>(sign | (r >> 13))};
  }
  // Subnormal f16 (units of 2^-24) or zero: value = m · 2^(e − 150), so m is shifted right by 126 − e.
  const uint32_t e = a >> 23;
  if (e < 102) return f16{static_cast<uint16_t>(sign)};  // < 2^-25: rounds to ±0
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t s = 126u - e;  // 14..24
  uint32_t r = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // may round up to the smallest normal, 0x0400
  return f16{static_cast<uint16_t>(sign | r)};
}

inline float f16_to_f32(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf, NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalize
    uint32_t shift = 0;
    while (!(man & 0x400u)) {
      man <<= 1;
      ++shift;
    }
    u = sign | ((113u - shift) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace qkv
