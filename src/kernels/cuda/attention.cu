// Scaled dot-product attention on the GPU (the problem: kernels/attention_problem.h; the formulas:
// kernels/cpu/attention_kernels.h and attention_flash.cpp), f32 in and out, f32 arithmetic on the CUDA
// cores: the correctness baseline of the CUDA backend, which the tensor-core kernels are to be
// measured and tested against (docs/CUDA.md).
//
// One warp per row. Forward, flash: a warp owns query row (b, h, i); its lanes score 32 keys at a
// time (q in shared memory), fold them into the running max m and sum l (online softmax), and
// accumulate O = Σ_j w_j V_j with each lane holding the output dims lane, lane + 32, … (Dv ≤ 256).
//   O = α·O + (P ∘ Z/(1−p)) V_j;  end: O /= l,  lse = m + log l   (l = 0: no visible key → O = 0, lse = −∞)
// with scores S_ij = c(scale · q_i·k_j) + M_ij, c the soft cap where p.softcap > 0 (attention_device.cuh).
// Backward, flash (FlashAttention-2's, split into two passes so that no output row is written by
// two warps and nothing needs atomics): with D_i = rowsum(dO_i ∘ O_i), P = e^(S − lse):
//   dQ pass (a warp per query row):  dS_ij = P_ij (Z_ij/(1−p) · dO_i·V_j − D_i) c'_ij,  dQ_i = scale Σ_j dS_ij K_j
//   dK/dV pass (a warp per key row of a key/value head, over its group's query heads):
//                                    dV_j = Σ_i P_ij Z_ij/(1−p) dO_i,  dK_j = scale Σ_i dS_ij Q_i
// (c'_ij: the soft cap's slope at the score, 1 without a cap.)
// A few query rows against many keys (decoding against a long KV cache) split the keys instead, a
// warp per (row, chunk of 256 keys), and combine the chunks' softmax statistics after (flash-decoding)
// — unless, with no lse asked (no gradient) and the cache's rows dense, the paged decoding kernel takes
// the step (paged_attention.cu's attention_decode_tiled: the cache as pages of one sequence each, its
// keys in tiles through shared memory, several in flight).
// The forward pair also serves bf16 and f16 attention where no tensor-core kernel does (decoding
// steps, head dims off the tiles): it rounds q, k and v to the 16-bit type as it loads them (Round),
// the numbers rounded copies would hold, without the copies.
// The reference kernels materialize P (and W, dS) as the CPU's do, for the attention weights and a
// float mask's gradient.
#include <cfloat>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/operand_rounding.cuh"  // operand<Round>

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kWarps = 4;            // warps (rows) per block
constexpr int kMaxDim = 256;         // D and Dv at most this
constexpr int kChunks = kMaxDim / 32;
constexpr unsigned kFull = 0xffffffffu;

template <int Round = 0>
__device__ inline float dot_shared(const float* s, const float* g, int64_t n) {
  float acc = 0.f;
  for (int64_t d = 0; d < n; ++d) acc += s[d] * operand<Round>(g[d]);
  return acc;
}

// The warp's row: (b, h, i) of `rows` = B·heads·L, or false past the end.
struct RowOf {
  int64_t b, h, i;
};
__device__ inline bool warp_row(int64_t heads, int64_t L, int64_t rows, RowOf* r) {
  const int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  if (row >= rows) return false;
  r->i = row % L;
  r->h = row / L % heads;
  r->b = row / (L * heads);
  return true;
}

// ---- flash forward ----------------------------------------------------------------------------------

// The online softmax of query row (b, h, i) over keys [j_begin, j_end), by one warp: its running max
// m, sum l and unnormalized output o (lane's dims lane, lane + 32, …). qs: the query row in shared memory
// (rounded already where Round asks); K and V rounded as they are read.
template <int Round>
__device__ inline void flash_row(const AttnProblem& p, int64_t b, int64_t h, int64_t i, int64_t j_begin,
                                 int64_t j_end, const float* qs, float& m, float& l, float (&o)[kChunks]) {
  const int lane = threadIdx.x % 32;
  const int64_t hk = h / (p.H / p.Hkv);
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;
  m = -INFINITY, l = 0.f;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) o[t] = 0.f;
  for (int64_t j0 = j_begin; j0 < j_end; j0 += 32) {
    const int64_t j = j0 + lane;
    float s = -INFINITY;
    if (j < j_end)
      s = masked_score(p, b, h, i, j, soft_cap(p.softcap, p.scale * dot_shared<Round>(qs, k + j * p.k_sl, p.D)));
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) continue;  // nothing visible yet (the whole warp agrees)
    const float alpha = m == -INFINITY ? 0.f : expf(m - m_new);
    const float pj = s == -INFINITY ? 0.f : expf(s - m_new);
    l = l * alpha + warp_sum(pj);
    const float w = j < j_end ? pj * keep(p, b, h, i, j) : 0.f;
