// Hopper's warpgroup tensor-core product (wgmma, sm_90a) as qkv's kernels use it: bf16 or f16 operands,
// f32 accumulators, m64nNk16 with B — and A, or A from registers — in shared memory in the 128-byte
// swizzled layouts, K-major or (the instruction's transpose bits) MN-major, through matrix
// descriptors; the fences and waits around it. nvcc for
// sm_90a (sm90a/*.cu), or g++ under tests/kernels/cuda_emulation.h (QKV_CUDA_EMULATION: the product
// from the PTX ISA's layouts, computed at the wait that retires it; the fences no-ops).
//
// Shared memory: an operand tile is stored as 64-element (128-byte) rows in column blocks of 64
// elements ([K/64][rows][64] for a contraction over K), 8 rows forming a 1024-byte atom in which
// 16-byte piece c of row r sits at piece c ⊕ (r mod 8); a descriptor gives the start address, 1024
// bytes between 8-row groups and the swizzle mode; a 16-element step along the contraction is +32
// bytes of start address inside a column block. The same tile read MN-major (transpose bit 1) is the
// transposed operand: its 64-element rows run along M (or N), its rows are the contraction's indices
// — 8 of them an atom, 1024 bytes between 8-row groups (stride byte offset), and the next 64 elements
// of M (N) one column block further (leading byte offset: the block's bytes); a 16-element step
// along the contraction is +2048 bytes of start address. So one tile [D/64][rows][64] serves a product
// contracting over D (K-major) and one contracting over its rows (MN-major).
//
// Register layouts (PTX ISA, wgmma .m64nNk16; warp w of the warpgroup owns rows 16w…16w+15, g =
// lane / 4, t = lane % 4): accumulator element 4c + e (c < N/8) is row g + 8·(e / 2), column 8c + 2t
// + e % 2 — mma.sync's C layout per 8 columns — and the A operand from registers is mma.sync's A
// fragment per 16 columns, so an accumulator's columns 16kk… are the next product's A fragment.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_tiles.cuh"

