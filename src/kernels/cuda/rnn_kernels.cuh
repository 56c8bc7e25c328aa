// The recurrent layers' per-step kernels (rnn.cu launches them between its cuBLAS GEMMs; tests/kernels/
// rnn_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h). Formulas:
// kernels/rnn.inc. Each is a grid-stride loop over a step's (row, unit) pairs; a row past its length
// (RnnProblem::time < 0) carries its state.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

__device__ inline float sigmoid_s(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ inline float tanh_s(float x) { return 2.0f * sigmoid_s(x + x) - 1.0f; }

// RnnProblem::time on the device: the time index row b is at in step s, or −1 past its length.
__device__ inline int64_t time_of(const int64_t* len, bool reverse, int64_t b, int64_t s) {
  if (s >= len[b]) return -1;
  return reverse ? len[b] - 1 - s : s;
}

struct Step {
  int64_t B, T, H, s;
  const int64_t* len;  // device
  bool reverse;
};

__global__ void gru_step_kernel(Step st, const float* x_proj, const float* hh, const float* bias, float* h, float* y,
                                float* g) {
  const int64_t H = st.H, G = 3 * H;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < st.B * H; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = e / H, j = e % H, t = time_of(st.len, st.reverse, b, st.s);
    float* gs = g ? g + (st.s * st.B + b) * 4 * H : nullptr;
    if (t < 0) {
      if (gs) gs[j] = gs[H + j] = gs[2 * H + j] = gs[3 * H + j] = 0.f;
      continue;
    }
    const float* x = x_proj + (b * st.T + t) * G;
    const float* hr = hh + b * G;
    const float br = bias ? bias[j] : 0.f, bz = bias ? bias[H + j] : 0.f, bn = bias ? bias[2 * H + j] : 0.f;
    const float r = sigmoid_s(x[j] + (hr[j] + br));
    const float z = sigmoid_s(x[H + j] + (hr[H + j] + bz));
    const float hn = hr[2 * H + j] + bn;
    const float n = tanh_s(r * hn + x[2 * H + j]);
    const float out = z * (h[e] - n) + n;
    h[e] = out;
    y[(b * st.T + t) * H + j] = out;
    if (gs) gs[j] = r, gs[H + j] = z, gs[2 * H + j] = n, gs[3 * H + j] = hn;
  }
}

// dh (in: the gradient of h' less dy; out: z ∘ dh', the part not through W_hh); dx_proj, dhh of the step
__global__ void gru_step_backward_kernel(Step st, const float* saved_gates, const float* saved_h, const float* dy,
                                         float* dh, float* dx_proj, float* dhh) {
  const int64_t H = st.H, G = 3 * H;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < st.B * H; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = e / H, j = e % H, t = time_of(st.len, st.reverse, b, st.s);
    if (t < 0) continue;  // the state was carried: dh passes through, nothing else
    const float* g = saved_gates + (st.s * st.B + b) * 4 * H;
    const float hp = saved_h[(st.s * st.B + b) * H + j];
    const float r = g[j], z = g[H + j], n = g[2 * H + j], hn = g[3 * H + j];
    const float d = dh[e] + (dy ? dy[(b * st.T + t) * H + j] : 0.f);
    const float dn = d * (1.f - z) * (1.f - n * n);
    const float dz = d * (hp - n) * z * (1.f - z);
    const float dr = dn * hn * r * (1.f - r);
    float* dx = dx_proj + (b * st.T + t) * G;
    float* dq = dhh + b * G;
    dx[j] = dr, dx[H + j] = dz, dx[2 * H + j] = dn;
    dq[j] = dr, dq[H + j] = dz, dq[2 * H + j] = dn * r;
    dh[e] = d * z;
  }
}

