// bf16 / f16 flash attention on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a; sm90a/wgmma.cuh:
// the instruction, its shared-memory layout and register layouts): FlashAttention-2's algorithm with
// FlashAttention-3's products, forward and backward. Same formulas, masks and semantics as the
// mma.sync pair (attention_mma_kernels.cuh), which stays the portable path (sm_80 and later).
// attention_wgmma.cu launches these kernels, compiled for sm_90a alone (CMakeLists.txt), on a compute
// capability 9.0 GPU (H100, H200): the forward by default (QKV_CUDA_ATTENTION=mma, mma1, mma2 or wmma
// selects the others), the backward where QKV_CUDA_ATTENTION_BACKWARD=wgmma asks for it. nvcc, or g++
// under tests/kernels/cuda_emulation.h (tests/kernels/attention_wgmma_emulation_test.cpp).
//
// Forward pre-pass: dense T copies of q [B, H, Lq, D], k and v [B, Hkv, Lk, D] (tiles::round_forward_operands).
// Every tile in shared memory is [D/64][rows][64] — a row's dims contiguous — and read K-major by
// S = Q Kᵀ (the contraction over the dims) and MN-major by O += P V (the contraction over the keys:
// wgmma's transpose bit, sm90a/wgmma.cuh), as FlashAttention-3 reads 16-bit V. (Until 2026-12-04 the
// pre-pass wrote vᵀ [B, Hkv, D, Lk'] for a K-major V: a fourth kernel, with 16-byte stores a row apart.)
//
// Forward block: 2 warpgroups (256 threads), 64 query rows each (128 a block); keys in tiles of KN (64,
// or 128), double-buffered (tile j+1 copied by cp.async while tile j is computed). Per warpgroup and
// key tile:
//     S = Q_w K_jᵀ                    wgmma m64nKNk16, A and B from shared memory, D/16 steps
//     s = scale·S + M,  m' = max(m, rowmax s),  P = e^(s − m'),  l = l·e^(m − m') + rowsum P,
//     O ·= e^(m − m')
//     O += (P ∘ Z/(1−p)) V_j          wgmma m64nDk16, A (P, rounded to T) from registers, B = V_j
//                                     (N-major)
// end: out = O / l,  lse = m + ln l. (The backward's design: above its kernel.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/sm90a/tma.cuh"
#include "kernels/cuda/sm90a/wgmma.cuh"

namespace qkv::kernels::cuda {
namespace {

using namespace tiles;

constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kRows = 64 * kWarpgroups;  // query rows a block

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

template <int D, int KN, int Stages>
constexpr size_t smem_bytes() {  // Q, then Stages K and V tiles, in 16-bit elements; 1024 to align the base
  return 1024 + 2 * size_t{D} * (kRows + 2 * Stages * KN);
}

// A block's work: 128 query rows from i0 of one (batch, head) bh. One a block: row block gridDim.x − 1 −
// blockIdx.x (the last row blocks first: under causality they walk the most keys, and finish last
// otherwise) of head blockIdx.y; the persistent kernel's item w of forward_items() (below).
struct Item {
  int64_t i0, bh;
};
__device__ inline Item this_blocks_item() { return {int64_t{gridDim.x - 1 - blockIdx.x} * kRows, int64_t{blockIdx.y}}; }
// The persistent kernel's work, B·H·⌈Lq / 128⌉ items: item w is row block ⌈Lq / 128⌉ − 1 − w / (B·H) of
// head w mod (B·H) — every head's last row block first (causal: the most keys), so that blocks taking
// items w, w + grid, w + 2·grid … end together
__host__ __device__ inline int64_t forward_items(const AttnProblem& p) {
  return (p.Lq + kRows - 1) / kRows * p.B * p.H;
}
__device__ inline Item forward_item(const AttnProblem& p, int64_t w) {
  const int64_t heads = p.B * p.H, row_blocks = (p.Lq + kRows - 1) / kRows;
  return {(row_blocks - 1 - w / heads) * kRows, w % heads};
}

// What a block knows of its work: its head, its rows, its operands, the warpgroup and lane.
template <typename T, int D, int KN>
struct Block {
  const AttnProblem& p;
  unsigned char* Qs;  // [D/64][kRows][64]
  unsigned char* Ks;  // [Stages][D/64][KN][64]
  unsigned char* Vs;  // [Stages][D/64][KN][64]
  int wg, t;
  int64_t b, h, i0, iw, iw_last, tiles;
  int64_t row[2];     // this thread's rows: g and g + 8 of its warp's 16
  const T *q, *k, *v;

  // first_wg: the block's first computing warpgroup (1 in the warp-specialized kernel, after its producer)
  __device__ Block(const AttnProblem& pp, unsigned char* smem, int stages, const T* qh, const T* kh, const T* vh,
                   int first_wg = 0, Item work = this_blocks_item())
      : p(pp) {
    Qs = smem + ((1024 - smem_address(smem) % 1024) % 1024);
    Ks = Qs + kRows * D * 2;
    Vs = Ks + stages * KN * D * 2;
    wg = static_cast<int>(threadIdx.x / 128) - first_wg, t = threadIdx.x % 4;
    const int warp = threadIdx.x % 128 / 32, g = threadIdx.x % 32 / 4;
    const int64_t bh = work.bh, hk = bh % p.H / (p.H / p.Hkv);
    b = bh / p.H, h = bh % p.H;
    i0 = work.i0;
    q = qh + bh * p.Lq * D;                // dense [B, H, Lq, D]
    k = kh + (b * p.Hkv + hk) * p.Lk * D;  // dense [B, Hkv, Lk, D]
    v = vh + (b * p.Hkv + hk) * p.Lk * D;  // dense [B, Hkv, Lk, D]
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
    copy_rows<T, D>(V(stage), v, j * KN, p.Lk, KN);
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

  // P = e^(x − m') of key tile j, in place, for the scores x = scale·S + M (element-wise masking only on
  // tiles that need it: a mask, keys past Lk, causality cutting through the warpgroup's rows); m and l
  // of rows g (r = 0) and g + 8 (r = 1) updated (a row's KN values lie across a quad's 4 lanes), alpha =
  // e^(m − m') for O; dropout's Z/(1−p) applied after l has summed P. Fold: a plain tile's scale folded
  // into the exponent (rows::online_softmax's f) — in a copy of the exponentials of its own, the scale
  // read as the kernel's parameter, so that no register holds a chosen factor (ptxas, sm_90a: the
  // one-tile kernel's mask code at head dim 64 spills 4 bytes a thread rather than 40; the
  // warp-specialized kernel's mask code spills 76–100 bytes with either form, none with the scale
  // multiplied in element by element: it keeps that, Fold false).
  // Capped (General's, head dim 256's warp-specialized kernel alone): x = c(scale·S) + M, c the soft cap.
  template <bool General, bool Fold = true, bool Capped = false>
  __device__ void softmax(float (&s)[KN / 2], int64_t j, float (&m)[2], float (&l)[2], float (&alpha)[2]) const {
    const int64_t j0 = j * KN;
    const bool plain = rows::plain_tile<General>(p, j0, KN, iw);
    if (!Fold || !plain) {
#pragma unroll
      for (int c = 0; c < KN / 8; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float& x = s[4 * c + e];
          const int64_t i = row[e / 2], jj = j0 + c * 8 + 2 * t + e % 2;
          if (plain)
            x *= p.scale;
          else if constexpr (General)
            x = i < p.Lq ? masked_score(p, b, h, i, jj, Capped ? soft_cap(p.softcap, p.scale * x) : p.scale * x)
                         : -INFINITY;
          else  // keys past Lk and the causal diagonal only
            x = jj < p.Lk && !(p.causal && jj > i) ? p.scale * x : -INFINITY;
        }
      }
    }
    // m' = max(m, f·rowmax s), P = e^(f·s − m') with f·s − m' one FFMA (f > 0)
    const auto exponentiate = [&](float f) {
      float base[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < KN / 8; ++c) mx = fmaxf(mx, fmaxf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(m[r], f * mx);
        base[r] = mx == -INFINITY ? 0.f : mx;  // a row that has seen no key yet: 2^(−∞ − 0) = 0
        alpha[r] = exp2f((m[r] - base[r]) * kLog2e);
        m[r] = mx;
        l[r] *= alpha[r];
      }
#pragma unroll
      for (int c = 0; c < KN / 8; ++c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * c + e] = exp2f(fmaf(s[4 * c + e], f, -base[e / 2]) * kLog2e);
        l[0] += s[4 * c] + s[4 * c + 1];  // l sums P before dropout
        l[1] += s[4 * c + 2] + s[4 * c + 3];
      }
    };
    if (Fold && plain)
      exponentiate(p.scale);
    else
      exponentiate(1.f);
    if (General && p.dropout_p > 0.f) {  // a lane's two keys of a row, j and j + 1, drawn together
#pragma unroll
      for (int c = 0; c < KN / 8; ++c)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float k0, k1;
          keep_pair(p, b, h, row[r], j0 + c * 8 + 2 * t, k0, k1);
          s[4 * c + 2 * r] *= k0, s[4 * c + 2 * r + 1] *= k1;
        }
    }
  }

