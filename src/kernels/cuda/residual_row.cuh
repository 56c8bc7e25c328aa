// A normalizing kernel's row, with the residual added first (add_layer_norm, add_rms_norm): one block a
// row (residual_row), or up to 1,024 elements a warp a row (warp_row, below). With Add, s = x + drop(res)
// is written to `sum` (rounded as an addition would: the backward's input; drop: kernels/dropout_mask.h,
// the dropped residual dropout_kernel's bits) and normalized; without, x itself. In residual_row each
// thread adds f(element) over the elements it visits (j = threadIdx.x, + blockDim.x, …) into `partial`,
// the first of the norm's sums (Σx for LayerNorm's mean, Σx² for RMSNorm's), and later reads back only
// those elements.
#pragma once

#include <cstdint>

#include "kernels/cuda/bf16_bits.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"

namespace qkv::kernels::cuda {

// Returns the row the norm reads: sum's when Add, x's otherwise.
template <bool Add, class F>
__device__ inline const float* residual_row(const float* x, const float* res, const DropoutMask& drop, float* sum,
                                            int64_t n, F f, float& partial) {
  const int64_t at = blockIdx.x * n;
  if constexpr (Add) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float r = res[at + j];
      const float v = __fadd_rn(x[at + j], drop.active() ? drop(r, static_cast<uint64_t>(at + j)) : r);
      sum[at + j] = v;
      partial += f(v);
    }
    return sum + at;
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) partial += f(x[at + j]);
    return x + at;
  }
}

// ---- rows of at most 1,024: a warp a row (layer_norm_kernels.cuh, rms_norm_kernels.cuh) ---------------
// A row of n ≤ 32·P elements held in a warp's registers, lane l holding elements l, l + 32, … (each of the
// row's P loads a coalesced 128 bytes, all P in flight at once), its sums by shuffles: no shared memory and
// no barrier. One block of 256 threads a row left most of them idle at the models' 256–1,024 and paid a
// block-wide reduction (shuffles, shared memory, two barriers) for each of the row's sums (the GPT's
// add_layer_norm on the H200, 2026-12-04: 60 / 105 µs a call forward / backward over [16384, 384], ~2–3×
// its bytes' time). kWarpRowsABlock rows a block of 256 threads.
constexpr int kWarpRowsABlock = 8;
constexpr int64_t kWarpRowMax = 1024;
// P for a row of n ≤ kWarpRowMax: the power of two ≥ ⌈n / 32⌉
inline int warp_row_slots(int64_t n) {
  int p = 1;
  while (32 * int64_t{p} < n) p *= 2;
  return p;
}
// f.template operator()<P>() for the warp kernels' P at a row of n ≤ kWarpRowMax (launchers)
template <class F>
void by_warp_row_slots(int64_t n, F f) {
  switch (warp_row_slots(n)) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 4:
      return f.template operator()<4>();
    case 8:
      return f.template operator()<8>();
    case 16:
      return f.template operator()<16>();
    default:
      return f.template operator()<32>();
  }
}
inline unsigned warp_rows_grid(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpRowsABlock - 1) / kWarpRowsABlock);
}
// Where a thread of a warp_rows_grid launch works: its warp's row (rows or past it: the warp has none and
// returns whole, so the shuffles see every lane of the warps that stay), the row's first element, its lane
struct WarpRowPlace {
  int64_t row, at;
  int lane;
};
__device__ inline WarpRowPlace warp_row_place(int64_t n) {
  const int64_t row = blockIdx.x * int64_t{kWarpRowsABlock} + threadIdx.x / 32;
  return {row, row * n, static_cast<int>(threadIdx.x % 32)};
}
// The warp's row: v[t] = element lane + 32t of the row at `at` (0 past n) — x's, or with Add s = x + drop(res),
// rounded as the addition and written to sum; the sum of f over the row's elements (every lane gets it).
template <bool Add, int P, class F>
__device__ inline float warp_row(const float* x, const float* res, const DropoutMask& drop, float* sum, int64_t at,
                                 int64_t n, int lane, float (&v)[P], F f) {
  float partial = 0.f;
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int64_t j = lane + 32 * t;
    v[t] = 0.f;
    if (j >= n) continue;
    if constexpr (Add) {
      const float r = res[at + j];
      v[t] = __fadd_rn(x[at + j], drop.active() ? drop(r, static_cast<uint64_t>(at + j)) : r);
      sum[at + j] = v[t];
    } else {
      v[t] = x[at + j];
    }
    partial += f(v[t]);
  }
  return warp_sum(partial);
}

// The backward's warp row (the norms' dx): g[t] = dy·γ and xv[t] = x of element lane + 32t of the row at
// `at` (both 0 past n), each element then handed to each(xv[t], g[t]) as it is loaded — the kernel's own
// sums, and LayerNorm's x̂ in xv's place
template <int P, class Each>
__device__ inline void warp_row_gradient(const float* x, const float* gamma, const float* dy, int64_t at, int64_t n,
                                         int lane, float (&xv)[P], float (&g)[P], Each each) {
#pragma unroll
  for (int t = 0; t < P; ++t) {
    const int64_t j = lane + 32 * t;
    xv[t] = g[t] = 0.f;
    if (j >= n) continue;
    g[t] = dy[at + j] * (gamma ? gamma[j] : 1.f);
    xv[t] = x[at + j];
    each(xv[t], g[t]);
  }
}

// The backward's counterpart (kernels/residual_gradient.h): element i of the norm's dx is v; writes
// dx[i] = v + dsum[i] (rounded as the addition of two gradients), dres[i] = drop(dx[i]) and the
// residual's gradient's bf16 copy.
__device__ inline void residual_gradient_at(const ResidualGradient& res, int64_t i, float v, float* dx) {
  if (res.dsum) v = __fadd_rn(v, res.dsum[i]);
  dx[i] = v;
  if (res.dres) res.dres[i] = v = res.drop.active() ? res.drop(v, static_cast<uint64_t>(i)) : v;
  if (res.grad16) reinterpret_cast<uint16_t*>(res.grad16)[i] = to_bf16_bits(v);
}

// y16[i] = bf16(v) when the copy is wanted (ops/autocast.h's activation copies)
__device__ inline void store_bf16(bf16* y16, int64_t i, float v) {
  if (y16) reinterpret_cast<uint16_t*>(y16)[i] = to_bf16_bits(v);
}

}  // namespace qkv::kernels::cuda
