#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/column_sums.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void sum_to(const std::vector<int64_t>& in_shape, const float* in, const std::vector<int64_t>& out_shape,
            float* out) {
  // Strides of `out` seen at in_shape: 0 along dims that were broadcast.
  const size_t nd = in_shape.size(), lead = nd - out_shape.size();
  std::vector<int64_t> so(nd, 0), si(nd);
  int64_t acc = 1, n_out = 1;
  for (int64_t d = static_cast<int64_t>(out_shape.size()) - 1; d >= 0; --d) {
    if (out_shape[d] != 1) so[lead + d] = acc;
    acc *= out_shape[d];
  }
  n_out = acc;
  acc = 1;
  for (int64_t d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
    si[d] = acc;
    acc *= in_shape[d];
  }
  std::memset(out, 0, static_cast<size_t>(n_out) * sizeof(float));
  if (acc == 0) return;
  StridedLoop L = coalesce(in_shape, {so, si});
  const int64_t ndl = static_cast<int64_t>(L.shape.size());
  const int64_t inner = L.shape[ndl - 1], st_o = L.strides[0][ndl - 1], st_i = L.strides[1][ndl - 1];
  // The leading rows summed onto dense columns (a bias's gradient: [rows, cols] → [cols]): in
  // kernels/column_strips.h's order — the GPU's bits, at any thread count (kernels/cpu/column_sums.h)
  // (and the whole tensor onto one number: rows of one column)
  if (ndl == 2 && L.strides[0][0] == 0 && st_o == 1 && st_i == 1 && L.strides[1][0] == inner) {
    column_sums_in_strips(L.shape[0], inner, out, [in, inner](int64_t r0, int64_t) { return in + r0 * inner; });
    return;
  }
  if (ndl == 1 && st_o == 0 && st_i == 1) {
    column_sums_in_strips(inner, 1, out, [in](int64_t r0, int64_t) { return in + r0; });
    return;
  }
  // Serial: rows of different outer indices may land on the same outputs.
  int64_t outer = 1;
  for (int64_t d = 0; d < ndl - 1; ++d) outer *= L.shape[d];
  for (int64_t r = 0; r < outer; ++r) {
    int64_t rem = r, oo = 0, oi = 0;
    for (int64_t d = ndl - 2; d >= 0; --d) {
      int64_t i = rem % L.shape[d];
      rem /= L.shape[d];
      oo += i * L.strides[0][d];
      oi += i * L.strides[1][d];
    }
    float* o = out + oo;
    const float* x = in + oi;
    if (st_o == 0) {
      float s = 0.f;
      for (int64_t i = 0; i < inner; ++i) s += x[i * st_i];
      *o += s;
    } else {
      for (int64_t i = 0; i < inner; ++i) o[i * st_o] += x[i * st_i];
    }
  }
}

double sum_f64(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

void sum_all(const float* x, int64_t n, float* out) { *out = static_cast<float>(sum_f64(x, n)); }

double sum_squares_f64(const float* x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void scale_inplace(float* x, int64_t n, float c) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= c;
}

void broadcast_rows(float* out, const float* row, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out + r * n, row, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace qkv::kernels::cpu
