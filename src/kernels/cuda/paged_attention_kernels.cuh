// The paged-attention kernels (paged_attention.cu launches them; tests/kernels/
// paged_attention_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h).
// Formulas, layouts and contracts: kernels/paged_attention.inc.
//
// For decoding (a few query tokens, each over its sequence's keys): one block per (query token,
// key/value head, chunk of at most 8 of the G query heads sharing that head — one chunk unless G > 8).
// Its 4 warps take the keys in turn (warp w: keys lo + w, lo + w + 4, …); a key's and a value's rows
// are read once for all the chunk's heads, a lane holding head dims lane, lane + 32, … (D, Dv ≤ 256:
// at most 8 a lane, in registers). Each warp keeps an online softmax per head (running max and sum,
// f32) and its weighted sum of values in registers; the warps' partial results are merged through
// shared memory at the end (a bf16 cache's elements widened to f32 as they are read). A page index
// outside the cache is skipped, a length clamped to the block-table row, a negative row sees no key:
// the kernel never reads outside the cache (the CPU op checks these indices; the GPU cannot cheaply).
//
// Split over the keys (flash-decoding: Dao, Haziza, Massa, Sizov, "Flash-Decoding for long-context
// inference", 2023; vLLM's PagedAttention V2): a step of few sequences gives few blocks — one
// sequence, 8 key heads: 8 blocks on 132 SMs — each walking its whole context alone. Then a token's
// keys lo … n − 1 are cut into S runs of K keys (run i: lo + i·K … lo + (i+1)·K − 1, the grid's y),
// each block writes its run's unnormalized result (its max M_i, sum L_i and Σ e^(x−M_i)·v) to a
// scratch buffer, and paged_attention_merge_kernel combines the runs:
//
//   out = Σ_i e^(M_i − M) · acc_i / Σ_i e^(M_i − M) · L_i,   M = max_i M_i
//
// (paged_split chooses S and K from the grid's size, the SMs and the longest context a row can
// hold; a run past a token's keys is empty: M_i = −∞, L_i = 0, acc_i = 0).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/paged_attention.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kPagedWarps = 4, kPagedThreads = 32 * kPagedWarps;
constexpr int kPagedHeads = 8;                     // query heads a block computes at most
constexpr int kPagedMaxDim = 256;                  // D and Dv at most
constexpr int kPagedPerLane = kPagedMaxDim / 32;  // head dims a lane holds

// The launch, shared by paged_attention.cu and the emulation test: blocks = T · Hkv · chunks,
// chunks = ⌈G / 8⌉, kPagedThreads threads each.
inline int64_t paged_head_chunks(const PagedShape& s) {
  const int64_t G = s.H / s.Hkv;
  return (G + kPagedHeads - 1) / kPagedHeads;
}
inline int64_t paged_attention_blocks(const PagedShape& s) { return s.T * s.Hkv * paged_head_chunks(s); }
// Its shared memory (floats), Gs = min(G, 8): q [Gs, D] (scaled), then per warp m [Gs], l [Gs] and
// acc [Gs, Dv] — at most (8·256 + 4·8·258)·4 = 41,216 bytes, under the 48 KB a block has unasked.
inline size_t paged_attention_shared_bytes(const PagedShape& s) {
  const int64_t G = s.H / s.Hkv, Gs = G < kPagedHeads ? G : kPagedHeads;
  return static_cast<size_t>(Gs * s.D + kPagedWarps * Gs * (s.Dv + 2)) * sizeof(float);
}
// The split over the keys: S runs of K keys each (S = 1, K = 0: none). Only where the grid is smaller
// than the GPU (fewer blocks than SMs) and a row can hold ≥ 2 runs of kPagedSplitMinKeys keys: S
// fills about two blocks an SM, at most kPagedMaxSplits runs, each ≥ kPagedSplitMinKeys keys of the
// most a token sees (the row's max_pages · page_size, or the window).
constexpr int64_t kPagedSplitMinKeys = 256, kPagedMaxSplits = 64;
struct PagedSplit {
  int64_t splits = 1, keys = 0;
};
inline PagedSplit paged_split(const PagedShape& s, int sms) {
  const int64_t blocks = paged_attention_blocks(s), cap = s.max_pages * s.page_size;
  const int64_t span = s.window > 0 && s.window < cap ? s.window : cap;
  if (blocks == 0 || blocks >= sms || span < 2 * kPagedSplitMinKeys) return {};
  int64_t S = (2 * int64_t{sms} + blocks - 1) / blocks;
  S = S < span / kPagedSplitMinKeys ? S : span / kPagedSplitMinKeys;
  S = S < kPagedMaxSplits ? S : kPagedMaxSplits;
  if (S < 2) return {};
  const int64_t K = (span + S - 1) / S;
  return {(span + K - 1) / K, K};
}
// the scratch the runs write (floats): acc [T, H, S, Dv], then M and L [T, H, S] each
inline int64_t paged_split_floats(const PagedShape& s, const PagedSplit& p) {
  return s.T * s.H * p.splits * (s.Dv + 2);
}
// paged_attention_merge_kernel's: one thread an output element, a grid-stride loop
inline unsigned paged_merge_blocks(const PagedShape& s) { return blocks_for(s.T * s.H * s.Dv); }