  // O ·= alpha (per row), then O += P V_j issued and committed as one group: P's accumulators for keys
  // 16kk…16kk+15 are the A fragment (rounded to T); B is V_j's rows 16kk…16kk+15 read N-major (+2048
  // bytes a step of 16 rows; its D/64 column blocks of dims KN·128 bytes apart)
  __device__ void issue_values(float (&o)[D / 2], const float (&s)[KN / 2], const float (&alpha)[2],
                               const unsigned char* Vj) const {
    uint32_t pa[KN / 16][4];
    pack_probabilities(pa, s);
    issue_packed_values(o, pa, alpha, Vj);
  }
  // P's accumulators rounded to T as the A fragments of O += P V (keys 16kk…16kk+15 in pa[kk])
  __device__ static void pack_probabilities(uint32_t (&pa)[KN / 16][4], const float (&s)[KN / 2]) {
#pragma unroll
    for (int kk = 0; kk < KN / 16; ++kk) {
      pa[kk][0] = pack2<T>(s[8 * kk], s[8 * kk + 1]);
      pa[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
  __device__ static void issue_packed_values(float (&o)[D / 2], const uint32_t (&pa)[KN / 16][4],
                                             const float (&alpha)[2], const unsigned char* Vj) {
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      o[4 * c] *= alpha[0], o[4 * c + 1] *= alpha[0];
      o[4 * c + 2] *= alpha[1], o[4 * c + 3] *= alpha[1];
    }
    fence_registers(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KN / 16; ++kk)
      wgmma_rs<T, D, 1>(o, pa[kk], smem_descriptor_mn(Vj + kk * 2048, KN * 128));
    wgmma_commit();
  }

  // out = O / l, lse = m + ln l (a row that sees no key: zeros and −∞, as the CPU). A thread's two
  // columns 2t, 2t + 1 of each 8 are one 8-byte store where every row starts on 8 bytes (a quad's
  // four stores one 32-byte sector), else two.
  __device__ void write(float (&o)[D / 2], const float (&m)[2], const float (&l)[2], float* out, float* lse) const {
    const HeadLayout& ol = p.out_l;
    const bool pairs = reinterpret_cast<uintptr_t>(out) % 8 == 0 && ((ol.sb | ol.sh | ol.sl) & 1) == 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[r];  // the quad's four parts of the row sum
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (row[r] >= p.Lq) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      float* orow = out + at(ol, b, h, row[r]);
#pragma unroll
      for (int c = 0; c < D / 8; ++c) {
        const float x0 = o[4 * c + 2 * r] * inv, x1 = o[4 * c + 2 * r + 1] * inv;
        if (pairs) {
          *reinterpret_cast<float2*>(orow + c * 8 + 2 * t) = make_float2(x0, x1);
        } else {
          orow[c * 8 + 2 * t] = x0;
          orow[c * 8 + 2 * t + 1] = x1;
        }
      }
      if (lse && t == 0) lse[(b * p.H + h) * p.Lq + row[r]] = sum > 0.f ? m[r] + logf(sum) : -INFINITY;
    }
  }
};

// One tile at a time (the default at head dim 64, with a mask or dropout too; QKV_CUDA_ATTENTION=wgmma64 /
// wgmma128): per key tile j, with tile j + 1 copied meanwhile into the other of 2 buffers, S_j, its
// softmax, then O += P_j V_j, each product waited for. At head dim 64 with key tiles of 64, two blocks
// an SM (≤ 128 registers: 113 plain; the mask and dropout code, 150 alone, spills 48 bytes a step).
template <typename T, int D, int KN, bool General>
__global__ void __launch_bounds__(kThreads, D == 64 && KN == 64 ? 2 : 1)
    flash_wgmma_forward_kernel(AttnProblem p, const T* qh, const T* kh, const T* vh, float* out,
                               float* lse) {
  QKV_DYNAMIC_SHARED(1, smem);
  const Block<T, D, KN> k(p, smem, 2, qh, kh, vh);
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

// FlashAttention-3's overlap inside a warpgroup (the default at head dim 128, with a mask or dropout too;
// QKV_CUDA_ATTENTION=wgmma-overlap): while the
// tensor cores compute S_{j+1} = Q K_{j+1}ᵀ, the warpgroup computes the softmax of S_j (the exponentials
// are the other bottleneck), then issues O += P_j V_j and waits only for S_{j+1}. Four tile buffers:
// in step j tile j + 1 is read (S_{j+1}), tile j (V_j), tile j − 1 may still be read by O += P_{j−1}
// V_{j−1} of the other warpgroup until the step's barrier, and tile j + 2 is copied in.
template <typename T, int D, int KN, bool General>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_overlap_kernel(AttnProblem p, const T* qh, const T* kh, const T* vh, float* out,
                               float* lse) {
  constexpr int kStages = 4;
  QKV_DYNAMIC_SHARED(1, smem);
  const Block<T, D, KN> k(p, smem, kStages, qh, kh, vh);
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

// ---- the warp-specialized forward (FlashAttention-3's producer and consumers) --------------------------
//
// QKV_CUDA_ATTENTION=wgmma-ws. The overlapped kernel's arithmetic, with FlashAttention-3's division of
// labour (Shah et al. 2024, §3.1): a block of three warpgroups, the first a producer — one thread
// issues TMA copies of Q and of each key tile (K_j, V_j) into a ring of Stages buffers; its
// registers given up (setmaxnreg) to the two consumer warpgroups of 64 query rows each, which
// compute and no longer spend issue slots on copies' addresses. Per buffer s, mbarriers:
//     full_k[s], full_v[s]    the producer announces the tile's bytes; TMA's copies complete them
//     empty_k[s], empty_v[s]  every consumer thread arrives once it no longer reads K_j (V_j)
// Per consumer warpgroup and key tile j ≥ 1 (Sⱼ's softmax under P_{j−1}V_{j−1}, as the overlapped kernel):
//     wait full_k[j];  [turn]  issue S_j = Q_w K_jᵀ;  O ·= α_{j−1};  wait full_v[j−1];
//     issue O += P_{j−1} V_{j−1};  [pass the turn];  wait for S_j;  release K_j;
//     P_j, α_j = softmax(S_j);  wait for O;  release V_{j−1}
// and the "pingpong" schedule (§3.1): the turn is a pair of named barriers, so the two warpgroups
// issue their products in alternation and one's softmax (the exponentials, the other bottleneck)
// runs while the other's products occupy the tensor cores. Both warpgroups walk every key tile of
// the item (a causal item's diagonal tile is masked for the rows before it), so that the turns
// pair up.
// Persistent (FlashAttention-3's tile scheduler, static): a block an SM walks items w, w + grid, …
// (forward_item: 128 rows of one head, every head's last rows first). The ring's buffers are used in
// key-tile order across its items, Q's buffer once an item:
//     q_full                  the producer announces Q's bytes; TMA's copy completes them
//     q_empty                 every consumer thread arrives once its last S = Q Kᵀ of the item is done
// so that the next item's Q and first key tiles come in while the consumers finish the item's last
// O += P V and write its rows — what a block a launch paid at every item's start (the fixed cost a
// block that the H200's figures of 2026-12-04 showed: ~15–18 key tiles' time at d 128).
constexpr int kWsThreads = 128 * (1 + kWarpgroups);
// the parity of use n of a buffer in a ring of `stages` (its (n / stages)-th): the phase of its `full`
// barrier to wait for; the buffer's previous use, released, is the other
__device__ inline unsigned ring_use(int64_t n, int stages) { return static_cast<unsigned>(n / stages & 1); }
// setmaxnreg moves registers within the block's launch allocation — 384 threads × 168 (the 64k of an
// SM, in whole 8s a thread) — so a producer's and its consumers' counts must add up within it (the
// consumers' setmaxnreg.inc waits for ever otherwise)
constexpr int kWsLaunchRegisters = 65536 / kWsThreads / 8 * 8;
constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= kWsThreads * kWsLaunchRegisters);

// The buffers of each head dim: keys in tiles of 128 in a ring of 4 (d 64) or 2 (d 128) buffers; at
// d 256 (the forward only: this kernel alone serves it) tiles of 64 in a ring of 2 — a consumer then
// holds O's 128 accumulators and S's 32 (193 KB of shared memory).
template <int D>
struct WsShape {
  static constexpr int KN = D == 256 ? 64 : 128, Stages = D == 64 ? 4 : 2;
};
template <int D, int KN, int Stages>
constexpr size_t ws_smem_bytes() {  // the tiles, then 2 + 4·Stages mbarriers
  return smem_bytes<D, KN, Stages>() + 8 * (2 + 4 * Stages);
}

// The three TMA tensor maps of the forward: q, k and v as the dense T copies [B·H, Lq, D] / [B·Hkv,
// Lk, D] (boxes of 64 dims by 128 rows / KN keys; rows past a head's Lk filled with zeros).
// An empty key set (Lk 0) still gets valid maps: no tile is copied through them.
struct ForwardMaps {
  CUtensorMap q, k, v;
};
template <typename T, int D, int KN>
void encode_forward_maps(ForwardMaps& m, const AttnProblem& p, const T* qh, const T* kh, const T* vh) {
  const uint64_t row = D * sizeof(T), Lk = p.Lk > 0 ? p.Lk : 1;
  encode_tensor_map<T>(m.q, {qh, {D, uint64_t(p.Lq), uint64_t(p.B * p.H)}, {row, row * p.Lq}, kRows});
  encode_tensor_map<T>(m.k, {kh, {D, Lk, uint64_t(p.B * p.Hkv)}, {row, row * Lk}, KN});
  encode_tensor_map<T>(m.v, {vh, {D, Lk, uint64_t(p.B * p.Hkv)}, {row, row * Lk}, KN});
}

template <typename T, int D, int KN, int Stages, bool General, bool Capped = false>  // (Capped: softmax's)
__global__ void __launch_bounds__(kWsThreads, 1)
    flash_wgmma_ws_kernel(AttnProblem p, const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const T* qh, const T* kh, const T* vh, float* out,
                          float* lse) {
  QKV_DYNAMIC_SHARED(1, smem);
  // (the dense copies the maps describe, for the items' geometry: only TMA reads them)
  const auto block = [&](int64_t w) { return Block<T, D, KN>(p, smem, Stages, qh, kh, vh, 1, forward_item(p, w)); };
  const Block<T, D, KN> first = block(blockIdx.x);  // (the buffers' addresses: every item's the same)
  uint64_t* q_full = reinterpret_cast<uint64_t*>(first.Vs + Stages * D * KN * 2);
  uint64_t *full_k = q_full + 1, *full_v = full_k + Stages, *empty_k = full_v + Stages, *empty_v = empty_k + Stages;
  uint64_t* q_empty = empty_v + Stages;
  const int64_t n_items = forward_items(p);
  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1), mbarrier_init(q_empty, 128 * kWarpgroups);
    for (int s = 0; s < Stages; ++s) {
      mbarrier_init(&full_k[s], 1), mbarrier_init(&full_v[s], 1);
      mbarrier_init(&empty_k[s], 128 * kWarpgroups), mbarrier_init(&empty_v[s], 128 * kWarpgroups);
    }
    mbarrier_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: the producer's idle threads leave after it

  // The ring's buffers are used in key-tile order across the block's items: `used` counts the tiles
  // of its items before this one, so that tile j of an item is the ring's use used + j
  if (threadIdx.x < 128) {  // the producer warpgroup
    registers_shrink<kProducerRegisters>();
    if (threadIdx.x != 0) return;
    int64_t used = 0, n = 0;  // n: the block's items so far (Q's buffer's uses)
    for (int64_t w = blockIdx.x; w < n_items; w += gridDim.x, ++n) {
      const Block<T, D, KN> k = block(w);
      const int bh = static_cast<int>(k.b * p.H + k.h), bhk = static_cast<int>(k.b * p.Hkv + k.h / (p.H / p.Hkv));
      mbarrier_wait(q_empty, ring_use(n, 1) ^ 1);  // the item before read Q for the last time
      mbarrier_arrive_expect_tx(q_full, kRows * D * 2);
      for (int c = 0; c < D / 64; ++c) tma_load(k.Qs + c * kRows * 128, tq, 64 * c, static_cast<int>(k.i0), bh, q_full);
      for (int64_t j = 0; j < k.tiles; ++j) {
        const int s = static_cast<int>((used + j) % Stages);
        const unsigned free = ring_use(used + j, Stages) ^ 1;
        const int j0 = static_cast<int>(j * KN);
        mbarrier_wait(&empty_k[s], free);
        mbarrier_arrive_expect_tx(&full_k[s], KN * D * 2);
        for (int c = 0; c < D / 64; ++c) tma_load(k.K(s) + c * KN * 128, tk, 64 * c, j0, bhk, &full_k[s]);
        mbarrier_wait(&empty_v[s], free);
        mbarrier_arrive_expect_tx(&full_v[s], KN * D * 2);
        for (int c = 0; c < D / 64; ++c) tma_load(k.V(s) + c * KN * 128, tv, 64 * c, j0, bhk, &full_v[s]);
      }
      used += k.tiles;
    }
    return;
  }

  registers_grow<kConsumerRegisters>();
  const unsigned mine = 1 + first.wg, other = 2 - first.wg;  // the named barriers of the two warpgroups' turns
  if (first.wg == 0) named_barrier_arrive(mine, 2 * 128);    // the first turn is the first warpgroup's
  int64_t used = 0, n = 0;
  for (int64_t w = blockIdx.x; w < n_items; w += gridDim.x, ++n) {
    const Block<T, D, KN> k = block(w);
    const auto stage = [&](int64_t j) { return static_cast<int>((used + j) % Stages); };
    const auto use = [&](int64_t j) { return ring_use(used + j, Stages); };  // tile j's use of its buffer
    float o[D / 2], s[KN / 2], alpha[2];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    uint32_t pa[KN / 16][4];  // P_{j−1}, rounded, for O += P_{j−1} V_{j−1}
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    mbarrier_wait(q_full, ring_use(n, 1));
    if (k.tiles == 0) mbarrier_arrive(q_empty);  // (no product reads Q)
    if (k.tiles > 0) {
      mbarrier_wait(&full_k[stage(0)], use(0));
      named_barrier_sync(mine, 2 * 128);
      k.issue_scores(s, k.K(stage(0)));
      named_barrier_arrive(other, 2 * 128);
      wgmma_wait<0>();
      fence_registers(s);
      mbarrier_arrive(&empty_k[stage(0)]);
      if (k.tiles == 1) mbarrier_arrive(q_empty);  // Q read for the last time: the next item's may come in
      k.template softmax<General, !General, Capped>(s, 0, m, l, alpha);
      Block<T, D, KN>::pack_probabilities(pa, s);
    }
    for (int64_t j = 1; j < k.tiles; ++j) {
      const int sj = stage(j), sv = stage(j - 1);
      mbarrier_wait(&full_k[sj], use(j));
      named_barrier_sync(mine, 2 * 128);
      k.issue_scores(s, k.K(sj));
      mbarrier_wait(&full_v[sv], use(j - 1));
      Block<T, D, KN>::issue_packed_values(o, pa, alpha, k.V(sv));
      named_barrier_arrive(other, 2 * 128);
      wgmma_wait<1>();  // S_j
      fence_registers(s);
      mbarrier_arrive(&empty_k[sj]);
      if (j == k.tiles - 1) mbarrier_arrive(q_empty);
      k.template softmax<General, !General, Capped>(s, j, m, l, alpha);
      wgmma_wait<0>();  // O += P_{j−1} V_{j−1}
      fence_registers(o);
      mbarrier_arrive(&empty_v[sv]);
      Block<T, D, KN>::pack_probabilities(pa, s);
    }
    if (k.tiles > 0) {  // the last tile's values
      const int sv = stage(k.tiles - 1);
      mbarrier_wait(&full_v[sv], use(k.tiles - 1));
      Block<T, D, KN>::issue_packed_values(o, pa, alpha, k.V(sv));
      wgmma_wait<0>();
      fence_registers(o);
      mbarrier_arrive(&empty_v[sv]);
    }
    k.write(o, m, l, out, lse);  // (meanwhile the producer copies the next item's Q and first key tiles)
    used += k.tiles;
  }
}

// ---- the backward kernel ------------------------------------------------------------------------------
//
// Pre-pass: the dense T copies of q, dO [B, H, Lq, D] and k, v [B, Hkv, Lk, D] alone. Each tile
// serves both of its products: read K-major by the one contracting over the dims (Sᵀ, dPᵀ: A = K or
// V, B = Q_i or dO_i) and MN-major — wgmma's transpose bit, sm90a/wgmma.cuh — by the one contracting
// over its rows (dV, dK: B = dO_i, Q_i N-major; dQ: B = K N-major).
//
// Block: 2 warpgroups (256 threads), 128 keys (64 a warpgroup, the M = 64 rows of its products), for
// one key/value head: every query head h of its group, its rows in steps of R (causal: from the
// block's first key) — R = 128 at head dim 64, 64 at 128 (FlashAttention-2's and -3's tiles: at head
// dim 64 a step of 64 rows did half the products' work for the same waits, barriers and dQ rows;
// QKV_CUDA_ATTENTION_BACKWARD_ROWS=64 keeps 64 there, to compare). Per step i and warpgroup w:
//     Sᵀ  = K_w Q_iᵀ                              wgmma m64nRk16, A, B from shared memory, D/16 steps
//     P   = e^(scale·S + M − lse_i),  W = P ∘ Z/(1−p)
//     dPᵀ = V_w dO_iᵀ                             (issued before dV's product, waited for after it)
//     dV_w += Wᵀ dO_i                            wgmma m64nDk16, A (W, rounded to T) from registers, B = dO_i
//                                                (N-major)
//     dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i)
//     dK_w += dS'ᵀ Q_i                           A (dS') from registers, B = Q_i (N-major)
// then dS' into shared memory as dS' [R rows][128 keys] (swizzled, each thread its elements), and
//     dQ_i += dS' K                              over the block's 128 keys, B = K N-major; the warpgroups
//                                                split dQ_i [R, D]: at R = 64 by its dims (m64n(D/2)), at
//                                                R = 128 by its rows (m64nD, rows 64·w …)
// added into dq with f32 atomics (the order of the key blocks sets dq's last bits, as the mma.sync
// backward's). dK and dV stay in registers until the block's last step; the next step's tiles are
// copied in under dQ's product.
constexpr int kBwdKeys = 128;          // keys a block
constexpr int kBwdThreads = kThreads;  // two warpgroups (copy_rows strides by kThreads)
// query rows a step at head dim D, unless QKV_CUDA_ATTENTION_BACKWARD_ROWS=64 (the launchers)
template <int D>
constexpr int kBwdRows = D == 64 ? 128 : 64;

template <int D, int R>
constexpr size_t backward_smem_bytes() {
  // K, V (keys); Q, dO (the step's rows); dS' (rows × keys), all T; lse and D_i of the step's rows; 1024
  // to align the base
  return 1024 + 2 * (2 * size_t{kBwdKeys} * D + 2 * size_t{R} * D + size_t{R} * kBwdKeys) + 2 * sizeof(float) * R;
}

// What a backward warpgroup knows of its block — its key/value head, its 64 keys, the lane — and the
// products and element-wise steps of one step of R query rows, shared by both backward kernels. Per
// step i (query head h, rows i0 …): Sᵀ and dPᵀ are accumulators [R/8 n-tiles][4]: s[n][e] is key
// key[e / 2], row i0 + n·8 + 2t + e % 2.
template <typename T, int D, int R, bool General>
struct BackwardWarpgroup {
  static_assert(R == 64 || R == 128, "a backward step is 64 or 128 query rows");
  // dQ_i [R, D] split between the warpgroups: 64 rows from dq_row0 (0 at R = 64, 64·w at 128), kDqDims
  // dims from dq_dim0 (D/2 from (D/2)·w at R = 64, all D at 128)
  static constexpr int kDqDims = R * D / 128;
  const AttnProblem& p;
  int wg, warp, g, t;
  int dq_row0, dq_dim0;
  int64_t b, hk, j0;
  int64_t key[2];  // this thread's keys
  bool dropout;