namespace qkv::kernels::cuda {
namespace {

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90a/wgmma.cuh is compiled for sm_90a alone (wgmma): see CMakeLists.txt"
#endif

using tiles::smem_address;

// A shared-memory matrix descriptor: start address / 16 (bits 0–13), leading byte offset (unused by
// the swizzled K-major layout: 1), stride byte offset 1024 / 16 (bits 32–45: the next 8 rows), 128-byte
// swizzle (bits 62–63 = 1). The tile's atoms must start on 1024-byte boundaries.
__device__ inline uint64_t smem_descriptor(const void* p) {
  const uint32_t a = smem_address(p);
  return uint64_t{(a & 0x3FFFFu) >> 4} | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// The same for an MN-major operand whose 64-element column blocks lie `block_bytes` apart (the leading
// byte offset; unused where M or N is at most 64).
__device__ inline uint64_t smem_descriptor_mn(const void* p, uint32_t block_bytes) {
  return (smem_descriptor(p) & ~(uint64_t{0x3FFF} << 16)) | (uint64_t{(block_bytes & 0x3FFFFu) >> 4} << 16);
}

// Byte offset of 16-byte piece c (< 8) of row r in a swizzled [rows][64] column block.
__device__ inline int swizzled(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

#ifdef QKV_CUDA_EMULATION  // on the host (tests/kernels/cuda_emulation.h): each product computed at its wait
__device__ inline void wgmma_fence() { ::qkv::emulation::wgmma_fence(); }
__device__ inline void wgmma_commit() { ::qkv::emulation::wgmma_commit(); }
template <int N>
__device__ inline void wgmma_wait() {
  ::qkv::emulation::wgmma_wait(N);
}
template <int N>
__device__ inline void fence_registers(float (&)[N]) {}
__device__ inline void fence_proxy_async() { ::qkv::emulation::fence_proxy_async(); }
// d (+)= a·b for a 64 × 16 A and a 16 × N B, f32 accumulators: A and B from shared memory (ss) or A
// from registers (rs); `accumulate` 0 overwrites d; TransA / TransB 1: A M-major, B N-major.
template <typename T, int N, int TransA = 0, int TransB = 0>
__device__ inline void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  ::qkv::emulation::wgmma_m64nNk16<T, N>(d, nullptr, da, db, accumulate != 0, TransA != 0, TransB != 0);
}
template <typename T, int N, int TransB = 0>
__device__ inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
  ::qkv::emulation::wgmma_m64nNk16<T, N>(d, a, 0, db, true, false, TransB != 0);
}
#else
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving reads or writes of accumulators across an asynchronous product's
// issue and its wait (CUTLASS's warpgroup_fence_operand).
template <int N>
__device__ inline void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// Shared memory written by cp.async (the generic proxy) is read next by wgmma (the async proxy).
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The instruction for one T and N: ss<TransA, TransB> (A and B from shared memory) and rs<TransB> (A
// from registers), defined below for N = 32, 64, 128, 256.
template <typename T, int N>
struct Wgmma;

// d (+)= a·b for a 64 × 16 A and a 16 × N B, f32 accumulators: A and B from shared memory (ss) or A
// from registers (rs); `accumulate` 0 overwrites d; TransA / TransB 1: A M-major, B N-major (the
// transpose bits, 16-bit types only). T: __nv_bfloat16 or __half.
template <typename T, int N, int TransA = 0, int TransB = 0>
__device__ inline void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  Wgmma<T, N>::template ss<TransA, TransB>(d, da, db, accumulate);
}
template <typename T, int N, int TransB = 0>
__device__ inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
  Wgmma<T, N>::template rs<TransB>(d, a, db);
}

// The accumulators of m64nNk16 as asm operands 0 … N/2 − 1, and their register list.
#define QKV_WGMMA_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define QKV_WGMMA_R16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define QKV_WGMMA_D32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define QKV_WGMMA_R32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define QKV_WGMMA_D64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define QKV_WGMMA_R64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define QKV_WGMMA_D128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define QKV_WGMMA_R128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
// ss: descriptors at operands N/2 and N/2 + 1, scale-d at N/2 + 2, the transpose bits (immediates) at
// N/2 + 3 and N/2 + 4; rs: A's registers at N/2 … N/2 + 3, B's descriptor at N/2 + 4, scale-d (1) at
// N/2 + 5, B's transpose bit at N/2 + 6. Scales of A and B 1.
#define QKV_WGMMA(Type, ptx, N, D, R, x0, x1, x2, x3, x4, x5, x6)                                           \
  template <>                                                                                               \
  struct Wgmma<Type, N> {                                                                                   \
    template <int TransA, int TransB>                                                                       \
    __device__ static void ss(float (&d)[N / 2], uint64_t da_, uint64_t db_, int accumulate) {              \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #x2 ", 0;\n"                                       \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." ptx "." ptx " " R ", %" #x0 ", %" #x1    \
                   ", p, 1, 1, %" #x3 ", %" #x4 ";\n}\n"                                                   \
                   : D                                                                                     \
                   : "l"(da_), "l"(db_), "r"(accumulate), "n"(TransA), "n"(TransB));                       \
    }                                                                                                       \
    template <int TransB>                                                                                   \
    __device__ static void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db_) {                    \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #x5 ", 0;\n"                                       \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." ptx "." ptx " " R ", {%" #x0 ",%" #x1    \
                   ",%" #x2 ",%" #x3 "}, %" #x4 ", p, 1, 1, %" #x6 ";\n}\n"                                \
                   : D                                                                                     \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db_), "n"(1), "n"(TransB));          \
    }                                                                                                       \
  };
QKV_WGMMA(__nv_bfloat16, "bf16", 32, QKV_WGMMA_D16, QKV_WGMMA_R16, 16, 17, 18, 19, 20, 21, 22)
QKV_WGMMA(__nv_bfloat16, "bf16", 64, QKV_WGMMA_D32, QKV_WGMMA_R32, 32, 33, 34, 35, 36, 37, 38)
QKV_WGMMA(__nv_bfloat16, "bf16", 128, QKV_WGMMA_D64, QKV_WGMMA_R64, 64, 65, 66, 67, 68, 69, 70)
QKV_WGMMA(__nv_bfloat16, "bf16", 256, QKV_WGMMA_D128, QKV_WGMMA_R128, 128, 129, 130, 131, 132, 133, 134)
QKV_WGMMA(__half, "f16", 32, QKV_WGMMA_D16, QKV_WGMMA_R16, 16, 17, 18, 19, 20, 21, 22)
QKV_WGMMA(__half, "f16", 64, QKV_WGMMA_D32, QKV_WGMMA_R32, 32, 33, 34, 35, 36, 37, 38)
QKV_WGMMA(__half, "f16", 128, QKV_WGMMA_D64, QKV_WGMMA_R64, 64, 65, 66, 67, 68, 69, 70)
QKV_WGMMA(__half, "f16", 256, QKV_WGMMA_D128, QKV_WGMMA_R128, 128, 129, 130, 131, 132, 133, 134)
#undef QKV_WGMMA
#undef QKV_WGMMA_D16
#undef QKV_WGMMA_R16
#undef QKV_WGMMA_D32
#undef QKV_WGMMA_R32
#undef QKV_WGMMA_D64
#undef QKV_WGMMA_R64
#undef QKV_WGMMA_D128
#undef QKV_WGMMA_R128
#endif

}  // namespace
}  // namespace qkv::kernels::cuda
