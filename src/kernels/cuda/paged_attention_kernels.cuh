// The paged-attention kernels (paged_attention.cu launches them; tests/kernels/
// paged_attention_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h).
// Formulas, layouts and contracts: kernels/paged_attention.inc.
//
// For decoding (a few query tokens, each over its sequence's keys): one block per (query token,
// key/value head, chunk of at most 8 of the G query heads sharing that head — one chunk unless G > 8).
// The default, paged_attention_tiled_kernel (below, 2026-12-05), streams the block's keys through
// shared memory in tiles of 32 by cp.async, 1–3 tiles in flight. paged_attention_kernel, the
// kernel before it (QKV_CUDA_PAGED_KERNEL=warps, to compare on a GPU): its 4 warps take the keys in turn (warp w: keys
// lo + w, lo + w + 4, …); a key's and a value's rows are read once for all the chunk's heads, a lane holding head dims
// lane, lane + 32, … (D, Dv ≤ 256: at most 8 a lane, in registers). Each warp keeps an online softmax per head (running
// max and sum, f32) and its weighted sum of values in registers; the warps' partial results are merged through shared
// memory at the end (a bf16 cache's elements widened to f32 as they are read). paged_attention_mma_kernel
// (QKV_CUDA_PAGED_KERNEL=mma: bf16 and e4m3 caches, head dims 64 and 128) takes the tiled kernel's blocks
// with its products on the tensor cores. A page index outside the cache is
// skipped, a length clamped to the block-table row, a negative row sees no key: the kernel never reads outside the
// cache (the CPU op checks these indices; the GPU cannot cheaply).
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
//
// Cascade (paged_cascade_kernel, below; paged_cascade_mma_kernel on the tensor cores, with
// QKV_CUDA_PAGED_KERNEL=mma, for bf16 and e4m3 caches): tokens sharing their sequences' first pages read those keys
// once a block of their query rows, into runs the same merge combines with each token's own.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/attention_device.cuh"  // soft_cap
#include "kernels/cuda/attention_tiles.cuh"   // cp.async, mma.sync, ldmatrix
#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/operand_rounding.cuh"  // operand<Round>
#include "kernels/paged_attention.h"
#include "kernels/paged_prefixes.h"  // kCascadeBlockTokens

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
// With a cascade (paged_cascade_split), each token's runs of its own keys are followed in the scratch
// by its group's runs over the shared keys: P runs of Kp keys (a token in no group: none).
struct PagedSplit {
  int64_t splits = 1, keys = 0;              // a token's own keys: S runs of K
  int64_t prefix_runs = 0, prefix_keys = 0;  // its group's shared keys: P runs of Kp
  __host__ __device__ int64_t runs() const { return splits + prefix_runs; }
};
// (most > 0: no token sees more keys than that — a dense cache's filled part of its capacity)
inline PagedSplit paged_split(const PagedShape& s, int sms, int64_t most = 0) {
  const int64_t blocks = paged_attention_blocks(s), rows_cap = s.max_pages * s.page_size;
  const int64_t cap = most > 0 && most < rows_cap ? most : rows_cap;
  const int64_t span = s.window > 0 && s.window < cap ? s.window : cap;
  if (blocks == 0 || blocks >= sms || span < 2 * kPagedSplitMinKeys) return {};
  int64_t S = (2 * int64_t{sms} + blocks - 1) / blocks;
  S = S < span / kPagedSplitMinKeys ? S : span / kPagedSplitMinKeys;
  S = S < kPagedMaxSplits ? S : kPagedMaxSplits;
  if (S < 2) return {};
  const int64_t K = (span + S - 1) / S;
  return {(span + K - 1) / K, K};
}
// the scratch the runs write (floats): acc [T, H, R, Dv], then M and L [T, H, R] each (R = S + P)
inline int64_t paged_split_floats(const PagedShape& s, const PagedSplit& p) {
  return s.T * s.H * p.runs() * (s.Dv + 2);
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

// N rows' online-softmax state before any key: m = −∞, l = 0, acc = 0 (both kernels' registers)
template <int N>
__device__ inline void clear_online(float (&m)[N], float (&l)[N], float (&acc)[N][kPagedPerLane]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
    for (int k = 0; k < kPagedPerLane; ++k) acc[i][k] = 0.f;
  }
}

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

// The keys j0 … j1 − 1 a decoding block of token t reads (both kernels'): those of row seq[t], lo … n − 1 —
// n clamped to the row's max_pages · page_size slots, none for a row outside the table; lo = n − window
// with a window, from[t] with a cascade (its group's keys come before) — or its run's of them
// (blockIdx.y's); and the row's pages.
struct BlockKeys {
  const int32_t* pages;
  int64_t j0, j1;
  // key j's slot in the caches' rows of key head kvh, (page · Hkv + kvh) · page_size + offset; −1 where
  // it is not to be attended to (past j1; its page outside the cache)
  __device__ int64_t slot(const PagedShape& s, int64_t kvh, int64_t j) const {
    if (j >= j1) return -1;
    const int64_t page = pages[j / s.page_size];
    return page >= 0 && page < s.pages ? (page * s.Hkv + kvh) * s.page_size + j % s.page_size : int64_t{-1};
  }
};
// A decoding block's place (blockIdx.x = (t · Hkv + kvh) · chunks + chunk): token t, key head kvh, and its
// query heads h0 … h0 + Gb − 1 (a chunk of ≤ 8 of the G sharing kvh)
struct DecodingBlock {
  int64_t t, kvh, h0;
  int Gb;
};
__device__ inline DecodingBlock decoding_block(const PagedShape& s) {
  const int64_t G = s.H / s.Hkv, chunks = (G + kPagedHeads - 1) / kPagedHeads;
  const int64_t block = blockIdx.x, chunk = block % chunks, kvh = block / chunks % s.Hkv, t = block / chunks / s.Hkv;
  const int64_t left = G - chunk * kPagedHeads;
  return {t, kvh, kvh * G + chunk * kPagedHeads, static_cast<int>(left < kPagedHeads ? left : kPagedHeads)};
}
__device__ inline BlockKeys block_keys(const PagedShape& s, const int32_t* table, const int32_t* seq,
                                       const int32_t* len, const int32_t* from, const PagedSplit& split, int64_t t) {
  const int64_t row = seq[t], cap = s.max_pages * s.page_size;
  const bool row_ok = row >= 0 && row < s.rows;
  int64_t n = row_ok ? len[t] : 0;
  n = n < 0 ? 0 : n > cap ? cap : n;
  int64_t lo = s.window > 0 && n > s.window ? n - s.window : 0;
  if (from != nullptr && from[t] >= 0) lo = from[t] < n ? from[t] : n;
  const int64_t j0 = split.keys > 0 ? lo + int64_t{blockIdx.y} * split.keys : lo;
  return {table + (row_ok ? row : 0) * s.max_pages, j0, split.keys > 0 && j0 + split.keys < n ? j0 + split.keys : n};
}

// The end of a decoding block whose warps each kept an online softmax over their own keys (the
// key-a-warp kernel's, the tensor-core kernel's), from shared memory — warp w's max m_w[g] at ms[w·Gs + g],
// its sum l_w at ls[…], its weighted values acc_w[g, d] at accs[(w·Gs + g)·Dv + d]:
//   out[t, h0 + g, d] = Σ_w e^(m_w − M) · acc_w[g, d] / Σ_w e^(m_w − M) · l_w,  M = max_w m_w
// (0 where no warp saw a key: M = −∞); a run (part given): the numerator, M and the denominator to `part`
// (paged_split_floats' layout: acc [T, H, R, Dv], then M and L [T, H, R]), run blockIdx.y.
__device__ inline void merge_warps(const PagedShape& s, const PagedSplit& split, float* part, float* out, int64_t t,
                                   int64_t h0, int Gb, int64_t Gs, const float* ms, const float* ls,
                                   const float* accs) {
  const int64_t S = split.runs(), y = blockIdx.y;
  float* ot = out + (t * s.H + h0) * s.Dv;
  for (int64_t e = threadIdx.x; e < Gb * s.Dv; e += blockDim.x) {
    const int64_t g = e / s.Dv, d = e % s.Dv;
    const Combined c = combine_partials(kPagedWarps, ms + g, ls + g, Gs, accs + g * s.Dv + d, Gs * s.Dv);
    if (part == nullptr) {
      ot[e] = c.den > 0.f ? c.num / c.den : 0.f;
    } else {
      const int64_t th = t * s.H + h0 + g, rows = s.T * s.H;  // (th: the run's row of part)
      part[(th * S + y) * s.Dv + d] = c.num;
      if (d == 0) part[rows * S * s.Dv + th * S + y] = c.M, part[rows * S * (s.Dv + 1) + th * S + y] = c.den;
    }
  }
}

