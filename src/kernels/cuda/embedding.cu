// Embedding lookup and its scatter-add backward, cross-entropy with label smoothing, row gathers
// and the causal mask, on the GPU (formulas: kernels/cpu/embedding.h, cross_entropy.h, index.h).
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

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
  unsigned long long* bad = deferred_check(s, [vocab](int64_t row, int32_t id) {
    return detail::concat("embedding: id ", id, " at position ", row, " is outside the vocabulary [0, ", vocab, ")");
  });
  QKV_LAUNCH(blocks_for(n * std::max<int64_t>(dim, 1)), 256, 0, s, embedding_forward_kernel)
  (weight, vocab, dim, Divisor::of_extent(dim), ids, n, out, bad);
  QKV_CUDA_LAUNCHED(embedding_forward_kernel);
}

void embedding_backward(const float* dout, const int32_t* ids, int64_t n, int64_t dim, int64_t vocab,
                        int64_t padding_idx, float* dweight) {
  if (n * dim == 0) return;
  QKV_LAUNCH(blocks_for(n * dim), 256, 0, stream(), embedding_backward_kernel)(
      dout, ids, n, Divisor(dim), vocab, padding_idx, dweight);
  QKV_CUDA_LAUNCHED(embedding_backward_kernel);
}

void check_targets(const int32_t* y, int64_t N, int64_t C, int64_t ignore) {
  if (N == 0) return;
  cudaStream_t s = stream();
  unsigned long long* bad = deferred_check(s, [C](int64_t row, int32_t target) {
    return detail::concat("cross_entropy: target ", target, " at row ", row, " is outside [0, ", C, ")");
  });
  const unsigned blocks = blocks_for(N) > 1024 ? 1024 : blocks_for(N);
  QKV_LAUNCH(blocks, 256, 0, s, check_targets_kernel)(y, N, C, ignore, bad);
  QKV_CUDA_LAUNCHED(check_targets_kernel);
}

void cross_entropy_forward(const float* x, const int32_t* y, int64_t N, int64_t C, float eps, int64_t ignore,
                           float* lse, float* loss) {
  if (N == 0) return;
  QKV_CHECK(N <= 2147483647, "cross_entropy: ", N, " rows; the CUDA kernel takes at most 2^31 - 1");
  QKV_LAUNCH(static_cast<unsigned>(N), 256, 0, stream(), cross_entropy_forward_kernel)(x, y, C, eps, ignore, lse, loss);
  QKV_CUDA_LAUNCHED(cross_entropy_forward_kernel);
}

void cross_entropy_reduce(const float* loss, const int32_t* y, int64_t N, int64_t ignore, bool mean, float* out,
                          float* divisor) {
  QKV_LAUNCH(1, 1024, 0, stream(), cross_entropy_reduce_kernel)(loss, y, N, ignore, mean, out, divisor);
  QKV_CUDA_LAUNCHED(cross_entropy_reduce_kernel);
}

void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* g, int64_t g_stride,
                            const float* divisor, int64_t N, int64_t C, float eps, int64_t ignore, float* dx,
                            bf16* dx16) {
  if (N == 0) return;
  QKV_CHECK(N <= 2147483647, "cross_entropy: ", N, " rows; the CUDA kernel takes at most 2^31 - 1");
  QKV_LAUNCH(static_cast<unsigned>(N), 256, 0, stream(), cross_entropy_backward_kernel)(
      x, y, lse, g, g_stride, divisor, C, eps, ignore, dx, dx16);
  QKV_CUDA_LAUNCHED(cross_entropy_backward_kernel);
}

void index_select(const uint8_t* src, int64_t outer, int64_t n, int64_t inner_bytes, const int64_t* index,
                  int64_t n_index, uint8_t* out) {
  const int64_t total = outer * n_index * inner_bytes;
  if (total == 0) return;
  cudaStream_t s = stream();
  DeviceIndex idx(index, n_index, s);
  if (inner_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    QKV_LAUNCH(blocks_for(total / 16), 256, 0, s, index_select_16_kernel)(
        reinterpret_cast<const uint4*>(src), outer, n, Divisor(inner_bytes / 16), idx.p, Divisor(n_index),
        reinterpret_cast<uint4*>(out));
    QKV_CUDA_LAUNCHED(index_select_16_kernel);
    return;
  }
  QKV_LAUNCH(blocks_for(total), 256, 0, s, index_select_kernel)
  (src, outer, n, Divisor(inner_bytes), idx.p, Divisor(n_index), out);
  QKV_CUDA_LAUNCHED(index_select_kernel);
}

void index_add(float* dst, int64_t outer, int64_t n, int64_t inner, const int64_t* index, int64_t n_index,
               const float* src) {
  const int64_t total = outer * n_index * inner;
  if (total == 0) return;
  cudaStream_t s = stream();
  DeviceIndex idx(index, n_index, s);
  QKV_LAUNCH(blocks_for(total), 256, 0, s, index_add_kernel)
  (dst, outer, n, Divisor(inner), idx.p, Divisor(n_index), src);
  QKV_CUDA_LAUNCHED(index_add_kernel);
}

void causal_mask(uint8_t* out, int64_t Lq, int64_t Lk, int64_t offset) {
  if (Lq * Lk == 0) return;
  QKV_LAUNCH(blocks_for(Lq * Lk), 256, 0, stream(), causal_mask_kernel)(out, Lq, Divisor(Lk), offset);
  QKV_CUDA_LAUNCHED(causal_mask_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
