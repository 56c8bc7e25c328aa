// The bf16 / f16 attention backward at head dim 256 on Hopper's wgmma (sm_90a): the backward's
// arithmetic (attention_wgmma_kernels.cuh, above its backward kernel) in a block shaped for 256 dims,
// where the other backwards' shape does not fit: their 128 keys a block, each operand also copied
// transposed, would want 224 KB of shared memory before dS', and one warpgroup cannot hold dK and dV
// for 64 keys × 256 dims (256 accumulators a thread). attention_wgmma.cu launches it; g++ runs it under
// tests/kernels/cuda_emulation.h (tests/kernels/attention_wgmma_emulation_test.cpp).
//
// Pre-pass: the dense T copies of q, dO [B, H, Lq, D] and k, v [B, Hkv, Lk, D] alone. No transposed
// copies: each tile serves both of its products, read K-major by one and MN-major by the other (the
// instruction's transpose bits; sm90a/wgmma.cuh).
//
// Block: 2 warpgroups (256 threads), 64 keys of one key/value head; every query head of its group, its
// rows in steps of 64 (causal: from the block's first key). Warpgroup w computes the step's scores for
// rows 32w … 32w + 31 and the gradients' dims 128w … 128w + 127. Per step i:
//     Sᵀ_w  = K Q_i[32w…]ᵀ                   wgmma m64n32k16, K-major A (K) and B (Q_i's rows), 16 steps
//     dPᵀ_w = V dO_i[32w…]ᵀ                  (the same on V, dO_i; left running under P's exponentials)
//     P = e^(c(scale·S) + M − lse_i),  W = P ∘ Z/(1−p)       → shared memory, [key][row]
//     dS' = scale · P ∘ (dP ∘ Z/(1−p) − D_i) ∘ c′             → shared memory, [key][row]
//   (c a soft cap and c′ = 1 − (c/cap)² its slope in the Capped kernel, c′ in registers; else c(x) = x)
//   [both warpgroups: W and dS' whole]
//     dV[:, 128w…] += W dO_i[:, 128w…]       m64n128k16, A = W (K-major: keys × rows), B = dO_i N-major
//     dK[:, 128w…] += dS'ᵀ Q_i[:, 128w…]     A = dS' (K-major), B = Q_i N-major
//     dQ_i[:, 128w…] = dS' K[:, 128w…]       A = dS' read M-major (rows × keys), B = K N-major
// dQ_i added into dq with f32 atomics (the key blocks' order sets dq's last bits, as in the other
// backwards); dK and dV (64 + 64 accumulators a thread) stay in registers to the block's end. The next
// step's Q_i, dO_i come by cp.async into the other of two buffers while this step computes.
// Shared memory: K, V, 2 × (Q_i, dO_i) at 32 KB each, W and dS' at 8 KB: 209 KB.
#pragma once

#include "kernels/cuda/sm90a/attention_wgmma_kernels.cuh"

