// The kernels of embedding.cu (embedding lookup and its scatter-add backward, the checks of ids and
// targets, cross-entropy's forward, reduction and backward, row gathers and the causal mask) —
// embedding.cu launches them; tests/kernels/loss_emulation_test.cpp runs them on the host through
// tests/kernels/cuda_emulation.h. Formulas: kernels/cpu/embedding.h, cross_entropy.h, index.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/launch.h"
#include "qkv/core/dtype.h"

namespace qkv::kernels::cuda {
namespace {

// A bad element's word for a deferred check (qkv/core/cuda.h): the smallest position wins, its value
// travels with it.
__device__ inline void report_bad(unsigned long long* word, int64_t position, int32_t value) {
  atomicMin(word, (static_cast<unsigned long long>(position) << 32) | static_cast<uint32_t>(value));
}

// width: dim, or 1 at dim 0 (nothing to copy, but every id is still checked)
__global__ void embedding_forward_kernel(const float* weight, int64_t vocab, int64_t dim, Divisor width,
                                         const int32_t* ids, int64_t n, float* out, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * width.value();
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t col;
    const int64_t row = width.divmod(i, col);
    const int32_t id = ids[row];
    if (id < 0 || id >= vocab) {
      if (col == 0) report_bad(bad, row, id);
      if (dim > 0) out[i] = 0.f;
      continue;
    }
    if (dim > 0) out[i] = weight[static_cast<int64_t>(id) * dim + col];
  }
}

// dweight[ids[i], :] += dout[i, :] (atomic: repeated ids add up; the order of the adds may differ
// between runs, which changes the last bits of a repeated row's gradient). An id outside [0, vocab)
// adds nothing: the forward's deferred check reports it at the host's next wait, which a step's
// backward may come before (a recorded step has no wait at all) — never a write past dweight.
__global__ void embedding_backward_kernel(const float* dout, const int32_t* ids, int64_t n, Divisor dim, int64_t vocab,
                                          int64_t padding_idx, float* dweight) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * dim.value();
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t col;
    const int64_t row = dim.divmod(i, col);
    const int32_t id = ids[row];
    if (id == padding_idx || id < 0 || id >= vocab) continue;
    atomicAdd(dweight + static_cast<int64_t>(id) * dim.value() + col, dout[i]);
  }
}

__global__ void check_targets_kernel(const int32_t* y, int64_t N, int64_t C, int64_t ignore, unsigned long long* bad) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N; n += int64_t{gridDim.x} * blockDim.x)
    if (y[n] != ignore && (y[n] < 0 || y[n] >= C)) report_bad(bad, n, y[n]);
}

// One block: Σ_n ℓ_n in double and the rows not ignored, in a fixed order (one result however many
// SMs); out = Σ or Σ / count, divisor = count or 1.
// (launched with 1,024 threads: the bound keeps ptxas within 64 registers a thread)
__global__ void __launch_bounds__(1024) cross_entropy_reduce_kernel(const float* loss, const int32_t* y, int64_t N,
                                                                    int64_t ignore, bool mean, float* out,
                                                                    float* divisor) {
  double s = 0;
  unsigned long long count = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) {
    s += loss[n];
    count += y[n] != ignore;
  }
  s = block_reduce(s, SumOp{}, 0.0);
  count = block_reduce(count, SumOp{}, 0ull);
  if (threadIdx.x == 0) {
    *out = static_cast<float>(!mean ? s : count ? s / static_cast<double>(count) : 0.0);
    *divisor = mean ? static_cast<float>(count) : 1.f;
  }
}