// out[t, h] = Σ_j softmax_j(scale · q[t, h] · k[p_j, h / G, o_j]) · v[p_j, h / G, o_j]
// for the block's heads h0 … h0 + Gb − 1, keys j = lo … n − 1 (p_j, o_j: j's page and offset).
// q [T, H, D], caches [pages, Hkv, page_size, D | Dv], table [rows, max_pages], out [T, H, Dv].
// Split (split.splits > 1, the grid's y the run): keys j = lo + y·K … of the run only, and the run's
// unnormalized result to `part` (paged_split_floats' layout) instead of out.
// C: the caches' element, float, bf16 or f8e4m3.
// Cascade (from != nullptr, part given): a token in a group (from[t] ≥ 0) attends here only to its
// keys from[t] … n − 1 — paged_cascade_kernel takes those before.
template <typename C>
__global__ void __launch_bounds__(kPagedThreads)
    paged_attention_kernel(const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                           const int32_t* seq, const int32_t* len, float* out, PagedShape s,
                           PagedSplit split = {}, float* part = nullptr, const int32_t* from = nullptr) {
  QKV_DYNAMIC_SHARED(128, smem);
  const DecodingBlock blk = decoding_block(s);
  const int64_t t = blk.t, kvh = blk.kvh, h0 = blk.h0, G = s.H / s.Hkv;
  const int64_t Gs = G < kPagedHeads ? G : kPagedHeads;  // the shared arrays' stride in heads
  const int Gb = blk.Gb;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  float* qs = reinterpret_cast<float*>(smem);  // [Gs, D]
  float* ms = qs + Gs * s.D;                   // [warps, Gs]: each warp's running max
  float* ls = ms + kPagedWarps * Gs;           // [warps, Gs]: its running sum
  float* accs = ls + kPagedWarps * Gs;         // [warps, Gs, Dv]: its weighted sum of values

  // qs[g, d] = scale · q[t, h0 + g, d] (the block's heads are consecutive rows of q[t])
  const float* qt = q + (t * s.H + h0) * s.D;
  for (int64_t e = threadIdx.x; e < Gb * s.D; e += blockDim.x) qs[e] = s.scale * qt[e];

  // this block's keys (block_keys)
  const BlockKeys keys = block_keys(s, table, seq, len, from, split, t);
  const int32_t* pages = keys.pages;
  const int64_t j0 = keys.j0, j1 = keys.j1;
  __syncthreads();

  float m[kPagedHeads], l[kPagedHeads], acc[kPagedHeads][kPagedPerLane];
  clear_online(m, l, acc);
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
      // x = c((scale · q_g) · k_j), summed over the warp's lanes (c: the soft cap, where s.softcap > 0)
      float part = 0.f;
#pragma unroll
      for (int i = 0; i < kPagedPerLane; ++i)
        if (lane + 32 * i < s.D) part += qs[g * s.D + lane + 32 * i] * kr[i];
      const float x = soft_cap(s.softcap, warp_sum(part));
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
  merge_warps(s, split, part, out, t, h0, Gb, Gs, ms, ls, accs);
}

// ---- the tiled kernel (the default) ----------------------------------------------------------------
//
// paged_attention_kernel's work and results — the same blocks (a token, a key/value head, a chunk of
// ≤ 8 of its query heads), the same runs and scratch — with the keys read as a GPU reads memory
// fastest. paged_attention_kernel holds one key in flight a warp, and a key's scores are G warp sums
// one after another: on the H200 of 2026-12-04 one sequence of 4,096 keys (8 key heads, d 128, f32)
// streamed its cache at ~120 GB/s of the 4.8 TB/s there. Here a block takes its keys in tiles of 32
// (two pages of 16), each tile's key and value rows copied whole into shared memory by cp.async — a
// warp's 16-byte copies of a row one contiguous run — into `stages` tile buffers, the next stages − 1
// tiles in flight (3 buffers for an f32 cache at d 128: 64 KB a block under way), and computes on tile
// i while tiles i + 1 … arrive. Per
// tile, for the block's rows g (query heads h0 + g) and its keys j:
//     x[g, j] = q_g · k_j                                     warp g mod 4 for row g, lane j for key j
//     m'_g = max(m_g, max_j x[g, j]),  c_g = e^(m_g − m'_g),  p[g, j] = e^(x[g, j] − m'_g),
//     l_g ← l_g · c_g + Σ_j p[g, j]                           row g's warp; p and c to shared memory
//     acc[g, d] ← acc[g, d] · c_g + Σ_j p[g, j] · v_j[d]      thread d (and d + 128): every row
// and at the end out = acc / l (a run: acc, m and l to the scratch). A key not to attend to (past the
// run, its page outside the cache) scores −∞ over a zero row. A lane reads its key 16 bytes at a
// time; a key's row in shared memory is an odd number of 16-byte pieces apart from the next, so that
// each 8 lanes of such a load fall in 32 distinct banks. Where the cache's rows are not whole 16-byte
// pieces on 16-byte addresses (D · sizeof(C) or Dv · sizeof(C) not a multiple of 16, or a cache not on
// 16 bytes), the same tiles are copied by plain loads (rows padded with zeros to whole pieces).
constexpr int kPagedTile = 32;                   // keys a tile
constexpr int kPagedMaxStages = 4;               // tile buffers at most
constexpr size_t kPagedStageBudget = 104 << 10;  // the tiles' shared memory a block aims at (two blocks an SM)

// The tiled kernel's shared memory: [stages][32] key rows of k_stride bytes, [stages][32] value rows
// of v_stride, then q [Gs, dc] (scaled, zeros past D), p [32][8] (a tile's p[g, j] at 8j + g), and the
// rows' factors c, then m and l [8] each.
struct PagedTiles {
  int64_t chunk = 4;                   // cache elements in 16 bytes
  int64_t dc = 0;                      // D rounded up to whole chunks
  int64_t k_stride = 0, v_stride = 0;  // bytes between rows in shared memory
  int stages = 2;
  bool async = true;  // cp.async; else plain loads (the rows not whole 16-byte pieces on 16-byte addresses)
  size_t q_at = 0, p_at = 0, c_at = 0, bytes = 0;  // offsets, and the whole
  __host__ __device__ size_t stage_bytes() const {
    return static_cast<size_t>(kPagedTile) * static_cast<size_t>(k_stride + v_stride);
  }
};
// `aligned`: both caches start on 16 bytes
inline PagedTiles paged_tiles(const PagedShape& s, size_t element_bytes, bool aligned) {
  PagedTiles tl;
  const auto e = static_cast<int64_t>(element_bytes);
  tl.chunk = 16 / e;
  tl.dc = (s.D + tl.chunk - 1) / tl.chunk * tl.chunk;
  const int64_t k_row = tl.dc * e;  // whole 16-byte pieces
  tl.k_stride = k_row / 16 % 2 == 1 ? k_row : k_row + 16;
  tl.v_stride = (s.Dv + tl.chunk - 1) / tl.chunk * tl.chunk * e;
  tl.async = aligned && s.D * e % 16 == 0 && s.Dv * e % 16 == 0;
  const size_t stage = tl.stage_bytes();
  const size_t fit = stage > 0 ? kPagedStageBudget / stage : kPagedMaxStages;
  tl.stages = fit < 2 ? 2 : fit > kPagedMaxStages ? kPagedMaxStages : static_cast<int>(fit);
  const int64_t G = s.H / s.Hkv, Gs = G < kPagedHeads ? G : kPagedHeads;
  tl.q_at = static_cast<size_t>(tl.stages) * stage;
  tl.p_at = tl.q_at + static_cast<size_t>(Gs * tl.dc) * sizeof(float);
  tl.c_at = tl.p_at + static_cast<size_t>(kPagedTile * kPagedHeads) * sizeof(float);
  tl.bytes = tl.c_at + 3 * kPagedHeads * sizeof(float);
  return tl;
}

// 16 bytes of cache elements (a piece of a row in shared memory) widened to f32
template <typename C>
__device__ inline void widen_piece(const unsigned char* at, float (&x)[16 / sizeof(C)]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(at);
  C c[16 / sizeof(C)];
  memcpy(c, &raw, 16);
#pragma unroll
  for (int i = 0; i < 16 / static_cast<int>(sizeof(C)); ++i) x[i] = widen(c[i]);
}

