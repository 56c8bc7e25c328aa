// Embedding lookup and its scatter-add backward, cross-entropy with label smoothing, row gathers
// and the causal mask, on the GPU (formulas: kernels/cpu/embedding.h, cross_entropy.h, index.h).
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

// A device int64 that kernels lower to the first bad position they meet (INT64_MAX: none).
struct FirstBad {
  int64_t* device = nullptr;
  cudaStream_t s;
  explicit FirstBad(cudaStream_t stream) : s(stream) {
    QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&device), sizeof(int64_t), s));
    const int64_t none = INT64_MAX;
    QKV_CUDA_CHECK(cudaMemcpyAsync(device, &none, sizeof none, cudaMemcpyHostToDevice, s));
  }
  int64_t read() {  // waits for the kernels before it
    int64_t v = INT64_MAX;
    QKV_CUDA_CHECK(cudaMemcpyAsync(&v, device, sizeof v, cudaMemcpyDeviceToHost, s));
    QKV_CUDA_CHECK(cudaStreamSynchronize(s));
    return v;
  }
  ~FirstBad() { cudaFreeAsync(device, s); }
};

__global__ void embedding_forward_kernel(const float* weight, int64_t vocab, int64_t dim, const int32_t* ids,
                                         int64_t n, float* out, int64_t* bad) {
  const int64_t width = dim > 0 ? dim : 1;  // (dim 0: nothing to copy, but every id is still checked)
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * width; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    const int32_t id = ids[row];
    if (id < 0 || id >= vocab) {
      if (col == 0) atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(row));
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

__global__ void count_targets_kernel(const int32_t* y, int64_t N, int64_t C, int64_t ignore, int64_t* bad,
                                     unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; n < N; n += int64_t{gridDim.x} * blockDim.x) {
    if (y[n] == ignore) continue;
    if (y[n] < 0 || y[n] >= C)
      atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(n));
    else
      ++c;
  }
  c = block_reduce(c, SumOp{}, 0ull);
  if (threadIdx.x == 0) atomicAdd(count, c);
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

// dx = (exp(x − lse) − ε/C − (1 − ε)[c = y]) · scale
__global__ void cross_entropy_backward_kernel(const float* x, const int32_t* y, const float* lse, const float* scale,
                                              int64_t C, float eps, int64_t ignore, float* dx) {
  const int64_t n = blockIdx.x;
  float* d = dx + n * C;
  const bool skip = y[n] == ignore;
  const float* xr = x + n * C;
  const float s = scale[n], l = lse[n], floor = eps / static_cast<float>(C);
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
  cudaStream_t s = stream();
  FirstBad bad(s);
  embedding_forward_kernel<<<blocks_for(n * std::max<int64_t>(dim, 1)), 256, 0, s>>>(weight, vocab, dim, ids, n, out, bad.device);
  QKV_CUDA_LAUNCHED(embedding_forward_kernel);
  const int64_t row = bad.read();
  if (row != INT64_MAX) {
    int32_t id = 0;
    QKV_CUDA_CHECK(cudaMemcpy(&id, ids + row, sizeof id, cudaMemcpyDeviceToHost));
    throw Error(detail::concat("embedding: id ", id, " at position ", row, " is outside the vocabulary [0, ", vocab,
                               ")"));
  }
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t n, int64_t dim, int64_t padding_idx,
                        float* dweight) {
  if (n * dim == 0) return;
  embedding_backward_kernel<<<blocks_for(n * dim), 256, 0, stream()>>>(dout, ids, n, dim, padding_idx, dweight);
  QKV_CUDA_LAUNCHED(embedding_backward_kernel);
}

int64_t count_targets(const int32_t* y, int64_t N, int64_t C, int64_t ignore, int64_t* bad_row) {
  *bad_row = -1;
  if (N == 0) return 0;
  cudaStream_t s = stream();
  FirstBad bad(s);
  unsigned long long* count = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&count), sizeof *count, s));
  QKV_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, s));
  const unsigned blocks = blocks_for(N) > 1024 ? 1024 : blocks_for(N);
  count_targets_kernel<<<blocks, 256, 0, s>>>(y, N, C, ignore, bad.device, count);
  QKV_CUDA_LAUNCHED(count_targets_kernel);
  unsigned long long host = 0;
  QKV_CUDA_CHECK(cudaMemcpyAsync(&host, count, sizeof host, cudaMemcpyDeviceToHost, s));
  QKV_CUDA_CHECK(cudaFreeAsync(count, s));
  const int64_t row = bad.read();  // synchronizes
  if (row != INT64_MAX) *bad_row = row;
  return static_cast<int64_t>(host);
}

void cross_entropy_forward(const float* x, const int32_t* y, int64_t N, int64_t C, float eps, int64_t ignore,
                           float* lse, float* loss) {
  if (N == 0) return;
  QKV_CHECK(N <= 2147483647, "cross_entropy: ", N, " rows; the CUDA kernel takes at most 2^31 - 1");
  cross_entropy_forward_kernel<<<static_cast<unsigned>(N), 256, 0, stream()>>>(x, y, C, eps, ignore, lse, loss);
  QKV_CUDA_LAUNCHED(cross_entropy_forward_kernel);
}

void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* scale, int64_t N,
                            int64_t C, float eps, int64_t ignore, float* dx) {
  if (N == 0) return;
  QKV_CHECK(N <= 2147483647, "cross_entropy: ", N, " rows; the CUDA kernel takes at most 2^31 - 1");
  cross_entropy_backward_kernel<<<static_cast<unsigned>(N), 256, 0, stream()>>>(x, y, lse, scale, C, eps, ignore, dx);
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
