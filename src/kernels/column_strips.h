// The order in which every device adds up the columns of a dense [rows, cols] — every bias's gradient:
// sum_to of leading rows onto dense columns, and an activation's backward that writes its bias's
// gradient in its own pass (kernels/activation.inc) — so that a column sum has one value on every
// device, at every thread count, fused or not:
//
//   the rows split into strips of `rows_each` (by the shape alone: at most 512 strips of at least 64
//   rows); for strip s (rows r₀ … r₁ − 1):
//     partial_s = Σ_{r = r₀ … r₁ − 1} a[r, c]                      (double, in row order, from 0)
//   out[c]      = f32(((0 + partial_0) + partial_1) + … )          (double, in strip order; one rounding)
//
// The GPU runs a strip's columns as a block's threads (kernels/cuda/sum_kernels.cuh), the CPU a strip
// a task (kernels/cpu/column_sums.h); each adds the same doubles in the same order, so the sums are the
// same bits. (Each f32 is exact in a double; only the additions round, and each is the same addition
// on both.) One running sum a column in a strip keeps the CPU's accumulators a row of doubles, in
// L1 while the rows stream past: eight row lanes a strip, as the GPU had them, made its sums 1.3–2×
// slower than the f32 loop they replaced.
#pragma once

#include <cstdint>

namespace qkv::kernels {

struct ColumnStrips {
  int64_t strips = 1, rows_each = 0;  // strip s: rows [s · rows_each, min(rows, (s + 1) · rows_each))
};

inline ColumnStrips column_strips(int64_t rows) {
  const int64_t by_size = (rows + 63) / 64;
  const int64_t strips = by_size < 1 ? 1 : by_size > 512 ? 512 : by_size;
  return {strips, (rows + strips - 1) / strips};
}

}  // namespace qkv::kernels