// cp.async.wait_group with the stages chosen at launch: every copy but the newest stages − 2 groups'
__device__ inline void wait_tiles(int stages) {
  if (stages <= 2)
    tiles::cp_async_wait<0>();
  else if (stages == 3)
    tiles::cp_async_wait<1>();
  else
    tiles::cp_async_wait<2>();
}

template <typename C, int Round = 0>
__global__ void __launch_bounds__(kPagedThreads, 2)
    paged_attention_tiled_kernel(const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                                 const int32_t* seq, const int32_t* len, float* out, PagedShape s, PagedTiles tl,
                                 PagedSplit split = {}, float* part = nullptr, const int32_t* from = nullptr) {
  static_assert(Round == 0 || std::is_same_v<C, float>, "16-bit rounding reads an f32 cache");
  QKV_DYNAMIC_SHARED(128, smem);
  const DecodingBlock blk = decoding_block(s);
  const int64_t t = blk.t, kvh = blk.kvh, h0 = blk.h0;
  const int Gb = blk.Gb;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int stages = tl.stages;
  unsigned char* const k_tiles = smem;                                      // [stages][32][k_stride]
  unsigned char* const v_tiles = smem + stages * kPagedTile * tl.k_stride;  // [stages][32][v_stride]
  float* const qs = reinterpret_cast<float*>(smem + tl.q_at);               // [Gb, dc]
  float* const ps = reinterpret_cast<float*>(smem + tl.p_at);               // [32][8]
  float* const cs = reinterpret_cast<float*>(smem + tl.c_at);               // [8]
  float* const ms = cs + kPagedHeads;                                       // [8]
  float* const ls = ms + kPagedHeads;                                       // [8]

  // qs[g, d] = scale · q[t, h0 + g, d], zeros from D to dc (q, k and v read as Round asks: operand<Round>)
  const float* qt = q + (t * s.H + h0) * s.D;
  for (int64_t e = threadIdx.x; e < Gb * tl.dc; e += blockDim.x) {
    const int64_t g = e / tl.dc, d = e % tl.dc;
    qs[e] = d < s.D ? s.scale * operand<Round>(qt[g * s.D + d]) : 0.f;
  }
  // this block's keys (block_keys)
  const BlockKeys keys = block_keys(s, table, seq, len, from, split, t);
  const int64_t y = blockIdx.y, j0 = keys.j0, j1 = keys.j1;
  const int64_t n_tiles = j1 > j0 ? (j1 - j0 + kPagedTile - 1) / kPagedTile : 0;

  // key j's slot in the caches' rows, −1 where it is not to be attended to (BlockKeys::slot)
  auto slot_of = [&](int64_t j) { return keys.slot(s, kvh, j); };
  // one row of a tile: a cache row (`width` elements from slot's) → `dst`, zeros past it to `whole`
  // elements and for slot −1; the warp's lanes along it
  auto copy_row = [&](unsigned char* dst, const C* cache, int64_t slot, int64_t width, int64_t whole) {
    if (tl.async) {
      const auto* src = reinterpret_cast<const unsigned char*>(cache + (slot < 0 ? 0 : slot) * width);
      for (int64_t c = lane; c < whole / tl.chunk; c += 32) tiles::cp_async16(dst + 16 * c, src + 16 * c, slot >= 0);
    } else {
      C* d = reinterpret_cast<C*>(dst);
      for (int64_t e = lane; e < whole; e += 32) d[e] = slot >= 0 && e < width ? cache[slot * width + e] : C{};
    }
  };
  const int64_t dv_whole = tl.v_stride / static_cast<int64_t>(sizeof(C));
  // tile i (keys j0 + 32i …) into buffer i mod stages: warp w copies rows w, w + 4, …; lane r < 8 finds
  // row w + 4r's slot, which the warp's lanes then take in turn
  auto copy_tile = [&](int64_t i) {
    const int64_t jt = j0 + i * kPagedTile;
    unsigned char* kb = k_tiles + (i % stages) * kPagedTile * tl.k_stride;
    unsigned char* vb = v_tiles + (i % stages) * kPagedTile * tl.v_stride;
    constexpr int kRowsAWarp = kPagedTile / kPagedWarps;
    const int64_t mine = lane < kRowsAWarp ? slot_of(jt + warp + kPagedWarps * lane) : -1;
#pragma unroll
    for (int r = 0; r < kRowsAWarp; ++r) {
      const auto slot = static_cast<int64_t>(__shfl_sync(0xffffffffu, static_cast<long long>(mine), r));
      const int64_t at = warp + kPagedWarps * r;
      copy_row(kb + at * tl.k_stride, k_cache, slot, s.D, tl.dc);
      copy_row(vb + at * tl.v_stride, v_cache, slot, s.Dv, dv_whole);
    }
  };

  // the pipeline's fill: tiles 0 … stages − 2, a group each (empty past the last tile)
  for (int i = 0; i < stages - 1; ++i) {
    if (i < n_tiles) copy_tile(i);
    tiles::cp_async_commit();
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows warp and warp + 4 (this warp's)
  float acc[kPagedHeads][2];                               // rows 0 … Gb − 1, dims threadIdx.x (+ 128)
#pragma unroll
  for (int g = 0; g < kPagedHeads; ++g) acc[g][0] = acc[g][1] = 0.f;
  const int64_t d0 = threadIdx.x, d1 = d0 + kPagedThreads;
  for (int64_t i = 0; i < n_tiles; ++i) {
    wait_tiles(stages);  // this thread's copies of tile i have landed
    __syncthreads();     // everyone's; and tile i − 1's buffer and p are read
    if (i + stages - 1 < n_tiles) copy_tile(i + stages - 1);
    tiles::cp_async_commit();
    const unsigned char* kb = k_tiles + (i % stages) * kPagedTile * tl.k_stride;
    const unsigned char* vb = v_tiles + (i % stages) * kPagedTile * tl.v_stride;

    // lane j: x_r = q_g · k_j for the warp's rows g = warp + 4r (−∞ for a key not to attend to)
    const bool present = slot_of(j0 + i * kPagedTile + lane) >= 0;
    const bool two = warp + kPagedWarps < Gb;
    if (warp < Gb) {  // (warp-uniform)
      float x[2] = {0.f, 0.f};
      if (present) {
        constexpr int kChunk = 16 / static_cast<int>(sizeof(C));
        const unsigned char* key = kb + lane * tl.k_stride;
        const float* q0 = qs + warp * tl.dc;
        const float* q1 = qs + (two ? warp + kPagedWarps : warp) * tl.dc;
        for (int64_t c = 0; c < tl.dc / kChunk; ++c) {
          float kv[kChunk];
          widen_piece<C>(key + 16 * c, kv);
          if constexpr (Round != 0)
            for (float& e : kv) e = operand<Round>(e);
#pragma unroll
          for (int u = 0; u < kChunk; u += 4) {  // q's four dims as one broadcast 16-byte load
            const float4 a = *reinterpret_cast<const float4*>(q0 + c * kChunk + u);
            x[0] += a.x * kv[u] + a.y * kv[u + 1] + a.z * kv[u + 2] + a.w * kv[u + 3];
            if (two) {
              const float4 b = *reinterpret_cast<const float4*>(q1 + c * kChunk + u);
              x[1] += b.x * kv[u] + b.y * kv[u + 1] + b.z * kv[u + 2] + b.w * kv[u + 3];
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (r == 1 && !two) break;  // (warp-uniform)
        const int g = warp + kPagedWarps * r;
        const float xr = present ? soft_cap(s.softcap, x[r]) : -INFINITY, m_new = fmaxf(m[r], warp_max(xr));
        float c = 1.f, p = 0.f;
        if (m_new != -INFINITY) {  // (warp-uniform; else no key yet: acc stays 0)
          c = expf(m[r] - m_new);
          p = present ? expf(xr - m_new) : 0.f;
          m[r] = m_new;
          l[r] = l[r] * c + warp_sum(p);
        }
        ps[lane * kPagedHeads + g] = p;
        if (lane == 0) cs[g] = c;
      }
    }
    __syncthreads();  // p and c written

    // acc[g, d] ← acc[g, d] · c_g + Σ_j p[g, j] · v_j[d]
#pragma unroll
    for (int g = 0; g < kPagedHeads; ++g) {
      if (g >= Gb) break;
      acc[g][0] *= cs[g], acc[g][1] *= cs[g];
    }
    const C* vrows = reinterpret_cast<const C*>(vb);
    for (int j = 0; j < kPagedTile; ++j) {
      const C* vj = vrows + j * dv_whole;
      const float v0 = d0 < s.Dv ? operand<Round>(widen(vj[d0])) : 0.f;
      const float v1 = d1 < s.Dv ? operand<Round>(widen(vj[d1])) : 0.f;
      const float4 pa = *reinterpret_cast<const float4*>(ps + j * kPagedHeads);
      const float4 pb = *reinterpret_cast<const float4*>(ps + j * kPagedHeads + 4);
      const float pj[kPagedHeads] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
#pragma unroll
      for (int g = 0; g < kPagedHeads; ++g) {
        if (g >= Gb) break;
        acc[g][0] += pj[g] * v0, acc[g][1] += pj[g] * v1;
      }
    }
  }
  tiles::cp_async_wait<0>();  // (the empty groups past the last tile)

  // out[t, h0 + g, d] = acc / l (0 where no key was seen); a run: acc, m and l to `part`
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int g = warp + kPagedWarps * r;
    if (g < Gb && lane == 0) ms[g] = m[r], ls[g] = l[r];
  }
  __syncthreads();
  const int64_t S = split.runs();
#pragma unroll
  for (int g = 0; g < kPagedHeads; ++g) {
    if (g >= Gb) break;
    const int64_t th = t * s.H + h0 + g;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int64_t d = k == 0 ? d0 : d1;
      if (d >= s.Dv) continue;
      if (part == nullptr) {
        out[th * s.Dv + d] = ls[g] > 0.f ? acc[g][k] / ls[g] : 0.f;
      } else {  // part: acc [T, H, R, Dv], then M and L [T, H, R]
        const int64_t rows = s.T * s.H;
        part[(th * S + y) * s.Dv + d] = acc[g][k];
        if (d == 0) part[rows * S * s.Dv + th * S + y] = ms[g], part[rows * S * (s.Dv + 1) + th * S + y] = ls[g];
      }
    }
  }
}

// ---- the tensor-core kernel (bf16 and e4m3 caches, D = Dv = 64 or 128; QKV_CUDA_PAGED_KERNEL=mma) -----
//
// The tiled kernel's blocks, runs and results, its two products on the tensor cores (mma.sync m16n8k16:
// bf16 in, f32 sums) instead of the CUDA cores, where a bf16 cache's bytes a key are half an f32 one's
// and the CUDA cores' products and shared-memory reads, not the memory, may bound the step (a block's
// G ≤ 8 query heads against each key: a GQA model's) — and an e4m3 cache's a quarter, each element
// widened by every warp that scores it there: here a tile is copied as it is and widened to bf16 rows
// once (exactly: every e4m3 value is a bf16 one), by the warp that owns it. Each warp takes keys of its own — 16 of
// every step of 64 (warp w: keys 16w … 16w + 15 of the step) — copied by its own lanes by cp.async into its own
// `stages` buffers, and keeps its own online softmax; the four warps meet only at the end, merged as the key-a-warp
// kernel's (merge_warps).
//
// The m16 rows of a product hold the block's heads twice — rows g (< 8) bf16(q_g), rows g + 8 the rest,
// bf16(q_g − bf16(q_g)) (q scaled first) — so that one product gives the score at ~2^-16 of q's own
// precision, the bf16 key exact:
//     x[g, j] = S[g, j] + S[g + 8, j] = (hi_g + lo_g) · k_j          S = Q₂ K_wᵀ  (16 × 16 keys)
//     m'_g = max(m_g, max_j x[g, j]),  c_g = e^(m_g − m'_g),  p[g, j] = e^(x[g, j] − m'_g),  l_g ← l_g c_g + Σ_j p
// and P the same way (rows g bf16(p), rows g + 8 bf16(p − bf16(p))), both halves rescaled by c_g:
//     O ← c ∘ O + P₂ V_w,   acc[g] = O[g] + O[g + 8]                   (16 × D)
// — the f32 query and weights the CUDA-core kernels use, against the cache's bf16 values, to ~1e-6.
// A lane (g = lane / 4, u = lane % 4) holds row g's and g + 8's scores for keys 2u, 2u + 1 and
// 8 + 2u, 9 + 2u (m16n8 accumulators, attention_mma_kernels.cuh's layouts), so that the two halves of
// a score, and of O, meet in one lane. A key not to attend to (past the run, its page outside the cache)
// has a zero row (cp.async's zero fill) and scores −∞.
constexpr int kPagedMmaKeys = 16;                           // keys a warp takes of a step
constexpr int kPagedMmaStep = kPagedMmaKeys * kPagedWarps;  // keys a step
inline bool paged_mma_serves(const PagedShape& s) { return s.D == s.Dv && (s.D == 64 || s.D == 128); }
// Shared memory: per warp [stages][16] key rows, then [stages][16] value rows — a bf16 cache's of D + 8
// bf16 (the 8 rows an ldmatrix reads 16 bytes apart in banks), an e4m3 cache's of D bytes as copied,
// followed (after every warp's) by each warp's one tile of 16 key and 16 value rows widened to bf16 rows
// of D + 8; after the loop, over them, the warps' m, l [4][8] and acc [4][8][Dv] (f32) for the merge. As
// many stages (2–4) as kPagedStageBudget holds: bf16 3 at d 128, 4 at 64; e4m3 4.
struct PagedMmaTiles {
  int stages = 2;
  size_t bytes = 0;
};
// (rows a tile `rows`, of `warps` warps' own, or of the block's: the cascade's)
inline PagedMmaTiles two_row_tiles(const PagedShape& s, size_t element_bytes, int64_t rows, size_t merge) {
  const size_t bf16_rows = static_cast<size_t>(rows) * 2 * static_cast<size_t>(s.D + 8) * sizeof(uint16_t);
  const size_t stage = element_bytes == 1 ? static_cast<size_t>(rows) * 2 * static_cast<size_t>(s.D) : bf16_rows;
  const size_t widened = element_bytes == 1 ? bf16_rows : 0;  // (e4m3: the widened tile)
  const size_t fit = (kPagedStageBudget - widened) / stage;
  PagedMmaTiles tl;
  tl.stages = fit < 2 ? 2 : fit > kPagedMaxStages ? kPagedMaxStages : static_cast<int>(fit);
  tl.bytes = tl.stages * stage + widened > merge ? tl.stages * stage + widened : merge;
  return tl;
}
inline PagedMmaTiles paged_mma_tiles(const PagedShape& s, size_t element_bytes) {
  const size_t merge = size_t{kPagedWarps} * kPagedHeads * static_cast<size_t>(s.Dv + 2) * sizeof(float);
  return two_row_tiles(s, element_bytes, kPagedWarps * kPagedMmaKeys, merge);
}

// Two f32 values as two bf16 pairs (the element with the lower index in the low half): hi = bf16(x) to
// nearest even, lo = bf16(x − hi) (x − hi exact in f32), so that hi + lo is x to ~2^-16 of itself.
__device__ inline void split_bf16(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const uint32_t h0 = to_bf16_bits(x0), h1 = to_bf16_bits(x1);
  const float r0 = x0 - __uint_as_float(h0 << 16), r1 = x1 - __uint_as_float(h1 << 16);
  hi = h0 | h1 << 16;
  lo = uint32_t{to_bf16_bits(r0)} | uint32_t{to_bf16_bits(r1)} << 16;
}

// ---- the two-row tiles both tensor-core kernels compute on (lane l: g = l / 4, u = l % 4) ----

// Q₂'s A fragments for D dims: this lane's row (q_row, scaled; zeros where !valid) as rows g (hi) and
// g + 8 (lo) — dims 16kk + 2u, +1 in registers 0 (hi) and 1 (lo), 16kk + 2u + 8, +9 in 2 and 3
template <int D>
__device__ inline void two_row_queries(uint32_t (&qa)[D / 16][4], const float* q_row, bool valid, float scale, int u) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int d = 16 * kk + 2 * u + 8 * half;
      const float x0 = valid ? scale * q_row[d] : 0.f, x1 = valid ? scale * q_row[d + 1] : 0.f;
      split_bf16(x0, x1, qa[kk][2 * half], qa[kk][2 * half + 1]);
    }
}

// Rows key and value rows of a tile → k_dst, v_dst by cp.async, the warp's lanes along them: row r from
// slot `mine` of lane r (−1: 16 zero bytes a piece). A bf16 cache's rows land D + 8 elements apart, the
// rows the products read; an e4m3 cache's as they are, D bytes apart, for widen_two_row_tile to make the
// bf16 rows of them — exactly: every e4m3 value is a bf16 one (3 of bf16's 7 mantissa bits, exponents
// within its range), widened once a block where the tiled kernel widens it in every warp that scores it.
template <typename C, int D, int Rows>
__device__ inline void copy_two_row_tile(unsigned char* k_dst, unsigned char* v_dst, const C* k_cache, const C* v_cache,
                                         int64_t mine, int lane) {
  constexpr int kRow = D * static_cast<int>(sizeof(C)), kPieces = kRow / 16;
  constexpr int kStride = std::is_same_v<C, bf16> ? (D + 8) * 2 : kRow;  // bytes between rows
#pragma unroll
  for (int e = lane; e < Rows * kPieces; e += 32) {
    const int r = e / kPieces, c = e % kPieces;
    const auto slot = static_cast<int64_t>(__shfl_sync(0xffffffffu, static_cast<long long>(mine), r));
    const int64_t at = (slot < 0 ? 0 : slot) * D;
    tiles::cp_async16(k_dst + r * kStride + 16 * c, reinterpret_cast<const unsigned char*>(k_cache + at) + 16 * c,
                      slot >= 0);
    tiles::cp_async16(v_dst + r * kStride + 16 * c, reinterpret_cast<const unsigned char*>(v_cache + at) + 16 * c,
                      slot >= 0);
  }
}
// Rows rows of e4m3 (k_raw, v_raw [Rows][D] bytes) → bf16 rows of D + 8 (k16, v16), 16 elements a lane at a time
template <int D, int Rows>
__device__ inline void widen_two_row_tile(uint16_t* k16, uint16_t* v16, const unsigned char* k_raw,
                                          const unsigned char* v_raw, int lane) {
  constexpr int S = D + 8, kPieces = D / 16;
#pragma unroll
  for (int e = lane; e < 2 * Rows * kPieces; e += 32) {
    const bool is_k = e < Rows * kPieces;
    const int f = is_k ? e : e - Rows * kPieces, r = f / kPieces, c = f % kPieces;
    const uint4 raw = *reinterpret_cast<const uint4*>((is_k ? k_raw : v_raw) + r * D + 16 * c);
    f8e4m3 x[16];
    memcpy(x, &raw, 16);
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
      w[i] = __float_as_uint(widen(x[2 * i])) >> 16 | (__float_as_uint(widen(x[2 * i + 1])) & 0xffff0000u);
    uint4* dst = reinterpret_cast<uint4*>((is_k ? k16 : v16) + r * S + 16 * c);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

// A tile of NT·8 keys (rows of D + 8 in shared memory; `here` bit j: key j to attend to) against the
// lane's row, the online softmax's step:
//   S = Q₂ Kᵀ,  x_j = c(S[g, j] + S[g + 8, j]) (−∞ for a key not here; c the soft cap where cap > 0),
//   m' = max(m, max_j x_j),
//   c = e^(m − m'),  p_j = e^(x_j − m'),  l ← l·c + Σ_j p_j (this lane's keys),  O ← c·O,
// then O += P₂ V with P₂'s rows g and g + 8 bf16(p) and bf16(p − bf16(p)). `here` ≠ 0 (m' finite).
template <int D, int NT>
__device__ inline void two_row_tile(const uint32_t (&qa)[D / 16][4], const uint16_t* kt, const uint16_t* vt,
                                    unsigned here, int lane, float cap, float& m, float& l, float (&o)[D / 8][4]) {
  static_assert(NT % 2 == 0, "keys in pairs of n-tiles: 16 a k-step");
  constexpr int S = D + 8;
  constexpr unsigned kFull = 0xffffffffu;
  const int u = lane % 4;
  // S = Q₂ Kᵀ: keys 8n … 8n + 7 into sc[n], a pair of n-tiles an ldmatrix.x4
  float sc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t kb[4];
      tiles::ldmatrix_x4(kb, kt + (np * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + (lane / 8 % 2) * 8);
      tiles::mma<__nv_bfloat16>(sc[2 * np], qa[kk], kb[0], kb[1]);
      tiles::mma<__nv_bfloat16>(sc[2 * np + 1], qa[kk], kb[2], kb[3]);
    }
  // x[n][e]: key 8n + 2u + e, the hi row's score and the lo row's; the online softmax
  float x[NT][2], mx = -INFINITY;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      x[n][e] = (here >> (8 * n + 2 * u + e)) & 1u ? soft_cap(cap, sc[n][e] + sc[n][e + 2]) : -INFINITY;
      mx = fmaxf(mx, x[n][e]);
    }
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
  const float m_new = fmaxf(m, mx), c = expf(m - m_new);
  float p[NT][2], sum = 0.f;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 2; ++e) p[n][e] = expf(x[n][e] - m_new), sum += p[n][e];  // (−∞: 0)
  l = l * c + sum;
  m = m_new;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] *= c, o[dt][1] *= c, o[dt][2] *= c, o[dt][3] *= c;
  // O += P₂ V, 16 keys a k-step: P₂'s A fragment (keys 2u, +1 in registers 0 (hi) and 1 (lo), 8 + 2u, +1
  // in 2 and 3), V's B fragments by transposed ldmatrix, 16 keys × 16 dims at a time
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t pa[4];
    split_bf16(p[2 * kk][0], p[2 * kk][1], pa[0], pa[1]);
    split_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1], pa[2], pa[3]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      tiles::ldmatrix_x4_trans(vb, vt + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * S + dp * 16 + (lane / 16) * 8);
      tiles::mma<__nv_bfloat16>(o[2 * dp], pa, vb[0], vb[1]);
      tiles::mma<__nv_bfloat16>(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
}

