// bf16 / f16 flash attention forward on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a):
// FlashAttention-2's algorithm with FlashAttention-3's products. Same formulas, masks and semantics as
// the mma.sync forward (attention_mma.cu), which stays the portable path (sm_80 and later) and the
// backward; this file is compiled for sm_90a alone (CMakeLists.txt) and runs only on a compute
// capability 9.0 GPU (H100, H200), where it is the default forward (QKV_CUDA_ATTENTION=mma, mma1,
// mma2 or wmma selects the others).
//
// Pre-pass: dense T copies of q [B, H, Lq, D] and k [B, Hkv, Lk, D] (tiles::round_rows), and of v
// *transposed*, vᵀ [B, Hkv, D, Lk'] (Lk' = Lk rounded up to 128, zeros past Lk), so that every
// operand in shared memory is "K-major" for wgmma — the contraction dimension contiguous: dims for
// S = Q Kᵀ, keys for O += P V — and one descriptor form serves all three.
//
// Block: 2 warpgroups (256 threads), 64 query rows each (128 a block); keys in tiles of KN (64, or 128),
// double-buffered (tile j+1 copied by cp.async while tile j is computed). Per warpgroup and key tile:
//     S = Q_w K_jᵀ                    wgmma m64nKNk16, A and B from shared memory, D/16 steps
//     s = scale·S + M,  m' = max(m, rowmax s),  P = e^(s − m'),  l = l·e^(m − m') + rowsum P,
//     O ·= e^(m − m')
//     O += (P ∘ Z/(1−p)) V_j          wgmma m64nDk16, A (P, rounded to T) from registers, B = V_jᵀ
// end: out = O / l,  lse = m + ln l.
//
// Shared memory: each operand tile is stored as 64-element (128-byte) rows in wgmma's 128-byte
// swizzled layout — 8 rows form a 1024-byte atom in which 16-byte piece c of row r sits at piece
// c ⊕ (r mod 8) — in column blocks of 64 elements ([D/64][rows][64]); a descriptor gives the start
// address, 1024 bytes between 8-row groups and the swizzle mode; a 16-element step along the
// contraction dimension is +32 bytes of start address inside a column block.
//
// Register layouts (PTX ISA, wgmma .m64nNk16; warp w of the warpgroup owns rows 16w…16w+15,
// g = lane / 4, t = lane % 4): accumulator element 4c + e (c < N/8) is row g + 8·(e / 2), column
// 8c + 2t + e % 2 — mma.sync's C layout per 8 columns — and the A operand from registers is
// mma.sync's A fragment per 16 columns, so S's accumulators for keys 16kk… are P's A fragment.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

using namespace tiles;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kRows = 64 * kWarpgroups;  // query rows a block

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "sm90a/attention_wgmma.cu is compiled for sm_90a alone (wgmma): see CMakeLists.txt"
#endif

// ---- wgmma ------------------------------------------------------------------------------------------

// A shared-memory matrix descriptor: start address / 16 (bits 0–13), leading byte offset (unused by
// the swizzled K-major layout: 1), stride byte offset 1024 / 16 (bits 32–45: the next 8 rows), 128-byte
// swizzle (bits 62–63 = 1). The tile's atoms must start on 1024-byte boundaries.
__device__ inline uint64_t smem_descriptor(const void* p) {
  const uint32_t a = smem_address(p);
  return uint64_t{(a & 0x3FFFFu) >> 4} | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// Byte offset of 16-byte piece c (< 8) of row r in a swizzled [rows][64] column block.
__device__ inline int swizzled(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

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

// d (+)= a·b for a 64 × 16 A and a 16 × N B, f32 accumulators: A and B from shared memory (ss) or A
// from registers (rs); `accumulate` 0 overwrites d. bf16 only (f16 keeps the mma.sync forward).
template <typename T, int N>
__device__ inline void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate);
template <typename T, int N>
__device__ inline void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);

