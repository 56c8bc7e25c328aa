// sample_rows's kernel (sample.cu launches it; tests/kernels/sample_emulation_test.cpp runs it on the
// host through tests/kernels/cuda_emulation.h). Formula and contract: kernels/sample.inc.
//
// A block of kSampleThreads a row; thread k takes the k-th contiguous chunk of the row. Greedy: the
// block's largest topk key (value, then the lower index; NaN below every number). Sampled: the tempered maximum, Σ exp in f64 (a block sum),
// then each chunk's Σ p_j in index order; thread 0 walks the chunks' sums and, in the chunk where u
// falls, the chunk's p_j one by one — the CPU's sequential cumulative sum, but for where the chunks
// begin (a rounding apart).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/topk.h"  // topk_key: the greedy rows' order

namespace qkv::kernels::cuda {
namespace {

constexpr int kSampleThreads = 256;

struct MaxKey64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

__device__ inline float tempered(const float* x, int64_t j, double T) {
  return static_cast<float>(static_cast<double>(x[j]) / T);
}

__global__ void sample_rows_kernel(const float* x, int64_t n, const double* temperature, const double* u, int32_t* out) {
#ifdef QKV_CUDA_EMULATION
  static double chunk_sum[kSampleThreads];  // (the host's emulation: a block's threads are fibers of one OS thread)
  static int64_t chunk_last[kSampleThreads];
#else
  __shared__ double chunk_sum[kSampleThreads];
  __shared__ int64_t chunk_last[kSampleThreads];
#endif
  const int64_t r = blockIdx.x, k = threadIdx.x;
  const float* row = x + r * n;
  const double T = temperature[r];
  const int64_t per = (n + kSampleThreads - 1) / kSampleThreads, lo = k * per < n ? k * per : n,
                hi = lo + per < n ? lo + per : n;
  if (T <= 0) {  // the first of the largest: topk's key (value, then the lower index), NaN below all (0)
    uint64_t best = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const uint64_t key = row[j] == row[j] ? topk_key(row[j], j) : 0;
      if (key > best) best = key;
    }
    best = block_reduce(best, MaxKey64{}, uint64_t{0});
    if (k == 0) out[r] = best == 0 ? 0 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
    return;
  }
  float m = -INFINITY;
  for (int64_t j = lo; j < hi; ++j) m = MaxF{}(m, tempered(row, j, T));
  m = block_reduce(m, MaxF{}, -INFINITY);
  if (!isfinite(m)) {  // no distribution: the caller's error
    if (k == 0) out[r] = -1;
    return;
  }
  double s = 0;
  for (int64_t j = lo; j < hi; ++j) s += exp(static_cast<double>(tempered(row, j, T)) - static_cast<double>(m));
  const double sum = block_reduce(s, SumD{}, 0.0);
  if (!(sum > 0)) {  // a NaN logit: no distribution either
    if (k == 0) out[r] = -1;
    return;
  }
  // this chunk's Σ p_j in index order, and its last j with p_j > 0
  double c = 0;
  int64_t last = -1;
  for (int64_t j = lo; j < hi; ++j) {
    const double p = exp(static_cast<double>(tempered(row, j, T)) - static_cast<double>(m)) / sum;
    if (p > 0) c += p, last = j;
  }
  chunk_sum[k] = c, chunk_last[k] = last;
  __syncthreads();
  if (k != 0) return;
  const double draw = u[r];
  double cum = 0;
  int64_t final_last = -1;
  for (int q = 0; q < kSampleThreads; ++q) {
    if (chunk_last[q] >= 0) final_last = chunk_last[q];
    if (!(draw < cum + chunk_sum[q])) {
      cum += chunk_sum[q];
      continue;
    }
    // u falls in chunk q: its p_j one by one (rounding may carry it past the chunk: then on)
    const int64_t a = q * per, e = a + per < n ? a + per : n;
    for (int64_t j = a; j < e; ++j) {
      const double p = exp(static_cast<double>(tempered(row, j, T)) - static_cast<double>(m)) / sum;
      if (p <= 0) continue;
      cum += p;
      if (draw < cum) {
        out[r] = static_cast<int32_t>(j);
        return;
      }
    }
  }
  out[r] = static_cast<int32_t>(final_last);
}

}  // namespace
}  // namespace qkv::kernels::cuda
