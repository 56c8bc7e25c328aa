#include "kernels/cpu/gemm_int8.h"

#include <oneapi/dnnl/dnnl.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/onednn_call.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vec.h"
#include "kernels/functors.h"

namespace qkv::kernels::cpu {

namespace {

constexpr float kWeightLevels = 127.f;

// Whether this build's matrix–vector kernel (dot_block below) sums u8 · s8 without vpmaddubsw's
// saturating int16: VNNI's vpdpbusd, or the scalar loop.
#if (defined(__AVX512VNNI__) && defined(__AVX512BW__)) || defined(__AVXVNNI__) || !defined(__AVX2__)
constexpr bool kGemvFullRange = true;
#else
constexpr bool kGemvFullRange = false;
#endif

std::atomic<int> g_activation_bits{0};  // 0: not chosen yet

// max_k |r[k]| (eight lanes at a time where the build has AVX2).
float abs_max(const float* r, int64_t K) {
  int64_t k = 0;
  float amax = 0.f;
#if defined(__AVX2__)
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 vmax = _mm256_setzero_ps();
  for (; k + 8 <= K; k += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(r + k)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  for (float v : lanes) amax = std::max(amax, v);
#endif
  for (; k < K; ++k) amax = std::max(amax, std::fabs(r[k]));
  return amax;
}

// q[k] = clamp(round(r[k] · inv), −levels, levels) + offset (round half to even, as nearbyint),
// stored as T: uint8_t for activations (offset 64), int8_t for weights (offset 0).
template <typename T>
void round_row(const float* r, int64_t K, float inv, float levels, int32_t offset, T* q) {
  int64_t k = 0;
#if defined(__AVX2__)
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-levels), hi = _mm256_set1_ps(levels);
  const __m256i zp = _mm256_set1_epi32(offset);
  for (; k + 8 <= K; k += 8) {
    __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(r + k), vinv), lo), hi);
    __m256i i = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), zp);
    // 8 int32 within [−127, 255] → 8 bytes (unsigned or signed saturation: nothing saturates)
    __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    const __m128i p8 = std::is_signed_v<T> ? _mm_packs_epi16(p16, p16) : _mm_packus_epi16(p16, p16);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), p8);
  }
#endif
  for (; k < K; ++k) {
    // clamped as the vector path's max-then-min: a NaN (from a NaN or infinite input) becomes −levels,
    // never a float→int conversion out of range (undefined behaviour; a crafted model file's weights)
    const float v = std::nearbyint(r[k] * inv);
    const float c = v >= -levels ? (v <= levels ? v : levels) : -levels;
    q[k] = static_cast<T>(static_cast<int32_t>(c) + offset);
  }
}

// One row of activations: returns s = max|r| / L and writes round(r / s) + z.
float quantize_row(const float* r, int64_t K, Int8Activations a, uint8_t* q) {
  const float amax = abs_max(r, K);
  const float s = amax > 0.f ? amax / a.levels : 1.f;
  round_row(r, K, 1.f / s, a.levels, a.zero_point, q);
  return s;
}