template <>
__device__ inline void wgmma_ss<__nv_bfloat16, 64>(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(accumulate));
}
template <>
__device__ inline void wgmma_ss<__nv_bfloat16, 128>(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
}
template <>
__device__ inline void wgmma_rs<__nv_bfloat16, 64>(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}
template <>
__device__ inline void wgmma_rs<__nv_bfloat16, 128>(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

// ---- pre-pass: v → vᵀ ---------------------------------------------------------------------------------

// dst[(b·heads + h)·D + d][j] = T(src[b·sb + h·sh + j·sl + d]) for j < L, 0 for L ≤ j < Lp (Lp a
// multiple of 8): a thread per 8 keys of one dim (the warp's loads are consecutive dims), one
// 16-byte store.
template <typename T>
__global__ void transpose_rows_kernel(const float* src, int64_t sb, int64_t sh, int64_t sl, int64_t heads, int64_t L,
                                      int64_t D, int64_t Lp, int64_t pieces, T* dst) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < pieces; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = e % D, j0 = e / D % (Lp / 8) * 8, bh = e / D / (Lp / 8), b = bh / heads, h = bh % heads;
    const float* s = src + b * sb + h * sh + d;
    float x[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) x[u] = j0 + u < L ? s[(j0 + u) * sl] : 0.f;
    *reinterpret_cast<uint4*>(dst + (bh * D + d) * Lp + j0) =
        make_uint4(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]), pack2<T>(x[4], x[5]), pack2<T>(x[6], x[7]));
  }
}

// ---- the forward kernel -------------------------------------------------------------------------------

// Rows [r0, r0 + n) of a dense [L, D] operand → the swizzled [D/64][n][64] layout, by cp.async (the
// caller commits and waits); rows past L are zeros.
template <typename T, int D>
__device__ inline void copy_rows(unsigned char* dst, const T* src, int64_t r0, int64_t L, int n) {
  constexpr int pieces = D / 8;  // 16-byte pieces a row
  for (int e = threadIdx.x; e < n * pieces; e += kThreads) {
    const int r = e / pieces, c = e % pieces;
    const bool ok = r0 + r < L;
    cp_async16(dst + (c / 8) * (n * 128) + swizzled(r, c % 8), ok ? src + (r0 + r) * D + c * 8 : src, ok);
  }
}

// Keys [j0, j0 + KN) of vᵀ's D rows (row stride Lp, zeros past Lk already) → swizzled [KN/64][D][64].
template <typename T, int D, int KN>
__device__ inline void copy_keys(unsigned char* dst, const T* vt, int64_t Lp, int64_t j0) {
  for (int e = threadIdx.x; e < D * KN / 8; e += kThreads) {
    const int d = e / (KN / 8), c = e % (KN / 8);
    cp_async16(dst + (c / 8) * (D * 128) + swizzled(d, c % 8), vt + d * Lp + j0 + c * 8, true);
  }
}

template <int D, int KN, int Stages>
constexpr size_t smem_bytes() {  // Q, then Stages K and vᵀ tiles, in 16-bit elements; 1024 to align the base
  return 1024 + 2 * size_t{D} * (kRows + 2 * Stages * KN);
}

// What a block knows of its problem: its head, its rows, its operands, the warpgroup and lane.
template <typename T, int D, int KN>
struct Block {
  const AttnProblem& p;
  unsigned char* Qs;  // [D/64][kRows][64]
  unsigned char* Ks;  // [Stages][D/64][KN][64]
  unsigned char* Vs;  // [Stages][KN/64][D][64]
  int wg, t;
  int64_t b, h, i0, iw, iw_last, tiles, Lp;
  int64_t row[2];     // this thread's rows: g and g + 8 of its warp's 16
  const T *q, *k, *vt;