  // first_wg: the block's first computing warpgroup (1 in the warp-specialized kernel, after its producer)
  __device__ BackwardWarpgroup(const AttnProblem& pp, int first_wg) : p(pp) {
    wg = static_cast<int>(threadIdx.x / 128) - first_wg, warp = threadIdx.x % 128 / 32;
    g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    dq_row0 = wg * (R - 64), dq_dim0 = R == 64 ? wg * (D / 2) : 0;
    const int64_t bhk = blockIdx.y;
    b = bhk / p.Hkv, hk = bhk % p.Hkv;
    j0 = int64_t{blockIdx.x} * kBwdKeys;
    key[0] = j0 + 64 * wg + 16 * warp + g, key[1] = key[0] + 8;
    dropout = General && p.dropout_p > 0.f;
  }
  // the block's steps in order, f(h, i0, n): every query head of the key head's group, its rows from
  // the first (causal: the block's first key; rows before it see none of these keys) in steps of R
  template <typename F>
  __device__ void for_each_step(F&& f) const {
    const int64_t group = p.H / p.Hkv, first_i0 = p.causal ? j0 : 0;
    int64_t n = 0;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
      for (int64_t i0 = first_i0; i0 < p.Lq; i0 += R) f(h, i0, n++);
  }
  // whether the step's P needs no element-wise masking: no mask, all keys before Lk, all rows before
  // Lq, causality not cutting through the block
  __device__ bool plain(int64_t i0) const { return rows::plain_step<General>(p, j0, kBwdKeys, i0, R); }
  // Z/(1−p) of element (n, e) of the step's accumulators; 1 without dropout
  __device__ float z(int64_t h, int64_t i0, int n, int e) const {
    return dropout ? keep(p, b, h, i0 + n * 8 + 2 * t + e % 2, key[e / 2]) : 1.f;
  }