// paged_kv_write's: one thread an element of the longer of a token's two rows, a grid-stride loop.
inline unsigned paged_kv_write_blocks(const PagedShape& s) {
  return blocks_for(s.T * s.Hkv * (s.D > s.Dv ? s.D : s.Dv));
}

// A cache element as f32 (a bf16 one widened: its bits the top half; an e4m3 one by dtype.h's
// f8e4m3_to_f32), and an f32 as one (bf16: rounded to nearest even, as the CPU's f32_to_bf16; e4m3:
// dtype.h's f32_to_f8e4m3, the CPU's own function).
__device__ inline float widen(float x) { return x; }
__device__ inline float widen(bf16 x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }
__device__ inline float widen(f8e4m3 x) { return f8e4m3_to_f32(x); }
__device__ inline void narrow(float x, float& out) { out = x; }
__device__ inline void narrow(float x, bf16& out) { out.bits = to_bf16_bits(x); }
__device__ inline void narrow(float x, f8e4m3& out) { out = f32_to_f8e4m3(x); }

// n partial softmaxes of one output element combined — part i's running max m_i, its sum l_i and its
// weighted sum of values acc_i (at m[i · m_stride], l[…], acc[i · acc_stride]):
//   M = max_i m_i, num = Σ_i e^(m_i − M) · acc_i, den = Σ_i e^(m_i − M) · l_i
// (num = den = 0 where no part saw a key: M = −∞). A block's warps, and the split's runs.
struct Combined {
  float M, num, den;
};
__device__ inline Combined combine_partials(int64_t n, const float* m, const float* l, int64_t m_stride,
                                            const float* acc, int64_t acc_stride) {
  Combined c{-INFINITY, 0.f, 0.f};
  for (int64_t i = 0; i < n; ++i) c.M = fmaxf(c.M, m[i * m_stride]);
  if (c.M == -INFINITY) return c;
  for (int64_t i = 0; i < n; ++i) {
    const float w = expf(m[i * m_stride] - c.M);
    c.num += w * acc[i * acc_stride];
    c.den += w * l[i * m_stride];
  }
  return c;
}