#pragma unroll
    for (int t = 0; t < kChunks; ++t) o[t] *= alpha;
    const int n = j_end - j0 < 32 ? static_cast<int>(j_end - j0) : 32;
    for (int c = 0; c < n; ++c) {
      const float wc = __shfl_sync(kFull, w, c);
      if (wc == 0.f) continue;
      const float* vr = v + (j0 + c) * p.v_sl;
#pragma unroll
      for (int t = 0; t < kChunks; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < p.Dv) o[t] += wc * operand<Round>(vr[d]);
      }
    }
    m = m_new;
  }
}

__device__ inline int64_t visible_end(const AttnProblem& p, int64_t i) {
  return p.causal ? (i + 1 < p.Lk ? i + 1 : p.Lk) : p.Lk;
}

template <int Round>
__global__ void __launch_bounds__(kWarps * 32) flash_forward_kernel(AttnProblem p, float* out, float* lse) {
  QKV_SHARED float qs[kWarps][kMaxDim];
  RowOf r;
  if (!warp_row(p.H, p.Lq, p.B * p.H * p.Lq, &r)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = r.b, h = r.h, i = r.i;
  const float* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_sl;
  for (int64_t d = lane; d < p.D; d += 32) qs[warp][d] = operand<Round>(q[d]);
  __syncwarp();
  float m, l, o[kChunks];
  flash_row<Round>(p, b, h, i, 0, visible_end(p, i), qs[warp], m, l, o);
  float* orow = out + at(p.out_l, b, h, i);
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.Dv) orow[d] = o[t] * inv;
  }
  if (lse && lane == 0) lse[(b * p.H + h) * p.Lq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

// ---- split-KV decoding (flash-decoding) -------------------------------------------------------------
//
// A few query rows against a long KV cache would leave all but a few warps idle, each walking every
// key: the keys are split in `splits` chunks, one warp per (row, chunk) computes its chunk's
// (m_s, l_s, o_s), and a second pass combines them:
//   M = max_s m_s,  l = Σ_s l_s e^(m_s − M),  O = Σ_s o_s e^(m_s − M) / l,  lse = M + log l.

template <int Round>
__global__ void __launch_bounds__(kWarps * 32) split_kv_partial_kernel(AttnProblem p, int64_t splits, int64_t chunk,
                                                                       float* part_m, float* part_l, float* part_o) {
  QKV_SHARED float qs[kWarps][kMaxDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = blockIdx.x * int64_t{kWarps} + warp, rows = p.B * p.H * p.Lq;
  if (item >= rows * splits) return;
  const int64_t row = item / splits, split = item % splits;
  const int64_t i = row % p.Lq, h = row / p.Lq % p.H, b = row / (p.Lq * p.H);
  const float* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_sl;
  for (int64_t d = lane; d < p.D; d += 32) qs[warp][d] = operand<Round>(q[d]);
  __syncwarp();
  const int64_t end = visible_end(p, i), j_begin = split * chunk, j_end = j_begin + chunk < end ? j_begin + chunk : end;
  float m, l, o[kChunks];
  flash_row<Round>(p, b, h, i, j_begin, j_end, qs[warp], m, l, o);  // an empty range: m = −∞, l = 0
  if (lane == 0) part_m[item] = m, part_l[item] = l;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.Dv) part_o[item * p.Dv + d] = o[t];
  }
}

__global__ void __launch_bounds__(kWarps * 32) split_kv_combine_kernel(AttnProblem p, int64_t splits,
                                                                       const float* part_m, const float* part_l,
                                                                       const float* part_o, float* out, float* lse) {
  RowOf r;
  if (!warp_row(p.H, p.Lq, p.B * p.H * p.Lq, &r)) return;
  const int lane = threadIdx.x % 32;
  const int64_t row = (r.b * p.H + r.h) * p.Lq + r.i;
  float M = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) M = fmaxf(M, part_m[row * splits + s]);
  float l = 0.f, o[kChunks];