  // dK and dV, the warpgroup's gradients, before the first step
  __device__ static void zero(float (&dK)[D / 8][4], float (&dV)[D / 8][4]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dK[n][e] = dV[n][e] = 0.f;
  }

  // acc = X_w Yᵀ over the dims, issued and committed as one group: X_w the warpgroup's 64 rows of a
  // key tile (K or V, [D/64][128][64]), Y the step's R rows (Q or dO, [D/64][R][64])
  __device__ void issue_keys_times_rows(float (&acc)[R / 2], const unsigned char* X, const unsigned char* Y) const {
    fence_registers(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_ss<T, R>(acc, smem_descriptor(X + (kk / 4) * kBwdKeys * 128 + wg * 64 * 128 + (kk % 4) * 32),
                     smem_descriptor(Y + (kk / 4) * R * 128 + (kk % 4) * 32), kk > 0);
    wgmma_commit();
  }

  // dV_w += Wᵀ dO_i, W = P ∘ Z/(1−p): W's accumulators for rows 16kk… are the A fragment (rounded to
  // T), B = dO_i ([D/64][R][64]) read N-major — 16 of its rows a step (+2048 bytes), its 64-dim column
  // blocks R·128 bytes apart; issued and committed as one group
  __device__ void issue_values_gradient(float (&dVf)[D / 2], const float (&s)[R / 8][4], int64_t h, int64_t i0,
                                        const unsigned char* G) const {
    uint32_t wa[R / 16][4];
#pragma unroll
    for (int kk = 0; kk < R / 16; ++kk) {
      const int n0 = 2 * kk, n1 = 2 * kk + 1;
      wa[kk][0] = pack2<T>(s[n0][0] * z(h, i0, n0, 0), s[n0][1] * z(h, i0, n0, 1));
      wa[kk][1] = pack2<T>(s[n0][2] * z(h, i0, n0, 2), s[n0][3] * z(h, i0, n0, 3));
      wa[kk][2] = pack2<T>(s[n1][0] * z(h, i0, n1, 0), s[n1][1] * z(h, i0, n1, 1));
      wa[kk][3] = pack2<T>(s[n1][2] * z(h, i0, n1, 2), s[n1][3] * z(h, i0, n1, 3));
    }
    fence_registers(dVf);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < R / 16; ++kk) wgmma_rs<T, D, 1>(dVf, wa[kk], smem_descriptor_mn(G + kk * 2048, R * 128));
    wgmma_commit();
  }

