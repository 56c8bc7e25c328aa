// What the register-resident attention pairs (attention_mma.cu on bf16/f16, attention_tf32.cu on f32,
// and the wgmma backward, sm90a/attention_wgmma_kernels.cuh) do to a warp's accumulator tiles between
// products — the same in all, as mma.sync's accumulators (m16n8, f32) have one layout whatever the
// operands' type, and wgmma's are that layout per 8 columns: element e of a lane (g = lane / 4, t =
// lane % 4) of n-tile n is row g + 8·(e / 2), column n·8 + 2t + e % 2. nvcc, or g++ under
// tests/kernels/cuda_emulation.h.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/attention_problem.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_tiles.cuh"

namespace qkv::kernels::cuda::rows {

// ---- forward ------------------------------------------------------------------------------------------

// A forward block's head and query rows: blockIdx.y = b·H + h (key/value head hk of its group); rows
// i0 … i0 + R − 1, the last row blocks first (under causality they walk the most keys, and finish last
// otherwise); and the key tiles of KN it walks (causal: up to its last row's diagonal).
struct ForwardBlock {
  int64_t b, h, hk, i0, tiles;
  __device__ ForwardBlock(const AttnProblem& p, int R, int KN) {
    const int64_t bh = blockIdx.y;
    b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hkv);
    i0 = int64_t{gridDim.x - 1 - blockIdx.x} * R;
    const int64_t last_row = (i0 + R < p.Lq ? i0 + R : p.Lq) - 1;
    const int64_t k_end = p.causal ? (last_row + 1 < p.Lk ? last_row + 1 : p.Lk) : p.Lk;
    tiles = (k_end + KN - 1) / KN;
  }
};

// ---- forward: a warp's 16 query rows (row[0] = its lane's row g, row[1] = g + 8) against NT·8 keys
// from j0 -------------------------------------------------------------------------------------------------

// Whether a tile of keys [j0, j0 + KN) is plain for rows from `first_row`: no mask and no soft cap (or
// no General code), no key past Lk, causality not cutting through the rows, and a positive scale — its
// scores then stay the products S, their scale folded into the softmax's exponent (online_softmax's f),
// rather than formed element by element (scale_and_mask).
template <bool General>
__device__ inline bool plain_tile(const AttnProblem& p, int64_t j0, int KN, int64_t first_row) {
  return (!General || (p.mask.kind == AttnMask::Kind::none && p.softcap == 0.f)) && j0 + KN <= p.Lk &&
         !(p.causal && j0 + KN - 1 > first_row) && p.scale > 0.f;
}
// The factor f of online_softmax for a tile: the scale where the tile is plain (s holds S), else 1 (s
// holds scale·S + M, scale_and_mask's)
__device__ inline float score_factor(const AttnProblem& p, bool plain) { return plain ? p.scale : 1.f; }

// s = c(scale·S) + M in place where `plain` is false (a mask or a soft cap c, keys past Lk, or causality
// cutting through the rows; without General only keys past Lk and the causal diagonal); a plain tile's s
// stays S. (The forward's; the backwards' P: probabilities.)
template <bool General, int NT>
__device__ inline void scale_and_mask(float (&s)[NT][4], const AttnProblem& p, int64_t b, int64_t h,
                                      const int64_t (&row)[2], int64_t j0, int t, bool plain) {
  if (plain) return;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t i = row[e / 2], jj = j0 + n * 8 + 2 * t + e % 2;
      if constexpr (General)
        s[n][e] = i < p.Lq ? masked_score(p, b, h, i, jj, soft_cap(p.softcap, p.scale * s[n][e])) : -INFINITY;
      else  // keys past Lk and the causal diagonal only
        s[n][e] = jj < p.Lk && !(p.causal && jj > i) ? p.scale * s[n][e] : -INFINITY;
    }
  }
}