#pragma unroll
  for (int t = 0; t < kChunks; ++t) o[t] = 0.f;
  if (M != -INFINITY) {
    for (int64_t s = 0; s < splits; ++s) {
      const float ms = part_m[row * splits + s];
      if (ms == -INFINITY) continue;
      const float f = expf(ms - M);
      l += part_l[row * splits + s] * f;
      const float* os = part_o + (row * splits + s) * p.Dv;
#pragma unroll
      for (int t = 0; t < kChunks; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < p.Dv) o[t] += os[d] * f;
      }
    }
  }
  float* orow = out + at(p.out_l, r.b, r.h, r.i);
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.Dv) orow[d] = o[t] * inv;
  }
  if (lse && lane == 0) lse[row] = l > 0.f ? M + logf(l) : -INFINITY;
}

// ---- flash backward ----------------------------------------------------------------------------------

// Dsum[b, h, i] = dO_i · O_i
__global__ void __launch_bounds__(kWarps * 32) row_dot_kernel(AttnProblem p, const float* out, const float* dout,
                                                              float* Dsum) {
  RowOf r;
  if (!warp_row(p.H, p.Lq, p.B * p.H * p.Lq, &r)) return;
  const int lane = threadIdx.x % 32;
  const float* o = out + at(p.out_l, r.b, r.h, r.i);
  const float* g = dout + at(p.dout_l, r.b, r.h, r.i);
  float acc = 0.f;
  for (int64_t d = lane; d < p.Dv; d += 32) acc += o[d] * g[d];
  acc = warp_sum(acc);
  if (lane == 0) Dsum[(r.b * p.H + r.h) * p.Lq + r.i] = acc;
}

__global__ void __launch_bounds__(kWarps * 32) flash_dq_kernel(AttnProblem p, const float* lse, const float* Dsum,
                                                               const float* dout, float* dq) {
  QKV_SHARED float qs[kWarps][kMaxDim], gs[kWarps][kMaxDim];
  RowOf r;
  if (!warp_row(p.H, p.Lq, p.B * p.H * p.Lq, &r)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = r.b, h = r.h, i = r.i, hk = h / (p.H / p.Hkv);
  const float* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_sl;
  const float* g = dout + at(p.dout_l, b, h, i);
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;
  for (int64_t d = lane; d < p.D; d += 32) qs[warp][d] = q[d];
  for (int64_t d = lane; d < p.Dv; d += 32) gs[warp][d] = g[d];
  __syncwarp();
  const float L = lse[(b * p.H + h) * p.Lq + i], Di = Dsum[(b * p.H + h) * p.Lq + i];
  float acc[kChunks];
#pragma unroll
  for (int t = 0; t < kChunks; ++t) acc[t] = 0.f;
  const int64_t j_end = L == -INFINITY ? 0 : p.causal ? (i + 1 < p.Lk ? i + 1 : p.Lk) : p.Lk;
  for (int64_t j0 = 0; j0 < j_end; j0 += 32) {
    const int64_t j = j0 + lane;
    float ds = 0.f;
    if (j < j_end) {
      const float c = soft_cap(p.softcap, p.scale * dot_shared(qs[warp], k + j * p.k_sl, p.D));
      const float s = masked_score(p, b, h, i, j, c);
      if (s != -INFINITY) {
        const float pj = expf(s - L);
        const float dp = dot_shared(gs[warp], v + j * p.v_sl, p.Dv) * keep(p, b, h, i, j);
        ds = pj * (dp - Di) * soft_cap_slope(p.softcap, c);
      }
    }
    const int n = j_end - j0 < 32 ? static_cast<int>(j_end - j0) : 32;
    for (int c = 0; c < n; ++c) {
      const float dsc = __shfl_sync(kFull, ds, c);
      if (dsc == 0.f) continue;
      const float* kr = k + (j0 + c) * p.k_sl;
#pragma unroll
      for (int t = 0; t < kChunks; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < p.D) acc[t] += dsc * kr[d];
      }
    }
  }
  float* row = dq + at(p.dq_l, b, h, i);
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.D) row[d] = p.scale * acc[t];
  }
}

