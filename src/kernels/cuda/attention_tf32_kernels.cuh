// f32 flash attention forward and backward on the tensor cores at f32's accuracy — the kernels
// (attention_tf32.cu launches them; tests/kernels/attention_tf32_emulation_test.cpp runs them on the
// host through tests/kernels/cuda_emulation.h): attention_mma.cu's
// pair (FlashAttention-2's kernels, every product's accumulators in registers) on mma.sync m16n8k8
// .tf32 (sm_80 and later), each product as three TF32 products of the operands' halves ("3xTF32",
// kernels/cuda/mma_tf32.h) — where attention.cu's f32 pair computes on the CUDA cores, one lane a key
// or a dim. PyTorch's f32 SDPA on sm_80 and later is the same arithmetic (CUTLASS's memory-efficient
// kernel, OpMultiplyAddFastF32). Same formulas, masks, dropout and layouts as the f32 flash pair
// (kernels/attention.inc); the results differ from it in the last bits only (the sums' order, and
// the split's 2^-22). Head dims 64 and 128 (D = Dv), operands whose rows start on 16 bytes.
//
// No pre-pass: q, k, v and dO are read in place ([B, H, L, D] at any strides whose rows are 16-byte
// aligned) by cp.async into shared memory, in f32 — 16·D bytes a row: twice bf16's tiles for the
// same rows, so the forward's key tiles are 32 keys at head dim 128.
//
// Forward block: 4 warps, 16 query rows each (64 a block), keys in tiles of KN double-buffered in
// shared memory. Per warp and key tile, in registers:
//     S = Q_w K_jᵀ                   (16 × KN: m16n8 accumulators; A = Q_w's rows, B = K_j's rows)
//     s = c(scale·S) + M, online softmax (m, l), O ·= e^(m − m')   — as attention_mma.cu (c: a soft cap)
//     O += (P ∘ Z/(1−p)) V_j         (P's accumulators are the A fragment, V_j's rows read in kperm order)
// Backward block: 64 keys of one key/value head (16 a warp, dK and dV in registers), walking the
// query rows of every query head of its group in steps of 64 (attention_mma.cu's, in f32; 32 at head
// dim 128, kStepRows):
//     Sᵀ = K_w Q_iᵀ,  P = e^(c(scale·S) + M − lse_i),  W = P ∘ Z/(1−p)
//     dV_w += Wᵀ dO_i,  dPᵀ = V_w dO_iᵀ,  dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i) ∘ c′,  dK_w += dS'ᵀ Q_i
//     dS'ᵀ → shared memory;  dQ_i += dS' K_j  (f32 atomics into a zeroed dq)
// (c′ = 1 − (c/cap)², the cap's slope, waits in dS'ᵀ's shared memory from P until dS')
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_rows.cuh"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma_tf32.h"

