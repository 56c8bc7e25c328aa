// What every CUDA kernel file shares: the current stream, launch sizes, scratch memory, warp and
// block reductions, and the check after each launch (a launch error names the kernel, its file and line).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/namespace.h"
#include "qkv/core/cuda.h"
#include "qkv/core/error.h"

// A kernel's statically sized shared memory: QKV_SHARED float tile[64][65]; — __shared__, and under the
// host emulation a static (a block's threads are fibers of one OS thread, one block at a time), which
// every fiber shares as a block's threads share __shared__ memory.
#ifdef QKV_CUDA_EMULATION
#define QKV_SHARED static
#else
#define QKV_SHARED __shared__
#endif

// A kernel's dynamic shared memory, the launch's third argument: QKV_DYNAMIC_SHARED(128, smem); declares
// `extern __shared__ __align__(128) unsigned char smem[]` (alignment 1: the kernel aligns its own base),
// and under the host emulation a pointer to the launching block's memory — which a block-scope extern
// declaration could not name from a kernel header's own namespace (attention_mma_kernels.cuh's mma_pair).
#ifdef QKV_CUDA_EMULATION
#define QKV_DYNAMIC_SHARED(alignment, name) unsigned char* const name = ::qkv::emulation::runtime()->smem
#else
#define QKV_DYNAMIC_SHARED(alignment, name) extern __shared__ __align__(alignment) unsigned char name[]
#endif

// In the launchers' namespace (namespace.h): under the tests' emulation these helpers act on the
// emulated GPU, and must not share a linkage name with the library's.
QKV_CUDA_LAUNCHERS_BEGIN

// The current stream; the host's wait for a stream's work (core's cuda::wait, which reports the
// deferred checks); a deferred check's device word (core's cuda::deferred_check: qkv/core/cuda.h).
// Under the emulation (tests/kernels/cuda_emulation.h) the emulated H200's: one stream, in which every
// launch runs at once, and the check words on the host, reported at the next wait as core reports them.
#ifdef QKV_CUDA_EMULATION
inline cudaStream_t stream() { return nullptr; }
inline void wait_for_stream(cudaStream_t s) { ::qkv::emulation::wait(s); }
inline unsigned long long* deferred_check(cudaStream_t s, ::qkv::cuda::CheckMessage message) {
  return ::qkv::emulation::deferred_check(s, std::move(message));
}
#else
inline cudaStream_t stream() {
  int device = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  return ::qkv::cuda::current_stream(device);
}
inline void wait_for_stream(cudaStream_t s) { ::qkv::cuda::wait(s); }
inline unsigned long long* deferred_check(cudaStream_t s, ::qkv::cuda::CheckMessage message) {
  return ::qkv::cuda::deferred_check(s, std::move(message));
}
#endif

// The current GPU's streaming multiprocessors (132 on an H100 SXM or H200).
inline int sm_count() {
  int device = 0, n = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

// Blocks for n elements at `threads` per block and `per_thread` elements each, capped so that
// grid-stride loops cover the rest (a grid of at most 65,535 × 16 blocks).
inline unsigned blocks_for(int64_t n, int threads = 256, int per_thread = 1) {
  const int64_t b = (n + int64_t{threads} * per_thread - 1) / (int64_t{threads} * per_thread);
  return static_cast<unsigned>(b < 1 ? 1 : b > 1048560 ? 1048560 : b);
}

// Σ over a block of `v` (every thread gets the result): warp shuffles, then one value per warp
// through shared memory. blockDim.x a multiple of 32, at most 1024.
template <typename T, typename Op>
__device__ inline T block_reduce(T v, Op op, T identity) {
  QKV_SHARED T partial[32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? partial[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A scratch buffer of f32 on the current stream, freed in stream order (from the device's stream-ordered
// pool, which the device allocator keeps across waits: core/cuda.cpp).
struct Scratch {
  float* p = nullptr;
  cudaStream_t s;
  Scratch(int64_t floats, cudaStream_t stream) : s(stream) {
    QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), (floats ? floats : 1) * sizeof(float), s));
  }
  ~Scratch() { cudaFreeAsync(p, s); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda

// A launch: QKV_LAUNCH(grid, block, shared bytes, stream, kernel)(arguments…) is nvcc's
// kernel<<<grid, block, shared bytes, stream>>>(arguments…); on the host, under the tests' emulation
// (tests/kernels/cuda_emulation.h), it runs the kernel there with the limits a GPU's launch checks
// (threads, grid, shared memory past 48 KB only where the kernel's attribute allows it). The kernel
// comes last, so that a template's commas need no parentheses.
#ifdef QKV_CUDA_EMULATION
#define QKV_LAUNCH(grid, block, shared, stream, ...) \
  (static_cast<void>(stream), ::qkv::emulation::launch_of(grid, block, shared, __VA_ARGS__))
#else
#define QKV_LAUNCH(grid, block, shared, stream, ...) __VA_ARGS__<<<grid, block, shared, stream>>>
#endif

// After a launch: the launch's own error (bad configuration, no kernel image for this GPU).
#define QKV_CUDA_LAUNCHED(name)                                                          \
  do {                                                                                   \
    const cudaError_t qkv_launch_status_ = cudaPeekAtLastError();                         \
    if (qkv_launch_status_ != cudaSuccess)                                               \
      ::qkv::cuda::fail(static_cast<int>(qkv_launch_status_), "launch of " #name, __FILE__, __LINE__); \
  } while (0)
