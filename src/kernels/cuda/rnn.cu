// GRU and LSTM layers on the GPU: the time loop of kernels/rnn.h's problem, forward and backward
// through time (the formulas: kernels/cpu/rnn.h). Per step, as the CPU's: one cuBLAS GEMM for the
// state (hh = h W_hhᵀ, every row; backward dh += dhh W_hh), then one kernel for the gates, a thread
// per (row, unit); rows past their length carry their state. dW_hh is one GEMM over all steps, db_hh
// column sums in the CPU's order. The lengths go to the device once per call.
#include <algorithm>
#include <vector>

#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/rnn.h"

namespace qkv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

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
    y[(b * st.T + t) * H + j] = o * tt;
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

unsigned grid_for(int64_t n) { return blocks_for(n, kThreads); }

// The scan's lengths on the device, and the longest (no step past it changes anything).
struct Lengths {
  Scratch buf;
  int64_t steps = 0;
  explicit Lengths(const RnnProblem& p) : buf(2 * p.B, stream()) {
    QKV_CUDA_CHECK(cudaMemcpyAsync(buf.p, p.lengths, sizeof(int64_t) * p.B, cudaMemcpyHostToDevice, stream()));
    for (int64_t b = 0; b < p.B; ++b) steps = std::max(steps, p.lengths[b]);
  }
  const int64_t* device() const { return reinterpret_cast<const int64_t*>(buf.p); }
};

void copy_d2d(float* dst, const float* src, int64_t n) {
  if (n > 0)
    QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, stream()));
}

// dW_hh = Σ_s dhh_sᵀ h_s (one GEMM over all steps), db_hh = Σ_s dhh_s
void weight_grads(const RnnProblem& p, int64_t steps, const float* dhh, const float* saved_h, float* dw_hh,
                  float* db_hh) {
  const int64_t GH = p.gates * p.H, rows = steps * p.B;
  if (dw_hh) {
    if (rows == 0) fill_f32(dw_hh, GH * p.H, 0.f);
    else sgemm(true, false, GH, p.H, rows, 1.f, dhh, GH, saved_h, p.H, 0.f, dw_hh, p.H);
  }
  if (db_hh && GH > 0) {
    column_sums<<<grid_for(GH), kThreads, 0, stream()>>>(dhh, rows, GH, db_hh);  // db = Σ_r dhh[r, ·]
    QKV_CUDA_LAUNCHED(column_sums);
  }
}

}  // namespace

void gru_forward(const RnnProblem& p, const float* h0, float* y, float* h_n, float* saved_gates, float* saved_h) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 3 * H;
  cudaStream_t s0 = stream();
  fill_f32(y, B * T * H, 0.f);
  if (B * H == 0) return;
  Lengths len(p);
  Scratch hh(B * G, s0);
  copy_d2d(h_n, h0, B * H);  // h_n is the running state
  for (int64_t s = 0; s < len.steps; ++s) {
    sgemm(false, true, B, G, H, 1.f, h_n, H, p.w_hh, H, 0.f, hh.p, G);
    if (saved_h) copy_d2d(saved_h + s * B * H, h_n, B * H);
    gru_step_kernel<<<grid_for(B * H), kThreads, 0, s0>>>(Step{B, T, H, s, len.device(), p.reverse}, p.x_proj, hh.p,
                                                          p.b_hh, h_n, y, saved_gates);
    QKV_CUDA_LAUNCHED(gru_step_kernel);
  }
}