  __device__ Block(const AttnProblem& pp, unsigned char* smem, int stages, const T* qh, const T* kh, const T* vth,
                   int64_t lp)
      : p(pp), Lp(lp) {
    Qs = smem + ((1024 - smem_address(smem) % 1024) % 1024);
    Ks = Qs + kRows * D * 2;
    Vs = Ks + stages * KN * D * 2;
    wg = threadIdx.x / 128, t = threadIdx.x % 4;
    const int warp = threadIdx.x % 128 / 32, g = threadIdx.x % 32 / 4;
    const int64_t bh = blockIdx.y, hk = bh % p.H / (p.H / p.Hkv);
    b = bh / p.H, h = bh % p.H;
    // the last row blocks first: under causality they walk the most keys, and finish last otherwise
    i0 = int64_t{gridDim.x - 1 - blockIdx.x} * kRows;
    q = qh + bh * p.Lq * D;                // dense [B, H, Lq, D]
    k = kh + (b * p.Hkv + hk) * p.Lk * D;  // dense [B, Hkv, Lk, D]
    vt = vth + (b * p.Hkv + hk) * D * Lp;  // [B, Hkv, D, Lp]
    const int64_t last_row = (i0 + kRows < p.Lq ? i0 + kRows : p.Lq) - 1;
    const int64_t k_end = p.causal ? (last_row + 1 < p.Lk ? last_row + 1 : p.Lk) : p.Lk;
    tiles = (k_end + KN - 1) / KN;
    iw = i0 + 64 * wg, iw_last = iw + 63;  // the warpgroup's rows
    row[0] = iw + 16 * warp + g, row[1] = row[0] + 8;
  }
  __device__ unsigned char* K(int stage) const { return Ks + stage * KN * D * 2; }
  __device__ unsigned char* V(int stage) const { return Vs + stage * D * KN * 2; }
  // key tile j into a stage's buffers (cp.async; the caller commits)
  __device__ void copy_tile(int64_t j, int stage) const {
    copy_rows<T, D>(K(stage), k, j * KN, p.Lk, KN);
    copy_keys<T, D, KN>(V(stage), vt, Lp, j * KN);
  }
  // whether the warpgroup has work in key tile j: rows before Lq, and (causal) not all before its first key
  __device__ bool active(int64_t j) const { return iw < p.Lq && !(p.causal && j * KN > iw_last); }
  // the key tiles the warpgroup has work in: [0, active_tiles())
  __device__ int64_t active_tiles() const {
    if (iw >= p.Lq) return 0;
    const int64_t n = p.causal ? iw_last / KN + 1 : tiles;
    return n < tiles ? n : tiles;
  }

  // S = Q_w K_jᵀ (64 × KN, D/16 steps along the dims), issued and committed as one group
  __device__ void issue_scores(float (&s)[KN / 2], const unsigned char* Kt) const {
#pragma unroll
    for (int i = 0; i < KN / 2; ++i) s[i] = 0.f;
    fence_registers(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = smem_descriptor(Qs + (kk / 4) * kRows * 128 + wg * 64 * 128 + (kk % 4) * 32);
      const uint64_t db = smem_descriptor(Kt + (kk / 4) * KN * 128 + (kk % 4) * 32);
      wgmma_ss<T, KN>(s, da, db, kk > 0);
    }
    wgmma_commit();
  }

  // P = e^(s − m') of key tile j, in place, with s = scale·S + M (element-wise masking only on tiles
  // that need it: a mask, keys past Lk, causality cutting through the warpgroup's rows); m and l of
  // rows g (r = 0) and g + 8 (r = 1) updated (a row's KN values lie across a quad's 4 lanes), alpha =
  // e^(m − m') for O; dropout's Z/(1−p) applied after l has summed P.
  template <bool General>
  __device__ void softmax(float (&s)[KN / 2], int64_t j, float (&m)[2], float (&l)[2], float (&alpha)[2]) const {
    const int64_t j0 = j * KN;
    const bool plain =
        (!General || p.mask.kind == AttnMask::Kind::none) && j0 + KN <= p.Lk && !(p.causal && j0 + KN - 1 > iw);
#pragma unroll
    for (int c = 0; c < KN / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float& x = s[4 * c + e];
        if (plain) {
          x *= p.scale;
        } else {
          const int64_t i = row[e / 2], jj = j0 + c * 8 + 2 * t + e % 2;
          if constexpr (General)
            x = i < p.Lq ? masked_score(p, b, h, i, jj, p.scale * x) : -INFINITY;
          else  // keys past Lk and the causal diagonal only
            x = jj < p.Lk && !(p.causal && jj > i) ? p.scale * x : -INFINITY;
        }
      }
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int c = 0; c < KN / 8; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      base[r] = mx == -INFINITY ? 0.f : mx;  // a row that has seen no key yet: 2^(−∞ − 0) = 0
      alpha[r] = exp2f((m[r] - base[r]) * kLog2e);
      m[r] = mx;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int c = 0; c < KN / 8; ++c) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[4 * c + e] = exp2f((s[4 * c + e] - base[e / 2]) * kLog2e);
      l[0] += s[4 * c] + s[4 * c + 1];  // l sums P before dropout
      l[1] += s[4 * c + 2] + s[4 * c + 3];
    }
    if (General && p.dropout_p > 0.f) {
#pragma unroll
      for (int c = 0; c < KN / 8; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (s[4 * c + e] != 0.f) s[4 * c + e] *= keep(p, b, h, row[e / 2], j0 + c * 8 + 2 * t + e % 2);
    }
  }

  // O ·= alpha (per row), then O += P V_j issued and committed as one group: P's accumulators for keys
  // 16kk…16kk+15 are the A fragment (rounded to T); B is V_jᵀ's D rows at keys 16kk… (column block kk / 4)
  __device__ void issue_values(float (&o)[D / 2], const float (&s)[KN / 2], const float (&alpha)[2],
                               const unsigned char* Vt) const {
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      o[4 * c] *= alpha[0], o[4 * c + 1] *= alpha[0];
      o[4 * c + 2] *= alpha[1], o[4 * c + 3] *= alpha[1];
    }
    uint32_t pa[KN / 16][4];
