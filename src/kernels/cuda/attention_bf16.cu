// bf16 and f16 attention on the GPU's tensor cores, forward and backward (AttentionCompute::bf16 —
// what Autocast(bf16) trains with — and AttentionCompute::f16): q, k, v and dO rounded to the 16-bit
// format, every product on the tensor cores with f32 accumulation, the softmax in f32, P and dS
// rounded to it for the products they feed. One kernel pair, templated on the element type T
// (__nv_bfloat16: 8 significant bits, f32's range; __half: 11 bits, |x| ≤ 65504); below, "bf16"
// stands for either.
// FlashAttention-2's algorithm, by tiles of 64 (the formulas: attention.cu and kernels/cpu/attention_kernels.h).
//
// Forward: a block of 4 warps owns 64 query rows of one head (16 per warp) and walks the keys in tiles of 64:
//     K_j, V_j → shared memory (bf16)                                 all warps
//     S_w = Q_w K_jᵀ          (16 × 64, wmma 16×16×16 tiles)          each warp, its rows
//     m' = max(m, rowmax S_w), P = e^(S_w − m'), l = l·e^(m − m') + rowsum P, O_w ·= e^(m − m')
//     O_w += (P ∘ Z/(1−p)) V_j  (16 × D, wmma; O_w kept in shared memory in f32)
//   end: O_w / l → out, lse = m + log l (for the backward)
//
// Backward: a block of 4 warps owns 64 keys of one key/value head (16 per warp) and walks the query
// rows of every query head of its group in tiles of 64 (causal: from its own first key on), with
// D_i = rowsum(dO_i ∘ O_i) from a first pass:
//     Q_i, dO_i → shared memory (bf16)                                all warps
//     S = Q_i K_jᵀ,  dP = dO_i V_jᵀ                                   each warp, its 16 query rows
//     P = e^(scale·S + M − lse_i),  W = P ∘ Z/(1−p),  dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i)   (f32 → bf16)
//     dV_j += Wᵀ dO_i,  dK_j += dS'ᵀ Q_i                               each warp, its 16 keys (registers)
//     dQ_i += dS' K_j                                                 each warp, its 16 query rows: f32
//                                                                     atomics into dq (zeroed first)
// dq's atomics make its last bits depend on the order the key blocks finish in (as FlashAttention's
// and PyTorch's flash backward); dk and dv are deterministic.
//
// Written with the portable WMMA API (mma.sync on sm_80/sm_90): the first tensor-core version, since
// rewritten on mma.sync with its accumulators in registers (attention_mma.cu) and on Hopper's wgmma
// (sm90a/attention_wgmma.cu); it serves where QKV_CUDA_ATTENTION=wmma asks (attention_16bit.cu chooses
// among them), for side-by-side measurement and the tests. Head dims 64 and 128 with D = Dv.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cfloat>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

using namespace nvcuda;

// f32 → T, rounded to nearest even
template <typename T>
__device__ inline T to_half(float x);
template <>
__device__ inline __nv_bfloat16 to_half<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half to_half<__half>(float x) {
  return __float2half_rn(x);
}

constexpr int kWarpsBf16 = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kTile = kWarpsBf16 * kRowsPerWarp;  // 64 query rows (forward) or keys (backward) per block
constexpr int kTileK = 64;                         // keys per tile (forward), query rows per step (backward)
constexpr int kThreads = kWarpsBf16 * 32;

template <typename T, typename Layout>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, Layout>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Rows [r0, r0 + kTile) of a [L, D] operand (row stride sl) → bf16 tile in shared memory; rows past L are zeros.
template <typename T, int D>
__device__ inline void load_tile(T* dst, const float* src, int64_t sl, int64_t r0, int64_t L) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    dst[e] = to_half<T>(r0 + r < L ? src[(r0 + r) * sl + c] : 0.f);
  }
}

// ---- forward ----------------------------------------------------------------------------------------