// One step of the online softmax of rows g (r = 0) and g + 8 (r = 1), whose NT·8 values lie across a
// quad's 4 lanes, for scores x = f·s (f > 0: score_factor): m' = max(m, rowmax x), s ← P = e^(x − m'),
// l = l·e^(m − m') + rowsum P (this lane's part), O ·= e^(m − m'). (e^y as 2^(y·log2 e), y = f·s − m'
// formed first — one FFMA, rounded once —, so that scores near −FLT_MAX, HuggingFace's additive mask,
// stay finite; f·max s = max f·s for f > 0.)
template <int NT, int ND>
__device__ inline void online_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&o)[ND][4], float f) {
  float alpha[2], base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx = fmaxf(m[r], f * mx);
    base[r] = mx == -INFINITY ? 0.f : mx;  // a row that has seen no key yet: 2^(−∞ − 0) = 0
    alpha[r] = exp2f((m[r] - base[r]) * tiles::kLog2e);
    m[r] = mx;
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = exp2f(fmaf(s[n][e], f, -base[e / 2]) * tiles::kLog2e);
    l[0] += s[n][0] + s[n][1];
    l[1] += s[n][2] + s[n][3];
  }
#pragma unroll
  for (int dt = 0; dt < ND; ++dt) {
    o[dt][0] *= alpha[0], o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1], o[dt][3] *= alpha[1];
  }
}

// P ∘ Z/(1−p) in place (after l has summed P); a lane's two keys of a row, j and j + 1, drawn together
template <int NT>
__device__ inline void drop(float (&s)[NT][4], const AttnProblem& p, int64_t b, int64_t h, const int64_t (&row)[2],
                            int64_t j0, int t) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float k0, k1;
      keep_pair(p, b, h, row[r], j0 + n * 8 + 2 * t, k0, k1);
      s[n][2 * r] *= k0, s[n][2 * r + 1] *= k1;
    }
}

// out = O / l and lse = m + ln l for the lane's rows below Lq (l summed over the quad first; a row that
// saw no key: 0 and −∞, as the CPU)
template <int ND>
__device__ inline void write_rows(const AttnProblem& p, float* out, float* lse, int64_t b, int64_t h,
                                  const int64_t (&row)[2], const float (&m)[2], const float (&l)[2],
                                  const float (&o)[ND][4], int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];  // the quad's four parts of the row sum
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (row[r] >= p.Lq) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    float* orow = out + at(p.out_l, b, h, row[r]);
#pragma unroll
    for (int dt = 0; dt < ND; ++dt) {
      orow[dt * 8 + 2 * t] = o[dt][2 * r] * inv;
      orow[dt * 8 + 2 * t + 1] = o[dt][2 * r + 1] * inv;
    }
    if (lse && t == 0) lse[(b * p.H + h) * p.Lq + row[r]] = sum > 0.f ? m[r] + logf(sum) : -INFINITY;
  }
}

// ---- backward: a warp's 16 keys (key[0] = its lane's key g, key[1] = g + 8) against the NR rows of a
// step from i0 (column n·8 + 2t + e % 2 of an accumulator tile is row i0 + that) -------------------------

// Row i0 + threadIdx.x's lse and D_i, read by threads 0 … NR − 1: −∞ and 0 past Lq (lse is −∞ also
// for a row that sees no key). Loaded into registers, stored later: a kernel can load the next step's
// while it computes this one's.
struct RowStats {
  float L = 0.f, D = 0.f;
};
template <int NR>
__device__ inline RowStats load_row_stats(const AttnProblem& p, const float* lse, const float* Dsum, int64_t stats,
                                          int64_t i0) {
  RowStats r;
  if (threadIdx.x < NR) {
    const int64_t i = i0 + threadIdx.x;
    r.L = i < p.Lq ? lse[stats + i] : -INFINITY;
    r.D = i < p.Lq ? Dsum[stats + i] : 0.f;
  }
  return r;
}
template <int NR>
__device__ inline void store_row_stats(float* rowL, float* rowD, RowStats r) {
  if (threadIdx.x < NR) rowL[threadIdx.x] = r.L, rowD[threadIdx.x] = r.D;
}

// The step's lse and D_i into shared memory (threads 0 … NR − 1, the caller syncs)
template <int NR>
__device__ inline void stage_rows(float* rowL, float* rowD, const AttnProblem& p, const float* lse,
                                  const float* Dsum, int64_t stats, int64_t i0) {
  store_row_stats<NR>(rowL, rowD, load_row_stats<NR>(p, lse, Dsum, stats, i0));
}