  // dS' → shared memory [row][key] (dS: [2][R][64], column block wg: the warpgroup's keys), then
  // dK_w += dS'ᵀ Q_i (as dV, B = Q_i N-major), issued and committed as one group. The stores come
  // first: a wgmma's A registers may not be read until a wait_group retires it (PTX ISA,
  // wgmma.wait_group: "undefined behavior"; FlashAttention-3's backward stores dS before its dK product).
  // The emulation reads A at the issue and cannot tell the orders apart.
  __device__ void issue_keys_gradient(float (&dKf)[D / 2], const float (&dp)[R / 8][4], const unsigned char* Q,
                                      unsigned char* dS) const {
    uint32_t da[R / 16][4];
#pragma unroll
    for (int kk = 0; kk < R / 16; ++kk) {
      const int n0 = 2 * kk, n1 = 2 * kk + 1;
      da[kk][0] = pack2<T>(dp[n0][0], dp[n0][1]);
      da[kk][1] = pack2<T>(dp[n0][2], dp[n0][3]);
      da[kk][2] = pack2<T>(dp[n1][0], dp[n1][1]);
      da[kk][3] = pack2<T>(dp[n1][2], dp[n1][3]);
    }
#pragma unroll
    for (int kk = 0; kk < R / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 8; ++e) {  // register e / 2's half e % 2: row r of the step, key c of the warpgroup's
        const int r = 16 * kk + 2 * t + e % 2 + 8 * (e / 4), c = 16 * warp + g + 8 * (e / 2 % 2);
        const uint16_t bits = static_cast<uint16_t>(da[kk][e / 2] >> (16 * (e % 2)));
        *reinterpret_cast<uint16_t*>(dS + wg * R * 128 + swizzled(r, c / 8) + (c % 8) * 2) = bits;
      }
    fence_registers(dKf);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < R / 16; ++kk) wgmma_rs<T, D, 1>(dKf, da[kk], smem_descriptor_mn(Q + kk * 2048, R * 128));
    wgmma_commit();
  }