__global__ void __launch_bounds__(kWarps * 32) flash_dkv_kernel(AttnProblem p, const float* lse, const float* Dsum,
                                                                const float* dout, float* dk, float* dv) {
  QKV_SHARED float ks[kWarps][kMaxDim], vs[kWarps][kMaxDim];
  RowOf r;  // (b, hk, j)
  if (!warp_row(p.Hkv, p.Lk, p.B * p.Hkv * p.Lk, &r)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = r.b, hk = r.h, j = r.i, group = p.H / p.Hkv;
  const float* kr = p.k + b * p.k_sb + hk * p.k_sh + j * p.k_sl;
  const float* vr = p.v + b * p.v_sb + hk * p.v_sh + j * p.v_sl;
  for (int64_t d = lane; d < p.D; d += 32) ks[warp][d] = kr[d];
  for (int64_t d = lane; d < p.Dv; d += 32) vs[warp][d] = vr[d];
  __syncwarp();
  float ak[kChunks], av[kChunks];
#pragma unroll
  for (int t = 0; t < kChunks; ++t) ak[t] = av[t] = 0.f;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* q = p.q + b * p.q_sb + h * p.q_sh;
    const float* L = lse + (b * p.H + h) * p.Lq;
    const float* Dh = Dsum + (b * p.H + h) * p.Lq;
    for (int64_t i0 = p.causal ? j : 0; i0 < p.Lq; i0 += 32) {  // causal: only queries i ≥ j see key j
      const int64_t i = i0 + lane;
      float w = 0.f, ds = 0.f;
      if (i < p.Lq && L[i] != -INFINITY) {
        const float c = soft_cap(p.softcap, p.scale * dot_shared(ks[warp], q + i * p.q_sl, p.D));
        const float s = masked_score(p, b, h, i, j, c);
        if (s != -INFINITY) {
          const float pj = expf(s - L[i]), z = keep(p, b, h, i, j);
          w = pj * z;
          ds = pj * (dot_shared(vs[warp], dout + at(p.dout_l, b, h, i), p.Dv) * z - Dh[i]) *
               soft_cap_slope(p.softcap, c);
        }
      }
      const int n = p.Lq - i0 < 32 ? static_cast<int>(p.Lq - i0) : 32;
      for (int c = 0; c < n; ++c) {
        const float wc = __shfl_sync(kFull, w, c), dsc = __shfl_sync(kFull, ds, c);
        if (wc == 0.f && dsc == 0.f) continue;
        const float* gr = dout + at(p.dout_l, b, h, i0 + c);
        const float* qr = q + (i0 + c) * p.q_sl;
#pragma unroll
        for (int t = 0; t < kChunks; ++t) {
          const int64_t d = lane + 32 * t;
          if (d < p.Dv) av[t] += wc * gr[d];
          if (d < p.D) ak[t] += dsc * qr[d];
        }
      }
    }
  }
  float* dkr = dk + at(p.dk_l, b, hk, j);
  float* dvr = dv + at(p.dv_l, b, hk, j);
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.D) dkr[d] = p.scale * ak[t];
    if (d < p.Dv) dvr[d] = av[t];
  }
}

// ---- reference: P, W and dS materialized ([B, H, Lq, Lk], dense) ----------------------------------