// A decoding step's few rows (M ≤ kGemvRows): one pass over the weights, each row of W8 read once
// for all M activation rows (oneDNN's GEMM packs the weights first, which a handful of rows does
// not repay). With Σ_k W8[n,k] known from quantization (row_sums):
//
//   acc[m, n] = Σ_k (xq[m,k] − z) · W8[n,k] = Σ_k xq[m,k] · W8[n,k] − z · row_sums[n]
//
// Rows of W8 go eight at a time (each activation vector loaded once for the eight, the next eight
// prefetched meanwhile), activation rows two at a time (the eight weight rows are re-read from L1
// for the next two); the u8 · s8 products
// are summed into int32 lanes by VNNI's vpdpbusd where the CPU has it (AVX-512 or AVX-VNNI), by
// vpmaddubsw + vpmaddwd otherwise (never saturating with 7-bit activations: xq ≤ 127, |W8| ≤ 127,
// 2 · 127 · 127 < 2¹⁵; that build never takes 8 bits). Every path sums the same integers exactly.
constexpr int64_t kGemvRows = kInt8GemvRows;
// How far ahead the weights are prefetched, in blocks of rows (the model's weights stream through
// once a step: the hardware prefetcher alone leaves the loads waiting).
constexpr int64_t kPrefetchBlocks = 1;

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// GCC 12's AVX-512 headers build their 256-bit halves from _mm256_undefined_*, which it then warns
// about as "uninitialized" (GCC PR 105593, fixed in 13): a false positive, silenced here only.
#if !defined(__clang__)  // (clang has neither warning, nor the bug)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// Σ_k xq·w over K for R weight rows × C activation rows, 64 bytes a step (the tail masked: zero
// bytes add nothing).
template <int R, int C>
void dot_block(int64_t K, const uint8_t* const* xs, const int8_t* const* ws, int32_t (*out)[8], int64_t prefetch) {
  __m512i acc[C][R];
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) acc[c][r] = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    __m512i wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = _mm512_loadu_si512(ws[r] + k);
      _mm_prefetch(reinterpret_cast<const char*>(ws[r] + k + prefetch), _MM_HINT_T0);
    }
    for (int c = 0; c < C; ++c) {
      const __m512i xv = _mm512_loadu_si512(xs[c] + k);
      for (int r = 0; r < R; ++r) acc[c][r] = _mm512_dpbusd_epi32(acc[c][r], xv, wv[r]);
    }
  }
  if (k < K) {
    const __mmask64 tail = _cvtu64_mask64(~0ULL >> (64 - (K - k)));
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_epi8(tail, ws[r] + k);
    for (int c = 0; c < C; ++c) {
      const __m512i xv = _mm512_maskz_loadu_epi8(tail, xs[c] + k);
      for (int r = 0; r < R; ++r) acc[c][r] = _mm512_dpbusd_epi32(acc[c][r], xv, wv[r]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) out[c][r] = _mm512_reduce_add_epi32(acc[c][r]);
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#elif defined(__AVX2__)
// As above, 32 bytes a step (the tail in scalar code).
inline __m256i dot_step(__m256i acc, __m256i xv, __m256i wv) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, xv, wv);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(xv, wv), _mm256_set1_epi16(1)));
#endif
}
inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}
template <int R, int C>
void dot_block(int64_t K, const uint8_t* const* xs, const int8_t* const* ws, int32_t (*out)[8], int64_t prefetch) {
  __m256i acc[C][R];
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) acc[c][r] = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m256i wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws[r] + k));
      _mm_prefetch(reinterpret_cast<const char*>(ws[r] + k + prefetch), _MM_HINT_T0);
    }
    for (int c = 0; c < C; ++c) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs[c] + k));
      for (int r = 0; r < R; ++r) acc[c][r] = dot_step(acc[c][r], xv, wv[r]);
    }
  }
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) {
      int32_t s = hsum(acc[c][r]);
      for (int64_t j = k; j < K; ++j) s += static_cast<int32_t>(xs[c][j]) * ws[r][j];
      out[c][r] = s;
    }
}
#else
template <int R, int C>
void dot_block(int64_t K, const uint8_t* const* xs, const int8_t* const* ws, int32_t (*out)[8], int64_t /*prefetch*/) {
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) {
      int32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<int32_t>(xs[c][k]) * ws[r][k];
      out[c][r] = s;
    }
}
#endif

// R weight rows from n: every activation row, two at a time.
template <int R>
void gemv_rows(int64_t M, int64_t N, int64_t K, const uint8_t* xq, const int8_t* W8, int64_t ldw,
               const int32_t* row_sums, int32_t zp, int64_t n, int32_t* acc) {
  const int8_t* ws[R];
  for (int r = 0; r < R; ++r) ws[r] = W8 + (n + r) * ldw;
  int32_t dots[2][8];
  for (int64_t m = 0; m < M; m += 2) {
    const uint8_t* xs[2] = {xq + m * K, xq + std::min(m + 1, M - 1) * K};
    if (m + 1 < M)
      dot_block<R, 2>(K, xs, ws, dots, kPrefetchBlocks * R * ldw);
    else
      dot_block<R, 1>(K, xs, ws, dots, kPrefetchBlocks * R * ldw);
    for (int64_t c = 0; c < std::min<int64_t>(2, M - m); ++c)
      for (int r = 0; r < R; ++r)
        acc[(m + c) * N + n + r] = dots[c][r] - zp * row_sums[n + r];
  }
}

void gemv_u8s8(int64_t M, int64_t N, int64_t K, const uint8_t* xq, const int8_t* W8, int64_t ldw,
               const int32_t* row_sums, int32_t zp, int32_t* acc) {
  parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + 8 <= n1; n += 8) gemv_rows<8>(M, N, K, xq, W8, ldw, row_sums, zp, n, acc);
    for (; n < n1; ++n) gemv_rows<1>(M, N, K, xq, W8, ldw, row_sums, zp, n, acc);
  });
}