template <typename C, int D>
__global__ void __launch_bounds__(kPagedThreads, 2)
    paged_attention_mma_kernel(const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                               const int32_t* seq, const int32_t* len, float* out, PagedShape s, int stages,
                               PagedSplit split = {}, float* part = nullptr, const int32_t* from = nullptr) {
  static_assert(D == 64 || D == 128, "the tensor-core decoding kernel: head dims 64 and 128");
  static_assert(std::is_same_v<C, bf16> || std::is_same_v<C, f8e4m3>, "bf16 or e4m3 caches");
  constexpr bool kWiden = std::is_same_v<C, f8e4m3>;
  constexpr int S = D + 8;  // a row's stride in shared memory (elements)
  constexpr unsigned kFull = 0xffffffffu;
  QKV_DYNAMIC_SHARED(128, smem);
  const DecodingBlock blk = decoding_block(s);
  const int64_t t = blk.t, kvh = blk.kvh, h0 = blk.h0;
  const int Gb = blk.Gb;
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane / 4, u = lane % 4;
  // bf16: kw, vw [stages][16][S]; e4m3: kr, vr [stages][16][D] bytes, then k16, v16 [16][S] (the widened tile)
  constexpr int kRow = kWiden ? D : S * 2;  // a copied row's bytes in shared memory
  unsigned char* const kr = smem + warp * stages * 2 * kPagedMmaKeys * kRow;
  unsigned char* const vr = kr + stages * kPagedMmaKeys * kRow;
  uint16_t* const kw = reinterpret_cast<uint16_t*>(kr);
  uint16_t* const vw = reinterpret_cast<uint16_t*>(vr);
  uint16_t* const k16 = reinterpret_cast<uint16_t*>(smem + kPagedWarps * stages * 2 * kPagedMmaKeys * kRow) +
                        warp * 2 * kPagedMmaKeys * S;
  uint16_t* const v16 = k16 + kPagedMmaKeys * S;

  // Q₂'s A fragments: head h0 + g's row (zeros past the block's Gb heads)
  uint32_t qa[D / 16][4];
  two_row_queries<D>(qa, q + (t * s.H + h0 + (g < Gb ? g : 0)) * s.D, g < Gb, s.scale, u);

  // this block's keys (block_keys), in steps of 64
  const BlockKeys keys = block_keys(s, table, seq, len, from, split, t);
  const int64_t j0 = keys.j0, j1 = keys.j1;
  const int64_t n_steps = j1 > j0 ? (j1 - j0 + kPagedMmaStep - 1) / kPagedMmaStep : 0;
  // key j's slot in the caches' rows, −1 where it is not to be attended to (BlockKeys::slot)
  auto slot_of = [&](int64_t j) { return keys.slot(s, kvh, j); };
  // this warp's keys of step i: lane r < 16 finds key r's slot
  auto my_slot = [&](int64_t i) {
    return lane < kPagedMmaKeys ? slot_of(j0 + i * kPagedMmaStep + warp * kPagedMmaKeys + lane) : int64_t{-1};
  };
  // step i's 16 key and value rows of this warp → its buffer i mod stages (zeros for a slot of −1)
  auto copy_step = [&](int64_t i) {
    const int64_t at = (i % stages) * kPagedMmaKeys * kRow;
    copy_two_row_tile<C, D, kPagedMmaKeys>(kr + at, vr + at, k_cache, v_cache, my_slot(i), lane);
  };

  for (int i = 0; i < stages - 1; ++i) {  // the pipeline's fill, a group a step (empty past the last)
    if (i < n_steps) copy_step(i);
    tiles::cp_async_commit();
  }
  float m = -INFINITY, l = 0.f;  // row g's running max, and this lane's part of its sum
  float o[D / 8][4];             // O: rows g (regs 0, 1) and g + 8 (2, 3), dims 8dt + 2u, +1
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  for (int64_t i = 0; i < n_steps; ++i) {
    wait_tiles(stages);  // this lane's copies of step i have landed
    __syncwarp();        // the warp's; and its reads of step i − 1's buffer are done
    if (i + stages - 1 < n_steps) copy_step(i + stages - 1);
    tiles::cp_async_commit();
    const unsigned here = __ballot_sync(kFull, my_slot(i) >= 0);  // bit r: key r to attend to
    if (here == 0) continue;                                      // (warp-uniform)
    if constexpr (kWiden) {  // (the widened tile: read by step i − 1's products, done at the __syncwarp above)
      const int64_t at = (i % stages) * kPagedMmaKeys * D;
      widen_two_row_tile<D, kPagedMmaKeys>(k16, v16, kr + at, vr + at, lane);
      __syncwarp();
      two_row_tile<D, 2>(qa, k16, v16, here, lane, s.softcap, m, l, o);
    } else {
      const int64_t at = (i % stages) * kPagedMmaKeys * S;
      two_row_tile<D, 2>(qa, kw + at, vw + at, here, lane, s.softcap, m, l, o);
    }
  }
  tiles::cp_async_wait<0>();  // (the empty groups past the last step)

  // the warps' (m, l, acc) over the buffers, then merged
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  __syncthreads();                                     // every warp is done with its buffers
  float* const ms = reinterpret_cast<float*>(smem);    // [4][8]
  float* const ls = ms + kPagedWarps * kPagedHeads;    // [4][8]
  float* const accs = ls + kPagedWarps * kPagedHeads;  // [4][8][Dv]
  if (g < Gb) {
    const int wg = warp * kPagedHeads + g;
    if (u == 0) ms[wg] = m, ls[wg] = l;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      accs[wg * D + 8 * dt + 2 * u] = o[dt][0] + o[dt][2];
      accs[wg * D + 8 * dt + 2 * u + 1] = o[dt][1] + o[dt][3];
    }
  }
  __syncthreads();
  merge_warps(s, split, part, out, t, h0, Gb, kPagedHeads, ms, ls, accs);
}