  // The warpgroup's part of dQ_i = dS' K over the block's 128 keys: A = dS' rows dq_row0 … + 63, B = K
  // ([D/64][128][64]) read N-major from dim dq_dim0 — at R = 64 and head dim 64 the warpgroup's 32 dims
  // start 64 bytes into the swizzled rows — 16 keys a step (+2048 bytes); issued and committed as one
  // group. acc: the warp's rows dq_row0 + 16·warp …, dims dq_dim0 …, as add_dq takes them
  __device__ void issue_rows_gradient(float (&acc)[kDqDims / 8][4], const unsigned char* dS,
                                      const unsigned char* K) const {
    float(&accf)[kDqDims / 2] = *reinterpret_cast<float(*)[kDqDims / 2]>(&acc[0][0]);
    fence_registers(accf);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBwdKeys / 16; ++kk)
      wgmma_ss<T, kDqDims, 0, 1>(
          accf, smem_descriptor(dS + (kk / 4) * R * 128 + dq_row0 * 128 + (kk % 4) * 32),
          smem_descriptor_mn(K + (dq_dim0 / 64) * kBwdKeys * 128 + (dq_dim0 % 64) * 2 + kk * 2048, kBwdKeys * 128),
          kk > 0);
    wgmma_commit();
  }
};

template <typename T, int D, int R, bool General>
__global__ void __launch_bounds__(kBwdThreads, 1)
    flash_wgmma_backward_kernel(AttnProblem p, const T* qh, const T* gh, const T* kh, const T* vh, const float* lse,
                                const float* Dsum, float* dq, float* dk, float* dv) {
  using Warpgroup = BackwardWarpgroup<T, D, R, General>;
  QKV_DYNAMIC_SHARED(1, smem);
  unsigned char* Ks = smem + ((1024 - smem_address(smem) % 1024) % 1024);  // [D/64][128][64]
  unsigned char* Vs = Ks + kBwdKeys * D * 2;                                // [D/64][128][64]
  unsigned char* Qs = Vs + kBwdKeys * D * 2;                                // [D/64][R][64]
  unsigned char* Gs = Qs + R * D * 2;                                       // [D/64][R][64]  dO
  unsigned char* dSs = Gs + R * D * 2;                                      // [2][R][64]  dS'
  float* rowL = reinterpret_cast<float*>(dSs + R * kBwdKeys * 2);           // [R] lse
  float* rowD = rowL + R;                                                   // [R] D_i

  const Warpgroup w(p, 0);
  const int64_t bhk = blockIdx.y, b = w.b;
  copy_rows<T, D>(Ks, kh + bhk * p.Lk * D, w.j0, p.Lk, kBwdKeys);
  copy_rows<T, D>(Vs, vh + bhk * p.Lk * D, w.j0, p.Lk, kBwdKeys);
  cp_async_commit();

  float dK[D / 8][4], dV[D / 8][4];  // the warpgroup's 64 keys × D: this thread's keys key[0], key[1]
  Warpgroup::zero(dK, dV);
  float(&dKf)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dK[0][0]);  // as wgmma's accumulators
  float(&dVf)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dV[0][0]);

  // A step's Q_i, dO_i come by cp.async, and its lse and D_i through registers, while the step before
  // computes its dQ (its last product, which reads none of them): the first step's with K and V, here.
  const int64_t first_i0 = p.causal ? w.j0 : 0, h_begin = w.hk * (p.H / p.Hkv), h_end = h_begin + p.H / p.Hkv;
  auto copy_step = [&](int64_t h, int64_t i0) {
    const int64_t bh = b * p.H + h;
    copy_rows<T, D>(Qs, qh + bh * p.Lq * D, i0, p.Lq, R);
    copy_rows<T, D>(Gs, gh + bh * p.Lq * D, i0, p.Lq, R);
  };
  if (first_i0 < p.Lq) copy_step(h_begin, first_i0);
  cp_async_commit();
  if (first_i0 < p.Lq) rows::stage_rows<R>(rowL, rowD, p, lse, Dsum, (b * p.H + h_begin) * p.Lq, first_i0);

  w.for_each_step([&](int64_t h, int64_t i0, int64_t) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // the step's tiles, lse and D_i in place (K, V too, at the first)

    float s[R / 8][4], dp[R / 8][4];
    float(&sf)[R / 2] = *reinterpret_cast<float(*)[R / 2]>(&s[0][0]);
    float(&dpf)[R / 2] = *reinterpret_cast<float(*)[R / 2]>(&dp[0][0]);
    w.issue_keys_times_rows(sf, Ks, Qs);   // Sᵀ = K_w Q_iᵀ
    w.issue_keys_times_rows(dpf, Vs, Gs);  // dPᵀ = V_w dO_iᵀ, left running under P's exponentials and dV's product
    wgmma_wait<1>();                       // Sᵀ
    fence_registers(sf);
    rows::probabilities<General>(s, p, b, h, i0, w.key, rowL, w.t, w.plain(i0));  // P = e^(scale·S + M − lse)
    w.issue_values_gradient(dVf, s, h, i0, Gs);
    wgmma_wait<0>();  // dPᵀ and dV
    fence_registers(dpf);
    fence_registers(dVf);
    rows::score_gradients(dp, s, p.scale, rowD, w.t, [&](int n, int e) { return w.z(h, i0, n, e); });
    w.issue_keys_gradient(dKf, dp, Qs, dSs);
    wgmma_wait<0>();  // dK
    fence_registers(dKf);
    fence_proxy_async();  // dS' written by the generic proxy, read next by wgmma
    __syncthreads();      // both warpgroups' dS' in place, and the step's tiles read for the last time

    // the next step's tiles (cp.async) and lse, D_i (registers) on their way during dQ's product
    rows::RowStats next_stats;
    const rows::NextStep next =
        rows::prefetch_next_step<R>(p, lse, Dsum, b, h, i0, first_i0, h_end, copy_step, next_stats);
    float acc[Warpgroup::kDqDims / 8][4];
    w.issue_rows_gradient(acc, dSs, Ks);
    wgmma_wait<0>();
    fence_registers(*reinterpret_cast<float(*)[Warpgroup::kDqDims / 2]>(&acc[0][0]));
    rows::add_dq(p, dq, b, h, i0, w.dq_row0 + 16 * w.warp, w.dq_dim0, rowL, acc, w.g, w.t);
    __syncthreads();  // dQ's reads of dS' and of the step's lse done
    if (next.exists) rows::store_row_stats<R>(rowL, rowD, next_stats);
  });
  cp_async_wait<0>();  // a block with no step (causal, its first key past Lq): K, V's copies to be waited for
  rows::write_dk_dv(p, dk, dv, b, w.hk, w.key, dK, dV, w.t);
}