// Whether a backward step — keys j0 … j0 + keys − 1 against rows i0 … i0 + rows − 1 — needs no
// element-wise masking: no mask and no soft cap (or no General code), every key before Lk and row before
// Lq, causality not cutting through the keys
template <bool General>
__device__ inline bool plain_step(const AttnProblem& p, int64_t j0, int keys, int64_t i0, int rows) {
  return (!General || (p.mask.kind == AttnMask::Kind::none && p.softcap == 0.f)) && j0 + keys <= p.Lk &&
         i0 + rows <= p.Lq && !(p.causal && j0 + keys - 1 > i0);
}

// A backward's soft cap (its Capped kernels, launched for p.softcap > 0 alone, with General): P comes from
// c(scale·S), and dS' takes the cap's slope c′ = 1 − (c/cap)², which `probabilities` leaves for each
// element through slope(n, e) (a float& in shared memory, or in registers in wgmma's head-dim-256
// backward), as the tiles keep no S to take it from later.
// Uncapped kernels pass NoSlope and compile none of the cap's code, the General ones' registers kept
// (ptxas, sm_90: the cap's code in the General kernels spilled up to 148 bytes more at head dim 128).
struct NoSlope {
  __device__ float& operator()(int, int) const;
};
template <bool Capped, typename F>
__device__ inline auto slope_if(F&& slope) {
  if constexpr (Capped)
    return slope;
  else
    return NoSlope{};
}
template <typename Slope>
constexpr bool kTakesCap = !std::is_same_v<std::decay_t<Slope>, NoSlope>;

// Sᵀ → P = e^(c(scale·S) + M − lse) in place (c the soft cap where `slope` takes one, else x ↦ x), rowL
// = the step's lse (−∞ past Lq, or a row that sees no key); element-wise masking only where `plain` is
// false. e^y as 2^(y·log2 e), as the forward's softmax (expf's range reduction cost several
// instructions an element more), y = scale·S − lse one FFMA on a plain step (its lse finite: every row
// before Lq sees a key), y = x − lse formed first elsewhere (a score near −FLT_MAX stays finite;
// masked, −∞ − lse = −∞ and 2^−∞ = 0). Capped, slope(n, e) ← c′(c).
template <bool General, int NT, typename Slope = NoSlope>
__device__ inline void probabilities(float (&s)[NT][4], const AttnProblem& p, int64_t b, int64_t h, int64_t i0,
                                     const int64_t (&key)[2], const float* rowL, int t, bool plain,
                                     Slope&& slope = {}) {
  static_assert(General || !kTakesCap<Slope>, "a soft cap is General code");
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = n * 8 + 2 * t + e % 2;
      const float L = rowL[r];
      float y;  // c(scale·S) + M − lse: −∞ (P = 0) where masked, and in a row that sees no key
      if (plain)
        y = fmaf(p.scale, s[n][e], -L);
      else if (L == -INFINITY)
        y = -INFINITY;
      else if constexpr (General) {
        float x = p.scale * s[n][e];
        if constexpr (kTakesCap<Slope>) {
          x = soft_cap(p.softcap, x);
          slope(n, e) = soft_cap_slope(p.softcap, x);
        }
        y = masked_score(p, b, h, i0 + r, key[e / 2], x) - L;
      } else  // keys past Lk and the causal diagonal only
        y = key[e / 2] < p.Lk && !(p.causal && key[e / 2] > i0 + r) ? p.scale * s[n][e] - L : -INFINITY;
      s[n][e] = exp2f(y * tiles::kLog2e);
    }
  }
}

// dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i) ∘ c′ in dP's place, 0 where P is (rowD = the step's D_i; z(n, e)
// = Z/(1−p) of element (n, e), 1 without dropout; c′ = slope(n, e) where it takes a cap, else 1). (The
// slope read here, not folded into P once dV's product is done: that spilled 236 bytes rather than 60 —
// ptxas, sm_90, mma.sync's capped backward at head dim 128.)
template <int NT, typename Keep, typename Slope = NoSlope>
__device__ inline void score_gradients(float (&dp)[NT][4], const float (&s)[NT][4], float scale, const float* rowD,
                                       int t, Keep&& z, Slope&& slope = {}) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float P = s[n][e];
      if constexpr (kTakesCap<Slope>)
        dp[n][e] = P == 0.f ? 0.f : scale * P * (dp[n][e] * z(n, e) - rowD[n * 8 + 2 * t + e % 2]) * slope(n, e);
      else
        dp[n][e] = P == 0.f ? 0.f : scale * P * (dp[n][e] * z(n, e) - rowD[n * 8 + 2 * t + e % 2]);
    }
}