// P_i = softmax(S_i + M_i) (zeros for a row that sees no key), W_i = P_i ∘ Z_i/(1−p), O_i = W_i V.
// P goes to `P` (probs, or scratch); W to `W` when not null (else it is recomputed from P).
__global__ void __launch_bounds__(kWarps * 32) reference_forward_kernel(AttnProblem p, float* out, float* P,
                                                                        float* W) {
  QKV_SHARED float qs[kWarps][kMaxDim];
  RowOf r;
  if (!warp_row(p.H, p.Lq, p.B * p.H * p.Lq, &r)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = r.b, h = r.h, i = r.i, hk = h / (p.H / p.Hkv);
  const float* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_sl;
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;
  for (int64_t d = lane; d < p.D; d += 32) qs[warp][d] = q[d];
  __syncwarp();
  float* Pr = P + ((b * p.H + h) * p.Lq + i) * p.Lk;
  float m = -INFINITY;
  for (int64_t j = lane; j < p.Lk; j += 32) {
    const float s =
        masked_score(p, b, h, i, j, soft_cap(p.softcap, p.scale * dot_shared(qs[warp], k + j * p.k_sl, p.D)));
    Pr[j] = s;
    m = fmaxf(m, s);
  }
  m = warp_max(m);
  float l = 0.f;
  for (int64_t j = lane; j < p.Lk; j += 32) {
    const float e = m == -INFINITY || Pr[j] == -INFINITY ? 0.f : expf(Pr[j] - m);
    Pr[j] = e;
    l += e;
  }
  const float inv = (l = warp_sum(l)) > 0.f ? 1.f / l : 0.f;
  float* Wr = W ? W + ((b * p.H + h) * p.Lq + i) * p.Lk : nullptr;
  for (int64_t j = lane; j < p.Lk; j += 32) {
    Pr[j] *= inv;
    if (Wr) Wr[j] = Pr[j] * keep(p, b, h, i, j);
  }
  __syncwarp();  // the row's P (and W) are written; every lane reads all of it below
  float o[kChunks];
#pragma unroll
  for (int t = 0; t < kChunks; ++t) o[t] = 0.f;
  for (int64_t j = 0; j < p.Lk; ++j) {
    const float wj = Wr ? Wr[j] : Pr[j] * keep(p, b, h, i, j);
    if (wj == 0.f) continue;
    const float* vr = v + j * p.v_sl;
#pragma unroll
    for (int t = 0; t < kChunks; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < p.Dv) o[t] += wj * vr[d];
    }
  }
  float* orow = out + ((b * p.H + h) * p.Lq + i) * p.Dv;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.Dv) orow[d] = o[t];
  }
}

// Per query row: dP_j = (dO_i·V_j) Z_ij/(1−p), dS_j = P_j (dP_j − Σ_k P_k dP_k) into dS (the scores'
// gradient: a float mask's); soft-capped, dX_j = dS_j c'(x_j) into dX, x_j = scale q_i·k_j recomputed (dX = dS
// without a cap); dQ_i = scale dX_i K.
__global__ void __launch_bounds__(kWarps * 32)
    reference_rows_kernel(AttnProblem p, const float* P, const float* dout, float* dS, float* dX, float* dq) {
  QKV_SHARED float gs[kWarps][kMaxDim], qs[kWarps][kMaxDim];
  RowOf r;
  if (!warp_row(p.H, p.Lq, p.B * p.H * p.Lq, &r)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = r.b, h = r.h, i = r.i, hk = h / (p.H / p.Hkv);
  const int64_t row = (b * p.H + h) * p.Lq + i;
  const float* g = dout + row * p.Dv;
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;
  for (int64_t d = lane; d < p.Dv; d += 32) gs[warp][d] = g[d];
  const float* q = p.q + b * p.q_sb + h * p.q_sh + i * p.q_sl;
  if (p.softcap > 0.f)
    for (int64_t d = lane; d < p.D; d += 32) qs[warp][d] = q[d];
  __syncwarp();
  const float* Pr = P + row * p.Lk;
  float* dSr = dS + row * p.Lk;
  float* dXr = dX + row * p.Lk;
  float s = 0.f;
  for (int64_t j = lane; j < p.Lk; j += 32) {
    const float dp = dot_shared(gs[warp], v + j * p.v_sl, p.Dv) * keep(p, b, h, i, j);
    dSr[j] = dp;
    s += Pr[j] * dp;
  }
  s = warp_sum(s);
  for (int64_t j = lane; j < p.Lk; j += 32) dSr[j] = Pr[j] * (dSr[j] - s);
  if (p.softcap > 0.f)  // dX = dS ∘ c′(x): the cap's slope at the recomputed capped score
    for (int64_t j = lane; j < p.Lk; j += 32)
      dXr[j] =
          dSr[j] * soft_cap_slope(p.softcap, soft_cap(p.softcap, p.scale * dot_shared(qs[warp], k + j * p.k_sl, p.D)));
  __syncwarp();
  float acc[kChunks];
#pragma unroll
  for (int t = 0; t < kChunks; ++t) acc[t] = 0.f;
  for (int64_t j = 0; j < p.Lk; ++j) {
    const float dsj = dXr[j];
    if (dsj == 0.f) continue;
    const float* kr = k + j * p.k_sl;
#pragma unroll
    for (int t = 0; t < kChunks; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < p.D) acc[t] += dsj * kr[d];
    }
  }
  float* qrow = dq + row * p.D;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.D) qrow[d] = p.scale * acc[t];
  }
}