// Shared memory of one forward block for head dim D (bytes): Q, K, V tiles in bf16; S in f32 and P
// in bf16 per warp; O in f32 per warp.
template <int D>
constexpr size_t forward_smem_bytes() {
  return 2 * (kTile * D + 2 * kTileK * D + kTile * kTileK) + sizeof(float) * (kTile * kTileK + kTile * D);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flash_bf16_forward_kernel(AttnProblem p, float* out, float* lse) {
  QKV_DYNAMIC_SHARED(128, smem);
  T* Qs = reinterpret_cast<T*>(smem);   // [kTile][D]
  T* Ks = Qs + kTile * D;                     // [kTileK][D]
  T* Vs = Ks + kTileK * D;                    // [kTileK][D]
  T* Ps = Vs + kTileK * D;                    // [kTile][kTileK]
  float* Ss = reinterpret_cast<float*>(Ps + kTile * kTileK);  // [kTile][kTileK]
  float* Os = Ss + kTile * kTileK;                             // [kTile][D]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hkv);
  const int64_t i0 = int64_t{blockIdx.x} * kTile;
  const float* q = p.q + b * p.q_sb + h * p.q_sh;
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;

  load_tile<T, D>(Qs, q, p.q_sl, i0, p.Lq);
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) Os[e] = 0.f;
  // Row statistics: lanes 2r and 2r+1 of a warp share row r of its 16 (each takes half the columns).
  // Each lane starts its columns at its own offset (`skew`), so that the 32 lanes reading a row-major
  // f32 tile with rows 64 or 128 floats apart hit 32 different shared-memory banks.
  const int row = lane / 2, half = lane % 2, skew = lane;
  const int64_t i = i0 + warp * kRowsPerWarp + row;
  float m = -INFINITY, l = 0.f;
  __syncthreads();

  const int64_t last_row = i0 + kTile - 1 < p.Lq - 1 ? i0 + kTile - 1 : p.Lq - 1;
  const int64_t k_end = p.causal ? (last_row + 1 < p.Lk ? last_row + 1 : p.Lk) : p.Lk;
  T* Pw = Ps + warp * kRowsPerWarp * kTileK;
  float* Sw = Ss + warp * kRowsPerWarp * kTileK;
  float* Ow = Os + warp * kRowsPerWarp * D;
  const T* Qw = Qs + warp * kRowsPerWarp * D;

  for (int64_t j0 = 0; j0 < k_end; j0 += kTileK) {
    load_tile<T, D>(Ks, k, p.k_sl, j0, p.Lk);
    load_tile<T, D>(Vs, v, p.v_sl, j0, p.Lk);
    __syncthreads();

    // S_w = Q_w K_jᵀ: four 16×16 output tiles, D/16 steps each
    for (int n = 0; n < kTileK / 16; ++n) {
      FragAcc acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < D / 16; ++kk) {
        FragA<T, wmma::row_major> a;
        FragB<T, wmma::col_major> bt;  // K rows as Kᵀ's columns
        wmma::load_matrix_sync(a, Qw + kk * 16, D);
        wmma::load_matrix_sync(bt, Ks + n * 16 * D + kk * 16, D);
        wmma::mma_sync(acc, a, bt, acc);
      }
      wmma::store_matrix_sync(Sw + n * 16, acc, kTileK, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over this tile, in f32: each lane its row's half of the 64 columns.
    float* srow = Sw + row * kTileK;
    float tile_max = -INFINITY;
    for (int t = 0; t < 32; ++t) {
      const int c = half * 32 + (t + skew) % 32;
      const float s = i < p.Lq ? masked_score(p, b, h, i, j0 + c, p.scale * srow[c]) : -INFINITY;
      srow[c] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float alpha = m == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : expf(m - m_new);
    float sum = 0.f;
    for (int t = 0; t < 32; ++t) {
      const int c = half * 32 + (t + skew) % 32;
      const float e = m_new == -INFINITY || srow[c] == -INFINITY ? 0.f : expf(srow[c] - m_new);
      sum += e;  // l sums P before dropout; O takes P ∘ Z/(1−p)
      Pw[row * kTileK + c] = to_half<T>(e == 0.f ? 0.f : e * keep(p, b, h, i, j0 + c));
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    for (int t = 0; t < D / 2; ++t) Ow[row * D + half * (D / 2) + (t + skew) % (D / 2)] *= alpha;
    __syncwarp();

    // O_w += P V_j: D/16 output tiles, four steps over the tile's keys
    for (int dt = 0; dt < D / 16; ++dt) {
      FragAcc acc;
      wmma::load_matrix_sync(acc, Ow + dt * 16, D, wmma::mem_row_major);
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        FragA<T, wmma::row_major> a;
        FragB<T, wmma::row_major> bv;
        wmma::load_matrix_sync(a, Pw + kk * 16, kTileK);
        wmma::load_matrix_sync(bv, Vs + kk * 16 * D + dt * 16, D);
        wmma::mma_sync(acc, a, bv, acc);
      }
      wmma::store_matrix_sync(Ow + dt * 16, acc, D, wmma::mem_row_major);
    }
    __syncthreads();  // K_j, V_j are read by every warp before the next tile replaces them
  }

  if (i < p.Lq) {
    float* orow = out + at(p.out_l, b, h, i);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    for (int t = 0; t < D / 2; ++t) {
      const int c = half * (D / 2) + (t + skew) % (D / 2);
      orow[c] = Ow[row * D + c] * inv;
    }
    if (lse && half == 0) lse[(b * p.H + h) * p.Lq + i] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}

// ---- backward ---------------------------------------------------------------------------------------

// Shared memory of one backward block (bytes): K, V, Q, dO tiles and W, dS' in bf16; S, dP in f32
// (at the end, the four warps' 16 × D rows of dK and dV pass through them); lse and D of the step's rows.
template <int D>
constexpr size_t backward_smem_bytes() {
  return 2 * (4 * kTile * D + 2 * kTileK * kTile) + sizeof(float) * (2 * kTileK * kTile + 2 * kTileK);
}
static_assert(2 * kTileK * kTile >= kTile * 128, "S and dP stage the warps' dK/dV rows at D = 128");

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_bf16_backward_kernel(AttnProblem p, const float* lse, const float* Dsum, const float* dout, float* dq,
                               float* dk, float* dv) {
  QKV_DYNAMIC_SHARED(128, smem);
  T* Ks = reinterpret_cast<T*>(smem);  // [kTile keys][D]
  T* Vs = Ks + kTile * D;                    // [kTile keys][D]
  T* Qs = Vs + kTile * D;                    // [kTileK rows][D]
  T* Gs = Qs + kTileK * D;                   // [kTileK rows][D]  dO
  T* Wb = Gs + kTileK * D;                   // [kTileK rows][kTile keys]  P ∘ Z/(1−p)
  T* dSb = Wb + kTileK * kTile;              // [kTileK rows][kTile keys]  scale · dS
  float* Ss = reinterpret_cast<float*>(dSb + kTileK * kTile);  // [kTileK][kTile]
  float* dPs = Ss + kTileK * kTile;                             // [kTileK][kTile]
  float* rowL = dPs + kTileK * kTile;                           // [kTileK]
  float* rowD = rowL + kTileK;                                  // [kTileK]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bhk = blockIdx.y, b = bhk / p.Hkv, hk = bhk % p.Hkv, group = p.H / p.Hkv;
  const int64_t j0 = int64_t{blockIdx.x} * kTile;
  load_tile<T, D>(Ks, p.k + b * p.k_sb + hk * p.k_sh, p.k_sl, j0, p.Lk);
  load_tile<T, D>(Vs, p.v + b * p.v_sb + hk * p.v_sh, p.v_sl, j0, p.Lk);

  FragAcc dV[D / 16], dK[D / 16];  // the warp's 16 keys × D
#pragma unroll
  for (int t = 0; t < D / 16; ++t) wmma::fill_fragment(dV[t], 0.f), wmma::fill_fragment(dK[t], 0.f);

  const int wr = warp * kRowsPerWarp;  // the warp's first row (a step's query rows) or key (the block's keys)
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* q = p.q + b * p.q_sb + h * p.q_sh;
    const int64_t stats = (b * p.H + h) * p.Lq;
    for (int64_t i0 = p.causal ? j0 : 0; i0 < p.Lq; i0 += kTileK) {  // causal: rows i < j0 see none of these keys
      __syncthreads();  // the previous step's readers of Q, dO, W, dS' are done
      load_tile<T, D>(Qs, q, p.q_sl, i0, p.Lq);
      for (int e = threadIdx.x; e < kTileK * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        Gs[e] = to_half<T>(i0 + r < p.Lq ? dout[at(p.dout_l, b, h, i0 + r) + c] : 0.f);
      }
      if (threadIdx.x < kTileK) {
        const int64_t i = i0 + threadIdx.x;
        rowL[threadIdx.x] = i < p.Lq ? lse[stats + i] : -INFINITY;  // −∞: past Lq, or a row that sees no key
        rowD[threadIdx.x] = i < p.Lq ? Dsum[stats + i] : 0.f;
      }
      __syncthreads();

      // S = Q_w K_jᵀ and dP = dO_w V_jᵀ for the warp's 16 rows: four 16×16 tiles each, D/16 steps
      for (int n = 0; n < kTile / 16; ++n) {
        FragAcc s, dp;
        wmma::fill_fragment(s, 0.f);
        wmma::fill_fragment(dp, 0.f);
        for (int kk = 0; kk < D / 16; ++kk) {
          FragA<T, wmma::row_major> a;
          FragB<T, wmma::col_major> bt;
          wmma::load_matrix_sync(a, Qs + wr * D + kk * 16, D);
          wmma::load_matrix_sync(bt, Ks + n * 16 * D + kk * 16, D);
          wmma::mma_sync(s, a, bt, s);
          wmma::load_matrix_sync(a, Gs + wr * D + kk * 16, D);
          wmma::load_matrix_sync(bt, Vs + n * 16 * D + kk * 16, D);
          wmma::mma_sync(dp, a, bt, dp);
        }
        wmma::store_matrix_sync(Ss + wr * kTile + n * 16, s, kTile, wmma::mem_row_major);
        wmma::store_matrix_sync(dPs + wr * kTile + n * 16, dp, kTile, wmma::mem_row_major);
      }
      __syncwarp();

      // W and dS' of the warp's rows, in f32: a row at a time, the lanes along its 64 keys
      for (int r = wr; r < wr + kRowsPerWarp; ++r) {
        const int64_t i = i0 + r;
        const float L = rowL[r], Di = rowD[r];
        for (int c = lane; c < kTile; c += 32) {
          const int e = r * kTile + c;
          const int64_t j = j0 + c;
          const float s = L == -INFINITY ? -INFINITY : masked_score(p, b, h, i, j, p.scale * Ss[e]);
          const float P = s == -INFINITY ? 0.f : expf(s - L);
          const float z = P == 0.f ? 0.f : keep(p, b, h, i, j);
          Wb[e] = to_half<T>(P * z);
          dSb[e] = to_half<T>(p.scale * P * (dPs[e] * z - Di));
        }
      }
      __syncthreads();  // every warp reads all 64 rows of W and dS' below

      // dV_w += Wᵀ dO and dK_w += dS'ᵀ Q over the step's 64 rows (Wᵀ, dS'ᵀ: column-major loads of W, dS')
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        FragA<T, wmma::col_major> wt, dst;
        wmma::load_matrix_sync(wt, Wb + kk * 16 * kTile + wr, kTile);
        wmma::load_matrix_sync(dst, dSb + kk * 16 * kTile + wr, kTile);
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          FragB<T, wmma::row_major> g, qf;
          wmma::load_matrix_sync(g, Gs + kk * 16 * D + dt * 16, D);
          wmma::mma_sync(dV[dt], wt, g, dV[dt]);
          wmma::load_matrix_sync(qf, Qs + kk * 16 * D + dt * 16, D);
          wmma::mma_sync(dK[dt], dst, qf, dK[dt]);
        }
      }

      // dQ += dS' K_j for the warp's 16 rows, four 16-column tiles at a time through the warp's rows
      // of S (free now), then added into dq — a row at a time, the lanes along its columns.
      float* stage = Ss + wr * kTile;
      for (int dt0 = 0; dt0 < D / 16; dt0 += 4) {
        for (int t = 0; t < 4; ++t) {
          FragAcc acc;
          wmma::fill_fragment(acc, 0.f);
          for (int kk = 0; kk < kTile / 16; ++kk) {
            FragA<T, wmma::row_major> a;
            FragB<T, wmma::row_major> kf;
            wmma::load_matrix_sync(a, dSb + wr * kTile + kk * 16, kTile);
            wmma::load_matrix_sync(kf, Ks + kk * 16 * D + (dt0 + t) * 16, D);
            wmma::mma_sync(acc, a, kf, acc);
          }
          wmma::store_matrix_sync(stage + t * 16, acc, kTile, wmma::mem_row_major);
        }
        __syncwarp();
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const int64_t i = i0 + wr + r;
          if (i >= p.Lq || rowL[wr + r] == -INFINITY) continue;  // (warp-uniform)
          float* dst_row = dq + at(p.dq_l, b, h, i) + dt0 * 16;
          for (int c = lane; c < 64; c += 32) atomicAdd(dst_row + c, stage[r * kTile + c]);
        }
        __syncwarp();
      }
    }
  }

  // dK, dV of the warp's 16 keys → global, through shared memory (S and dP hold 4 warps × 16 × D floats)
  __syncthreads();
  float* stage = Ss + wr * D;
  auto write_rows = [&](FragAcc(&acc)[D / 16], float* base, const HeadLayout& l) {
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) wmma::store_matrix_sync(stage + dt * 16, acc[dt], D, wmma::mem_row_major);
    __syncwarp();
    for (int r = 0; r < kRowsPerWarp && j0 + wr + r < p.Lk; ++r) {
      float* dst_row = base + at(l, b, hk, j0 + wr + r);
      for (int c = lane; c < D; c += 32) dst_row[c] = stage[r * D + c];
    }
    __syncwarp();
  };
  write_rows(dV, dv, p.dv_l);
  write_rows(dK, dk, p.dk_l);
}

