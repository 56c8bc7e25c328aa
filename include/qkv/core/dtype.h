// Element types. f32 is the compute type; bf16 is for storage and bf16 matmuls; boolean (1 byte,
// 0/1) is for masks; i32 is for token ids and targets; i8 holds int8 weight rows (a quantized model
// file's tensors, ops/inference_weight.h) and f8e4m3 a KV cache's keys and values (PyTorch's
// float8_e4m3fn, vLLM's kv_cache_dtype "fp8": nn/paged_kv_cache.h) — no op computes on either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qkv/core/host_device.h"

namespace qkv {

enum class DType : uint8_t { f32, bf16, boolean, i32, i8, f8e4m3 };

constexpr size_t dtype_size(DType t) {
  return t == DType::f32 || t == DType::i32 ? 4 : t == DType::bf16 ? 2 : 1;
}
constexpr const char* dtype_name(DType t) {
  return t == DType::f32    ? "f32"
         : t == DType::bf16 ? "bf16"
         : t == DType::i32  ? "i32"
         : t == DType::i8   ? "i8"
         : t == DType::f8e4m3 ? "f8e4m3"
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

// float8 e4m3fn (the OCP's FP8 E4M3; PyTorch's torch.float8_e4m3fn): a sign, 4 exponent bits (bias
// 7) and 3 fraction bits; no infinities, 0x7f and 0xff are NaN. Normal values 2⁻⁶ … 448, subnormal
// steps of 2⁻⁹ below:
//
//   e4m3(s, e, m) = (−1)ˢ · 2^(e − 7) · (1 + m/8)   for e ≥ 1,   (−1)ˢ · 2⁻⁹ · m   for e = 0
//
// Every value is a normal f32 (or 0), so widening is exact bit work; only the subnormals are m · 2⁻⁹
// as one f32 product of normal numbers, so a processor that treats f32 subnormals as 0 (MXCSR's
// DAZ/FTZ, -ffast-math's start-up code) widens them alike.
struct f8e4m3 {
  uint8_t bits;
};
// x's bits as a To (memcpy: what both compilers turn into a register move, on the host and the GPU)
template <typename To, typename From>
QKV_HOST_DEVICE inline To bits_as(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}
QKV_HOST_DEVICE inline uint32_t f32_bits(float f) { return bits_as<uint32_t>(f); }
QKV_HOST_DEVICE inline float f32_from_bits(uint32_t u) { return bits_as<float>(u); }
QKV_HOST_DEVICE inline float f8e4m3_to_f32(f8e4m3 x) {
  const uint32_t mag = x.bits & 0x7fu, sign = static_cast<uint32_t>(x.bits & 0x80u) << 24;
  const uint32_t r = mag == 0x7fu ? 0x7fc00000u                                       // NaN
                     : mag >= 8u  ? ((mag + (120u << 3)) << 20)                        // 2^(e − 7 + 127): e + 120
                                  : f32_bits(static_cast<float>(mag) * 0x1p-9f);       // m · 2⁻⁹ (0 for m = 0)
  return f32_from_bits(r | sign);
}
// f32 → e4m3fn, rounding to nearest even; beyond the largest finite, ±448 (±inf too: saturating, as
// PyTorch's cast — measured, torch 2.15 — and vLLM's fp8 cache writes); NaN → 0x7f with f's sign.
// Normal results keep 3 of f32's 23 fraction bits by the integer add of f32_to_bf16; below 2⁻⁶ the
// step is 2⁻⁹: |f| · 2⁹ rounded to an integer m (0 … 8; 8 is 2⁻⁶, the code 0x08) by adding and
// taking away 2²³ (IEEE arithmetic: not under -ffast-math).
QKV_HOST_DEVICE inline f8e4m3 f32_to_f8e4m3(float f) {
  const uint32_t u = f32_bits(f), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
  uint32_t r;
  if (a > 0x7f800000u) r = 0x7fu;                        // NaN
  else if (a >= 0x43e00000u) r = 0x7eu;                  // ≥ 448 (inf included): 448
  else if (a >= 0x3c800000u)                             // ≥ 2⁻⁶: normal
    r = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  else r = static_cast<uint32_t>((f32_from_bits(a) * 0x1p9f + 0x1p23f) - 0x1p23f);
  return f8e4m3{static_cast<uint8_t>(r | sign)};
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
    case DType::f8e4m3: return f8e4m3_to_f32(static_cast<const f8e4m3*>(p)[i]);
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
    case DType::f8e4m3: static_cast<f8e4m3*>(p)[i] = f32_to_f8e4m3(v); break;
  }
}

}  // namespace qkv