#pragma unroll
    for (int kk = 0; kk < KN / 16; ++kk) {
      pa[kk][0] = pack2<T>(s[8 * kk], s[8 * kk + 1]);
      pa[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
    fence_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KN / 16; ++kk)
      wgmma_rs<T, D>(o, pa[kk], smem_descriptor(Vt + (kk / 4) * D * 128 + (kk % 4) * 32));
    wgmma_commit();
  }

  // out = O / l, lse = m + ln l (a row that sees no key: zeros and −∞, as the CPU)
  __device__ void write(float (&o)[D / 2], const float (&m)[2], const float (&l)[2], float* out, float* lse) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[r];  // the quad's four parts of the row sum
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (row[r] >= p.Lq) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      float* orow = out + at(p.out_l, b, h, row[r]);
#pragma unroll
      for (int c = 0; c < D / 8; ++c) {
        orow[c * 8 + 2 * t] = o[4 * c + 2 * r] * inv;
        orow[c * 8 + 2 * t + 1] = o[4 * c + 2 * r + 1] * inv;
      }
      if (lse && t == 0) lse[(b * p.H + h) * p.Lq + row[r]] = sum > 0.f ? m[r] + logf(sum) : -INFINITY;
    }
  }
};

// One tile at a time (the default at head dim 64 without a mask or dropout; QKV_CUDA_ATTENTION=wgmma64 /
// wgmma128): per key tile j, with tile j + 1 copied meanwhile into the other of 2 buffers, S_j, its
// softmax, then O += P_j V_j, each product waited for.
template <typename T, int D, int KN, bool General>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_forward_kernel(AttnProblem p, const T* qh, const T* kh, const T* vth, int64_t Lp, float* out,
                               float* lse) {
  extern __shared__ unsigned char smem_raw[];
  const Block<T, D, KN> k(p, smem_raw, 2, qh, kh, vth, Lp);
  copy_rows<T, D>(k.Qs, k.q, k.i0, p.Lq, kRows);
  if (k.tiles > 0) k.copy_tile(0, 0);
  cp_async_commit();

  float o[D / 2], s[KN / 2], alpha[2];  // O_w: 64 × D, S: 64 × KN (this thread's parts)
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  for (int64_t j = 0; j < k.tiles; ++j) {
    const int stage = static_cast<int>(j % 2);
    if (j + 1 < k.tiles) {  // the next tile into the other buffer (read last in step j − 1: synced below)
      k.copy_tile(j + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();
    if (k.active(j)) {
      k.issue_scores(s, k.K(stage));
      wgmma_wait<0>();
      fence_registers(s);
      k.template softmax<General>(s, j, m, l, alpha);
      k.issue_values(o, s, alpha, k.V(stage));
      wgmma_wait<0>();
      fence_registers(o);
    }
    __syncthreads();  // both warpgroups are done with this buffer before step j + 1 copies tile j + 2 into it
  }
  cp_async_wait<0>();  // no key tile (Lk = 0): Q's copy is still to be waited for before the block ends
  k.write(o, m, l, out, lse);
}

// FlashAttention-3's overlap inside a warpgroup (the default at head dim 128, and with a mask or dropout;
// QKV_CUDA_ATTENTION=wgmma-overlap): while the
// tensor cores compute S_{j+1} = Q K_{j+1}ᵀ, the warpgroup computes the softmax of S_j (the exponentials
// are the other bottleneck), then issues O += P_j V_j and waits only for S_{j+1}. Four tile buffers:
// in step j tile j + 1 is read (S_{j+1}), tile j (V_j), tile j − 1 may still be read by O += P_{j−1}
// V_{j−1} of the other warpgroup until the step's barrier, and tile j + 2 is copied in.
template <typename T, int D, int KN, bool General>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_overlap_kernel(AttnProblem p, const T* qh, const T* kh, const T* vth, int64_t Lp, float* out,
                               float* lse) {
  constexpr int kStages = 4;
  extern __shared__ unsigned char smem_raw[];
  const Block<T, D, KN> k(p, smem_raw, kStages, qh, kh, vth, Lp);
  copy_rows<T, D>(k.Qs, k.q, k.i0, p.Lq, kRows);
  if (k.tiles > 0) k.copy_tile(0, 0);
  cp_async_commit();
  if (k.tiles > 1) k.copy_tile(1, 1);
  cp_async_commit();
  cp_async_wait<1>();  // Q and tile 0
  fence_proxy_async();
  __syncthreads();

  float o[D / 2], s[2][KN / 2], alpha[2];  // S_j and S_{j+1} alternate between s[0] and s[1]
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  const int64_t n = k.active_tiles();  // the warpgroup computes key tiles [0, n), copies and syncs all
  if (n > 0) {
    k.issue_scores(s[0], k.K(0));
    wgmma_wait<0>();
    fence_registers(s[0]);
  }
  // step j with S_j in `cur` and S_{j+1} into `next`; each branch waits for what it issued, so that the
  // compiler can see every product's registers left alone until its wait (else it serializes them)
  auto step = [&](int64_t j, float(&cur)[KN / 2], float(&next)[KN / 2]) {
    cp_async_wait<0>();  // tile j + 1 (the latest copy) is in
    fence_proxy_async();
    __syncthreads();     // … for every thread; and both warpgroups are past step j − 1 (O += P_{j−2} V_{j−2} done)
    if (j + 2 < k.tiles) k.copy_tile(j + 2, static_cast<int>((j + 2) % kStages));
    cp_async_commit();
    if (j + 1 < n) {
      k.issue_scores(next, k.K(static_cast<int>((j + 1) % kStages)));
      k.template softmax<General>(cur, j, m, l, alpha);  // while the tensor cores compute S_{j+1}
      wgmma_wait<0>();  // S_{j+1} and O += P_{j−1} V_{j−1} done
      fence_registers(next);
      fence_registers(o);
      k.issue_values(o, cur, alpha, k.V(static_cast<int>(j % kStages)));  // runs on into step j + 1
    } else if (j + 1 == n) {  // the warpgroup's last tile
      k.template softmax<General>(cur, j, m, l, alpha);
      wgmma_wait<0>();
      fence_registers(o);
      k.issue_values(o, cur, alpha, k.V(static_cast<int>(j % kStages)));
      wgmma_wait<0>();
      fence_registers(o);
    }
  };
  for (int64_t j = 0; j < k.tiles; j += 2) {  // two steps a turn: the buffers swap roles without copies
    step(j, s[0], s[1]);
    if (j + 1 < k.tiles) step(j + 1, s[1], s[0]);
  }
  wgmma_wait<0>();
  fence_registers(o);
  cp_async_wait<0>();
  k.write(o, m, l, out, lse);
}

template <typename T, int D, int KN, bool General, bool Overlap>
void launch(const AttnProblem& p, const T* qh, const T* kh, const T* vth, int64_t Lp, float* out, float* lse,
            cudaStream_t s) {
  constexpr size_t bytes = smem_bytes<D, KN, Overlap ? 4 : 2>();
  auto* kernel = [] {
    if constexpr (Overlap) return flash_wgmma_overlap_kernel<T, D, KN, General>;
    else return flash_wgmma_forward_kernel<T, D, KN, General>;
  }();
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lq + kRows - 1) / kRows), static_cast<unsigned>(p.B * p.H));
  kernel<<<grid, kThreads, bytes, s>>>(p, qh, kh, vth, Lp, out, lse);
  QKV_CUDA_LAUNCHED(flash_wgmma_forward_kernel);
}