// ---- the warp-specialized backward (FlashAttention-3's producer and consumers) -------------------------
//
// QKV_CUDA_ATTENTION_BACKWARD=wgmma-ws. The backward kernel's products and element-wise steps, with the
// warp-specialized forward's division of labour: a block of three warpgroups, the first a producer —
// thread 0 issues TMA copies of K, V (once) and of every step's Q_i, dO_i into a ring of buffers; warp
// 1 loads the step's lse and D_i into shared memory — its registers given to the two consumer
// warpgroups of 64 keys each. A step's tiles in one ring (Stages buffers), released once read by dK:
//     Q_i, dO_i, lse, D_i      full: TMA's bytes and warp 1's 32 arrivals;  empty: every consumer thread
// Per consumer warpgroup and step i:
//     wait full[i];  issue Sᵀ, dPᵀ;  wait for Sᵀ;  P;  issue dV += Wᵀ dO_i;  wait;  dS';
//     issue dK += dS'ᵀ Q_i;  dS' → dS[i mod 2];  wait;  release the buffer;
//     [both warpgroups: dS' in place];  dQ_i = dS' K, waited for;  [the warpgroup: the step before's
//     reductions have read their rows];  dQ_i → shared memory (f32, the warpgroup's 64 × kDqDims);
//     [the warpgroup];  a bulk reduction a row adds it into dq (cp.reduce.async.bulk .add.f32: 64
//     instructions a warpgroup where f32 atomics took 64 · D/2 — FlashAttention-3's dQ, by rows
//     rather than through a tensor map, so any row stride on 16 bytes serves)
// (dQ_i left in flight into step i + 1, its adds under Sᵀ's product, made ptxas serialize every
// product of the loop: it cannot follow a group retired by wgmma.wait_group 1 across the loop's turn.)
// dS' in two buffers: a warpgroup writes dS[i mod 2] only after the barrier of step i − 1, which the
// other passes only after it has waited for dQ_{i−2}, the last reader of that buffer.
constexpr int kBwdWsThreads = 128 * (1 + kWarpgroups);
// The producer's two loops (thread 0's copies, warp 1's rows) spill in 24 registers a thread: 40, and
// the consumers 232, within the block's 384 × 168 (ptxas, sm_90a: at head dim 128 no spills but 36 bytes
// in the consumers of the mask/dropout code; 24 / 240 spilled 12–20 bytes in the producer; at 64 with
// steps of 128 rows 8 bytes, and 116 in the mask/dropout code — 24 / 240 there: 24 and 88)
constexpr int kBwdProducerRegisters = 40, kBwdConsumerRegisters = 232;
static_assert(128 * kBwdProducerRegisters + 256 * kBwdConsumerRegisters <= kBwdWsThreads * kWsLaunchRegisters);

// The ring of a step of R rows at head dim D: at 64 with steps of 128 rows, two buffers (197 KB of shared
// memory with dQ's staging; three would want 230); with steps of 64, four (149 KB); at 128, two (196 KB;
// three would want 228.6, past the 227 a block may have).
template <int D, int R>
struct WsBackwardShape {
  static constexpr int Stages = D == 64 && R == 64 ? 4 : 2;
  static constexpr int StageRow = R * D / 128 + 4;  // floats a staged row of dQ: 16-byte aligned, banks skewed
};
template <int D, int R>
constexpr size_t ws_backward_smem_bytes() {
  constexpr int S = WsBackwardShape<D, R>::Stages;
  // K, V; the ring's Q_i, dO_i; 2 dS', all T; dQ's staging (2 warpgroups × 64 rows); the ring's lse and
  // D_i; 1 + 2·S mbarriers; 1024 to align the base
  return 1024 + 2 * (2 * size_t{kBwdKeys} * D + 2 * S * size_t{R} * D + 2 * size_t{R} * kBwdKeys) +
         sizeof(float) * kWarpgroups * 64 * WsBackwardShape<D, R>::StageRow + S * 2 * sizeof(float) * R +
         8 * (1 + 2 * S);
}
static_assert(ws_backward_smem_bytes<64, 128>() <= 227 * 1024, "an H100's shared memory a block");
static_assert(ws_backward_smem_bytes<64, 64>() <= 227 * 1024, "an H100's shared memory a block");
static_assert(ws_backward_smem_bytes<128, 64>() <= 227 * 1024, "an H100's shared memory a block");

// The backward's TMA tensor maps over the pre-pass's dense copies: q, dO [B·H, Lq, D] (boxes of 64 dims
// by R rows), k, v [B·Hkv, Lk, D] (64 dims by 128 keys). Empty rows or keys (Lq or Lk 0) still get
// valid maps.
struct BackwardMaps {
  CUtensorMap q, g, k, v;
};
template <typename T, int D, int R>
void encode_backward_maps(BackwardMaps& m, const AttnProblem& p, const T* qh, const T* gh, const T* kh, const T* vh) {
  const uint64_t row = D * sizeof(T), Lq = p.Lq > 0 ? p.Lq : 1, Lk = p.Lk > 0 ? p.Lk : 1;
  const uint64_t BH = p.B * p.H, BHk = p.B * p.Hkv;
  encode_tensor_map<T>(m.q, {qh, {D, Lq, BH}, {row, row * Lq}, R});
  encode_tensor_map<T>(m.g, {gh, {D, Lq, BH}, {row, row * Lq}, R});
  encode_tensor_map<T>(m.k, {kh, {D, Lk, BHk}, {row, row * Lk}, kBwdKeys});
  encode_tensor_map<T>(m.v, {vh, {D, Lk, BHk}, {row, row * Lk}, kBwdKeys});
}