// out[t, h, d] = Σ_i e^(M_i − M) · acc_i[d] / Σ_i e^(M_i − M) · L_i over the S runs, M = max_i M_i
// (0 where no run saw a key); part as paged_attention_kernel (and paged_cascade_kernel) wrote it, out
// [T, H, Dv]. Cascade (from given): a token in a group has its group's P runs after its S own ones.
__global__ void paged_attention_merge_kernel(const float* part, float* out, PagedShape s, PagedSplit split,
                                             const int32_t* from = nullptr) {
  const int64_t S = split.runs(), rows = s.T * s.H, stride = int64_t{gridDim.x} * blockDim.x;
  const float* part_m = part + rows * S * s.Dv;
  const float* part_l = part_m + rows * S;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * s.Dv; e += stride) {
    const int64_t th = e / s.Dv, d = e % s.Dv;
    const int64_t n = from != nullptr && from[th / s.H] >= 0 ? S : split.splits;  // the token's runs
    const Combined c = combine_partials(n, part_m + th * S, part_l + th * S, 1, part + th * S * s.Dv + d, s.Dv);
    out[e] = c.den > 0.f ? c.num / c.den : 0.f;
  }
}

// Cascade (FlashInfer's cascade inference; Ye et al., 2024): the tokens of a group (PagedCascade: up to
// kCascadeBlockTokens of them a block) share their sequences' first `keys` keys. One block per (block
// of a group, key/value head, chunk of 32 of its rows, run of the shared keys): its rows are the
// tokens' query heads of that key head — row x·G + g: token tokens[first + x], head kvh·G + g — and
// it reads each shared key once for all of them, where the token-by-token kernel reads it once a
// token. Keys go through shared memory in tiles of 32, widened to f32: lane j scores key j of the tile
// against a row (the rows' queries in shared memory too), the warp's online softmax moves the row's
// max, sum and weighted values (a lane holding value dims lane, lane + 32, …), each warp 8 rows. A
// run's unnormalized result goes to the scratch after the token's own runs (PagedSplit's prefix
// runs), where paged_attention_merge_kernel finds it.
constexpr int kCascadeTile = 32;                            // keys a tile
constexpr int kCascadeWarpRows = 8;                         // rows a warp
constexpr int kCascadeRows = kPagedWarps * kCascadeWarpRows;  // rows a block: 32

