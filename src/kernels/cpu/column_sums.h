// The column sums of a [rows, cols] on the CPU in kernels/column_strips.h's order (the GPU's bits): the
// strips split over the threads (a strip a task: any thread count adds the same doubles in the same
// order), each strip's eight lanes in a thread's buffer, then the strips' partial sums added in strip
// order, split over the columns.
//
//   column_sums_in_strips(rows, cols, out, rows_of)
//     rows_of(r0, r1) → a pointer to row r0 of rows [r0, r1) (at most kRowLanes of them, one a lane),
//     rows `cols` floats apart — the rows may be made by the call (an activation's backward writes its
//     dx there, and the sum reads them while they are in cache: kernels/cpu/activation.cpp).
//   out [cols] f32; memory: the strips' partials (strips × cols doubles: at most a quarter of a row's
//   bytes a row, as rows ≥ 64 a strip) and eight lanes of cols doubles a thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/column_strips.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

template <class RowsOf>
void column_sums_in_strips(int64_t rows, int64_t cols, float* out, RowsOf&& rows_of) {
  if (cols <= 0) return;
  const ColumnStrips S = column_strips(rows);
  std::vector<double> partial(static_cast<size_t>(S.strips * cols));
  // threads past 64K elements' work (a strip's rows × cols)
  const int64_t strip_work = std::max<int64_t>(1, S.rows_each * cols);
  parallel_for(S.strips, std::max<int64_t>(1, (int64_t{1} << 16) / strip_work), [&](int64_t sb, int64_t se) {
    std::vector<double> lanes(static_cast<size_t>(kRowLanes * cols));
    for (int64_t s = sb; s < se; ++s) {
      std::fill(lanes.begin(), lanes.end(), 0.0);
      const int64_t r0 = std::min(rows, s * S.rows_each), r1 = std::min(rows, r0 + S.rows_each);
      // lane y = Σ rows r0 + y, r0 + y + 8, …: rows [g, g + 8) go to lanes 0 … 7 in row order
      for (int64_t g = r0; g < r1; g += kRowLanes) {
        const int64_t ge = std::min(r1, g + kRowLanes);
        const float* a = rows_of(g, ge);
        for (int64_t y = 0; y < ge - g; ++y) {
          double* l = lanes.data() + y * cols;
          const float* row = a + y * cols;
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) l[c] += row[c];
        }
      }
      // partial_s = ((0 + lane_0) + lane_1) + … + lane_7
      double* p = partial.data() + s * cols;
      std::fill(p, p + cols, 0.0);
      for (int y = 0; y < kRowLanes; ++y) {
        const double* l = lanes.data() + y * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) p[c] += l[c];
      }
    }
  });
  // out[c] = f32(Σ_s partial_s[c]) in strip order (a thread's columns in a row of doubles, a strip at a time)
  parallel_for(cols, std::max<int64_t>(1, (int64_t{1} << 16) / S.strips), [&](int64_t cb, int64_t ce) {
    std::vector<double> t(static_cast<size_t>(ce - cb), 0.0);
    for (int64_t s = 0; s < S.strips; ++s) {
      const double* p = partial.data() + s * cols + cb;
#pragma omp simd
      for (int64_t c = 0; c < ce - cb; ++c) t[c] += p[c];
    }
    for (int64_t c = cb; c < ce; ++c) out[c] = static_cast<float>(t[c - cb]);
  });
}

}  // namespace qkv::kernels::cpu
