// Bahdanau's additive attention scores on the GPU (the formulas: kernels/cpu/additive_score.h),
// fused as the CPU's — τ = tanh(q + k) recomputed in the backward, nothing [B, T, S, A] stored:
//   forward  e_tj = Σ_a v_a τ_tja              a warp per score, its lanes along a
//   backward dq_ta = Σ_j g_tja                  a thread per (b, t, a), over j
//            dk_ja = Σ_t g_tja                  a thread per (b, j, a), over t
//            dv_a  = Σ_{b,t,j} de_tj τ_tja      a block per a
// with g_tja = de_tj v_a (1 − τ_tja²); zero de (masked positions) contributes nothing. No atomics.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kThreads = 256;

__device__ inline float tanh_s(float x) { return 2.0f / (1.0f + expf(-(x + x))) - 1.0f; }

__global__ void score_forward_kernel(const float* q, const float* k, const float* v, float* e, int64_t B, int64_t T,
                                     int64_t S, int64_t A) {
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t w = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; w < B * T * S; w += warps) {
    const int64_t j = w % S, bt = w / S, b = bt / T;
    const float* qr = q + bt * A;
    const float* kr = k + (b * S + j) * A;
    float s = 0.f;
    for (int64_t a = lane; a < A; a += 32) s += v[a] * tanh_s(qr[a] + kr[a]);
    s = warp_sum(s);
    if (lane == 0) e[w] = s;
  }
}

__global__ void score_dq_kernel(const float* q, const float* k, const float* v, const float* de, float* dq, int64_t B,
                                int64_t T, int64_t S, int64_t A) {
  for (int64_t x = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; x < B * T * A; x += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = x % A, bt = x / A, b = bt / T;
    const float qa = q[x], va = v[a];
    float acc = 0.f;
    for (int64_t j = 0; j < S; ++j) {
      const float d = de[bt * S + j];
      if (d == 0.f) continue;
      const float t = tanh_s(qa + k[(b * S + j) * A + a]);
      acc += d * va * (1.f - t * t);
    }
    dq[x] = acc;
  }
}

__global__ void score_dk_kernel(const float* q, const float* k, const float* v, const float* de, float* dk, int64_t B,
                                int64_t T, int64_t S, int64_t A) {
  for (int64_t x = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; x < B * S * A; x += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = x % A, bj = x / A, b = bj / S, j = bj % S;
    const float ka = k[x], va = v[a];
    float acc = 0.f;
    for (int64_t t = 0; t < T; ++t) {
      const float d = de[(b * T + t) * S + j];
      if (d == 0.f) continue;
      const float th = tanh_s(q[(b * T + t) * A + a] + ka);
      acc += d * va * (1.f - th * th);
    }
    dk[x] = acc;
  }
}

__global__ void score_dv_kernel(const float* q, const float* k, const float* de, float* dv, int64_t B, int64_t T,
                                int64_t S, int64_t A) {
  const int64_t a = blockIdx.x, n = B * T * S;
  double acc = 0;
  for (int64_t w = threadIdx.x; w < n; w += blockDim.x) {
    const float d = de[w];
    if (d == 0.f) continue;
    const int64_t j = w % S, bt = w / S, b = bt / T;
    acc += d * tanh_s(q[bt * A + a] + k[(b * S + j) * A + a]);
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) dv[a] = static_cast<float>(acc);
}

}  // namespace

void additive_score_forward(const float* q, const float* k, const float* v, float* e, int64_t B, int64_t T, int64_t S,
                            int64_t A) {
  const int64_t n = B * T * S;
  if (n == 0) return;
  if (A == 0) return fill_f32(e, n, 0.f);
  QKV_LAUNCH(blocks_for(n * 32, kThreads), kThreads, 0, stream(), score_forward_kernel)(q, k, v, e, B, T, S, A);
  QKV_CUDA_LAUNCHED(score_forward_kernel);
}

void additive_score_backward(const float* q, const float* k, const float* v, const float* de, float* dq, float* dk,
                             float* dv, int64_t B, int64_t T, int64_t S, int64_t A) {
  cudaStream_t s = stream();
  if (dq && B * T * A > 0) {
    QKV_LAUNCH(blocks_for(B * T * A, kThreads), kThreads, 0, s, score_dq_kernel)(q, k, v, de, dq, B, T, S, A);
    QKV_CUDA_LAUNCHED(score_dq_kernel);
  }
  if (dk && B * S * A > 0) {
    QKV_LAUNCH(blocks_for(B * S * A, kThreads), kThreads, 0, s, score_dk_kernel)(q, k, v, de, dk, B, T, S, A);
    QKV_CUDA_LAUNCHED(score_dk_kernel);
  }
  if (dv && A > 0) {
    QKV_CHECK(A <= 2147483647, "additive_score: ", A, " units are too many for one CUDA grid");
    QKV_LAUNCH(static_cast<unsigned>(A), kThreads, 0, s, score_dv_kernel)(q, k, de, dv, B, T, S, A);
    QKV_CUDA_LAUNCHED(score_dv_kernel);
  }
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
