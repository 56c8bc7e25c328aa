// out[j] = Σ_r a[r, j] over the rows of a dense [rows, n], in row order (the CPU's order): one thread
// a column. The norms' parameter gradients sum their strips' partials with it (layer_norm.cu,
// rms_norm.cu: a few rows each). out may be null (nothing wanted). (Sums over many rows — a bias's
// gradient — go through sum_kernels.cuh's column strips.)
#pragma once

#include <cstdint>

namespace qkv::kernels::cuda {
namespace {

__global__ void column_sums(const float* a, int64_t rows, int64_t n, float* out) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n || !out) return;
  float s = 0.f;
  for (int64_t r = 0; r < rows; ++r) s += a[r * n + j];
  out[j] = s;
}

}  // namespace
}  // namespace qkv::kernels::cuda