// oneDNN's effective ISA (what its JIT kernels use here, after ONEDNN_MAX_CPU_ISA) sums u8 · s8
// exactly: VNNI (AVX-512 or AVX) or AMX.
bool onednn_has_vnni() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
         (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
}

}  // namespace

bool int8_full_range_available() {
  static const bool available = kGemvFullRange && onednn_has_vnni();
  return available;
}

namespace {

// `bits` checked (7, or 8 where available); `what` names where they came from.
int checked_bits(int bits, const std::string& what) {
  QKV_CHECK(bits == 7 || bits == 8, what, ": the int8 products' activation bits are 7 or 8");
  QKV_CHECK(bits == 7 || int8_full_range_available(), what, ": this CPU's int8 products take 7-bit activations "
            "(oneDNN's effective ISA has no VNNI or AMX, or this build's matrix-vector kernel uses vpmaddubsw)");
  return bits;
}

}  // namespace

int int8_activation_bits() {
  int bits = g_activation_bits.load(std::memory_order_relaxed);
  if (bits == 0) {
    bits = int8_full_range_available() ? 8 : 7;
    if (const char* e = std::getenv("QKV_INT8_ACTIVATION_BITS"); e && *e) {
      const std::string_view v(e);
      bits = checked_bits(v == "7" ? 7 : v == "8" ? 8 : 0, "QKV_INT8_ACTIVATION_BITS='" + std::string(v) + "'");
    }
    g_activation_bits.store(bits, std::memory_order_relaxed);
  }
  return bits;
}

void set_int8_activation_bits(int bits) {
  g_activation_bits.store(checked_bits(bits, "int8 activations: " + std::to_string(bits) + " bits"),
                          std::memory_order_relaxed);
}

Int8Activations int8_activations(int64_t K) {
  if (int8_activation_bits() == 8 && K <= kInt8FullRangeMaxK) return {127.f, 128};
  return {63.f, 64};
}

void quantize_rows_int8(int64_t N, int64_t K, const float* W, int8_t* W8, float* scale, int32_t* row_sums) {
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* w = W + n * K;
      int8_t* q = W8 + n * K;
      // s_w = max|W[n,:]| / 127; W8 = round(W / s_w)
      const float amax = abs_max(w, K);
      const float s = amax > 0.f ? amax / kWeightLevels : 1.f;
      round_row(w, K, 1.f / s, kWeightLevels, 0, q);
      int32_t sum = 0;  // Σ_k W8[n,k]: the zero point's share of every product with this row
      for (int64_t k = 0; k < K; ++k) sum += q[k];
      scale[n] = s;
      row_sums[n] = sum;
    }
  });
}

namespace {

// The int32 sums may be written into the f32 output itself (same size), each read before the float
// that replaces it: an int32 that may alias a float.
using aliased_i32 = int32_t __attribute__((may_alias));

// out[n] = s · s_w[n] · (a[n] − zp · Σ_k W8[n,k]) (+ b[n]): a row of int32 sums to f32 in one pass
// (ZeroPoint: the product left the activations' zero point in the sums); a may be out.
// (Eight at a time by hand: in place, the compiler's own vectorization sees a and out overlap and
// keeps the scalar loop. Each lane is loaded before it is stored; every path of a product goes
// through this one function, so they still give the same numbers.)
template <bool ZeroPoint>
void dequantize_row(int64_t N, const aliased_i32* a, int32_t zp, const int32_t* row_sums, float s, const float* scale,
                    const float* bias, float* out) {
  auto sum = [&](int64_t n) { return ZeroPoint ? a[n] - zp * row_sums[n] : a[n]; };
  int64_t n = 0;
#if defined(__AVX2__)
  const __m256 vs = _mm256_set1_ps(s);
  const __m256i vzp = _mm256_set1_epi32(zp);
  for (; n + 8 <= N; n += 8) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + n));
    if (ZeroPoint)
      v = _mm256_sub_epi32(v, _mm256_mullo_epi32(vzp, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_sums + n))));
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(vs, _mm256_loadu_ps(scale + n)));
    if (bias) f = _mm256_add_ps(f, _mm256_loadu_ps(bias + n));
    _mm256_storeu_ps(out + n, f);
  }
#endif
  if (bias)
    for (; n < N; ++n) out[n] = static_cast<float>(sum(n)) * (s * scale[n]) + bias[n];
  else
    for (; n < N; ++n) out[n] = static_cast<float>(sum(n)) * (s * scale[n]);
}

