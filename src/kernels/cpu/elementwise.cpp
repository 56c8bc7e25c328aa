#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>

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
  // The leading rows summed onto dense columns (a bias's gradient: [rows, cols] → [cols]): split over
  // the columns, each thread adding every row onto its own, in row order — the serial loop's bits.
  if (ndl == 2 && L.strides[0][0] == 0 && st_o == 1 && st_i == 1) {
    const int64_t rows = L.shape[0], row_stride = L.strides[1][0];
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / rows);  // threads past 64K additions
    parallel_for(inner, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* x = in + r * row_stride;
        for (int64_t c = b; c < e; ++c) out[c] += x[c];
      }
    });
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
