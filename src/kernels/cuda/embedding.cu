// Embedding lookup and its scatter-add backward, cross-entropy with label smoothing, row gathers
// and the causal mask, on the GPU (formulas: kernels/cpu/embedding.h, cross_entropy.h, index.h).
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

// A bad element's word for a deferred check (qkv/core/cuda.h): the smallest position wins, its value
// travels with it.
__device__ inline void report_bad(unsigned long long* word, int64_t position, int32_t value) {
  atomicMin(word, (static_cast<unsigned long long>(position) << 32) | static_cast<uint32_t>(value));
}

__global__ void embedding_forward_kernel(const float* weight, int64_t vocab, int64_t dim, const int32_t* ids,
                                         int64_t n, float* out, unsigned long long* bad) {
  const int64_t width = dim > 0 ? dim : 1;  // (dim 0: nothing to copy, but every id is still checked)
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * width; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / width, col = i % width;
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
// between runs, which changes the last bits of a repeated row's gradient)
__global__ void embedding_backward_kernel(const float* dout, const int32_t* ids, int64_t n, int64_t dim,
                                          int64_t padding_idx, float* dweight) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * dim; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / dim, col = i % dim;
    const int32_t id = ids[row];
    if (id == padding_idx) continue;
    atomicAdd(dweight + static_cast<int64_t>(id) * dim + col, dout[i]);
  }
}

__global__ void check_targets_kernel(const int32_t* y, int64_t N, int64_t C, int64_t ignore, unsigned long long* bad) {
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N; n += int64_t{gridDim.x} * blockDim.x)
    if (y[n] != ignore && (y[n] < 0 || y[n] >= C)) report_bad(bad, n, y[n]);
}

// One block: Σ_n ℓ_n in double and the rows not ignored, in a fixed order (one result however many
// SMs); out = Σ or Σ / count, divisor = count or 1.
__global__ void cross_entropy_reduce_kernel(const float* loss, const int32_t* y, int64_t N, int64_t ignore, bool mean,
                                            float* out, float* divisor) {
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
    const double logp_y = (static_cast<double>(xr[y[n]]) - m) - log_s;
    const double sum_logp = sx - static_cast<double>(C) * log_s;
    loss[n] = static_cast<float>(-(1.0 - eps) * logp_y - eps / static_cast<double>(C) * sum_logp);
  }
}

// dx = (exp(x − lse) − ε/C − (1 − ε)[c = y]) · scale,  scale = g[n · g_stride] / divisor
__global__ void cross_entropy_backward_kernel(const float* x, const int32_t* y, const float* lse, const float* g,
                                              int64_t g_stride, const float* divisor, int64_t C, float eps,
                                              int64_t ignore, float* dx) {
  const int64_t n = blockIdx.x;
  float* d = dx + n * C;
  const bool skip = y[n] == ignore;
  const float* xr = x + n * C;
  const float dv = divisor ? *divisor : 1.f;
  const float s = dv != 0.f ? g[n * g_stride] / dv : 0.f, l = lse[n], floor = eps / static_cast<float>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    if (skip) {
      d[c] = 0.f;
      continue;
    }
    float v = (expf(xr[c] - l) - floor) * s;
    if (c == y[n]) v -= (1.f - eps) * s;
    d[c] = v;
  }
}

__global__ void index_select_kernel(const uint8_t* src, int64_t outer, int64_t n, int64_t inner_bytes,
                                    const int64_t* index, int64_t n_index, uint8_t* out) {
  const int64_t total = outer * n_index * inner_bytes;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = t % inner_bytes, r = t / inner_bytes, i = r % n_index, o = r / n_index;
    out[t] = src[(o * n + index[i]) * inner_bytes + b];
  }
}

// The same in 16-byte pieces, for rows whose bytes and addresses are multiples of 16 (a KV cache's
// rows of d floats): a sixteenth of the threads and whole-vector loads and stores.
__global__ void index_select_16_kernel(const uint4* src, int64_t outer, int64_t n, int64_t inner_vec, const int64_t* index,
                                       int64_t n_index, uint4* out) {
  const int64_t total = outer * n_index * inner_vec;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = t % inner_vec, r = t / inner_vec, i = r % n_index, o = r / n_index;
    out[t] = src[(o * n + index[i]) * inner_vec + b];
  }
}

__global__ void index_add_kernel(float* dst, int64_t outer, int64_t n, int64_t inner, const int64_t* index,
                                 int64_t n_index, const float* src) {
  const int64_t total = outer * n_index * inner;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t e = t % inner, r = t / inner, i = r % n_index, o = r / n_index;
    atomicAdd(dst + (o * n + index[i]) * inner + e, src[t]);
  }
}

__global__ void causal_mask_kernel(uint8_t* out, int64_t Lq, int64_t Lk, int64_t offset) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < Lq * Lk; t += int64_t{gridDim.x} * blockDim.x)
    out[t] = (t % Lk) <= (t / Lk) + offset;
}

// The host's index list, copied to the device for one kernel (freed in stream order after it).
struct DeviceIndex {
  int64_t* p = nullptr;
  cudaStream_t s;
  DeviceIndex(const int64_t* host, int64_t n, cudaStream_t stream) : s(stream) {
    QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), (n ? n : 1) * sizeof(int64_t), s));
    // (`host` is pageable: the copy has taken it into a staging buffer when the call returns, so it
    // may go then — no stream synchronization, which would stall every beam reorder of a KV cache)
    if (n) QKV_CUDA_CHECK(cudaMemcpyAsync(p, host, n * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  }
  ~DeviceIndex() { cudaFreeAsync(p, s); }
};

}  // namespace