// The step after rows i0 … of query head h, for a backward block walking heads [.., h_end) in steps of
// R rows from first_i0: the next rows of h, or h + 1's first; `exists` false after the last.
struct NextStep {
  int64_t h, i0;
  bool exists;
};
__device__ inline NextStep next_step(int64_t h, int64_t i0, int R, int64_t Lq, int64_t first_i0, int64_t h_end) {
  const bool last_row_step = i0 + R >= Lq;
  NextStep n{last_row_step ? h + 1 : h, last_row_step ? first_i0 : i0 + R, false};
  n.exists = n.h < h_end;
  return n;
}

// The step after rows i0 … of query head h, started while this one finishes its dQ: its tiles by
// `copy(h, i0)` (the caller's cp.async, committed here) and its rows' lse and D_i into `stats`
// (registers, for store_row_stats once the step's own are read for the last time)
template <int NR, typename Copy>
__device__ inline NextStep prefetch_next_step(const AttnProblem& p, const float* lse, const float* Dsum, int64_t b,
                                              int64_t h, int64_t i0, int64_t first_i0, int64_t h_end, Copy&& copy,
                                              RowStats& stats) {
  const NextStep next = next_step(h, i0, NR, p.Lq, first_i0, h_end);
  if (next.exists) {
    copy(next.h, next.i0);
    tiles::cp_async_commit();
    stats = load_row_stats<NR>(p, lse, Dsum, (b * p.H + next.h) * p.Lq, next.i0);
  }
  return next;
}

// dq rows of the step += a warp's 16 × NT·8 block of dQ (acc: NT n-tiles; rows rw + g, rw + g + 8 of
// the step, dims c0 …), by f32 atomics; rows past Lq, or not `sees` (a row that sees no key), are left alone
template <int NT>
__device__ inline void add_dq_rows(const AttnProblem& p, float* dq, int64_t b, int64_t h, int64_t i0, int rw, int c0,
                                   const bool (&sees)[2], const float (&acc)[NT][4], int g, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = rw + g + 8 * r;
    if (i0 + row >= p.Lq || !sees[r]) continue;
    float* dst = dq + at(p.dq_l, b, h, i0 + row) + c0 + 2 * t;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      atomicAdd(dst + n * 8, acc[n][2 * r]);
      atomicAdd(dst + n * 8 + 1, acc[n][2 * r + 1]);
    }
  }
}
// the same, a row seeing a key where its lse (rowL, the step's) is finite
template <int NT>
__device__ inline void add_dq(const AttnProblem& p, float* dq, int64_t b, int64_t h, int64_t i0, int rw, int c0,
                              const float* rowL, const float (&acc)[NT][4], int g, int t) {
  const bool sees[2] = {rowL[rw + g] != -INFINITY, rowL[rw + g + 8] != -INFINITY};
  add_dq_rows(p, dq, b, h, i0, rw, c0, sees, acc, g, t);
}

// dK, dV of the lane's two keys below Lk: dims n·8 + 2t, n·8 + 2t + 1
template <int ND>
__device__ inline void write_dk_dv(const AttnProblem& p, float* dk, float* dv, int64_t b, int64_t hk,
                                   const int64_t (&key)[2], const float (&dK)[ND][4], const float (&dV)[ND][4], int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= p.Lk) continue;
    float* k_row = dk + at(p.dk_l, b, hk, key[r]) + 2 * t;
    float* v_row = dv + at(p.dv_l, b, hk, key[r]) + 2 * t;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      k_row[n * 8] = dK[n][2 * r], k_row[n * 8 + 1] = dK[n][2 * r + 1];
      v_row[n * 8] = dV[n][2 * r], v_row[n * 8 + 1] = dV[n][2 * r + 1];
    }
  }
}

}  // namespace qkv::kernels::cuda::rows