// The variant QKV_CUDA_ATTENTION names — "wgmma64" / "wgmma128" one tile at a time with key tiles of
// 64 / 128, "wgmma-overlap" the overlapped kernel — or by default (unset or "wgmma") the faster on an
// H200 at the head dim (docs/BENCHMARKS.md): at 64 one tile at a time (113 registers: two blocks an
// SM, where the overlapped kernel's 176 allow one; 1.3–1.45× at L = 2k–16k), at 128 the overlapped
// kernel (0.95–1.15× the one-tile kernels).
enum class Variant { overlap, tile64, tile128 };
Variant variant(int64_t D) {
  const char* e = std::getenv("QKV_CUDA_ATTENTION");
  if (e && std::strcmp(e, "wgmma64") == 0) return Variant::tile64;
  if (e && std::strcmp(e, "wgmma128") == 0) return Variant::tile128;
  if (e && std::strcmp(e, "wgmma-overlap") == 0) return Variant::overlap;
  return D == 64 ? Variant::tile64 : Variant::overlap;
}

template <typename T, int D>
void forward(const AttnProblem& p, float* out, float* lse, cudaStream_t s) {
  const Variant which = variant(D);
  const int64_t Lp = (p.Lk + 127) / 128 * 128;  // whole tiles of either width
  const int64_t nq = p.B * p.H * p.Lq * D, nk = p.B * p.Hkv * p.Lk * D, nv = p.B * p.Hkv * D * Lp;
  Scratch buf((nq + nk + nv + 1) / 2, s);  // T copies of q, k and vᵀ (each a multiple of 8 elements)
  T* qh = reinterpret_cast<T*>(buf.p);
  T* kh = qh + nq;
  T* vth = kh + nk;
  round_rows<T>(p.q, p.q_sb, p.q_sh, p.q_sl, p.B, p.H, p.Lq, D, qh, s);
  round_rows<T>(p.k, p.k_sb, p.k_sh, p.k_sl, p.B, p.Hkv, p.Lk, D, kh, s);
  if (const int64_t pieces = nv / 8; pieces > 0) {
    transpose_rows_kernel<T><<<blocks_for(pieces), 256, 0, s>>>(p.v, p.v_sb, p.v_sh, p.v_sl, p.Hkv, p.Lk, D, Lp,
                                                                 pieces, vth);
    QKV_CUDA_LAUNCHED(transpose_rows_kernel);
  }
  // a mask or dropout: the overlapped kernel with its element-wise code (General)
  if (p.mask.kind != AttnMask::Kind::none || p.dropout_p > 0.f) return launch<T, D, 64, true, true>(p, qh, kh, vth, Lp, out, lse, s);
  if (which == Variant::tile128) return launch<T, D, 128, false, false>(p, qh, kh, vth, Lp, out, lse, s);
  if (which == Variant::tile64) return launch<T, D, 64, false, false>(p, qh, kh, vth, Lp, out, lse, s);
  launch<T, D, 64, false, true>(p, qh, kh, vth, Lp, out, lse, s);
}

// Whether this forward serves the problem: head dims 64 and 128 (D = Dv), a compute capability 9.0
// GPU, and QKV_CUDA_ATTENTION unset or naming a wgmma variant ("wgmma", "wgmma64", "wgmma128",
// "wgmma-overlap").
bool serves(const AttnProblem& p) {
  if ((p.D != 64 && p.D != 128) || p.Dv != p.D) return false;
  if (const char* e = std::getenv("QKV_CUDA_ATTENTION"); e && std::strncmp(e, "wgmma", 5) != 0) return false;
  int device = 0, major = 0, minor = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

}  // namespace

bool attention_forward_wgmma_bf16(const AttnProblem& p, float* out, float* lse) {
  if (!serves(p)) return false;
  if (p.D == 64) forward<__nv_bfloat16, 64>(p, out, lse, stream());
  else forward<__nv_bfloat16, 128>(p, out, lse, stream());
  return true;
}
// f16 keeps the mma.sync forward for now (half the compile time of this file; bf16 is what training
// and PyTorch's comparisons use)
bool attention_forward_wgmma_f16(const AttnProblem&, float*, float*) { return false; }

}  // namespace qkv::kernels::cuda