namespace qkv::kernels::cuda {
namespace {

constexpr int kBwd256Keys = 64;  // keys a block
constexpr int kBwd256Rows = 64;  // query rows a step
constexpr int kBwd256Threads = kThreads;  // two warpgroups (copy_rows strides by kThreads)

constexpr size_t backward256_smem_bytes() {
  constexpr size_t tile = size_t{64} * 256 * 2;  // a 64-row tile of 256 dims, T
  // K, V; two buffers of Q_i, dO_i; W, dS' [64][64]; two of the step's lse and D_i; 1024 to align the base
  return 1024 + 6 * tile + 2 * size_t{kBwd256Keys} * kBwd256Rows * 2 + 2 * sizeof(float) * kBwd256Rows;
}
static_assert(backward256_smem_bytes() <= 227 * 1024, "an H100's shared memory a block");

template <typename T, bool General, bool Capped = false>  // (Capped: General's, with a soft cap)
__global__ void __launch_bounds__(kBwd256Threads, 1)
    flash_wgmma_backward256_kernel(AttnProblem p, const T* qh, const T* gh, const T* kh, const T* vh, const float* lse,
                                   const float* Dsum, float* dq, float* dk, float* dv) {
  constexpr int D = 256, kTile = 64 * D * 2, kBlock = 64 * 128;  // a 64-row tile's bytes; a column block's
  QKV_DYNAMIC_SHARED(1, smem);
  unsigned char* Ks = smem + ((1024 - smem_address(smem) % 1024) % 1024);  // [4][64 keys][64]
  unsigned char* Vs = Ks + kTile;                                           // [4][64 keys][64]
  unsigned char* QG = Vs + kTile;                                           // [2]: Q_i, dO_i [4][64 rows][64]
  unsigned char* Ws = QG + 4 * kTile;                                       // [64 keys][64 rows]  W
  unsigned char* dSs = Ws + kBwd256Keys * kBwd256Rows * 2;                  // [64 keys][64 rows]  dS'
  float* rowL = reinterpret_cast<float*>(dSs + kBwd256Keys * kBwd256Rows * 2);  // [64] lse
  float* rowD = rowL + kBwd256Rows;                                             // [64] D_i
  auto Q = [&](int64_t n) { return QG + (n % 2) * 2 * kTile; };
  auto G = [&](int64_t n) { return QG + (n % 2) * 2 * kTile + kTile; };

  const int wg = static_cast<int>(threadIdx.x / 128), warp = threadIdx.x % 128 / 32;
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int64_t bhk = blockIdx.y, b = bhk / p.Hkv, hk = bhk % p.Hkv, j0 = int64_t{blockIdx.x} * kBwd256Keys;
  const int64_t key[2] = {j0 + 16 * warp + g, j0 + 16 * warp + g + 8};  // this thread's keys (rows of Sᵀ, dK, dV)
  const bool dropout = General && p.dropout_p > 0.f;
  const int64_t group = p.H / p.Hkv, h_begin = hk * group, h_end = h_begin + group, first_i0 = p.causal ? j0 : 0;

  copy_rows<T, D>(Ks, kh + bhk * p.Lk * D, j0, p.Lk, kBwd256Keys);
  copy_rows<T, D>(Vs, vh + bhk * p.Lk * D, j0, p.Lk, kBwd256Keys);
  auto copy_step = [&](int64_t h, int64_t i0, int64_t n) {
    const int64_t bh = b * p.H + h;
    copy_rows<T, D>(Q(n), qh + bh * p.Lq * D, i0, p.Lq, kBwd256Rows);
    copy_rows<T, D>(G(n), gh + bh * p.Lq * D, i0, p.Lq, kBwd256Rows);
  };
  if (first_i0 < p.Lq) copy_step(h_begin, first_i0, 0);
  cp_async_commit();
  if (first_i0 < p.Lq) rows::stage_rows<kBwd256Rows>(rowL, rowD, p, lse, Dsum, (b * p.H + h_begin) * p.Lq, first_i0);

  float dK[16][4], dV[16][4];  // keys key[0], key[1] × dims 128·wg + 8n + 2t (+1)
#pragma unroll
  for (int n = 0; n < 16; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dK[n][e] = dV[n][e] = 0.f;
  float(&dKf)[64] = *reinterpret_cast<float(*)[64]>(&dK[0][0]);  // as wgmma's accumulators
  float(&dVf)[64] = *reinterpret_cast<float(*)[64]>(&dV[0][0]);

  int64_t n = 0;
  for (int64_t h = h_begin; h < h_end; ++h)
    for (int64_t i0 = first_i0; i0 < p.Lq; i0 += kBwd256Rows, ++n) {
      cp_async_wait<0>();
      fence_proxy_async();
      __syncthreads();  // the step's Q_i, dO_i, lse, D_i in place (K, V too, at the first); the step before done

      // Sᵀ_w, dPᵀ_w: 64 keys × the warpgroup's 32 rows, over the 256 dims; s[n][e] is key key[e / 2],
      // row iw + 8n + 2t + e % 2
      const int64_t iw = i0 + 32 * wg;
      float s[4][4], dp[4][4];
      float(&sf)[16] = *reinterpret_cast<float(*)[16]>(&s[0][0]);
      float(&dpf)[16] = *reinterpret_cast<float(*)[16]>(&dp[0][0]);
      auto issue_scores = [&](float(&acc)[16], const unsigned char* X, const unsigned char* Y) {
        fence_registers(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          wgmma_ss<T, 32>(acc, smem_descriptor(X + (kk / 4) * kBlock + (kk % 4) * 32),
                          smem_descriptor(Y + (kk / 4) * kBlock + 32 * wg * 128 + (kk % 4) * 32), kk > 0);
        wgmma_commit();
      };
      issue_scores(sf, Ks, Q(n));
      issue_scores(dpf, Vs, G(n));

      // the next step's tiles (cp.async, into the other buffers: read last by the step before) and
      // lse, D_i (registers) on their way during this one
      rows::RowStats next_stats;
      const rows::NextStep next = rows::prefetch_next_step<kBwd256Rows>(
          p, lse, Dsum, b, h, i0, first_i0, h_end, [&](int64_t nh, int64_t ni0) { copy_step(nh, ni0, n + 1); },
          next_stats);

      const bool plain = rows::plain_step<General>(p, j0, kBwd256Keys, i0, kBwd256Rows);
      auto z = [&](int nn, int e) {
        return dropout ? keep(p, b, h, iw + nn * 8 + 2 * t + e % 2, key[e / 2]) : 1.f;
      };
      // an accumulator tile of the warpgroup's rows → [key][row] in shared memory (swizzled, two rows a store)
      auto store_keys_by_rows = [&](unsigned char* dst, const float(&x)[4][4], bool scaled_by_z) {
#pragma unroll
        for (int nn = 0; nn < 4; ++nn)
#pragma unroll
          for (int e = 0; e < 4; e += 2) {
            const int c = 16 * warp + g + 8 * (e / 2), r = 32 * wg + 8 * nn + 2 * t;
            const uint32_t v = scaled_by_z ? pack2<T>(x[nn][e] * z(nn, e), x[nn][e + 1] * z(nn, e + 1))
                                           : pack2<T>(x[nn][e], x[nn][e + 1]);
            *reinterpret_cast<uint32_t*>(dst + swizzled(c, r / 8) + (r % 8) * 2) = v;
          }
      };
      wgmma_wait<1>();  // Sᵀ
      fence_registers(sf);
      float slopes[4][4];  // a soft cap's c′ of each element (Capped: 16 registers, P to dS')
      auto slope = rows::slope_if<Capped>([&](int nn, int e) -> float& { return slopes[nn][e]; });
      rows::probabilities<General>(s, p, b, h, iw, key, rowL + 32 * wg, t, plain, slope);  // P
      store_keys_by_rows(Ws, s, true);                                                     // W = P ∘ Z/(1−p)
      wgmma_wait<0>();  // dPᵀ
      fence_registers(dpf);
      rows::score_gradients(dp, s, p.scale, rowD + 32 * wg, t, z, slope);  // dS'
      store_keys_by_rows(dSs, dp, false);
      bool sees[2];  // whether this thread's rows of dQ see a key (lse > −∞)
      for (int r = 0; r < 2; ++r) sees[r] = rowL[16 * warp + g + 8 * r] != -INFINITY;
      fence_proxy_async();  // W, dS' written by the generic proxy, read next by wgmma
      __syncthreads();      // both warpgroups' rows of W and dS' in place; this step's lse, D_i read
      if (next.exists) rows::store_row_stats<kBwd256Rows>(rowL, rowD, next_stats);

      // dV, dK += Wᵀ, dS'ᵀ (keys × rows, K-major) times dO_i, Q_i's dims 128·wg … (N-major: 16 rows a step
      // along the contraction, +2048 bytes; two column blocks 8 KB apart)
      fence_registers(dVf);
      fence_registers(dKf);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBwd256Rows / 16; ++kk) {
        wgmma_ss<T, 128, 0, 1>(dVf, smem_descriptor(Ws + kk * 32),
                               smem_descriptor_mn(G(n) + 2 * wg * kBlock + kk * 2048, kBlock), 1);
        wgmma_ss<T, 128, 0, 1>(dKf, smem_descriptor(dSs + kk * 32),
                               smem_descriptor_mn(Q(n) + 2 * wg * kBlock + kk * 2048, kBlock), 1);
      }
      wgmma_commit();
      // dQ_i[:, 128·wg …] = dS' K: A = dS' read M-major (rows × keys), B = K's dims 128·wg … N-major
      float acc[16][4];
      float(&accf)[64] = *reinterpret_cast<float(*)[64]>(&acc[0][0]);
      fence_registers(accf);
#pragma unroll
      for (int kk = 0; kk < kBwd256Keys / 16; ++kk)
        wgmma_ss<T, 128, 1, 1>(accf, smem_descriptor_mn(dSs + kk * 2048, kBlock),
                               smem_descriptor_mn(Ks + 2 * wg * kBlock + kk * 2048, kBlock), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(dVf);
      fence_registers(dKf);
      fence_registers(accf);
      rows::add_dq_rows(p, dq, b, h, i0, 16 * warp, 128 * wg, sees, acc, g, t);
    }
  cp_async_wait<0>();  // a block with no step (causal, its first key past Lq): K, V's copies to be waited for
  rows::write_dk_dv(p, dk + 128 * wg, dv + 128 * wg, b, hk, key, dK, dV, t);
}

}  // namespace
}  // namespace qkv::kernels::cuda