// h' = o ∘ tanh c' into h (and y, when not null: the projected LSTM passes its m' buffer as h and no y)
__global__ void lstm_step_kernel(Step st, const float* x_proj, const float* hh, const float* bias, float* h, float* c,
                                 float* y, float* sv, float* tc) {
  const int64_t H = st.H, G = 4 * H;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < st.B * H; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = e / H, j = e % H, t = time_of(st.len, st.reverse, b, st.s);
    float* svs = sv ? sv + (st.s * st.B + b) * G : nullptr;
    float* tcs = tc ? tc + (st.s * st.B + b) * H : nullptr;
    if (t < 0) {
      if (svs) svs[j] = svs[H + j] = svs[2 * H + j] = svs[3 * H + j] = 0.f;
      if (tcs) tcs[j] = 0.f;
      continue;
    }
    const float* x = x_proj + (b * st.T + t) * G;
    const float* hr = hh + b * G;
    auto bias_of = [&](int64_t k) { return bias ? bias[k] : 0.f; };
    const float i = sigmoid_s(x[j] + (hr[j] + bias_of(j)));
    const float f = sigmoid_s(x[H + j] + (hr[H + j] + bias_of(H + j)));
    const float gg = tanh_s(x[2 * H + j] + (hr[2 * H + j] + bias_of(2 * H + j)));
    const float o = sigmoid_s(x[3 * H + j] + (hr[3 * H + j] + bias_of(3 * H + j)));
    const float cn = f * c[e] + i * gg;
    const float tt = tanh_s(cn);
    c[e] = cn;
    h[e] = o * tt;
    if (y) y[(b * st.T + t) * H + j] = o * tt;
    if (svs) svs[j] = i, svs[H + j] = f, svs[2 * H + j] = gg, svs[3 * H + j] = o;
    if (tcs) tcs[j] = tt;
  }
}

// dh (in: the gradient of h' less dy; out: 0 — all of it goes through W_hh), dc updated; dx_proj and
// dhh (the same gradient: the pre-activations add x and hh) of the step
__global__ void lstm_step_backward_kernel(Step st, const float* saved_gates, const float* saved_c,
                                          const float* saved_tanh_c, const float* dy, float* dh, float* dc,
                                          float* dx_proj, float* dhh) {
  const int64_t H = st.H, G = 4 * H;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < st.B * H; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = e / H, j = e % H, t = time_of(st.len, st.reverse, b, st.s);
    if (t < 0) continue;  // carried: dh and dc pass through
    const float* sv = saved_gates + (st.s * st.B + b) * G;
    const float cp = saved_c[(st.s * st.B + b) * H + j], tt = saved_tanh_c[(st.s * st.B + b) * H + j];
    const float i = sv[j], f = sv[H + j], gg = sv[2 * H + j], o = sv[3 * H + j];
    const float d = dh[e] + (dy ? dy[(b * st.T + t) * H + j] : 0.f);
    const float dct = dc[e] + d * o * (1.f - tt * tt);
    float* dx = dx_proj + (b * st.T + t) * G;
    float* dq = dhh + b * G;
    dx[j] = dq[j] = dct * gg * i * (1.f - i);
    dx[H + j] = dq[H + j] = dct * cp * f * (1.f - f);
    dx[2 * H + j] = dq[2 * H + j] = dct * i * (1.f - gg * gg);
    dx[3 * H + j] = dq[3 * H + j] = d * tt * o * (1.f - o);
    dc[e] = dct * f;
    dh[e] = 0.f;
  }
}

// The projected LSTM (proj_size P): after the cell's kernel wrote m' = o ∘ tanh c' and the GEMM
// hp = m' W_hrᵀ [B, P], the rows this step updated take h' = hp and write it to y [B, T, P].
__global__ void lstm_proj_step_kernel(Step st, int64_t P, const float* hp, float* h, float* y) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < st.B * P; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = e / P, k = e % P, t = time_of(st.len, st.reverse, b, st.s);
    if (t < 0) continue;  // carried
    h[e] = hp[e];
    y[(b * st.T + t) * P + k] = hp[e];
  }
}

// The projected LSTM's backward at step s, over [B, P]: dh'_s = dh + dy (dhr_s, the rows this step
// updated; 0 for the others), and dh → 0 for those rows (all of dh' goes through W_hr: dm' = dh' W_hr,
// then dh = dhh W_hh, by the GEMMs after); a carried row's dh passes through.
__global__ void lstm_proj_step_backward_kernel(Step st, int64_t P, const float* dy, float* dh, float* dhr_s) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < st.B * P; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = e / P, k = e % P, t = time_of(st.len, st.reverse, b, st.s);
    if (t < 0) {
      dhr_s[e] = 0.f;
      continue;
    }
    dhr_s[e] = dh[e] + (dy ? dy[(b * st.T + t) * P + k] : 0.f);
    dh[e] = 0.f;
  }
}

// m' = o ∘ tanh c' of every saved step and row ([rows, H], rows = steps · B; 0 for a row past its
// length, whose saved gates are 0), for dW_hr = Σ_s dh'_sᵀ m'_s
__global__ void lstm_cell_output_kernel(const float* saved_gates, const float* saved_tanh_c, int64_t rows, int64_t H,
                                        float* m) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * H; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / H, j = e % H;
    m[e] = saved_gates[r * 4 * H + 3 * H + j] * saved_tanh_c[e];
  }
}

}  // namespace
}  // namespace qkv::kernels::cuda
