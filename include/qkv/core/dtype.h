// Element types. f32 is the compute type; bf16 is for storage and bf16 matmuls; boolean (1 byte,
// 0/1) is for masks; i32 is for token ids and targets; i8 holds int8 weight rows (a quantized model
// file's tensors, ops/inference_weight.h) — no op computes on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qkv {

enum class DType : uint8_t { f32, bf16, boolean, i32, i8 };

constexpr size_t dtype_size(DType t) {
  return t == DType::f32 || t == DType::i32 ? 4 : t == DType::bf16 ? 2 : 1;
}
constexpr const char* dtype_name(DType t) {
  return t == DType::f32    ? "f32"
         : t == DType::bf16 ? "bf16"
         : t == DType::i32  ? "i32"
         : t == DType::i8   ? "i8"
                            : "bool";
}

// bfloat16: the top 16 bits of an IEEE f32; conversion rounds to nearest even (NaN stays NaN).
struct bf16 {
  uint16_t bits;
};
// Add just under half a bf16 ulp, plus the kept bit (ties to even), and keep the top half; a NaN
// is made quiet instead. Branch-free, so loops over it vectorize.
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(r >> 16)};
}
inline float bf16_to_f32(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The IEEE binary16 (f16) value nearest f, as an f32 — what an f16 operand holds: 11 significant
// bits, ties to even; |f| ≥ 65520 (halfway past the largest finite, 65504) → ±inf; below 2⁻¹⁴ the
// subnormal step 2⁻²⁴ (so |f| ≤ 2⁻²⁵ → ±0); NaN stays NaN. No _Float16 (not every compiler here
// has it on x86-64), and branch-free, so loops over it vectorize. Normal results keep 10 of f32's
// 23 fraction bits by the integer add of f32_to_bf16; subnormal ones are |f| + 0.5 − 0.5, whose
// sum rounds to a multiple of 0.5's ulp, 2⁻²⁴, ties to even (IEEE arithmetic: not under -ffast-math).
inline float round_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t a = u & 0x7fffffffu;
  float af;
  std::memcpy(&af, &a, 4);
  const float small = (af + 0.5f) - 0.5f;
  uint32_t r;
  std::memcpy(&r, &small, 4);
  r = a >= 0x38800000u ? (a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu : r;  // ≥ 2⁻¹⁴: normal in f16
  r = a >= 0x477ff000u ? 0x7f800000u : r;                                   // ≥ 65520: inf
  r = a >= 0x7f800000u ? a : r;                                             // inf, NaN: themselves
  r |= u & 0x80000000u;
  float out;
  std::memcpy(&out, &r, 4);
  return out;
}

// Element i of a buffer of `t`, as an f32, and an f32 stored as one: the value rules every
// conversion follows (bf16 rounds to nearest even, boolean is x ≠ 0, i32 truncates).
inline float load_as_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    case DType::boolean: return static_cast<const uint8_t*>(p)[i] ? 1.f : 0.f;
    case DType::i32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DType::i8: return static_cast<float>(static_cast<const int8_t*>(p)[i]);
  }
  return 0.f;
}
inline void store_from_f32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::bf16: static_cast<bf16*>(p)[i] = f32_to_bf16(v); break;
    case DType::boolean: static_cast<uint8_t*>(p)[i] = v != 0.f; break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::i8:  // saturating (NaN → 0): no value is undefined behaviour
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v >= 127.f ? 127.f : v <= -128.f ? -128.f : v == v ? v : 0.f);
      break;
  }
}

}  // namespace qkv