template <typename T, int D>
void launch_wmma_forward(const AttnProblem& p, float* out, float* lse, cudaStream_t s) {
  constexpr size_t bytes = forward_smem_bytes<D>();  // over the default 48 KB: raised for the kernel
  QKV_CUDA_CHECK(cudaFuncSetAttribute(flash_bf16_forward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lq + kTile - 1) / kTile), static_cast<unsigned>(p.B * p.H));
  QKV_LAUNCH(grid, kThreads, bytes, s, flash_bf16_forward_kernel<T, D>)(p, out, lse);
  QKV_CUDA_LAUNCHED(flash_bf16_forward_kernel);
}

// (dq zeroed and Dsum = D_i by the caller, as the mma.sync backward takes them)
template <typename T, int D>
void launch_wmma_backward(const AttnProblem& p, const float* lse, const float* Dsum, const float* dout, float* dq,
                          float* dk, float* dv, cudaStream_t s) {
  constexpr size_t bytes = backward_smem_bytes<D>();
  QKV_CUDA_CHECK(cudaFuncSetAttribute(flash_bf16_backward_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lk + kTile - 1) / kTile), static_cast<unsigned>(p.B * p.Hkv));
  QKV_LAUNCH(grid, kThreads, bytes, s, flash_bf16_backward_kernel<T, D>)(p, lse, Dsum, dout, dq, dk, dv);
  QKV_CUDA_LAUNCHED(flash_bf16_backward_kernel);
}

}  // namespace