namespace qkv::kernels::cuda {
namespace {
// The pair's own names (kThreads, kKeys, forward_smem_bytes…), apart from the other pairs' (a test compiles
// them in one file: attention_mma_emulation_test.cpp)
namespace tf32_pair {

using tiles::cp_async16;
using tiles::cp_async_commit;
using tiles::cp_async_wait;
using tf32::accumulators_as_a;
using tf32::load_a;
using tf32::load_b;
using tf32::split;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // query rows a forward block
constexpr int kKeys = 64;           // keys a backward block
template <int D>
constexpr int kStride = tf32::row_stride(D);  // floats a row of a tile in shared memory

// c += a·b on the tensor cores: a 16 × 8, b 8 × 8 (TF32 in f32 registers), c 16 × 8 (f32)
__device__ inline void mma(float (&c)[4], const float (&a)[4], const float (&b)[2]) {
#ifdef QKV_CUDA_EMULATION  // on the host: the warp's fragments through the PTX ISA's tables
  ::qkv::emulation::mma_m16n8k8_tf32(c, a, b);
#else
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
#endif
}

// An f32 operand fragment as its two TF32 halves (mma_tf32.h)
template <int N>
struct Halves {
  float big[N], small[N];
  Halves() = default;
  __device__ explicit Halves(const float (&x)[N]) { split(x, big, small); }
};

// c += a·b at f32's accuracy: small·big' + big·small' + big·big', the small terms first
__device__ inline void mma3(float (&c)[4], const Halves<4>& a, const Halves<2>& b) {
  mma(c, a.small, b.big);
  mma(c, a.big, b.small);
  mma(c, a.big, b.big);
}

// Rows [r0, r0 + n) of one head's [L, D] operand (row i at src + i·sl) → shared memory [n][kStride<D>]
// by cp.async (the caller commits and waits); rows past L are zeros (a key past Lk must hold a
// finite value: P is 0 there, and 0 · NaN is not).
template <int D>
__device__ inline void copy_rows(float* dst, const float* src, int64_t sl, int64_t r0, int64_t L, int n) {
  constexpr int pieces = D / 4;  // 16-byte pieces a row
  for (int e = threadIdx.x; e < n * pieces; e += kThreads) {
    const int r = e / pieces, c = e % pieces * 4;
    const bool ok = r0 + r < L;
    cp_async16(dst + r * kStride<D> + c, ok ? src + (r0 + r) * sl + c : src, ok);
  }
}

// ---- the forward kernel -------------------------------------------------------------------------------

template <int D, int KN>
constexpr size_t forward_smem_bytes() {  // the Q tile, K and V tiles twice
  return sizeof(float) * kStride<D> * (kRows + 4 * KN);
}

template <int D, int KN, bool General>
__global__ void __launch_bounds__(kThreads) flash_tf32_forward_kernel(AttnProblem p, float* out, float* lse) {
  constexpr int S = kStride<D>;
  QKV_DYNAMIC_SHARED(128, smem);
  float* Qs = reinterpret_cast<float*>(smem);  // [kRows][S]
  float* Ks = Qs + kRows * S;                   // [2][KN][S]
  float* Vs = Ks + 2 * KN * S;                  // [2][KN][S]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const rows::ForwardBlock blk(p, kRows, KN);
  const int64_t b = blk.b, h = blk.h, hk = blk.hk, i0 = blk.i0, tiles = blk.tiles;
  const float* q = p.q + b * p.q_sb + h * p.q_sh;  // row i at q + i·q_sl
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;

  copy_rows<D>(Qs, q, p.q_sl, i0, p.Lq, kRows);
  if (tiles > 0) copy_rows<D>(Ks, k, p.k_sl, 0, p.Lk, KN), copy_rows<D>(Vs, v, p.v_sl, 0, p.Lk, KN);
  cp_async_commit();

  const int qw = warp * 16;  // the warp's first row in the block
  const int64_t iw = i0 + qw, iw_last = iw + 15;
  const int64_t row[2] = {iw + g, iw + g + 8};  // this lane's rows
  // head dim 64: Q_w's A fragments held across the key tiles, split (64 registers: 136 → 200 a
  // thread, where shared memory already limits a multiprocessor to 2 blocks); 128: read each tile
  constexpr bool kHoldQ = D == 64;
  Halves<4> qheld[kHoldQ ? D / 8 : 1];
  float o[D / 8][4];                             // O_w: 16 × D
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // l: this lane's part of each row sum
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;

  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t j0 = j * KN;
    const float* Kt = Ks + (j % 2) * KN * S;
    const float* Vt = Vs + (j % 2) * KN * S;
    if (j + 1 < tiles) {  // the next tile into the other buffer (read last in step j − 1: synced below)
      copy_rows<D>(Ks + ((j + 1) % 2) * KN * S, k, p.k_sl, j0 + KN, p.Lk, KN);
      copy_rows<D>(Vs + ((j + 1) % 2) * KN * S, v, p.v_sl, j0 + KN, p.Lk, KN);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kHoldQ) {
      if (j == 0) {
#pragma unroll
        for (int kk = 0; kk < D / 8; ++kk) {
          float qa[4];
          load_a<false>(qa, Qs + qw * S + kk * 8, S, 1, lane);
          qheld[kk] = Halves<4>(qa);
        }
      }
    }

    // a warp whose rows are past Lq, or (causal) all before the tile's first key, has nothing here
    if (iw < p.Lq && !(p.causal && j0 > iw_last)) {
      // S = Q_w K_jᵀ: 8 dims a step; Q_w's A fragment split once for the KN / 8 key tiles
      float s[KN / 8][4];
#pragma unroll
      for (int n = 0; n < KN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 8; ++kk) {
        Halves<4> qh;
        if constexpr (kHoldQ) {
          qh = qheld[kk];
        } else {
          float qa[4];
          load_a<false>(qa, Qs + qw * S + kk * 8, S, 1, lane);
          qh = Halves<4>(qa);
        }
#pragma unroll
        for (int n = 0; n < KN / 8; ++n) {
          float kb[2];
          load_b<false>(kb, Kt + n * 8 * S + kk * 8, 1, S, lane);
          mma3(s[n], qh, Halves<2>(kb));
        }
      }

      // s = scale·S + M: element-wise masking only on tiles that need it (a mask, keys past Lk, or
      // causality cutting through the warp's rows); a plain tile's scale in the softmax's exponent
      const bool plain = rows::plain_tile<General>(p, j0, KN, iw);
      rows::scale_and_mask<General>(s, p, b, h, row, j0, t, plain);
      rows::online_softmax(s, m, l, o, rows::score_factor(p, plain));  // l sums P before dropout
      if (General && p.dropout_p > 0.f) rows::drop(s, p, b, h, row, j0, t);

      // O += P V_j: each tile of 8 keys' accumulators is the A fragment (keys in kperm order), V_j's
      // rows of those keys read in the same order
#pragma unroll
      for (int n = 0; n < KN / 8; ++n) {
        float pa[4];
        accumulators_as_a(pa, s[n]);
        const Halves<4> ph(pa);
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          float vb[2];
          load_b<true>(vb, Vt + n * 8 * S + dt * 8, S, 1, lane);
          mma3(o[dt], ph, Halves<2>(vb));
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before step j + 1 copies tile j + 2 into it
  }
  cp_async_wait<0>();  // no key tile (Lk = 0): Q's copy is still to be waited for before the block ends

  rows::write_rows(p, out, lse, b, h, row, m, l, o, t);
}

// ---- the backward kernel ------------------------------------------------------------------------------

// Query rows a backward step at head dim D: 64 at 64, 32 at 128 — where 64 rows took 153 KB of shared
// memory a block and so one block (4 warps) an SM, whose every wait was exposed (the H200 of
// 2026-12-04: 12 TFLOP/s at d 128 against 22 at d 64 and PyTorch's 36); at 32 a block takes 108 KB,
// and an SM two. QKV_CUDA_ATTENTION_TF32_ROWS=32 or 64 picks the step at either head dim, to compare
// (attention_tf32.cu): at head dim 64 steps of 32 rows hold an SM to three blocks' registers (170 a
// thread, where 64 rows take 217) and shared memory (62 KB a block), 12 warps where 64 rows run 8.
template <int D>
constexpr int kStepRows = D == 128 ? 32 : 64;

// c = X_w Yᵀ for one warp: X_w = rows x0 … x0+15 of X, Y = rows 0 … NR−1, both [row][kStride<D>] in
// shared memory, the sum over D. c [NR / 8][4]: m16n8 accumulators, element (n, e) at row x0 + g
// (+8 for e ≥ 2) and column n·8 + 2t + e % 2.
template <int D, int NR>
__device__ inline void rows_times_rows_t(float (&c)[NR / 8][4], const float* X, int x0, const float* Y) {
  constexpr int S = kStride<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < NR / 8; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 8; ++kk) {
    float a[4];
    load_a<false>(a, X + x0 * S + kk * 8, S, 1, lane);
    const Halves<4> ah(a);
#pragma unroll
    for (int n = 0; n < NR / 8; ++n) {
      float y[2];
      load_b<false>(y, Y + n * 8 * S + kk * 8, 1, S, lane);
      mma3(c[n], ah, Halves<2>(y));
    }
  }
}

// acc_w += Cᵀ Y for one warp: C = the warp's accumulators of a product whose rows are its 16 keys and
// whose columns are the step's NR query rows (c[n]: rows n·8 …), Y = those query rows [row][kStride<D>]
// in shared memory (dO or Q) — each 8-row tile of C is an A fragment as it stands, Y's rows read in
// kperm order.
template <int D, int NR>
__device__ inline void keys_times_rows(float (&acc)[D / 8][4], const float (&c)[NR / 8][4], const float* Y) {
  constexpr int S = kStride<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < NR / 8; ++n) {
    float a[4];
    accumulators_as_a(a, c[n]);
    const Halves<4> ah(a);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      float y[2];
      load_b<true>(y, Y + n * 8 * S + dt * 8, S, 1, lane);
      mma3(acc[dt], ah, Halves<2>(y));
    }
  }
}

// Blocks an SM the backward's registers are bounded for: three at head dim 64 in steps of 32 rows (its
// shared memory allows them), otherwise as many as its registers give (one or two)
template <int D, int R>
constexpr int kBackwardBlocksPerSm = D == 64 && R == 32 ? 3 : 1;

template <int D, int R = kStepRows<D>>
constexpr size_t backward_smem_bytes() {  // K, V, Q, dO tiles, dS'ᵀ, lse and D of the step's rows
  return sizeof(float) * (size_t{kStride<D>} * (2 * kKeys + 2 * R) + size_t{kKeys} * tf32::ds_stride(R) + 2 * R);
}

// Backward block: 64 keys (16 a warp), steps of R query rows. dQ_i [R, D] of a step is split among the
// warps: R / 16 tiles of 16 rows, each tile's D dims among 4 / (R / 16) warps (at R = 64 a warp's 16 rows
// × every dim; at 32, 16 rows × D/2), added 64 dims at a time (or all of a warp's, if fewer).
template <int D, int R, bool General, bool Capped = false>  // (Capped: General's, with a soft cap)
__global__ void __launch_bounds__(kThreads, kBackwardBlocksPerSm<D, R>)
    flash_tf32_backward_kernel(AttnProblem p, const float* lse, const float* Dsum, const float* dout, float* dq,
                               float* dk, float* dv) {
  static_assert(R == 32 || R == 64, "a backward step is 32 or 64 query rows");
  constexpr int S = kStride<D>, SS = tf32::ds_stride(R);
  constexpr int kRowTiles = R / 16, kDqDims = D * kRowTiles / kWarps;  // a warp's part of dQ_i: 16 × kDqDims
  constexpr int kChunk = kDqDims < 64 ? kDqDims : 64;
  QKV_DYNAMIC_SHARED(128, smem);
  float* Ks = reinterpret_cast<float*>(smem);  // [kKeys][S]
  float* Vs = Ks + kKeys * S;                   // [kKeys][S]
  float* Qs = Vs + kKeys * S;                   // [R][S]
  float* Gs = Qs + R * S;                       // [R][S]  dO
  float* dSt = Gs + R * S;                      // [kKeys][SS]  dS'ᵀ
  float* rowL = dSt + kKeys * SS;               // [R] lse
  float* rowD = rowL + R;                       // [R] D

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kw = warp * 16;  // the warp's first key in the block
  const int64_t bhk = blockIdx.y, b = bhk / p.Hkv, hk = bhk % p.Hkv, group = p.H / p.Hkv;
  const int64_t j0 = int64_t{blockIdx.x} * kKeys;
  const int64_t key[2] = {j0 + kw + g, j0 + kw + g + 8};  // this lane's two keys
  copy_rows<D>(Ks, p.k + b * p.k_sb + hk * p.k_sh, p.k_sl, j0, p.Lk, kKeys);
  copy_rows<D>(Vs, p.v + b * p.v_sb + hk * p.v_sh, p.v_sl, j0, p.Lk, kKeys);
  cp_async_commit();

  float dK[D / 8][4], dV[D / 8][4];  // the warp's 16 keys × D
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dK[n][e] = dV[n][e] = 0.f;

  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* q = p.q + b * p.q_sb + h * p.q_sh;
    const float* gq = dout + b * p.dout_l.sb + h * p.dout_l.sh;
    const int64_t stats = (b * p.H + h) * p.Lq;
    for (int64_t i0 = p.causal ? j0 : 0; i0 < p.Lq; i0 += R) {  // causal: rows i < j0 see none of these keys
      __syncthreads();  // the last step's readers of Q, dO, dS'ᵀ, lse and D are done
      copy_rows<D>(Qs, q, p.q_sl, i0, p.Lq, R);
      copy_rows<D>(Gs, gq, p.dout_l.sl, i0, p.Lq, R);
      cp_async_commit();
      rows::stage_rows<R>(rowL, rowD, p, lse, Dsum, stats, i0);
      cp_async_wait<0>();
      __syncthreads();

      // Sᵀ = K_w Q_iᵀ: s[n][e] is key key[e / 2], row n·8 + 2t + e % 2 of the step
      float s[R / 8][4];
      rows_times_rows_t<D, R>(s, Ks, kw, Qs);

      // P = e^(c(scale·S) + M − lse): element-wise masking only where the step needs it
      const bool plain = rows::plain_step<General>(p, j0, kKeys, i0, R);
      // (a soft cap's slope c′ of element (n, e) waits in the place its dS' takes in dS'ᵀ, free until then)
      auto slope = rows::slope_if<Capped>(
          [&](int n, int e) -> float& { return dSt[(kw + tf32::c_row(lane, e)) * SS + n * 8 + tf32::c_col(lane, e)]; });
      rows::probabilities<General>(s, p, b, h, i0, key, rowL, t, plain, slope);
      const bool dropout = General && p.dropout_p > 0.f;
      // Z/(1−p) of element (n, e); 1 without dropout (drawn again for dS': a hash, not a memory read)
      auto z = [&](int n, int e) {
        return dropout ? keep(p, b, h, i0 + n * 8 + 2 * t + e % 2, key[e / 2]) : 1.f;
      };

      // dV_w += Wᵀ dO_i
      if (dropout) {
        float w[R / 8][4];
#pragma unroll
        for (int n = 0; n < R / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) w[n][e] = s[n][e] * z(n, e);
        keys_times_rows<D, R>(dV, w, Gs);
      } else {
        keys_times_rows<D, R>(dV, s, Gs);
      }

      // dPᵀ = V_w dO_iᵀ, then dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i) ∘ c′ in its place
      float ds[R / 8][4];
      rows_times_rows_t<D, R>(ds, Vs, kw, Gs);
      rows::score_gradients(ds, s, p.scale, rowD, t, z, slope);

      // dK_w += dS'ᵀ Q_i (as dV), and dS'ᵀ → shared memory for dQ
      keys_times_rows<D, R>(dK, ds, Qs);
#pragma unroll
      for (int n = 0; n < R / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dSt[(kw + tf32::c_row(lane, e)) * SS + n * 8 + tf32::c_col(lane, e)] = ds[n][e];
      __syncthreads();  // every warp's dS'ᵀ rows are in place

      // dQ_i += dS' K_j for the warp's rows rw … rw + 15 of the step and its dims, 64 at a time: A = dS' read
      // from dS'ᵀ with its keys in kperm order, B = K_j's rows in the same order
      const int rw = warp % kRowTiles * 16, dim0 = warp / kRowTiles * kDqDims;
#pragma unroll
      for (int c0 = dim0; c0 < dim0 + kDqDims; c0 += kChunk) {
        float acc[kChunk / 8][4];
#pragma unroll
        for (int n = 0; n < kChunk / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kKeys / 8; ++kk) {
          float a[4];
          load_a<true>(a, dSt + kk * 8 * SS + rw, 1, SS, lane);
          const Halves<4> ah(a);
#pragma unroll
          for (int dt = 0; dt < kChunk / 8; ++dt) {
            float kb[2];
            load_b<true>(kb, Ks + kk * 8 * S + c0 + dt * 8, S, 1, lane);
            mma3(acc[dt], ah, Halves<2>(kb));
          }
        }
        rows::add_dq(p, dq, b, h, i0, rw, c0, rowL, acc, g, t);
      }
    }
  }

  cp_async_wait<0>();  // a block with no step (causal, its first key past Lq): K, V's copies to be waited for

  rows::write_dk_dv(p, dk, dv, b, hk, key, dK, dV, t);
}

}  // namespace tf32_pair
}  // namespace
}  // namespace qkv::kernels::cuda
