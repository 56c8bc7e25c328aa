// bf16 / f16 flash attention forward and backward on the tensor cores with every product's
// accumulators in registers — the kernels (attention_mma.cu launches them;
// tests/kernels/attention_mma_emulation_test.cpp runs them on the host through
// tests/kernels/cuda_emulation.h): FlashAttention-2's kernels, written on mma.sync m16n8k16 (sm_80 and
// later) with PTX's documented fragment layouts, where the WMMA pair (attention_bf16.cu) round-trips
// S, P and O through shared memory because WMMA's fragments are opaque. Same formulas and semantics
// as the WMMA pair and the f32 flash pair (attention.cu): q, k, v rounded to T (bf16 or f16), products
// on the tensor cores with f32 sums, the online softmax in f32, P (and dS) rounded to T for the
// products they feed.
//
// Pre-pass: q [B, H, Lq, D], k, v [B, Hkv, Lk, D] (any strides) → dense T copies, so that the kernel
// reads half the bytes from L2 (every block of a head rereads all of k and v) and copies whole 16-byte
// pieces with cp.async.
//
// Forward block: 4 warps and MT m16 tiles of query rows per warp — MT = 1 at head dim 64 (64 rows a
// block, Q_w's fragments held in registers), MT = 2 at 128 (128 rows a block: each K and V fragment
// read from shared memory feeds both tiles; keys in tiles of 32 there, where 64 would spill) —
// keys in tiles of KN (64, or 32), double-buffered in shared memory (tile j+1 copied by cp.async
// while tile j is computed). Per warp and key tile, in registers:
//     S = Q_w K_jᵀ                  (16·MT × KN: m16n8 accumulators)
//     s = scale·S + M               (masks, causality, keys past Lk → −∞; only on tiles that need it)
//     m' = max(m, rowmax s),  P = e^(s − m'),  l = l·e^(m − m') + rowsum P,  O ·= e^(m − m')
//     O += (P ∘ Z/(1−p)) V_j        (P's accumulators are P's A fragments: no shuffle, no memory)
// end: out = O / l,  lse = m + ln l.  (e^x as 2^(x·log2 e) — ex2 is one instruction — with x = s − m'
// formed first, so that scores near −FLT_MAX, HuggingFace's additive mask, stay finite.)
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4): A (16 × 16, row-major) reg
// 0..3 = (row g, cols 2t, 2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B (16 × 8) reg 0, 1 = (k 2t,
// 2t+1; col g), (k 2t+8, 2t+9; col g); C (16 × 8, f32) = (g; 2t, 2t+1), (g+8; 2t, 2t+1). ldmatrix.x4 hands
// lane l the (l/4, 2(l%4)) pair of each of four 8 × 8 matrices whose row addresses lanes 8i…8i+7 give.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {
// The pair's own names (kThreads, kKeys, forward_smem_bytes…), apart from the wgmma pair's: attention_mma.cu
// calls that pair first, and a test compiles both launcher files in one (attention_mma_emulation_test.cpp)
namespace mma_pair {

using namespace tiles;

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // query rows per block
constexpr int kKeys = 64;           // keys per tile
constexpr int kThreads = 32 * kWarps;

// (mma<T>, ldmatrix_x4 and ldmatrix_x4_trans: attention_tiles.cuh's, shared with the paged decoding kernel)

// ---- the forward kernel -------------------------------------------------------------------------------

// Shared-memory row stride (elements): D + 8 puts the 8 rows an ldmatrix reads 16 bytes apart in
// banks, so that no two of them collide.
template <int D>
constexpr int kStride = D + 8;

// Rows [r0, r0 + n) of a dense [L, D] operand → shared memory [n][kStride<D>], by cp.async (the
// caller commits and waits); rows past L are zeros (a key past Lk must hold a finite value: P is 0
// there, and 0 · NaN is not).
template <typename T, int D>
__device__ inline void copy_tile(T* dst, const T* src, int64_t r0, int64_t L, int n) {
  constexpr int pieces = D / 8;  // 16-byte pieces a row
  for (int e = threadIdx.x; e < n * pieces; e += kThreads) {
    const int r = e / pieces, c = e % pieces * 8;
    const bool ok = r0 + r < L;
    cp_async16(dst + r * kStride<D> + c, ok ? src + (r0 + r) * D + c : src, ok);
  }
}

// Query rows of a forward block: 16 per m16 tile, MT tiles a warp (MT = 2: each K and V fragment read
// from shared memory feeds two products, half the shared-memory traffic per product of MT = 1)
template <int MT>
constexpr int kFwdRows = 16 * MT * kWarps;

template <int D, int MT, int KN>
constexpr size_t forward_smem_bytes() {
  return 2 * size_t{kStride<D>} * (kFwdRows<MT> + 4 * KN);  // Q tile, K and V tiles twice, in T
}

template <typename T, int D, int MT, int KN, bool General>
__global__ void __launch_bounds__(kThreads)
    flash_mma_forward_kernel(AttnProblem p, const T* qh, const T* kh, const T* vh, float* out, float* lse) {
  constexpr int S = kStride<D>, R = kFwdRows<MT>;
  QKV_DYNAMIC_SHARED(128, smem);
  T* Qs = reinterpret_cast<T*>(smem);  // [R][S]
  T* Ks = Qs + R * S;                  // [2][KN][S]
  T* Vs = Ks + 2 * KN * S;             // [2][KN][S]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const rows::ForwardBlock blk(p, R, KN);
  const int64_t b = blk.b, h = blk.h, hk = blk.hk, i0 = blk.i0, tiles = blk.tiles;
  const T* q = qh + (b * p.H + h) * p.Lq * D;        // dense [B, H, Lq, D]
  const T* k = kh + (b * p.Hkv + hk) * p.Lk * D;     // dense [B, Hkv, Lk, D]
  const T* v = vh + (b * p.Hkv + hk) * p.Lk * D;

  copy_tile<T, D>(Qs, q, i0, p.Lq, R);
  if (tiles > 0) copy_tile<T, D>(Ks, k, 0, p.Lk, KN), copy_tile<T, D>(Vs, v, 0, p.Lk, KN);
  cp_async_commit();

  const int qw = warp * 16 * MT;                     // the warp's first row in the block
  const int64_t iw = i0 + qw, iw_last = iw + 16 * MT - 1;
  int64_t row[MT][2];                                // this lane's rows: g and g + 8 of each m-tile
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) row[mt][0] = iw + 16 * mt + g, row[mt][1] = iw + 16 * mt + g + 8;
  uint32_t qf[MT == 1 ? D / 16 : 1][4];             // MT = 1: Q_w's A fragments, held across the tiles
  float o[MT][D / 8][4];                             // O_w: 16·MT × D
  float m[MT][2], l[MT][2];                          // l: this lane's part of each row sum
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
  }
  // A fragment of Q rows qw + 16·mt …, dims 16·kk …
  auto q_fragment = [&](uint32_t(&a)[4], int mt, int kk) {
    ldmatrix_x4(a, Qs + (qw + 16 * mt + lane % 8 + (lane / 8 % 2) * 8) * S + kk * 16 + (lane / 16) * 8);
  };

  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t j0 = j * KN;
    const T* Kt = Ks + (j % 2) * KN * S;
    const T* Vt = Vs + (j % 2) * KN * S;
    if (j + 1 < tiles) {  // the next tile into the other buffer (read last in step j − 1: synced below)
      copy_tile<T, D>(Ks + ((j + 1) % 2) * KN * S, k, j0 + KN, p.Lk, KN);
      copy_tile<T, D>(Vs + ((j + 1) % 2) * KN * S, v, j0 + KN, p.Lk, KN);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (MT == 1) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) q_fragment(qf[kk], 0, kk);
      }
    }

    // a warp whose rows are past Lq, or (causal) all before the tile's first key, has nothing here
    if (iw < p.Lq && !(p.causal && j0 > iw_last)) {
      // S = Q_w K_jᵀ: n-tiles of 8 keys in pairs (one ldmatrix.x4 = B fragments of 16 keys × 16 dims),
      // each pair of fragments into the MT m-tiles' products
      float s[MT][KN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < KN / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          if constexpr (MT == 1) {
#pragma unroll
            for (int e = 0; e < 4; ++e) qa[mt][e] = qf[kk][e];
          } else {
            q_fragment(qa[mt], mt, kk);
          }
        }
#pragma unroll
        for (int np = 0; np < KN / 16; ++np) {
          uint32_t kb[4];
          ldmatrix_x4(kb, Kt + (np * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + (lane / 8 % 2) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma<T>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
            mma<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
          }
        }
      }

      // s = scale·S + M: element-wise masking only on tiles that need it (a mask, keys past Lk, or
      // causality cutting through the warp's rows); a plain tile's scale in the softmax's exponent
      const bool plain = rows::plain_tile<General>(p, j0, KN, iw);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) rows::scale_and_mask<General>(s[mt], p, b, h, row[mt], j0, t, plain);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        rows::online_softmax(s[mt], m[mt], l[mt], o[mt], rows::score_factor(p, plain));  // l sums P before dropout
        if (General && p.dropout_p > 0.f) rows::drop(s[mt], p, b, h, row[mt], j0, t);
      }

      // O += P V_j: P's accumulators for keys 16kk…16kk+15 are the A fragment (rounded to T); V's B
      // fragments by transposed ldmatrix, 16 keys × 16 dims at a time, into the MT m-tiles' products