// out[t, h] = Σ_j softmax_j(scale · q[t, h] · k[p_j, h / G, o_j]) · v[p_j, h / G, o_j]
// for the block's heads h0 … h0 + Gb − 1, keys j = lo … n − 1 (p_j, o_j: j's page and offset).
// q [T, H, D], caches [pages, Hkv, page_size, D | Dv], table [rows, max_pages], out [T, H, Dv].
// Split (split.splits > 1, the grid's y the run): keys j = lo + y·K … of the run only, and the run's
// unnormalized result to `part` (paged_split_floats' layout) instead of out.
// C: the caches' element, float, bf16 or f8e4m3.
template <typename C>
__global__ void __launch_bounds__(kPagedThreads)
    paged_attention_kernel(const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                           const int32_t* seq, const int32_t* len, float* out, PagedShape s,
                           PagedSplit split = {}, float* part = nullptr) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int64_t G = s.H / s.Hkv, chunks = (G + kPagedHeads - 1) / kPagedHeads;
  const int64_t block = blockIdx.x, chunk = block % chunks, kvh = block / chunks % s.Hkv, t = block / chunks / s.Hkv;
  const int64_t Gs = G < kPagedHeads ? G : kPagedHeads;  // the shared arrays' stride in heads
  const int64_t h0 = kvh * G + chunk * kPagedHeads;
  const int Gb = static_cast<int>(G - chunk * kPagedHeads < kPagedHeads ? G - chunk * kPagedHeads : kPagedHeads);
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  float* qs = reinterpret_cast<float*>(smem);  // [Gs, D]
  float* ms = qs + Gs * s.D;                   // [warps, Gs]: each warp's running max
  float* ls = ms + kPagedWarps * Gs;           // [warps, Gs]: its running sum
  float* accs = ls + kPagedWarps * Gs;         // [warps, Gs, Dv]: its weighted sum of values

  // qs[g, d] = scale · q[t, h0 + g, d] (the block's heads are consecutive rows of q[t])
  const float* qt = q + (t * s.H + h0) * s.D;
  for (int64_t e = threadIdx.x; e < Gb * s.D; e += blockDim.x) qs[e] = s.scale * qt[e];

  // the keys lo … n − 1 of row seq[t]: n clamped to the row's max_pages · page_size slots, none for a
  // row outside the table; lo = n − window with a window
  const int64_t row = seq[t], cap = s.max_pages * s.page_size;
  const bool row_ok = row >= 0 && row < s.rows;
  int64_t n = row_ok ? len[t] : 0;
  n = n < 0 ? 0 : n > cap ? cap : n;
  const int64_t lo = s.window > 0 && n > s.window ? n - s.window : 0;
  const int32_t* pages = table + (row_ok ? row : 0) * s.max_pages;
  // this block's keys: all of them, or its run's
  const int64_t y = blockIdx.y;
  const int64_t j0 = split.keys > 0 ? lo + y * split.keys : lo;
  const int64_t j1 = split.keys > 0 && j0 + split.keys < n ? j0 + split.keys : n;
  __syncthreads();

  float m[kPagedHeads], l[kPagedHeads], acc[kPagedHeads][kPagedPerLane];
#pragma unroll
  for (int g = 0; g < kPagedHeads; ++g) {
    m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < kPagedPerLane; ++i) acc[g][i] = 0.f;
  }
  for (int64_t j = j0 + warp; j < j1; j += kPagedWarps) {
    // k_j = k[table[row, j / page_size], kvh, j mod page_size]; a page outside the cache is skipped
    // (its keys count for nothing)
    const int64_t page = pages[j / s.page_size];
    if (page < 0 || page >= s.pages) continue;
    const int64_t at = (page * s.Hkv + kvh) * s.page_size + j % s.page_size;
    const C* kj = k_cache + at * s.D;
    const C* vj = v_cache + at * s.Dv;
    float kr[kPagedPerLane], vr[kPagedPerLane];  // this lane's dims lane + 32i of k_j and v_j
#pragma unroll
    for (int i = 0; i < kPagedPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      kr[i] = d < s.D ? widen(kj[d]) : 0.f;
      vr[i] = d < s.Dv ? widen(vj[d]) : 0.f;
    }
#pragma unroll
    for (int g = 0; g < kPagedHeads; ++g) {
      if (g >= Gb) break;  // (warp-uniform: every lane leaves together)
      // x = (scale · q_g) · k_j, summed over the warp's lanes
      float part = 0.f;
#pragma unroll
      for (int i = 0; i < kPagedPerLane; ++i)
        if (lane + 32 * i < s.D) part += qs[g * s.D + lane + 32 * i] * kr[i];
      const float x = warp_sum(part);
      // online softmax: m' = max(m, x), c = e^(m − m'), p = e^(x − m');
      // l ← l·c + p, acc ← acc·c + p·v_j
      const float m_new = fmaxf(m[g], x), c = expf(m[g] - m_new), p = expf(x - m_new);
      m[g] = m_new;
      l[g] = l[g] * c + p;
#pragma unroll
      for (int i = 0; i < kPagedPerLane; ++i) acc[g][i] = acc[g][i] * c + p * vr[i];
    }
  }

  // each warp's (m, l, acc) to shared memory