// The WMMA pair's entry points (attention_kernels.h): head dims 64 and 128, D = Dv
void attention_forward_wmma_bf16(const AttnProblem& p, float* out, float* lse) {
  if (p.D == 64) return launch_wmma_forward<__nv_bfloat16, 64>(p, out, lse, stream());
  launch_wmma_forward<__nv_bfloat16, 128>(p, out, lse, stream());
}
void attention_forward_wmma_f16(const AttnProblem& p, float* out, float* lse) {
  if (p.D == 64) return launch_wmma_forward<__half, 64>(p, out, lse, stream());
  launch_wmma_forward<__half, 128>(p, out, lse, stream());
}
void attention_backward_wmma_bf16(const AttnProblem& p, const float* lse, const float* Dsum, const float* dout,
                                  float* dq, float* dk, float* dv) {
  if (p.D == 64) return launch_wmma_backward<__nv_bfloat16, 64>(p, lse, Dsum, dout, dq, dk, dv, stream());
  launch_wmma_backward<__nv_bfloat16, 128>(p, lse, Dsum, dout, dq, dk, dv, stream());
}
void attention_backward_wmma_f16(const AttnProblem& p, const float* lse, const float* Dsum, const float* dout,
                                 float* dq, float* dk, float* dv) {
  if (p.D == 64) return launch_wmma_backward<__half, 64>(p, lse, Dsum, dout, dq, dk, dv, stream());
  launch_wmma_backward<__half, 128>(p, lse, Dsum, dout, dq, dk, dv, stream());
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
