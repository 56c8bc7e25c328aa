// kernels/column_strips.h's order of a column sum written out plainly — a column at a time, a strip at
// a time — for the tests of both devices' column sums (column_sums_test.cpp on the
// CPU, loss_ and activation_emulation_test.cpp on the GPU's kernels), and inputs whose sums show the
// order they were added in.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/column_strips.h"
#include "qkv/core/rng.h"

namespace qkv::testing {

// out[c] = f32(Σ_s (Σ_{r in strip s} a[r, c]))   (double; rows and strips in order, each sum from 0)
inline std::vector<float> strip_order_sums(const std::vector<float>& a, int64_t rows, int64_t cols) {
  const kernels::ColumnStrips S = kernels::column_strips(rows);
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    double total = 0;
    for (int64_t s = 0; s < S.strips; ++s) {
      double partial = 0;
      for (int64_t r = s * S.rows_each; r < rows && r < (s + 1) * S.rows_each; ++r)
        partial += a[static_cast<size_t>(r * cols + c)];
      total += partial;
    }
    out[static_cast<size_t>(c)] = static_cast<float>(total);
  }
  return out;
}

// the plain serial double sums (a different order: where they differ from strip_order_sums, a test
// of the order can fail)
inline std::vector<float> serial_sums(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    double t = 0;
    for (int64_t r = 0; r < rows; ++r) t += a[static_cast<size_t>(r * cols + c)];
    out[static_cast<size_t>(c)] = static_cast<float>(t);
  }
  return out;
}

// ±2⁶⁰, ±1 and ±2⁻³⁰ at random: a double holds 2⁶⁰ + 1 only as 2⁶⁰, so which small values survive
// depends on when the large ones cancel — on the order of the additions
inline std::vector<float> order_revealing(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float u = Generator::uniform(seed, i);
    const float sign = Generator::uniform(seed + 1, i) < 0.5f ? -1.f : 1.f;
    v[i] = sign * (u < 0.2f ? 1152921504606846976.f : u < 0.7f ? 1.f : 9.3132257e-10f);
  }
  return v;
}

}  // namespace qkv::testing