// One block per row: m = max x, s = Σ exp(x − m), Σ (x − m); lse = m + log s;
// ℓ = −(1 − ε)(x_y − lse) − (ε/C)(Σ (x − m) − C log s)
// A target outside [0, C) (and not ignore_index) gets ℓ = NaN, never a read past its row: check_targets'
// deferred check reports it at the host's next wait, after this kernel has run.
__global__ void cross_entropy_forward_kernel(const float* x, const int32_t* y, int64_t C, float eps, int64_t ignore,
                                             float* lse, float* loss) {
  const int64_t n = blockIdx.x;
  const float* xr = x + n * C;
  if (y[n] == ignore) {
    if (threadIdx.x == 0) lse[n] = 0.f, loss[n] = 0.f;
    return;
  }
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = fmaxf(m, xr[c]);
  m = block_reduce(m, MaxOp{}, -INFINITY);
  double se = 0, sx = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    se += expf(xr[c] - m);
    sx += xr[c] - m;
  }
  se = block_reduce(se, SumOp{}, 0.0);
  sx = block_reduce(sx, SumOp{}, 0.0);
  if (threadIdx.x == 0) {
    const float log_s = logf(static_cast<float>(se));
    lse[n] = m + log_s;
    const int32_t t = y[n];
    const double logp_y = t >= 0 && t < C ? (static_cast<double>(xr[t]) - m) - log_s : NAN;
    const double sum_logp = sx - static_cast<double>(C) * log_s;
    loss[n] = static_cast<float>(-(1.0 - eps) * logp_y - eps / static_cast<double>(C) * sum_logp);
  }
}

// dx = (exp(x − lse) − ε/C − (1 − ε)[c = y]) · scale,  scale = g[n · g_stride] / divisor; dx16 (may be
// null): dx's bf16 copy
__global__ void cross_entropy_backward_kernel(const float* x, const int32_t* y, const float* lse, const float* g,
                                              int64_t g_stride, const float* divisor, int64_t C, float eps,
                                              int64_t ignore, float* dx, bf16* dx16) {
  const int64_t n = blockIdx.x;
  float* d = dx + n * C;
  const bool skip = y[n] == ignore;
  const float* xr = x + n * C;
  const float dv = divisor ? *divisor : 1.f;
  const float s = dv != 0.f ? g[n * g_stride] / dv : 0.f, l = lse[n], floor = eps / static_cast<float>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = 0.f;
    if (!skip) {
      v = (expf(xr[c] - l) - floor) * s;
      if (c == y[n]) v -= (1.f - eps) * s;
    }
    d[c] = v;
    if (dx16) reinterpret_cast<uint16_t*>(dx16)[n * C + c] = to_bf16_bits(v);
  }
}

// t = (o·n_index + i)·inner + b: its coordinates through Divisors (divisor.cuh)
__device__ inline int64_t gather_coordinates(int64_t t, const Divisor& inner, const Divisor& n_index, int64_t& i,
                                             int64_t& b) {
  return n_index.divmod(inner.divmod(t, b), i);
}

__global__ void index_select_kernel(const uint8_t* src, int64_t outer, int64_t n, Divisor inner_bytes,
                                    const int64_t* index, Divisor n_index, uint8_t* out) {
  const int64_t total = outer * n_index.value() * inner_bytes.value();
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    int64_t i, b;
    const int64_t o = gather_coordinates(t, inner_bytes, n_index, i, b);
    out[t] = src[(o * n + index[i]) * inner_bytes.value() + b];
  }
}

// The same in 16-byte pieces, for rows whose bytes and addresses are multiples of 16 (a KV cache's
// rows of d floats): a sixteenth of the threads and whole-vector loads and stores.
__global__ void index_select_16_kernel(const uint4* src, int64_t outer, int64_t n, Divisor inner_vec,
                                       const int64_t* index, Divisor n_index, uint4* out) {
  const int64_t total = outer * n_index.value() * inner_vec.value();
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    int64_t i, b;
    const int64_t o = gather_coordinates(t, inner_vec, n_index, i, b);
    out[t] = src[(o * n + index[i]) * inner_vec.value() + b];
  }
}

__global__ void index_add_kernel(float* dst, int64_t outer, int64_t n, Divisor inner, const int64_t* index,
                                 Divisor n_index, const float* src) {
  const int64_t total = outer * n_index.value() * inner.value();
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    int64_t i, e;
    const int64_t o = gather_coordinates(t, inner, n_index, i, e);
    atomicAdd(dst + (o * n + index[i]) * inner.value() + e, src[t]);
  }
}

__global__ void causal_mask_kernel(uint8_t* out, int64_t Lq, Divisor Lk, int64_t offset) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < Lq * Lk.value();
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t j;
    const int64_t i = Lk.divmod(t, j);
    out[t] = j <= i + offset;
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