// the chunks of 32 rows a block of ≤ max_count tokens may hold (the last ones of a smaller block idle)
__host__ __device__ inline int64_t paged_cascade_chunks(const PagedShape& s, const PagedCascade& c) {
  return (c.max_count * (s.H / s.Hkv) + kCascadeRows - 1) / kCascadeRows;
}
inline int64_t paged_cascade_blocks(const PagedShape& s, const PagedCascade& c) {
  return c.n_blocks * s.Hkv * paged_cascade_chunks(s, c);
}
// the keys' row stride in shared memory: odd, so that the 32 lanes reading dim d of 32 keys hit 32 banks
__host__ __device__ inline int64_t paged_cascade_key_stride(const PagedShape& s) { return s.D | 1; }
// its shared memory (floats): q [32, D], k [32, D | 1], v [32, Dv], a tile key's presence [32]
inline size_t paged_cascade_shared_bytes(const PagedShape& s) {
  return static_cast<size_t>(kCascadeRows * s.D + kCascadeTile * (paged_cascade_key_stride(s) + s.Dv + 1)) * sizeof(float);
}
// The scratch's layout with a cascade: the tokens' own runs as paged_split chooses them (one at least:
// the scratch holds every token's result), then the shared keys cut into P runs of Kp (a multiple of
// the tile), P filling about two blocks an SM with the cascade's blocks, each run ≥ kPagedSplitMinKeys.
inline PagedSplit paged_cascade_split(const PagedShape& s, const PagedCascade& c, int sms) {
  PagedSplit p = paged_split(s, sms);
  const int64_t blocks = paged_cascade_blocks(s, c);
  int64_t P = blocks == 0 ? 1 : (2 * int64_t{sms} + blocks - 1) / blocks;
  P = P < c.max_keys / kPagedSplitMinKeys ? P : c.max_keys / kPagedSplitMinKeys;
  P = P < kPagedMaxSplits ? P : kPagedMaxSplits;
  P = P < 1 ? 1 : P;
  int64_t K = (c.max_keys + P - 1) / P;
  K = (K + kCascadeTile - 1) / kCascadeTile * kCascadeTile;
  p.prefix_keys = K > 0 ? K : kCascadeTile;
  p.prefix_runs = (c.max_keys + p.prefix_keys - 1) / p.prefix_keys;
  p.prefix_runs = p.prefix_runs < 1 ? 1 : p.prefix_runs;
  return p;
}