void gru_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* dy,
                  const float* dh_n, float* dx_proj, float* dh0, float* dw_hh, float* db_hh) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 3 * H;
  cudaStream_t s0 = stream();
  fill_f32(dx_proj, B * T * G, 0.f);
  Lengths len(p);
  const int64_t steps = len.steps;
  Scratch dh(B * H, s0), dhh((steps > 0 ? steps : 1) * B * G, s0);
  if (dh_n) copy_d2d(dh.p, dh_n, B * H);
  else fill_f32(dh.p, B * H, 0.f);
  fill_f32(dhh.p, (steps > 0 ? steps : 1) * B * G, 0.f);
  for (int64_t s = steps - 1; s >= 0; --s) {
    float* dhh_s = dhh.p + s * B * G;
    gru_step_backward_kernel<<<grid_for(B * H), kThreads, 0, s0>>>(Step{B, T, H, s, len.device(), p.reverse},
                                                                   saved_gates, saved_h, dy, dh.p, dx_proj, dhh_s);
    QKV_CUDA_LAUNCHED(gru_step_backward_kernel);
    sgemm(false, false, B, H, G, 1.f, dhh_s, G, p.w_hh, H, 1.f, dh.p, H);  // dh = z ∘ dh' + dhh W_hh
  }
  if (dh0) copy_d2d(dh0, dh.p, B * H);
  weight_grads(p, steps, dhh.p, saved_h, dw_hh, db_hh);
}

void lstm_forward(const RnnProblem& p, const float* h0, const float* c0, float* y, float* h_n, float* c_n,
                  float* saved_gates, float* saved_h, float* saved_c, float* saved_tanh_c) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  cudaStream_t s0 = stream();
  fill_f32(y, B * T * H, 0.f);
  if (B * H == 0) return;
  Lengths len(p);
  Scratch hh(B * G, s0);
  copy_d2d(h_n, h0, B * H), copy_d2d(c_n, c0, B * H);  // the running state
  for (int64_t s = 0; s < len.steps; ++s) {
    sgemm(false, true, B, G, H, 1.f, h_n, H, p.w_hh, H, 0.f, hh.p, G);
    if (saved_h) copy_d2d(saved_h + s * B * H, h_n, B * H);
    if (saved_c) copy_d2d(saved_c + s * B * H, c_n, B * H);
    lstm_step_kernel<<<grid_for(B * H), kThreads, 0, s0>>>(Step{B, T, H, s, len.device(), p.reverse}, p.x_proj, hh.p,
                                                           p.b_hh, h_n, c_n, y, saved_gates, saved_tanh_c);
    QKV_CUDA_LAUNCHED(lstm_step_kernel);
  }
}

void lstm_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* saved_c,
                   const float* saved_tanh_c, const float* dy, const float* dh_n, const float* dc_n, float* dx_proj,
                   float* dh0, float* dc0, float* dw_hh, float* db_hh) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  cudaStream_t s0 = stream();
  fill_f32(dx_proj, B * T * G, 0.f);
  Lengths len(p);
  const int64_t steps = len.steps;
  Scratch dh(B * H, s0), dc(B * H, s0), dhh((steps > 0 ? steps : 1) * B * G, s0);
  if (dh_n) copy_d2d(dh.p, dh_n, B * H);
  else fill_f32(dh.p, B * H, 0.f);
  if (dc_n) copy_d2d(dc.p, dc_n, B * H);
  else fill_f32(dc.p, B * H, 0.f);
  fill_f32(dhh.p, (steps > 0 ? steps : 1) * B * G, 0.f);
  for (int64_t s = steps - 1; s >= 0; --s) {
    float* dhh_s = dhh.p + s * B * G;
    lstm_step_backward_kernel<<<grid_for(B * H), kThreads, 0, s0>>>(Step{B, T, H, s, len.device(), p.reverse},
                                                                    saved_gates, saved_c, saved_tanh_c, dy, dh.p, dc.p,
                                                                    dx_proj, dhh_s);
    QKV_CUDA_LAUNCHED(lstm_step_backward_kernel);
    sgemm(false, false, B, H, G, 1.f, dhh_s, G, p.w_hh, H, 1.f, dh.p, H);
  }
  if (dh0) copy_d2d(dh0, dh.p, B * H);
  if (dc0) copy_d2d(dc0, dc.p, B * H);
  weight_grads(p, steps, dhh.p, saved_h, dw_hh, db_hh);
}

}  // namespace qkv::kernels::cuda
