// The bf16 attention forward on the GPU's tensor cores (inference: AttentionCompute::bf16), the
// counterpart of the CPU's AVX512-BF16 kernel (kernels/cpu/attention.h): q, k, v rounded to bf16,
// S = scale·Q Kᵀ and O = P V on the tensor cores with f32 accumulation, the softmax in f32 (P
// rounded to bf16 for the second product). The flash algorithm of attention.cu, by tiles:
//
//   a block of 4 warps owns 64 query rows of one head (16 per warp) and walks the keys in tiles of 64:
//     K_j, V_j → shared memory (bf16)                                 all warps
//     S_w = Q_w K_jᵀ          (16 × 64, wmma 16×16×16 tiles)          each warp, its rows
//     m' = max(m, rowmax S_w), P = e^(S_w − m'), l = l·e^(m − m') + rowsum P, O_w ·= e^(m − m')
//     O_w += P V_j            (16 × D, wmma; O_w kept in shared memory in f32)
//   end: O_w / l → out, lse = m + log l
//
// Written with the portable WMMA API (mma.sync on sm_80/sm_90): the first tensor-core version, to be
// measured on a lent GPU against PyTorch's flash / cuDNN SDPA and then rewritten on Hopper's wgmma
// and the bulk copy engine where the figures say so (docs/CUDA.md). Head dims 64 and 128 with D = Dv;
// other shapes, and dropout, take the f32 kernels over bf16-rounded copies (the same rounding).
#include <cuda_bf16.h>
#include <mma.h>

#include <cfloat>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarpsBf16 = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kTileQ = kWarpsBf16 * kRowsPerWarp;  // 64 query rows per block
constexpr int kTileK = 64;                           // keys per tile

// Shared memory of one block for head dim D (bytes): Q, K, V tiles in bf16; S in f32 and P in bf16
// per warp; O in f32 per warp.
template <int D>
constexpr size_t smem_bytes() {
  return sizeof(__nv_bfloat16) * (kTileQ * D + 2 * kTileK * D + kTileQ * kTileK) +
         sizeof(float) * (kTileQ * kTileK + kTileQ * D);
}

template <int D>
__global__ void __launch_bounds__(kWarpsBf16 * 32) flash_bf16_kernel(AttnProblem p, float* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem);   // [kTileQ][D]
  __nv_bfloat16* Ks = Qs + kTileQ * D;                           // [kTileK][D]
  __nv_bfloat16* Vs = Ks + kTileK * D;                           // [kTileK][D]
  __nv_bfloat16* Ps = Vs + kTileK * D;                           // [kTileQ][kTileK]
  float* Ss = reinterpret_cast<float*>(Ps + kTileQ * kTileK);    // [kTileQ][kTileK]
  float* Os = Ss + kTileQ * kTileK;                              // [kTileQ][D]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hkv);
  const int64_t i0 = int64_t{blockIdx.x} * kTileQ;
  const float* q = p.q + b * p.q_sb + h * p.q_sh;
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;

  // Q tile (rows past Lq are zeros), O = 0
  for (int e = threadIdx.x; e < kTileQ * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    Qs[e] = __float2bfloat16_rn(i0 + r < p.Lq ? q[(i0 + r) * p.q_sl + c] : 0.f);
    Os[e] = 0.f;
  }
  // Row statistics: lanes 2r and 2r+1 of a warp share row r of its 16 (each takes half the columns).
  const int row = lane / 2, half = lane % 2;
  const int64_t i = i0 + warp * kRowsPerWarp + row;
  float m = -INFINITY, l = 0.f;
  __syncthreads();

  const int64_t last_row = i0 + kTileQ - 1 < p.Lq - 1 ? i0 + kTileQ - 1 : p.Lq - 1;
  const int64_t k_end = p.causal ? (last_row + 1 < p.Lk ? last_row + 1 : p.Lk) : p.Lk;
  __nv_bfloat16* Pw = Ps + warp * kRowsPerWarp * kTileK;
  float* Sw = Ss + warp * kRowsPerWarp * kTileK;
  float* Ow = Os + warp * kRowsPerWarp * D;
  const __nv_bfloat16* Qw = Qs + warp * kRowsPerWarp * D;

  for (int64_t j0 = 0; j0 < k_end; j0 += kTileK) {
    for (int e = threadIdx.x; e < kTileK * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      const bool in = j0 + r < p.Lk;
      Ks[e] = __float2bfloat16_rn(in ? k[(j0 + r) * p.k_sl + c] : 0.f);
      Vs[e] = __float2bfloat16_rn(in ? v[(j0 + r) * p.v_sl + c] : 0.f);
    }
    __syncthreads();

    // S_w = Q_w K_jᵀ: four 16×16 output tiles, D/16 steps each
    for (int n = 0; n < kTileK / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> bt;  // K rows as Kᵀ's columns
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
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float s = i < p.Lq ? masked_score(p, b, h, i, j0 + c, p.scale * srow[c]) : -INFINITY;
      srow[c] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float alpha = m == -INFINITY ? (m_new == -INFINITY ? 1.f : 0.f) : expf(m - m_new);
    float sum = 0.f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float e = m_new == -INFINITY || srow[c] == -INFINITY ? 0.f : expf(srow[c] - m_new);
      sum += e;
      Pw[row * kTileK + c] = __float2bfloat16_rn(e);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) Ow[row * D + c] *= alpha;
    __syncwarp();

    // O_w += P V_j: D/16 output tiles, four steps over the tile's keys
    for (int dt = 0; dt < D / 16; ++dt) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Ow + dt * 16, D, wmma::mem_row_major);
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> bv;
        wmma::load_matrix_sync(a, Pw + kk * 16, kTileK);
        wmma::load_matrix_sync(bv, Vs + kk * 16 * D + dt * 16, D);
        wmma::mma_sync(acc, a, bv, acc);
      }
      wmma::store_matrix_sync(Ow + dt * 16, acc, D, wmma::mem_row_major);
    }
    __syncthreads();  // K_j, V_j are read by every warp before the next tile replaces them
  }

  if (i < p.Lq) {
    float* orow = out + b * p.out_l.sb + h * p.out_l.sh + i * p.out_l.sl;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) orow[c] = Ow[row * D + c] * inv;
  }
}

