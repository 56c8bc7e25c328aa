// The CPU's elementwise kernels (kernels/elementwise.inc: one declaration for every device), the
// templates defined here.
//
// The shape is first "coalesced" (adjacent dims merged when every operand's strides allow it), so
// the common cases — dense same-shape operands, a bias broadcast along rows — become one or two
// flat loops that the compiler vectorizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/vec.h"
#include "kernels/strided.h"
#include "kernels/functors.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {
#include "kernels/elementwise.inc"

// The register form of an elementwise function where libm's scalar one would dominate a loop (tanh,
// σ, e^x: the recurrent models' attention scores and gates): the formulas of vec.h, eight or
// sixteen lanes at a time. unary() uses it on dense rows; other functions run as written.
template <typename F>
struct VectorForm {
  static constexpr bool value = false;
};
#if QKV_SIMD
template <>
struct VectorForm<kernels::Tanh> {
  static constexpr bool value = true;
  static simd::vf apply(simd::vf x) { return simd::tanh(x); }
};
template <>
struct VectorForm<kernels::Sigmoid> {
  static constexpr bool value = true;
  static simd::vf apply(simd::vf x) { return simd::sigmoid(x); }
};
template <>
struct VectorForm<kernels::Exp> {
  static constexpr bool value = true;
  static simd::vf apply(simd::vf x) { return simd::exp(x); }
};
#endif

// Calls f(offsets[0..k), inner_count, inner_strides[0..k)) for every innermost row of the loop,
// splitting the outer iterations across threads when the work is large.
template <typename F>
void for_each_row(const StridedLoop& L, F&& f) {
  const int64_t nd = static_cast<int64_t>(L.shape.size());
  const size_t k = L.strides.size();
  const int64_t inner = L.shape[nd - 1];
  int64_t outer = 1;
  for (int64_t d = 0; d < nd - 1; ++d) outer *= L.shape[d];
  std::vector<int64_t> inner_st(k);
  for (size_t o = 0; o < k; ++o) inner_st[o] = L.strides[o][nd - 1];
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> off(k);
    for (int64_t r = begin; r < end; ++r) {
      int64_t rem = r;
      for (size_t o = 0; o < k; ++o) off[o] = 0;
      for (int64_t d = nd - 2; d >= 0; --d) {
        int64_t i = rem % L.shape[d];
        rem /= L.shape[d];
        for (size_t o = 0; o < k; ++o) off[o] += i * L.strides[o][d];
      }
      f(off.data(), inner, inner_st.data());
    }
  };
  int64_t grain = inner >= 4096 ? 1 : (4096 + inner - 1) / inner;
  if (outer == 1 && inner >= 65536 && !in_parallel_region() && num_threads() > 1) {
    // One long row: split it instead.
    parallel_for(inner, 16384, [&](int64_t b, int64_t e) {
      std::vector<int64_t> off(k);
      for (size_t o = 0; o < k; ++o) off[o] = b * inner_st[o];
      f(off.data(), e - b, inner_st.data());
    });
    return;
  }
  parallel_for(outer, grain, body);
}

template <typename F>
void binary(const std::vector<int64_t>& shape, float* out, const float* a, const std::vector<int64_t>& sa,
            const float* b, const std::vector<int64_t>& sb, F f) {
  const std::vector<int64_t> so = dense_strides(shape);
  if (numel(shape) == 0) return;
  StridedLoop L = coalesce(shape, {so, sa, sb});
  for_each_row(L, [&](const int64_t* off, int64_t n, const int64_t* st) {
    float* o = out + off[0];
    const float* x = a + off[1];
    const float* y = b + off[2];
    if (st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[1] == 1 && st[2] == 0) {
      const float yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (st[1] == 0 && st[2] == 1) {
      const float xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i * st[1]], y[i * st[2]]);
    }
  });
}

template <typename F>
void unary(const std::vector<int64_t>& shape, float* out, const float* a, const std::vector<int64_t>& sa, F f) {
  const std::vector<int64_t> so = dense_strides(shape);
  if (numel(shape) == 0) return;
  StridedLoop L = coalesce(shape, {so, sa});
  for_each_row(L, [&](const int64_t* off, int64_t n, const int64_t* st) {
    float* o = out + off[0];
    const float* x = a + off[1];
    if (st[1] == 1) {
      int64_t i = 0;
#if QKV_SIMD
      if constexpr (VectorForm<F>::value)
        for (; i + simd::kLanes <= n; i += simd::kLanes) simd::store(o + i, VectorForm<F>::apply(simd::load(x + i)));
#endif
      for (; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i * st[1]]);
    }
  });
}

template <typename TO, typename TA, typename F>
void map1(const std::vector<int64_t>& shape, TO* out, const TA* a, const std::vector<int64_t>& sa, F f) {
  const std::vector<int64_t> so = dense_strides(shape);
  if (numel(shape) == 0) return;
  StridedLoop L = coalesce(shape, {so, sa});
  for_each_row(L, [&](const int64_t* off, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0]] = f(a[off[1] + i * st[1]]);
  });
}
template <typename TO, typename TA, typename TB, typename F>
void map2(const std::vector<int64_t>& shape, TO* out, const TA* a, const std::vector<int64_t>& sa, const TB* b,
          const std::vector<int64_t>& sb, F f) {
  const std::vector<int64_t> so = dense_strides(shape);
  if (numel(shape) == 0) return;
  StridedLoop L = coalesce(shape, {so, sa, sb});
  for_each_row(L, [&](const int64_t* off, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0]] = f(a[off[1] + i * st[1]], b[off[2] + i * st[2]]);
  });
}

}  // namespace qkv::kernels::cpu