// Per key row j of head (b, hk): dV_j = Σ_{h in group, i} W_ij dO_i,  dK_j = scale Σ dX_ij Q_i.
__global__ void __launch_bounds__(kWarps * 32)
    reference_columns_kernel(AttnProblem p, const float* P, const float* dX, const float* dout, float* dk, float* dv) {
  RowOf r;
  if (!warp_row(p.Hkv, p.Lk, p.B * p.Hkv * p.Lk, &r)) return;
  const int lane = threadIdx.x % 32;
  const int64_t b = r.b, hk = r.h, j = r.i, group = p.H / p.Hkv;
  float ak[kChunks], av[kChunks];
#pragma unroll
  for (int t = 0; t < kChunks; ++t) ak[t] = av[t] = 0.f;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* q = p.q + b * p.q_sb + h * p.q_sh;
    for (int64_t i = 0; i < p.Lq; ++i) {
      const int64_t row = (b * p.H + h) * p.Lq + i;
      const float w = P[row * p.Lk + j] * keep(p, b, h, i, j), ds = dX[row * p.Lk + j];
      if (w == 0.f && ds == 0.f) continue;
      const float* gr = dout + row * p.Dv;
      const float* qr = q + i * p.q_sl;
#pragma unroll
      for (int t = 0; t < kChunks; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < p.Dv) av[t] += w * gr[d];
        if (d < p.D) ak[t] += ds * qr[d];
      }
    }
  }
  float* dkr = dk + ((b * p.Hkv + hk) * p.Lk + j) * p.D;
  float* dvr = dv + ((b * p.Hkv + hk) * p.Lk + j) * p.Dv;
#pragma unroll
  for (int t = 0; t < kChunks; ++t) {
    const int64_t d = lane + 32 * t;
    if (d < p.D) dkr[d] = p.scale * ak[t];
    if (d < p.Dv) dvr[d] = av[t];
  }
}

unsigned warps_grid(int64_t rows) {
  const int64_t blocks = (rows + kWarps - 1) / kWarps;
  QKV_CHECK(blocks <= 2147483647, "scaled_dot_product_attention: ", rows, " rows are too many for one CUDA grid");
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

void check_dims(const AttnProblem& p) {
  QKV_CHECK(p.D <= kMaxDim && p.Dv <= kMaxDim, "scaled_dot_product_attention: head dims ", p.D, " and ", p.Dv,
            "; the CUDA kernels take at most ", kMaxDim);
}

}  // namespace

// Rows × keys below which one warp per row keeps the GPU busy enough: fewer rows than four warps per
// multiprocessor (528 on an H100 or H200, 432 on an A100), against at least kSplitMinKeys keys, go
// through the split-KV pair.
constexpr int64_t kSplitWarpsPerSm = 4;
constexpr int64_t kSplitMinKeys = 512, kSplitChunk = 256;

namespace {

// The CUDA-core forward: split over the keys where few rows meet many keys, else a warp a row
template <int Round>
void forward_simt(const AttnProblem& p, float* out, float* lse) {
  const int64_t rows = p.B * p.H * p.Lq;
  cudaStream_t s = stream();
  if (p.Lk >= kSplitMinKeys && rows < kSplitWarpsPerSm * sm_count()) {
    // a decoding step (no lse) over a dense cache: the paged decoding kernel, its keys streamed in tiles
    // (rounding them as p.compute asks, as Round does here)
    if (lse == nullptr && Round == operand_rounding(p.compute) && attention_decode_tiled(p, out)) return;
    const int64_t splits = (p.Lk + kSplitChunk - 1) / kSplitChunk;
    Scratch part(rows * splits * (2 + p.Dv), s);
    float* part_m = part.p;
    float* part_l = part_m + rows * splits;
    float* part_o = part_l + rows * splits;
    QKV_LAUNCH(warps_grid(rows * splits), kWarps * 32, 0, s, split_kv_partial_kernel<Round>)(
        p, splits, kSplitChunk, part_m, part_l, part_o);
    QKV_CUDA_LAUNCHED(split_kv_partial_kernel);
    QKV_LAUNCH(warps_grid(rows), kWarps * 32, 0, s, split_kv_combine_kernel)(
        p, splits, part_m, part_l, part_o, out, lse);
    QKV_CUDA_LAUNCHED(split_kv_combine_kernel);
    return;
  }
  QKV_LAUNCH(warps_grid(rows), kWarps * 32, 0, s, flash_forward_kernel<Round>)(p, out, lse);
  QKV_CUDA_LAUNCHED(flash_forward_kernel);
}

}  // namespace