template <int D>
void launch_bf16(const AttnProblem& p, float* out, cudaStream_t s) {
  constexpr size_t bytes = smem_bytes<D>();  // over the default 48 KB: raised for the kernel (each launch's device)
  QKV_CUDA_CHECK(cudaFuncSetAttribute(flash_bf16_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lq + kTileQ - 1) / kTileQ), static_cast<unsigned>(p.B * p.H));
  flash_bf16_kernel<D><<<grid, kWarpsBf16 * 32, bytes, s>>>(p, out);
  QKV_CUDA_LAUNCHED(flash_bf16_kernel);
}

}  // namespace

void attention_forward_flash_bf16(const AttnProblem& p, float* out) {
  if (p.B * p.H * p.Lq == 0 || p.Dv == 0) return;
  QKV_CHECK(p.B * p.H <= 65535, "scaled_dot_product_attention (bf16): B·H = ", p.B * p.H,
            " exceeds the CUDA grid's 65535 (run in smaller batches)");
  cudaStream_t s = stream();
  const bool tiles = p.D == p.Dv && (p.D == 64 || p.D == 128) && p.dropout_p == 0.f;
  if (tiles && p.D == 64) return launch_bf16<64>(p, out, s);
  if (tiles && p.D == 128) return launch_bf16<128>(p, out, s);
  // Other shapes: the f32 kernels over bf16-rounded dense copies of q, k, v (the same rounding).
  AttnProblem r = p;
  const int64_t nq = p.B * p.H * p.Lq * p.D, nk = p.B * p.Hkv * p.Lk * p.D, nv = p.B * p.Hkv * p.Lk * p.Dv;
  float* buf = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&buf), (nq + nk + nv) * sizeof(float), s));
  auto dense = [&](const float* src, int64_t heads, int64_t L, int64_t d, int64_t sb, int64_t sh, int64_t sl,
                   float* dst) {
    copy_strided_to({p.B, heads, L, d}, dst, {heads * L * d, L * d, d, 1}, src, {sb, sh, sl, 1}, sizeof(float));
    round_to_bf16(dst, dst, p.B * heads * L * d);
  };
  dense(p.q, p.H, p.Lq, p.D, p.q_sb, p.q_sh, p.q_sl, buf);
  dense(p.k, p.Hkv, p.Lk, p.D, p.k_sb, p.k_sh, p.k_sl, buf + nq);
  dense(p.v, p.Hkv, p.Lk, p.Dv, p.v_sb, p.v_sh, p.v_sl, buf + nq + nk);
  r.q = buf, r.q_sb = p.H * p.Lq * p.D, r.q_sh = p.Lq * p.D, r.q_sl = p.D;
  r.k = buf + nq, r.k_sb = p.Hkv * p.Lk * p.D, r.k_sh = p.Lk * p.D, r.k_sl = p.D;
  r.v = buf + nq + nk, r.v_sb = p.Hkv * p.Lk * p.Dv, r.v_sh = p.Lk * p.Dv, r.v_sl = p.Dv;
  attention_forward_flash(r, out, nullptr);
  QKV_CUDA_CHECK(cudaFreeAsync(buf, s));
}

}  // namespace qkv::kernels::cuda