// For the block's rows (token t = tokens[first + x], head h = kvh·G + g, row x·G + g) and keys
// j = y·Kp … min(keys, (y+1)·Kp) − 1 of their common pages (the first token's block-table row):
//   M = max_j x_j, L = Σ_j e^(x_j − M), acc = Σ_j e^(x_j − M) · v_j,   x_j = scale · q[t, h] · k_j
// to part at run S + y of row (t, h) — an empty run: M = −∞, L = 0, acc = 0. A page outside the
// cache is skipped, as in paged_attention_kernel.
template <typename C>
__global__ void __launch_bounds__(kPagedThreads)
    paged_cascade_kernel(const float* q, const C* k_cache, const C* v_cache, const int32_t* table, const int32_t* seq,
                         PagedShape s, PagedCascade c, PagedSplit split, float* part) {
  QKV_DYNAMIC_SHARED(128, smem);
  const int64_t G = s.H / s.Hkv, chunks = paged_cascade_chunks(s, c), KS = paged_cascade_key_stride(s);
  const int64_t block = blockIdx.x, chunk = block % chunks, kvh = block / chunks % s.Hkv, b = block / chunks / s.Hkv;
  const int64_t first = c.blocks[3 * b], count = c.blocks[3 * b + 1], keys = c.blocks[3 * b + 2];
  const int64_t r0 = chunk * kCascadeRows, rows = count * G - r0 < kCascadeRows ? count * G - r0 : kCascadeRows;
  if (rows <= 0) return;  // (the whole block: a smaller group block's idle chunk)
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  float* qs = reinterpret_cast<float*>(smem);  // [32, D] (scaled)
  float* ks = qs + kCascadeRows * s.D;         // [32, KS]
  float* vs = ks + kCascadeTile * KS;          // [32, Dv]
  float* present = vs + kCascadeTile * s.Dv;   // [32]: 1 where the tile's key j is one to attend to
  auto token_of = [&](int64_t r) { return static_cast<int64_t>(c.tokens[first + (r0 + r) / G]); };
  auto head_of = [&](int64_t r) { return kvh * G + (r0 + r) % G; };

  // qs[r, d] = scale · q[token_of(r), head_of(r), d]
  for (int64_t e = threadIdx.x; e < rows * s.D; e += blockDim.x) {
    const int64_t r = e / s.D, d = e % s.D;
    qs[e] = s.scale * q[(token_of(r) * s.H + head_of(r)) * s.D + d];
  }
  // the group's pages: its first token's block-table row (none for a row outside the table; at most
  // the row's max_pages · page_size keys)
  const int64_t row = seq[c.tokens[first]], cap = s.max_pages * s.page_size;
  const bool row_ok = row >= 0 && row < s.rows;
  const int64_t seen = !row_ok ? 0 : keys < cap ? keys : cap;
  const int32_t* pages = table + (row_ok ? row : 0) * s.max_pages;
  const int64_t y = blockIdx.y, a = y * split.prefix_keys, end = a + split.prefix_keys < seen ? a + split.prefix_keys : seen;

  // the warp's rows: warp·8 … warp·8 + 7 of the block's (wr of them)
  const int64_t w0 = int64_t{warp} * kCascadeWarpRows;
  const int wr = static_cast<int>(rows - w0 < 0 ? 0 : rows - w0 < kCascadeWarpRows ? rows - w0 : kCascadeWarpRows);
  float m[kCascadeWarpRows], l[kCascadeWarpRows], acc[kCascadeWarpRows][kPagedPerLane];
  clear_online(m, l, acc);
  for (int64_t j0 = a; j0 < end; j0 += kCascadeTile) {
    const int64_t n = end - j0 < kCascadeTile ? end - j0 : kCascadeTile;  // the tile's keys
    __syncthreads();  // (the tile before is read; at the first, qs is written)
    // the tile's keys and values, widened: key j0 + j at k[page, kvh, offset]
    for (int64_t e = threadIdx.x; e < n * (s.D + s.Dv); e += blockDim.x) {
      const bool is_k = e < n * s.D;
      const int64_t f = is_k ? e : e - n * s.D, D = is_k ? s.D : s.Dv, j = f / D, d = f % D, key = j0 + j;
      const int64_t page = pages[key / s.page_size];
      const bool ok = page >= 0 && page < s.pages;  // (else 0: its weight is 0, and 0 · 0 adds nothing)
      const int64_t at = ((page * s.Hkv + kvh) * s.page_size + key % s.page_size) * D + d;
      if (is_k) ks[j * KS + d] = ok ? widen(k_cache[at]) : 0.f;
      else vs[j * s.Dv + d] = ok ? widen(v_cache[at]) : 0.f;
    }
    if (threadIdx.x < kCascadeTile) {
      const int64_t j = threadIdx.x, page = j < n ? pages[(j0 + j) / s.page_size] : -1;
      present[j] = page >= 0 && page < s.pages ? 1.f : 0.f;
    }
    __syncthreads();

    // lane j: x_i = q_i · k_j for the warp's rows i (−∞ for a key not present)
    float x[kCascadeWarpRows];
#pragma unroll
    for (int i = 0; i < kCascadeWarpRows; ++i) x[i] = 0.f;
    const bool mine = present[lane] != 0.f;
    if (mine) {
      // four dims at a time: a row's q as one 16-byte load (the same address for every lane: a
      // broadcast), so that the loads are 12 for 32 multiply-adds rather than 9 for 8; then the tail
      // (qs's rows start 16-byte aligned where D is a multiple of 4)
      const int64_t D4 = s.D % 4 == 0 ? s.D : 0;
      for (int64_t d = 0; d < D4; d += 4) {
        const float* kl = ks + lane * KS + d;
        const float k0 = kl[0], k1 = kl[1], k2 = kl[2], k3 = kl[3];
#pragma unroll
        for (int i = 0; i < kCascadeWarpRows; ++i)
          if (i < wr) {
            const float4 qv = *reinterpret_cast<const float4*>(qs + (w0 + i) * s.D + d);
            x[i] += qv.x * k0 + qv.y * k1 + qv.z * k2 + qv.w * k3;
          }
      }
      for (int64_t d = D4; d < s.D; ++d) {
        const float kd = ks[lane * KS + d];
#pragma unroll
        for (int i = 0; i < kCascadeWarpRows; ++i)
          if (i < wr) x[i] += qs[(w0 + i) * s.D + d] * kd;
      }
    }
    // online softmax, each row: m' = max(m, max_j x_j), c = e^(m − m'), p_j = e^(x_j − m');
    // l ← l·c + Σ_j p_j, acc ← acc·c + Σ_j p_j · v_j
    float p[kCascadeWarpRows];
#pragma unroll
    for (int i = 0; i < kCascadeWarpRows; ++i) {
      p[i] = 0.f;
      if (i >= wr) continue;  // (warp-uniform)
      const float xi = mine ? soft_cap(s.softcap, x[i]) : -INFINITY, m_new = fmaxf(m[i], warp_max(xi));
      if (m_new == -INFINITY) continue;  // no key yet (warp-uniform)
      const float cf = expf(m[i] - m_new);
      p[i] = mine ? expf(xi - m_new) : 0.f;
      m[i] = m_new;
      l[i] = l[i] * cf + warp_sum(p[i]);
#pragma unroll
      for (int k = 0; k < kPagedPerLane; ++k) acc[i][k] *= cf;
    }
    for (int j = 0; j < n; ++j) {
      float vr[kPagedPerLane];
#pragma unroll
      for (int k = 0; k < kPagedPerLane; ++k) vr[k] = lane + 32 * k < s.Dv ? vs[j * s.Dv + lane + 32 * k] : 0.f;
#pragma unroll
      for (int i = 0; i < kCascadeWarpRows; ++i) {
        if (i >= wr) break;  // (warp-uniform)
        const float pj = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
        for (int k = 0; k < kPagedPerLane; ++k) acc[i][k] += pj * vr[k];
      }
    }
  }

  // part: acc [T, H, R, Dv], then M and L [T, H, R]; this run is S + y of its rows
  const int64_t R = split.runs(), all = s.T * s.H, run = split.splits + y;
#pragma unroll
  for (int i = 0; i < kCascadeWarpRows; ++i) {
    if (i >= wr) break;
    const int64_t th = token_of(w0 + i) * s.H + head_of(w0 + i);
#pragma unroll
    for (int k = 0; k < kPagedPerLane; ++k)
      if (lane + 32 * k < s.Dv) part[(th * R + run) * s.Dv + lane + 32 * k] = acc[i][k];
    if (lane == 0) part[all * R * s.Dv + th * R + run] = m[i], part[all * R * (s.Dv + 1) + th * R + run] = l[i];
  }
}

// The cascade's groups on the tensor cores (QKV_CUDA_PAGED_KERNEL=mma: bf16 caches, D = Dv = 64 or 128):
// paged_cascade_kernel's blocks, runs and results, where 32 rows against each shared key make the
// products, not the reads, the work — a warp's 8 rows are the m16 tile of paged_attention_mma_kernel,
// each row twice (bf16(q) and its remainder, P likewise), against the tile's 32 keys, which the block
// copies into shared memory by cp.async (bf16 rows of D + 8, `stages` tiles, the next in flight while
// the warps compute), all four warps reading them:
//     S = Q₂ K_tᵀ (16 × 32),  x[r, j] = S[r, j] + S[r + 8, j],  the online softmax of paged_attention_mma_kernel,
//     O ← c ∘ O + P₂ V_t (16 × D),  acc[r] = O[r] + O[r + 8]
// (its shared memory: the tiles of 32 rows as paged_attention_mma_kernel's of each warp's 16)
inline PagedMmaTiles paged_cascade_mma_tiles(const PagedShape& s, size_t element_bytes) {
  return two_row_tiles(s, element_bytes, kCascadeTile, 0);
}