template <typename T, int D, int R, bool General>
__global__ void __launch_bounds__(kBwdWsThreads, 1)
    flash_wgmma_ws_backward_kernel(AttnProblem p, const __grid_constant__ BackwardMaps maps, const float* lse,
                                   const float* Dsum, float* dq, float* dk, float* dv) {
  using Warpgroup = BackwardWarpgroup<T, D, R, General>;
  constexpr int S = WsBackwardShape<D, R>::Stages, kStageRow = WsBackwardShape<D, R>::StageRow;
  constexpr int kRowTile = R * D * 2, kKeyTile = kBwdKeys * D * 2, kScores = R * kBwdKeys * 2;
  QKV_DYNAMIC_SHARED(1, smem);
  unsigned char* Ks = smem + ((1024 - smem_address(smem) % 1024) % 1024);  // [D/64][128][64]
  unsigned char* Vs = Ks + kKeyTile;                                        // [D/64][128][64]
  unsigned char* ring = Vs + kKeyTile;                                      // [S]: Q_i, dO_i [D/64][R][64]
  unsigned char* dSs = ring + S * 2 * kRowTile;                             // [2][2][R][64]  dS'
  float* dQs = reinterpret_cast<float*>(dSs + 2 * kScores);                 // [2 warpgroups][64][kStageRow]
  float* stats = dQs + kWarpgroups * 64 * kStageRow;                        // [S]: lse, D_i [R]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(stats + S * 2 * R);
  uint64_t *full = kv_full + 1, *empty = full + S;
  auto Q = [&](int a) { return ring + a * 2 * kRowTile; };
  auto G = [&](int a) { return ring + a * 2 * kRowTile + kRowTile; };
  auto rowL = [&](int a) { return stats + a * 2 * R; };
  auto rowD = [&](int a) { return stats + a * 2 * R + R; };
  if (threadIdx.x == 0) {
    mbarrier_init(kv_full, 1);
    for (int a = 0; a < S; ++a) mbarrier_init(&full[a], 1 + 32), mbarrier_init(&empty[a], 128 * kWarpgroups);
    mbarrier_init_fence();
  }
  __syncthreads();  // the last block-wide barrier: the producer's idle threads leave after it

  const Warpgroup w(p, 1);
  const int64_t bhk = blockIdx.y, b = w.b;
  if (threadIdx.x < 128) {  // the producer warpgroup
    registers_shrink<kBwdProducerRegisters>();
    if (threadIdx.x == 0) {  // the tiles, by TMA
      mbarrier_arrive_expect_tx(kv_full, 2 * kKeyTile);
      const int j0 = static_cast<int>(w.j0), kv = static_cast<int>(bhk);
      for (int c = 0; c < D / 64; ++c) {
        tma_load(Ks + c * kBwdKeys * 128, maps.k, 64 * c, j0, kv, kv_full);
        tma_load(Vs + c * kBwdKeys * 128, maps.v, 64 * c, j0, kv, kv_full);
      }
      w.for_each_step([&](int64_t h, int64_t i0, int64_t n) {
        const int a = static_cast<int>(n % S);
        const int i = static_cast<int>(i0), bh = static_cast<int>(b * p.H + h);
        mbarrier_wait(&empty[a], ring_use(n, S) ^ 1);
        mbarrier_arrive_expect_tx(&full[a], 2 * kRowTile);
        for (int d = 0; d < D / 64; ++d) {
          tma_load(Q(a) + d * R * 128, maps.q, 64 * d, i, bh, &full[a]);
          tma_load(G(a) + d * R * 128, maps.g, 64 * d, i, bh, &full[a]);
        }
      });
    } else if (threadIdx.x / 32 == 1) {  // the rows' lse and D_i (−∞ and 0 past Lq), a lane R/32 rows
      const int lane = threadIdx.x % 32;
      w.for_each_step([&](int64_t h, int64_t i0, int64_t n) {
        const int a = static_cast<int>(n % S);
        const int64_t stats_at = (b * p.H + h) * p.Lq;
        mbarrier_wait(&empty[a], ring_use(n, S) ^ 1);
        for (int r = lane; r < R; r += 32) {
          const int64_t i = i0 + r;
          rowL(a)[r] = i < p.Lq ? lse[stats_at + i] : -INFINITY;
          rowD(a)[r] = i < p.Lq ? Dsum[stats_at + i] : 0.f;
        }
        mbarrier_arrive(&full[a]);
      });
    }
    return;
  }

  registers_grow<kBwdConsumerRegisters>();
  float dK[D / 8][4], dV[D / 8][4];  // the warpgroup's 64 keys × D: this thread's keys key[0], key[1]
  Warpgroup::zero(dK, dV);
  float(&dKf)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dK[0][0]);  // as wgmma's accumulators
  float(&dVf)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dV[0][0]);
  mbarrier_wait(kv_full, 0);  // K, V (also in a block with no step: its copies land before it exits)

  w.for_each_step([&](int64_t h, int64_t i0, int64_t n) {
    const int a = static_cast<int>(n % S);
    float s[R / 8][4], dp[R / 8][4];
    float(&sf)[R / 2] = *reinterpret_cast<float(*)[R / 2]>(&s[0][0]);
    float(&dpf)[R / 2] = *reinterpret_cast<float(*)[R / 2]>(&dp[0][0]);
    mbarrier_wait(&full[a], ring_use(n, S));
    w.issue_keys_times_rows(sf, Ks, Q(a));  // Sᵀ = K_w Q_iᵀ
    w.issue_keys_times_rows(dpf, Vs, G(a));  // dPᵀ = V_w dO_iᵀ, under P's exponentials
    wgmma_wait<1>();                         // Sᵀ
    fence_registers(sf);
    rows::probabilities<General>(s, p, b, h, i0, w.key, rowL(a), w.t, w.plain(i0));  // P = e^(scale·S + M − lse)
    w.issue_values_gradient(dVf, s, h, i0, G(a));
    wgmma_wait<0>();  // dPᵀ and dV
    fence_registers(dpf);
    fence_registers(dVf);
    rows::score_gradients(dp, s, p.scale, rowD(a), w.t, [&](int nn, int e) { return w.z(h, i0, nn, e); });
    // the warpgroup's thread `me` < 64 adds row i0 + dq_row0 + me of dQ_i into dq: below Lq, seeing a key
    // (lse > −∞)
    const int me = threadIdx.x % 128, my_row = w.dq_row0 + me;
    const bool adds_row = me < 64 && i0 + my_row < p.Lq && rowL(a)[my_row] != -INFINITY;
    unsigned char* dS = dSs + (n % 2) * kScores;
    w.issue_keys_gradient(dKf, dp, Q(a), dS);
    wgmma_wait<0>();  // dK
    fence_registers(dKf);
    mbarrier_arrive(&empty[a]);  // Q_i, dO_i, lse, D_i read for the last time
    fence_proxy_async();         // dS' written by the generic proxy, read next by wgmma
    named_barrier_sync(1, 128 * kWarpgroups);  // both warpgroups' dS' in place
    float acc[Warpgroup::kDqDims / 8][4];
    w.issue_rows_gradient(acc, dS, Ks);
    wgmma_wait<0>();
    fence_registers(*reinterpret_cast<float(*)[Warpgroup::kDqDims / 2]>(&acc[0][0]));
    // the warpgroup's part of dQ_i into dq through shared memory: staged (this thread's rows 16·warp + g
    // (+ 8) of its 64, dims 8n + 2t (+ 1) of its kDqDims), then a bulk reduction a row
    float* stage = dQs + w.wg * 64 * kStageRow;
    if (me < 64) bulk_wait_read<0>();  // the step before's reductions have read their rows
    named_barrier_sync(2 + w.wg, 128);
#pragma unroll
    for (int nn = 0; nn < Warpgroup::kDqDims / 8; ++nn)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<float2*>(stage + (16 * w.warp + w.g + 8 * r) * kStageRow + 8 * nn + 2 * w.t) =
            make_float2(acc[nn][2 * r], acc[nn][2 * r + 1]);
    fence_proxy_async();  // the staged rows written by the generic proxy, read next by the bulk copies
    named_barrier_sync(2 + w.wg, 128);
    if (adds_row)
      bulk_reduce_add(dq + at(p.dq_l, b, h, i0 + my_row) + w.dq_dim0, stage + me * kStageRow, Warpgroup::kDqDims * 4);
    if (me < 64) bulk_commit();
  });
  if (threadIdx.x % 128 < 64) bulk_wait<0>();  // every row of dQ added before the block ends
  rows::write_dk_dv(p, dk, dv, b, w.hk, w.key, dK, dV, w.t);
}

}  // namespace
}  // namespace qkv::kernels::cuda