// Per thread, reused across calls: quantized rows, their scales, int32 sums. Grown, never shrunk (a
// vector that shrank and grew back value-initialized the new part — a memset of the 4 MB of a
// vocabulary's sums after every smaller product of a decoding step).
template <typename T>
T* grown(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

// s_x[m] = max|x[m,:]| / L; X8 = round(x / s_x), stored + z: x [M, K] (row stride ldx) → xq [M, K], sx [M].
void quantize_activations(int64_t M, int64_t K, const float* x, int64_t ldx, Int8Activations a, uint8_t* xq, float* sx) {
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) sx[m] = quantize_row(x + m * ldx, K, a, xq + m * K);
  });
}

// acc [M, N] = (Xq − z) · W8ᵀ, exact in int32 (K · 255 · 127 < 2³¹ for K ≤ kInt8FullRangeMaxK, K · 127 ·
// 127 for 7 bits): the same integers on every path, so a decoding step gives the same numbers
// whichever path its batch takes. Returns whether the zero point's share, z · Σ_k W8[n,k], is still
// in the sums (the packed product leaves it for the dequantizing pass to take out).
bool int8_sums(int64_t M, const uint8_t* xq, Int8Activations a, const Int8Weights& w, aliased_i32* acc) {
  const int64_t N = w.N, K = w.K;
  if (M <= kGemvRows) {
    gemv_u8s8(M, N, K, xq, w.W8, w.ldw, w.row_sums, a.zero_point, acc);
    return false;
  }
  if (w.packed && packed_linear_u8s8(*w.packed, M, xq, acc)) return true;
  const int32_t co = 0;
  dnnl_status_t st;
  {
    const OneDnnCall call;  // (kernels/cpu/onednn_call.h)
    st = dnnl_gemm_u8s8s32('N', 'T', 'F', M, N, K, 1.f, xq, K, static_cast<uint8_t>(a.zero_point), w.W8, w.ldw, 0,
                           0.f, acc, N, &co);
  }
  QKV_CHECK(st == dnnl_success, "linear_int8: oneDNN's dnnl_gemm_u8s8s32 failed (status ", static_cast<int>(st),
            ") for M=", M, " N=", N, " K=", K);
  return false;
}

// Row m of the sums to f32: y = s_x[m] · s_w[n] · (acc − [z · Σ_k W8[n,k]]) (+ b) (the bracket only
// when the product left it); out may be the sums' own row.
void dequantize_sums(const aliased_i32* sums, bool zero_point_left, int32_t zp, float sx, const Int8Weights& w,
                     float* out) {
  if (zero_point_left)
    dequantize_row<true>(w.N, sums, zp, w.row_sums, sx, w.scale, w.bias, out);
  else
    dequantize_row<false>(w.N, sums, 0, w.row_sums, sx, w.scale, w.bias, out);
}

// The activation between a feed-forward block's products, in place on one row: the unfused ops'
// kernels (and so their numbers), but for silu's σ (below).
void activate_row(FfnActivation act, float* r, int64_t n) {
  switch (act) {
    case FfnActivation::relu: relu_forward(r, r, n); return;
    case FfnActivation::gelu: gelu_forward(r, r, n, false); return;
    case FfnActivation::gelu_tanh: gelu_forward(r, r, n, true); return;
    case FfnActivation::silu: {
      // x · σ(x), σ on vec.h's exp (~2 ulp) where the build has vectors: libm's expf, element by
      // element as the unfused sigmoid op takes it, was 5 % of a Marian model's decoding
      int64_t i = 0;
#if QKV_SIMD
      for (; i + kLanes <= n; i += kLanes) {
        const simd::vf v = simd::load(r + i);
        simd::store(r + i, simd::mul(v, simd::sigmoid(v)));
      }
#endif
      for (; i < n; ++i) r[i] = r[i] * kernels::Sigmoid{}(r[i]);
      return;
    }
  }
}

struct Int8Scratch {
  std::vector<uint8_t> xq;
  std::vector<float> sx, sh;
  std::vector<int32_t> acc;
};
Int8Scratch& scratch() {
  thread_local Int8Scratch s;
  return s;
}