void embedding_forward(const float* weight, int64_t vocab, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  if (n == 0) return;
  QKV_CHECK(n < (int64_t{1} << 32), "embedding: ", n, " ids; the CUDA kernel takes fewer than 2^32");
  cudaStream_t s = stream();
  // (read at the host's next wait: the lookup does not stop the GPU)
  unsigned long long* bad = ::qkv::cuda::deferred_check(s, [vocab](int64_t row, int32_t id) {
    return detail::concat("embedding: id ", id, " at position ", row, " is outside the vocabulary [0, ", vocab, ")");
  });
  embedding_forward_kernel<<<blocks_for(n * std::max<int64_t>(dim, 1)), 256, 0, s>>>(weight, vocab, dim, ids, n, out, bad);
  QKV_CUDA_LAUNCHED(embedding_forward_kernel);
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t n, int64_t dim, int64_t padding_idx,
                        float* dweight) {
  if (n * dim == 0) return;
  embedding_backward_kernel<<<blocks_for(n * dim), 256, 0, stream()>>>(dout, ids, n, dim, padding_idx, dweight);
  QKV_CUDA_LAUNCHED(embedding_backward_kernel);
}

void check_targets(const int32_t* y, int64_t N, int64_t C, int64_t ignore) {
  if (N == 0) return;
  cudaStream_t s = stream();
  unsigned long long* bad = ::qkv::cuda::deferred_check(s, [C](int64_t row, int32_t target) {
    return detail::concat("cross_entropy: target ", target, " at row ", row, " is outside [0, ", C, ")");
  });
  const unsigned blocks = blocks_for(N) > 1024 ? 1024 : blocks_for(N);
  check_targets_kernel<<<blocks, 256, 0, s>>>(y, N, C, ignore, bad);
  QKV_CUDA_LAUNCHED(check_targets_kernel);
}

void cross_entropy_forward(const float* x, const int32_t* y, int64_t N, int64_t C, float eps, int64_t ignore,
                           float* lse, float* loss) {
  if (N == 0) return;
  QKV_CHECK(N <= 2147483647, "cross_entropy: ", N, " rows; the CUDA kernel takes at most 2^31 - 1");
  cross_entropy_forward_kernel<<<static_cast<unsigned>(N), 256, 0, stream()>>>(x, y, C, eps, ignore, lse, loss);
  QKV_CUDA_LAUNCHED(cross_entropy_forward_kernel);
}

void cross_entropy_reduce(const float* loss, const int32_t* y, int64_t N, int64_t ignore, bool mean, float* out,
                          float* divisor) {
  cross_entropy_reduce_kernel<<<1, 1024, 0, stream()>>>(loss, y, N, ignore, mean, out, divisor);
  QKV_CUDA_LAUNCHED(cross_entropy_reduce_kernel);
}

void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* g, int64_t g_stride,
                            const float* divisor, int64_t N, int64_t C, float eps, int64_t ignore, float* dx) {
  if (N == 0) return;
  QKV_CHECK(N <= 2147483647, "cross_entropy: ", N, " rows; the CUDA kernel takes at most 2^31 - 1");
  cross_entropy_backward_kernel<<<static_cast<unsigned>(N), 256, 0, stream()>>>(x, y, lse, g, g_stride, divisor, C, eps,
                                                                                ignore, dx);
  QKV_CUDA_LAUNCHED(cross_entropy_backward_kernel);
}

void index_select(const uint8_t* src, int64_t outer, int64_t n, int64_t inner_bytes, const int64_t* index,
                  int64_t n_index, uint8_t* out) {
  const int64_t total = outer * n_index * inner_bytes;
  if (total == 0) return;
  cudaStream_t s = stream();
  DeviceIndex idx(index, n_index, s);
  if (inner_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    index_select_16_kernel<<<blocks_for(total / 16), 256, 0, s>>>(reinterpret_cast<const uint4*>(src), outer, n,
                                                                  inner_bytes / 16, idx.p, n_index,
                                                                  reinterpret_cast<uint4*>(out));
    QKV_CUDA_LAUNCHED(index_select_16_kernel);
    return;
  }
  index_select_kernel<<<blocks_for(total), 256, 0, s>>>(src, outer, n, inner_bytes, idx.p, n_index, out);
  QKV_CUDA_LAUNCHED(index_select_kernel);
}

void index_add(float* dst, int64_t outer, int64_t n, int64_t inner, const int64_t* index, int64_t n_index,
               const float* src) {
  const int64_t total = outer * n_index * inner;
  if (total == 0) return;
  cudaStream_t s = stream();
  DeviceIndex idx(index, n_index, s);
  index_add_kernel<<<blocks_for(total), 256, 0, s>>>(dst, outer, n, inner, idx.p, n_index, src);
  QKV_CUDA_LAUNCHED(index_add_kernel);
}

void causal_mask(uint8_t* out, int64_t Lq, int64_t Lk, int64_t offset) {
  if (Lq * Lk == 0) return;
  causal_mask_kernel<<<blocks_for(Lq * Lk), 256, 0, stream()>>>(out, Lq, Lk, offset);
  QKV_CUDA_LAUNCHED(causal_mask_kernel);
}

}  // namespace qkv::kernels::cuda
