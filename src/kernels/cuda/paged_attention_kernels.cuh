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
// shared memory at the end. A page index outside the cache is skipped, a length clamped to the
// block-table row, a negative row sees no key: the kernel never reads outside the cache (the CPU op
// checks these indices; the GPU cannot cheaply).
#pragma once

#include <cmath>
#include <cstdint>

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
// paged_kv_write's: one thread an element of the longer of a token's two rows, a grid-stride loop.
inline unsigned paged_kv_write_blocks(const PagedShape& s) {
  return blocks_for(s.T * s.Hkv * (s.D > s.Dv ? s.D : s.Dv));
}

// out[t, h] = Σ_j softmax_j(scale · q[t, h] · k[p_j, h / G, o_j]) · v[p_j, h / G, o_j]
// for the block's heads h0 … h0 + Gb − 1, keys j = lo … n − 1 (p_j, o_j: j's page and offset).
// q [T, H, D], caches [pages, Hkv, page_size, D | Dv], table [rows, max_pages], out [T, H, Dv].
__global__ void __launch_bounds__(kPagedThreads)
    paged_attention_kernel(const float* q, const float* k_cache, const float* v_cache, const int32_t* table,
                           const int32_t* seq, const int32_t* len, float* out, PagedShape s) {
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
  __syncthreads();

  float m[kPagedHeads], l[kPagedHeads], acc[kPagedHeads][kPagedPerLane];
#pragma unroll
  for (int g = 0; g < kPagedHeads; ++g) {
    m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < kPagedPerLane; ++i) acc[g][i] = 0.f;
  }
  for (int64_t j = lo + warp; j < n; j += kPagedWarps) {
    // k_j = k[table[row, j / page_size], kvh, j mod page_size]; a page outside the cache is skipped
    // (its keys count for nothing)
    const int64_t page = pages[j / s.page_size];
    if (page < 0 || page >= s.pages) continue;
    const int64_t at = (page * s.Hkv + kvh) * s.page_size + j % s.page_size;
    const float* kj = k_cache + at * s.D;
    const float* vj = v_cache + at * s.Dv;
    float kr[kPagedPerLane], vr[kPagedPerLane];  // this lane's dims lane + 32i of k_j and v_j
#pragma unroll
    for (int i = 0; i < kPagedPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      kr[i] = d < s.D ? kj[d] : 0.f;
      vr[i] = d < s.Dv ? vj[d] : 0.f;
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
  // (0 where no warp saw a key: M = −∞)
  float* ot = out + (t * s.H + h0) * s.Dv;
  for (int64_t e = threadIdx.x; e < Gb * s.Dv; e += blockDim.x) {
    const int64_t g = e / s.Dv, d = e % s.Dv;
    float M = -INFINITY;
    for (int w = 0; w < kPagedWarps; ++w) M = fmaxf(M, ms[w * Gs + g]);
    float num = 0.f, den = 0.f;
    if (M != -INFINITY)
      for (int w = 0; w < kPagedWarps; ++w) {
        const float c = expf(ms[w * Gs + g] - M);
        num += c * accs[(w * Gs + g) * s.Dv + d];
        den += c * ls[w * Gs + g];
      }
    ot[e] = den > 0.f ? num / den : 0.f;
  }
}

// k[slot / page_size, h, slot mod page_size, d] = k_new[t, h, d] (and v), slot = slots[t]
// (k_new [T, Hkv, D], v_new [T, Hkv, Dv] dense); a slot outside 0 … pages · page_size − 1 is skipped
__global__ void paged_kv_write_kernel(float* k_cache, float* v_cache, const float* k, const float* v,
                                      const int32_t* slots, PagedShape s) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, cache_slots = s.pages * s.page_size;
  auto write = [&](float* cache, const float* x, int64_t D) {
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < s.T * s.Hkv * D; i += stride) {
      const int64_t t = i / (s.Hkv * D), h = i / D % s.Hkv, d = i % D, slot = slots[t];
      if (slot >= 0 && slot < cache_slots) cache[((slot / s.page_size * s.Hkv + h) * s.page_size + slot % s.page_size) * D + d] = x[i];
    }
  };
  write(k_cache, k, s.D);
  write(v_cache, v, s.Dv);
}

}  // namespace
}  // namespace qkv::kernels::cuda