void attention_forward_flash_f32(const AttnProblem& p, float* out, float* lse) {
  check_dims(p);
  if (p.B * p.H * p.Lq == 0) return;  // (Dv = 0 still writes lse: the backward reads it)
  // the tensor cores wherever they serve (attention_tf32.cu; QKV_CUDA_ATTENTION_F32=simt: the kernels below)
  if (attention_forward_tf32(p, out, lse)) return;
  forward_simt<0>(p, out, lse);
}

void attention_forward_rounding(const AttnProblem& p, float* out, float* lse) {
  check_dims(p);
  if (p.B * p.H * p.Lq == 0) return;
  if (p.compute == AttnCompute::f16) return forward_simt<2>(p, out, lse);
  if (p.compute == AttnCompute::bf16) return forward_simt<1>(p, out, lse);
  forward_simt<0>(p, out, lse);
}

void attention_row_dot(const AttnProblem& p, const float* out, const float* dout, float* Dsum) {
  const int64_t qrows = p.B * p.H * p.Lq;
  if (qrows == 0) return;
  QKV_LAUNCH(warps_grid(qrows), kWarps * 32, 0, stream(), row_dot_kernel)(p, out, dout, Dsum);
  QKV_CUDA_LAUNCHED(row_dot_kernel);
}

void attention_backward_flash_f32(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv) {
  check_dims(p);
  cudaStream_t s = stream();
  const int64_t qrows = p.B * p.H * p.Lq, krows = p.B * p.Hkv * p.Lk;
  // the tensor cores wherever they serve (attention_tf32.cu): D_i and dq's zeros in one launch, then dq, dk
  // and dv in one kernel
  if (qrows > 0 && krows > 0 && attention_backward_tf32(p, out, lse, dout, dq, dk, dv)) return;
  Scratch Dsum(qrows, s);
  if (qrows > 0) {
    attention_row_dot(p, out, dout, Dsum.p);
    QKV_LAUNCH(warps_grid(qrows), kWarps * 32, 0, s, flash_dq_kernel)(p, lse, Dsum.p, dout, dq);
    QKV_CUDA_LAUNCHED(flash_dq_kernel);
  }
  if (krows > 0) {
    QKV_LAUNCH(warps_grid(krows), kWarps * 32, 0, s, flash_dkv_kernel)(p, lse, Dsum.p, dout, dk, dv);
    QKV_CUDA_LAUNCHED(flash_dkv_kernel);
  }
}

void attention_forward_reference(const AttnProblem& p, float* out, float* probs, float* weights) {
  check_dims(p);
  const int64_t rows = p.B * p.H * p.Lq;
  if (rows == 0) return;
  cudaStream_t s = stream();
  Scratch scratch(probs ? 0 : rows * p.Lk, s);
  QKV_LAUNCH(warps_grid(rows), kWarps * 32, 0, s, reference_forward_kernel)(p, out, probs ? probs : scratch.p, weights);
  QKV_CUDA_LAUNCHED(reference_forward_kernel);
}

void attention_backward_reference(const AttnProblem& p, const float* probs, const float* dout, float* dq, float* dk,
                                  float* dv, float* dscores) {
  check_dims(p);
  cudaStream_t s = stream();
  const int64_t qrows = p.B * p.H * p.Lq, krows = p.B * p.Hkv * p.Lk;
  Scratch scratch(dscores ? 0 : qrows * p.Lk, s), capped(p.softcap > 0.f ? qrows * p.Lk : 0, s);
  float* dS = dscores ? dscores : scratch.p;
  float* dX = p.softcap > 0.f ? capped.p : dS;  // the capped scores' gradient (the scores' own without a cap)
  if (qrows > 0) {
    QKV_LAUNCH(warps_grid(qrows), kWarps * 32, 0, s, reference_rows_kernel)(p, probs, dout, dS, dX, dq);
    QKV_CUDA_LAUNCHED(reference_rows_kernel);
  }
  if (krows > 0) {
    QKV_LAUNCH(warps_grid(krows), kWarps * 32, 0, s, reference_columns_kernel)(p, probs, dX, dout, dk, dv);
    QKV_CUDA_LAUNCHED(reference_columns_kernel);
  }
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
