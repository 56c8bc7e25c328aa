// Hopper's asynchronous data movement as qkv's warp-specialized kernels use it (sm_90a): TMA bulk tensor
// copies global → shared memory described by a tensor map, the mbarriers that count their bytes and
// the consumers' releases, named barriers between warpgroups, and setmaxnreg. nvcc for sm_90a
// (sm90a/*.cu), or g++ under tests/kernels/cuda_emulation.h (QKV_CUDA_EMULATION: a copy happens when
// issued, with the tensor map's bounds, zero fill and 128-byte swizzle; the barriers count arrivals,
// transaction bytes and phases as the PTX ISA describes them; setmaxnreg moves registers between a
// warp and the block's pool, and waits while the pool holds too few).
//
// A tensor map (CUtensorMap, 128 opaque bytes, a __grid_constant__ kernel parameter) describes a
// dense 16-bit tensor of rank 3, dims {d0, d1, d2} (d0 contiguous), and the box a copy moves: {64,
// rows, 1} elements, stored into shared memory as `rows` rows of 128 bytes with the 128-byte swizzle —
// 16-byte piece c of row r at piece c ⊕ (r mod 8) of a 1024-byte-aligned atom: the layout wgmma's
// descriptors read (wgmma.cuh). Elements past the tensor's dims are written as zeros.
//
// A bulk reduction adds a range of f32 in shared memory into global memory (cp.reduce.async.bulk …
// .add.f32: 16-byte aligned, whole 16-byte pieces), asynchronously: issued into a bulk group
// (bulk_commit closes one), its source free to rewrite once bulk_wait_read<N> has retired its group,
// its sums done once bulk_wait<N> has. Shared memory written by the threads and read by it needs
// fence_proxy_async (wgmma.cuh) first.
//
// An mbarrier (8 bytes of shared memory) completes a phase when its expected arrivals have arrived
// and the bytes announced by arrive_expect_tx have landed; wait(parity) returns once the phase of
// that parity has completed — on a fresh barrier wait(1) returns at once (the "previous" phase),
// which lets a producer start on empty buffers.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums: the header only, the driver's entry point is found at run time
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_tiles.cuh"

namespace qkv::kernels::cuda {
namespace {

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90a/tma.cuh is compiled for sm_90a alone (setmaxnreg): see CMakeLists.txt"
#endif

// What a copy's box holds: 64 elements (128 bytes, the swizzle's row) of d0 by `rows` of d1.
struct TensorBox {
  const void* base;     // 16-byte aligned
  uint64_t dims[3];     // elements, each ≥ 1
  uint64_t strides[2];  // bytes from one d1 (d2) index to the next, multiples of 16
  uint32_t rows;        // ≤ 256
};

template <typename T>
constexpr CUtensorMapDataType tensor_map_type() {
  return std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

#ifdef QKV_CUDA_EMULATION
template <typename T>
inline void encode_tensor_map(CUtensorMap& map, const TensorBox& b) {
  ::qkv::emulation::encode_tensor_map(map, b.base, 2, b.dims, b.strides, b.rows);
}
__device__ inline void tma_load(void* dst, const CUtensorMap& map, int c0, int c1, int c2, uint64_t* bar) {
  ::qkv::emulation::tma_load(dst, map, c0, c1, c2, tiles::smem_address(bar));
}
__device__ inline void mbarrier_init(uint64_t* bar, unsigned count) {
  ::qkv::emulation::mbarrier_init(tiles::smem_address(bar), count);
}
__device__ inline void mbarrier_init_fence() {}
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  ::qkv::emulation::mbarrier_arrive(tiles::smem_address(bar), bytes);
}
__device__ inline void mbarrier_arrive(uint64_t* bar) { ::qkv::emulation::mbarrier_arrive(tiles::smem_address(bar), 0); }
__device__ inline void mbarrier_wait(uint64_t* bar, unsigned parity) {
  ::qkv::emulation::mbarrier_wait(tiles::smem_address(bar), parity);
}
__device__ inline void named_barrier_sync(unsigned id, unsigned threads) { ::qkv::emulation::named_barrier(id, threads, true); }
__device__ inline void named_barrier_arrive(unsigned id, unsigned threads) {
  ::qkv::emulation::named_barrier(id, threads, false);
}
template <int Registers>
__device__ inline void registers_grow() {
  ::qkv::emulation::setmaxnreg(Registers, true);
}
template <int Registers>
__device__ inline void registers_shrink() {
  ::qkv::emulation::setmaxnreg(Registers, false);
}
__device__ inline void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  ::qkv::emulation::bulk_reduce_add(dst, src, bytes);
}
__device__ inline void bulk_commit() { ::qkv::emulation::bulk_commit(); }
template <int N>
__device__ inline void bulk_wait_read() {
  ::qkv::emulation::bulk_wait(N);
}
template <int N>
__device__ inline void bulk_wait() {
  ::qkv::emulation::bulk_wait(N);
}
#else
// The driver's cuTensorMapEncodeTiled, found through the runtime (no link against libcuda); throws
// where the driver refuses the map.
template <typename T>
inline void encode_tensor_map(CUtensorMap& map, const TensorBox& b) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    QKV_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !fn)
      throw std::runtime_error("CUDA: the driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)");
    return reinterpret_cast<Encode>(fn);
  }();
  const cuuint64_t dims[3] = {b.dims[0], b.dims[1], b.dims[2]}, strides[2] = {b.strides[0], b.strides[1]};
  const cuuint32_t box[3] = {64, b.rows, 1}, unit[3] = {1, 1, 1};
  const CUresult r = encode(&map, tensor_map_type<T>(), 3, const_cast<void*>(b.base), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("CUDA: cuTensorMapEncodeTiled refused a tensor map (error " + std::to_string(int(r)) + ")");
}

// The box at element coordinates {c0, c1, c2} → dst (1024-byte aligned), its bytes counted on `bar`.
__device__ inline void tma_load(void* dst, const CUtensorMap& map, int c0, int c1, int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(tiles::smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(tiles::smem_address(bar))
      : "memory");
}
__device__ inline void mbarrier_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tiles::smem_address(bar)), "r"(count) : "memory");
}
// the barriers' initialization visible to the async proxy (TMA) before any copy completes on them
__device__ inline void mbarrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// one arrival, and `bytes` more to land before the phase completes
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tiles::smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ inline void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(tiles::smem_address(bar)) : "memory");
}
__device__ inline void mbarrier_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(tiles::smem_address(bar)),
      "r"(parity)
      : "memory");
}
// bar.sync / bar.arrive on barrier `id` (1–15; 0 is __syncthreads) completing at `threads` arrivals
__device__ inline void named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ inline void named_barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// A warpgroup's registers a thread (setmaxnreg: the producer gives its registers to the consumers).
// The block's registers are those it was launched with — threads × ptxas's count (384 × 168 for the
// warp-specialized kernels) — so what the consumers take must not exceed what the producer gave:
// setmaxnreg.inc waits for them, for ever where they are not there.
template <int Registers>
__device__ inline void registers_grow() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
template <int Registers>
__device__ inline void registers_shrink() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Registers));
}
// dst[i] += src[i] for bytes / 4 floats, into the open bulk group
__device__ inline void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(tiles::smem_address(src)), "r"(bytes)
               : "memory");
}
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// every bulk group but the newest N has read its source (bulk_wait_read) or is done (bulk_wait)
template <int N>
__device__ inline void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ inline void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

}  // namespace
}  // namespace qkv::kernels::cuda