#pragma unroll
      for (int kk = 0; kk < KN / 16; ++kk) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t vb[4];
          ldmatrix_x4_trans(vb, Vt + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S + dp * 16 + (lane / 16) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma<T>(o[mt][2 * dp], pa[mt], vb[0], vb[1]);
            mma<T>(o[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before step j + 1 copies tile j + 2 into it
  }
  cp_async_wait<0>();  // no key tile (Lk = 0): Q's copy is still to be waited for before the block ends

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) rows::write_rows(p, out, lse, b, h, row[mt], m[mt], l[mt], o[mt], t);
}

// ---- the backward kernel ------------------------------------------------------------------------------

// Backward (FlashAttention-2's, with D_i = rowsum(dO_i ∘ O_i) from a first pass and dq zeroed): a block
// of 4 warps owns 64 keys of one key/value head (16 per warp: dK, dV of the warp's keys stay in
// registers) and walks the query rows of every query head of its group in steps of 64 (causal: from
// its own first key on). Per step, Q_i and dO_i in shared memory (the next step's copied in while
// this one computes dQ); per warp, with the warp's keys as the rows of every product (so that Pᵀ and
// dSᵀ are the A fragments of the next one as they stand):
//     Sᵀ = K_w Q_iᵀ,  P = e^(c(scale·S) + M − lse_i),  W = P ∘ Z/(1−p)     (16 keys × 64 rows, f32)
//     dV_w += Wᵀ dO_i
//     dPᵀ = V_w dO_iᵀ,  dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i) ∘ c′        (c: a soft cap, or x ↦ x)
//     dK_w += dS'ᵀ Q_i
// then dS' through shared memory ([key][row], T) for dQ_i += dS' K_j (each warp 16 of the rows, 64 dims
// at a time), added into dq with f32 atomics (the order of the key blocks sets dq's last bits, as in
// FlashAttention-2 and PyTorch's flash backward; dk and dv are deterministic).
constexpr int kStrideS = kRows + 8;  // dS' rows ([key][row]) in shared memory, padded as the tiles