// A product's input rows quantized into this thread's scratch: x [M, K] (row stride ldx) → q, s.
struct QuantizedInput {
  const uint8_t* q;
  const float* s;
  Int8Activations a;
};
QuantizedInput quantize_input(int64_t M, int64_t K, const float* x, int64_t ldx) {
  Int8Scratch& sc = scratch();
  uint8_t* q = grown(sc.xq, M * K);
  float* s = grown(sc.sx, M);
  const Int8Activations a = int8_activations(K);
  quantize_activations(M, K, x, ldx, a, q, s);
  return {q, s, a};
}

}  // namespace

void linear_int8(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const int8_t* W8, int64_t ldw,
                 const float* scale, const int32_t* row_sums, const float* bias, float* y, int64_t ldy,
                 const PackedLinear* packed) {
  if (M <= 0 || N <= 0) return;
  const Int8Weights w{N, K, W8, ldw, scale, row_sums, bias, packed};
  // The sums go into y itself where it is dense ([M, N]); a buffer of their own otherwise (the
  // vocabulary's [128, 6,500] output of a beam step kept 3.3 MB per thread for good).
  aliased_i32* acc = ldy == N ? reinterpret_cast<aliased_i32*>(y) : grown(scratch().acc, M * N);
  const QuantizedInput in = quantize_input(M, K, x, ldx);
  const bool zero_point_left = int8_sums(M, in.q, in.a, w, acc);
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      dequantize_sums(acc + m * N, zero_point_left, in.a.zero_point, in.s[m], w, y + m * ldy);
  });
}

void linear_log_softmax_int8(int64_t M, const float* x, const Int8Weights& w, float* y) {
  if (M <= 0 || w.N <= 0) return;
  const int64_t N = w.N;
  const QuantizedInput in = quantize_input(M, w.K, x, w.K);
  aliased_i32* acc = reinterpret_cast<aliased_i32*>(y);  // the sums in y itself
  const bool zero_point_left = int8_sums(M, in.q, in.a, w, acc);
  // each row while in cache: the logits z = s_x s_w Σ + b, then log_softmax(z) in place
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      dequantize_sums(acc + m * N, zero_point_left, in.a.zero_point, in.s[m], w, y + m * N);
      log_softmax_forward(y + m * N, y + m * N, 1, N);
    }
  });
}

void feed_forward_int8(int64_t M, const float* x, const Int8Weights& l1, FfnActivation act, const Int8Weights& l2,
                       float* y, int32_t* hidden, uint8_t* hq) {
  QKV_CHECK(l2.K == l1.N, "feed_forward_int8: the second product takes ", l2.K, " inputs, the first gives ", l1.N);
  if (M <= 0) return;
  const int64_t H = l1.N, N = l2.N;
  float* sh = grown(scratch().sh, M);
  aliased_i32* acc = hidden;
  // x [M, K] → Xq, s_x; acc [M, H] = Σ (Xq − z) W₁8
  const QuantizedInput in = quantize_input(M, l1.K, x, l1.K);
  const bool zero_point_left = int8_sums(M, in.q, in.a, l1, acc);
  // each row while in cache: h = act(s_x s_w Σ + b₁) over the sums' own row, then its quantization
  // H8 = round(h / s_h) + z_h, s_h = max|h| / L — the f32 hidden activations are never written out
  const Int8Activations ah = int8_activations(H);
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* h = reinterpret_cast<float*>(acc + m * H);
      dequantize_sums(acc + m * H, zero_point_left, in.a.zero_point, in.s[m], l1, h);
      activate_row(act, h, H);
      sh[m] = quantize_row(h, H, ah, hq + m * H);
    }
  });
  // y [M, N] = s_h s_w (Σ (H8 − z_h) W₂8) + b₂, the sums in y itself
  aliased_i32* out = reinterpret_cast<aliased_i32*>(y);
  const bool left2 = int8_sums(M, hq, ah, l2, out);
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) dequantize_sums(out + m * N, left2, ah.zero_point, sh[m], l2, y + m * N);
  });
}

void embedding_int8(const int8_t* W8, const float* scale, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n,
                    float* out) {
  for (int64_t i = 0; i < n; ++i)
    QKV_CHECK(ids[i] >= 0 && ids[i] < vocab, "embedding: id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", vocab, ")");
  parallel_for(n, 1 + 8192 / (dim + 1), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int8_t* w = W8 + static_cast<int64_t>(ids[i]) * dim;
      const float s = scale[ids[i]];
      float* o = out + i * dim;
      for (int64_t k = 0; k < dim; ++k) o[k] = s * static_cast<float>(w[k]);
    }
  });
}

}  // namespace qkv::kernels::cpu