template <typename C, int D>
__global__ void __launch_bounds__(kPagedThreads)
    paged_cascade_mma_kernel(const float* q, const C* k_cache, const C* v_cache, const int32_t* table,
                             const int32_t* seq, PagedShape s, PagedCascade c, PagedSplit split, float* part,
                             int stages) {
  static_assert(D == 64 || D == 128, "the tensor-core cascade: head dims 64 and 128");
  static_assert(std::is_same_v<C, bf16> || std::is_same_v<C, f8e4m3>, "bf16 or e4m3 caches");
  constexpr bool kWiden = std::is_same_v<C, f8e4m3>;
  constexpr int S = D + 8;  // a row's stride in shared memory (elements)
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int kRowsAWarp = kCascadeTile / kPagedWarps;  // a tile's rows each warp copies: 8
  QKV_DYNAMIC_SHARED(128, smem);
  const int64_t G = s.H / s.Hkv, chunks = paged_cascade_chunks(s, c);
  const int64_t block = blockIdx.x, chunk = block % chunks, kvh = block / chunks % s.Hkv, b = block / chunks / s.Hkv;
  const int64_t first = c.blocks[3 * b], count = c.blocks[3 * b + 1], keys = c.blocks[3 * b + 2];
  const int64_t r0 = chunk * kCascadeRows, rows = count * G - r0 < kCascadeRows ? count * G - r0 : kCascadeRows;
  if (rows <= 0) return;  // (the whole block: a smaller group block's idle chunk)
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane / 4, u = lane % 4;
  // bf16: k_tiles, v_tiles [stages][32][S]; e4m3: kr, vr [stages][32][D] bytes, then k16, v16 [32][S]
  constexpr int kRow = kWiden ? D : S * 2;  // a copied row's bytes in shared memory
  unsigned char* const kr = smem;
  unsigned char* const vr = kr + stages * kCascadeTile * kRow;
  uint16_t* const k_tiles = reinterpret_cast<uint16_t*>(kr);
  uint16_t* const v_tiles = reinterpret_cast<uint16_t*>(vr);
  uint16_t* const k16 = reinterpret_cast<uint16_t*>(smem + 2 * stages * kCascadeTile * kRow);
  uint16_t* const v16 = k16 + kCascadeTile * S;
  auto token_of = [&](int64_t r) { return static_cast<int64_t>(c.tokens[first + (r0 + r) / G]); };
  auto head_of = [&](int64_t r) { return kvh * G + (r0 + r) % G; };

  // the warp's rows w0 … w0 + wr − 1 of the block's; this lane's, w0 + g, in Q₂'s rows g (hi) and g + 8
  // (lo), as paged_attention_mma_kernel's (zeros past wr)
  const int64_t w0 = int64_t{warp} * kCascadeWarpRows;
  const int wr = static_cast<int>(rows - w0 < 0 ? 0 : rows - w0 < kCascadeWarpRows ? rows - w0 : kCascadeWarpRows);
  uint32_t qa[D / 16][4];
  two_row_queries<D>(qa, q + (g < wr ? token_of(w0 + g) * s.H + head_of(w0 + g) : 0) * s.D, g < wr, s.scale, u);

  // the group's pages (its first token's block-table row) and this run's keys a … end − 1, as
  // paged_cascade_kernel's
  const int64_t row = seq[c.tokens[first]], cap = s.max_pages * s.page_size;
  const bool row_ok = row >= 0 && row < s.rows;
  const int64_t seen = !row_ok ? 0 : keys < cap ? keys : cap;
  const int32_t* pages = table + (row_ok ? row : 0) * s.max_pages;
  const int64_t y = blockIdx.y, a = y * split.prefix_keys,
                end = a + split.prefix_keys < seen ? a + split.prefix_keys : seen;
  const int64_t n_tiles = end > a ? (end - a + kCascadeTile - 1) / kCascadeTile : 0;
  const BlockKeys run_keys{pages, a, end};
  auto slot_of = [&](int64_t j) { return run_keys.slot(s, kvh, j); };  // −1: past the run, or its page outside
  // tile i into buffer i mod stages: warp w its rows 8w … 8w + 7 (lane r < 8 finds row 8w + r's slot)
  auto copy_tile = [&](int64_t i) {
    const int64_t jt = a + i * kCascadeTile + warp * kRowsAWarp;
    const int64_t at = (i % stages) * kCascadeTile + warp * kRowsAWarp,
                  mine = lane < kRowsAWarp ? slot_of(jt + lane) : -1;
    copy_two_row_tile<C, D, kRowsAWarp>(kr + at * kRow, vr + at * kRow, k_cache, v_cache, mine, lane);
  };

  for (int i = 0; i < stages - 1; ++i) {  // the pipeline's fill, a group a tile (empty past the last)
    if (i < n_tiles) copy_tile(i);
    tiles::cp_async_commit();
  }
  float m = -INFINITY, l = 0.f;  // row w0 + g's running max, and this lane's part of its sum
  float o[D / 8][4];             // O: rows g (regs 0, 1) and g + 8 (2, 3), dims 8dt + 2u, +1
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  for (int64_t i = 0; i < n_tiles; ++i) {
    wait_tiles(stages);  // this thread's copies of tile i have landed
    __syncthreads();     // everyone's; and tile i − 1's buffer is read
    if (i + stages - 1 < n_tiles) copy_tile(i + stages - 1);
    tiles::cp_async_commit();
    const unsigned here = __ballot_sync(kFull, slot_of(a + i * kCascadeTile + lane) >= 0);  // bit j: key j
    if constexpr (kWiden) {  // each warp its 8 rows of the widened tile; then everyone's (block-uniform)
      const int64_t at = ((i % stages) * kCascadeTile + warp * kRowsAWarp) * D;
      if (here != 0)
        widen_two_row_tile<D, kRowsAWarp>(k16 + warp * kRowsAWarp * S, v16 + warp * kRowsAWarp * S, kr + at, vr + at,
                                          lane);
      __syncthreads();
      if (wr > 0 && here != 0) two_row_tile<D, 4>(qa, k16, v16, here, lane, s.softcap, m, l, o);
      // (the next tile's widening waits at its __syncthreads above for these reads)
    } else {
      if (wr == 0 || here == 0) continue;  // (warp-uniform)
      const int64_t at = (i % stages) * kCascadeTile * S;
      two_row_tile<D, 4>(qa, k_tiles + at, v_tiles + at, here, lane, s.softcap, m, l, o);
    }
  }
  tiles::cp_async_wait<0>();  // (the empty groups past the last tile)

  // part: acc [T, H, R, Dv], then M and L [T, H, R]; this run is S + y of its rows
  l += __shfl_xor_sync(kFull, l, 1);
  l += __shfl_xor_sync(kFull, l, 2);
  if (g < wr) {
    const int64_t R = split.runs(), all = s.T * s.H, run = split.splits + y;
    const int64_t th = token_of(w0 + g) * s.H + head_of(w0 + g);
    float* pr = part + (th * R + run) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      pr[8 * dt + 2 * u] = o[dt][0] + o[dt][2];
      pr[8 * dt + 2 * u + 1] = o[dt][1] + o[dt][3];
    }
    if (u == 0) part[all * R * D + th * R + run] = m, part[all * R * (D + 1) + th * R + run] = l;
  }
}

// A dense KV cache as a paged one of one page a sequence (attention_decode_tiled, paged_attention.cu):
// table[b] = b (B rows of one page), and query token t = b·Lq + i of sequence seq[t] = b seeing
// len[t] = Lk keys, or min(i + 1, Lk) when causal (top-left aligned, as AttnProblem's).
__global__ void dense_as_paged_kernel(int32_t* table, int32_t* seq, int32_t* len, int64_t B, int64_t Lq, int64_t Lk,
                                      bool causal) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < B * Lq; e += stride) {
    const int64_t i = e % Lq;
    if (i == 0) table[e / Lq] = static_cast<int32_t>(e / Lq);
    seq[e] = static_cast<int32_t>(e / Lq);
    len[e] = static_cast<int32_t>(causal && i + 1 < Lk ? i + 1 : Lk);
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