// c = X_w Yᵀ for one warp: X_w = rows x0 … x0+15 of X, Y = rows 0 … kRows−1, both [row][kStride<D>] in
// shared memory, the sum over D (A fragments of X_w, B fragments of Y's rows, 16 rows × 16 dims an
// ldmatrix.x4). c [kRows / 8][4]: m16n8 accumulators, element (n, e) at row x0 + g (+8 for e ≥ 2) and
// column n·8 + 2t + e % 2.
template <typename T, int D>
__device__ inline void rows_times_rows_t(float (&c)[kRows / 8][4], const T* X, int x0, const T* Y) {
  constexpr int S = kStride<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < kRows / 8; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, X + (x0 + lane % 8 + (lane / 8 % 2) * 8) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int np = 0; np < kRows / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, Y + (np * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + (lane / 8 % 2) * 8);
      mma<T>(c[2 * np], a, b[0], b[1]);
      mma<T>(c[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// K, V, Q, dO tiles, dS', lse and D of the step's rows; under a soft cap the slopes of its kKeys × kRows
// scores too (f32: 16 KB more, two blocks an SM still on Hopper)
template <int D>
constexpr size_t backward_smem_bytes(bool capped = false) {
  return 2 * size_t{kStride<D>} * (2 * kKeys + 2 * kRows) + 2 * size_t{kKeys} * kStrideS +
         sizeof(float) * (2 * kRows + (capped ? size_t{kKeys} * kRows : 0));
}

template <typename T, int D, bool General, bool Capped = false>  // (Capped: General's, with a soft cap)
__global__ void __launch_bounds__(kThreads)
    flash_mma_backward_kernel(AttnProblem p, const T* qh, const T* kh, const T* vh, const T* gh, const float* lse,
                              const float* Dsum, float* dq, float* dk, float* dv) {
  constexpr int S = kStride<D>;
  QKV_DYNAMIC_SHARED(128, smem);
  T* Ks = reinterpret_cast<T*>(smem);  // [kKeys][S]
  T* Vs = Ks + kKeys * S;              // [kKeys][S]
  T* Qs = Vs + kKeys * S;              // [kRows][S]
  T* Gs = Qs + kRows * S;              // [kRows][S]  dO
  T* dSt = Gs + kRows * S;             // [kKeys][kStrideS]  dS'ᵀ
  float* rowL = reinterpret_cast<float*>(dSt + kKeys * kStrideS);  // [kRows] lse
  float* rowD = rowL + kRows;                                      // [kRows] D
  float* slopes = rowD + kRows;  // [kKeys · kRows] a soft cap's slopes, a thread's own (no bank conflict)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kw = warp * 16;  // the warp's first key in the block
  const int64_t bhk = blockIdx.y, b = bhk / p.Hkv, hk = bhk % p.Hkv, group = p.H / p.Hkv;
  const int64_t j0 = int64_t{blockIdx.x} * kKeys;
  const int64_t key[2] = {j0 + kw + g, j0 + kw + g + 8};  // this lane's two keys
  copy_tile<T, D>(Ks, kh + bhk * p.Lk * D, j0, p.Lk, kKeys);  // dense [B, Hkv, Lk, D]
  copy_tile<T, D>(Vs, vh + bhk * p.Lk * D, j0, p.Lk, kKeys);
  // The steps: every query head h of the group, its rows from first_i0 in steps of kRows (causal: rows
  // i < j0 see none of these keys). A step's Q_i and dO_i come by cp.async and its lse and D_i through
  // registers while the step before computes its dQ (the step's last products, which read neither Q
  // nor dO): the first step's with K and V, here.
  const int64_t first_i0 = p.causal ? j0 : 0, h_begin = hk * group, h_end = (hk + 1) * group;
  auto copy_step = [&](int64_t h, int64_t i0) {  // dense [B, H, Lq, D]
    copy_tile<T, D>(Qs, qh + (b * p.H + h) * p.Lq * D, i0, p.Lq, kRows);
    copy_tile<T, D>(Gs, gh + (b * p.H + h) * p.Lq * D, i0, p.Lq, kRows);
  };
  if (first_i0 < p.Lq) copy_step(h_begin, first_i0);
  cp_async_commit();
  if (first_i0 < p.Lq) rows::stage_rows<kRows>(rowL, rowD, p, lse, Dsum, (b * p.H + h_begin) * p.Lq, first_i0);

  float dK[D / 8][4], dV[D / 8][4];  // the warp's 16 keys × D
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dK[n][e] = dV[n][e] = 0.f;

  for (int64_t h = h_begin; h < h_end; ++h) {
    for (int64_t i0 = first_i0; i0 < p.Lq; i0 += kRows) {
      cp_async_wait<0>();
      __syncthreads();  // the step's Q, dO, lse and D in place (K and V too, at the first)

      // Sᵀ = K_w Q_iᵀ: s[n][e] is key key[e / 2], row n·8 + 2t + e % 2 of the step
      float s[kRows / 8][4];
      rows_times_rows_t<T, D>(s, Ks, kw, Qs);

      // P = e^(c(scale·S) + M − lse): element-wise masking only where the step needs it
      const bool plain = rows::plain_step<General>(p, j0, kKeys, i0, kRows);
      auto slope = rows::slope_if<Capped>(
          [&](int n, int e) -> float& { return slopes[((warp * (kRows / 8) + n) * 4 + e) * 32 + lane]; });
      rows::probabilities<General>(s, p, b, h, i0, key, rowL, t, plain, slope);
      const bool dropout = General && p.dropout_p > 0.f;
      // Z/(1−p) of element (n, e); 1 without dropout. Drawn again for dS' rather than kept beside P
      // (32 more registers in a kernel at 255): a hash, not a memory read.
      auto z = [&](int n, int e) {
        return dropout ? keep(p, b, h, i0 + n * 8 + 2 * t + e % 2, key[e / 2]) : 1.f;
      };

      // dV_w += Wᵀ dO_i: W's accumulators for rows 16kk…16kk+15 are the A fragment; dO's B fragments by
      // transposed ldmatrix
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk) {
        const int n0 = 2 * kk, n1 = 2 * kk + 1;
        const uint32_t wa[4] = {pack2<T>(s[n0][0] * z(n0, 0), s[n0][1] * z(n0, 1)),
                                pack2<T>(s[n0][2] * z(n0, 2), s[n0][3] * z(n0, 3)),
                                pack2<T>(s[n1][0] * z(n1, 0), s[n1][1] * z(n1, 1)),
                                pack2<T>(s[n1][2] * z(n1, 2), s[n1][3] * z(n1, 3))};
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t gb[4];
          ldmatrix_x4_trans(gb, Gs + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S + dp * 16 + (lane / 16) * 8);
          mma<T>(dV[2 * dp], wa, gb[0], gb[1]);
          mma<T>(dV[2 * dp + 1], wa, gb[2], gb[3]);
        }
      }

      // dPᵀ = V_w dO_iᵀ, then dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i) ∘ c′ in its place
      float ds[kRows / 8][4];
      rows_times_rows_t<T, D>(ds, Vs, kw, Gs);
      rows::score_gradients(ds, s, p.scale, rowD, t, z, slope);

      // dK_w += dS'ᵀ Q_i (as dV), and dS'ᵀ → shared memory for dQ (two rows' values a 32-bit store)
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk) {
        const int n0 = 2 * kk, n1 = 2 * kk + 1;
        const uint32_t da[4] = {pack2<T>(ds[n0][0], ds[n0][1]), pack2<T>(ds[n0][2], ds[n0][3]),
                                pack2<T>(ds[n1][0], ds[n1][1]), pack2<T>(ds[n1][2], ds[n1][3])};
        *reinterpret_cast<uint32_t*>(dSt + (kw + g) * kStrideS + n0 * 8 + 2 * t) = da[0];
        *reinterpret_cast<uint32_t*>(dSt + (kw + g + 8) * kStrideS + n0 * 8 + 2 * t) = da[1];
        *reinterpret_cast<uint32_t*>(dSt + (kw + g) * kStrideS + n1 * 8 + 2 * t) = da[2];
        *reinterpret_cast<uint32_t*>(dSt + (kw + g + 8) * kStrideS + n1 * 8 + 2 * t) = da[3];
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t qb[4];
          ldmatrix_x4_trans(qb, Qs + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S + dp * 16 + (lane / 16) * 8);
          mma<T>(dK[2 * dp], da, qb[0], qb[1]);
          mma<T>(dK[2 * dp + 1], da, qb[2], qb[3]);
        }
      }
      __syncthreads();  // every warp's dS' columns are in place, and Q_i and dO_i read for the last time

      // the next step's Q, dO (cp.async) and lse, D (registers) on their way during dQ's products
      rows::RowStats next_stats;
      const rows::NextStep next =
          rows::prefetch_next_step<kRows>(p, lse, Dsum, b, h, i0, first_i0, h_end, copy_step, next_stats);

      // dQ_i += dS' K_j for rows 16·warp…16·warp+15 of the step, 64 dims at a time: A = dS' (row-major
      // from dS'ᵀ by transposed ldmatrix), B = K (transposed ldmatrix, as V in the forward)
      const int rw = warp * 16;
#pragma unroll
      for (int c0 = 0; c0 < D; c0 += 64) {
        float acc[8][4];
#pragma unroll
        for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
          uint32_t a[4];
          ldmatrix_x4_trans(a, dSt + (kk * 16 + lane % 8 + (lane / 16) * 8) * kStrideS + rw + (lane / 8 % 2) * 8);
#pragma unroll
          for (int dp = 0; dp < 4; ++dp) {
            uint32_t kb[4];
            ldmatrix_x4_trans(kb, Ks + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S + c0 + dp * 16 + (lane / 16) * 8);
            mma<T>(acc[2 * dp], a, kb[0], kb[1]);
            mma<T>(acc[2 * dp + 1], a, kb[2], kb[3]);
          }
        }
        rows::add_dq(p, dq, b, h, i0, rw, c0, rowL, acc, g, t);
      }
      __syncthreads();  // dQ's readers of dS' and of the step's lse are done
      if (next.exists) rows::store_row_stats<kRows>(rowL, rowD, next_stats);
    }
  }

  cp_async_wait<0>();  // a block with no step (causal, its first key past Lq): K, V's copies to be waited for

  rows::write_dk_dv(p, dk, dv, b, hk, key, dK, dV, t);
}

}  // namespace mma_pair
}  // namespace
}  // namespace qkv::kernels::cuda
