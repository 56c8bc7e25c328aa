// The column sums of a [rows, cols] on the CPU in kernels/column_strips.h's order (the GPU's bits): the
// strips split over the threads (a strip a task: any thread count adds the same doubles in the same
// order), each strip's running sums a row of doubles (in L1/L2 while the rows stream past), then the
// strips' partial sums added in strip order, split over the columns.
//
//   column_sums_in_strips(rows, cols, out, rows_of)
//     rows_of(r0, r1) → a pointer to row r0 of the rows [r0, r1) (a group of about kGroup elements
//     inside one strip), rows `cols` floats apart — they may be made by the call (an activation's
//     backward writes its dx there, and the sum reads it while it is in cache:
//     kernels/cpu/activation.cpp).
//   out [cols] f32; memory: the strips' partials (strips × cols doubles: at most an eighth of the
//   input's bytes where rows ≥ 64, as a strip holds ≥ 64 rows).
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
  std::vector<double> partial(static_cast<size_t>(S.strips * cols), 0.0);
  constexpr int64_t kGroup = 8192;  // elements a call of rows_of makes: 32 KB of floats, in rows of 8
  const int64_t group = std::max<int64_t>(8, kGroup / cols / 8 * 8);
  // threads past 64K elements' work (a strip's rows × cols)
  const int64_t strip_work = std::max<int64_t>(1, S.rows_each * cols);
  parallel_for(S.strips, std::max<int64_t>(1, (int64_t{1} << 16) / strip_work), [&](int64_t sb, int64_t se) {
    for (int64_t s = sb; s < se; ++s) {
      // partial_s = Σ the strip's rows, in row order
      const int64_t r0 = std::min(rows, s * S.rows_each), r1 = std::min(rows, r0 + S.rows_each);
      double* p = partial.data() + s * cols;
      for (int64_t g = r0; g < r1; g += group) {
        const int64_t ge = std::min(r1, g + group);
        const float* a = rows_of(g, ge);
        int64_t r = 0;
        // eight rows a pass: a column's running sum loaded and stored once for eight additions
        for (; r + 8 <= ge - g; r += 8) {
          const float* x = a + r * cols;
          const int64_t n = cols;
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) {
            double t = p[c];
            t += x[c], t += x[c + n], t += x[c + 2 * n], t += x[c + 3 * n];
            t += x[c + 4 * n], t += x[c + 5 * n], t += x[c + 6 * n], t += x[c + 7 * n];
            p[c] = t;
          }
        }
        for (; r < ge - g; ++r) {
          const float* row = a + r * cols;
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) p[c] += row[c];
        }
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