#pragma unroll
  for (int g = 0; g < kPagedHeads; ++g) {
    if (g >= Gb) break;
    const int64_t wg = warp * Gs + g;
    if (lane == 0) ms[wg] = m[g], ls[wg] = l[g];
#pragma unroll
    for (int i = 0; i < kPagedPerLane; ++i)
      if (lane + 32 * i < s.Dv) accs[wg * s.Dv + lane + 32 * i] = acc[g][i];
  }
  __syncthreads();
  // out[t, h0 + g, d] = Σ_w e^(m_w − M) · acc_w[g, d] / Σ_w e^(m_w − M) · l_w, M = max_w m_w
  // (0 where no warp saw a key: M = −∞); a run: the numerator, M and the denominator to `part`
  const int64_t S = split.splits;
  float* ot = out + (t * s.H + h0) * s.Dv;
  for (int64_t e = threadIdx.x; e < Gb * s.Dv; e += blockDim.x) {
    const int64_t g = e / s.Dv, d = e % s.Dv;
    const Combined c = combine_partials(kPagedWarps, ms + g, ls + g, Gs, accs + g * s.Dv + d, Gs * s.Dv);
    if (part == nullptr) {
      ot[e] = c.den > 0.f ? c.num / c.den : 0.f;
    } else {  // part: acc [T, H, S, Dv], then M and L [T, H, S]
      const int64_t th = t * s.H + h0 + g, rows = s.T * s.H;  // (th: the run's row of part)
      part[(th * S + y) * s.Dv + d] = c.num;
      if (d == 0) part[rows * S * s.Dv + th * S + y] = c.M, part[rows * S * (s.Dv + 1) + th * S + y] = c.den;
    }
  }
}

// out[t, h, d] = Σ_i e^(M_i − M) · acc_i[d] / Σ_i e^(M_i − M) · L_i over the S runs, M = max_i M_i
// (0 where no run saw a key); part as paged_attention_kernel wrote it, out [T, H, Dv]
__global__ void paged_attention_merge_kernel(const float* part, float* out, PagedShape s, PagedSplit split) {
  const int64_t S = split.splits, rows = s.T * s.H, stride = int64_t{gridDim.x} * blockDim.x;
  const float* part_m = part + rows * S * s.Dv;
  const float* part_l = part_m + rows * S;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * s.Dv; e += stride) {
    const int64_t th = e / s.Dv, d = e % s.Dv;
    const Combined c = combine_partials(S, part_m + th * S, part_l + th * S, 1, part + th * S * s.Dv + d, s.Dv);
    out[e] = c.den > 0.f ? c.num / c.den : 0.f;
  }
}

// k[slot / page_size, h, slot mod page_size, d] = k_new[t, h, d] (and v), slot = slots[t]
// (k_new [T, Hkv, D], v_new [T, Hkv, Dv] dense); a slot outside 0 … pages · page_size − 1 is skipped
// (a bf16 or e4m3 cache: each rounded to nearest even; e4m3 saturating at ±448)
template <typename C>
__global__ void paged_kv_write_kernel(C* k_cache, C* v_cache, const float* k, const float* v, const int32_t* slots,
                                      PagedShape s) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, cache_slots = s.pages * s.page_size;
  auto write = [&](C* cache, const float* x, int64_t D) {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < s.T * s.Hkv * D; i += stride) {
      const int64_t t = i / (s.Hkv * D), h = i / D % s.Hkv, d = i % D, slot = slots[t];
      if (slot >= 0 && slot < cache_slots)
        narrow(x[i], cache[((slot / s.page_size * s.Hkv + h) * s.page_size + slot % s.page_size) * D + d]);
    }
  };
  write(k_cache, k, s.D);
  write(v_cache, v, s.Dv);
}

}  // namespace
}  // namespace qkv::kernels::cuda
