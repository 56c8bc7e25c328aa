// GRU and LSTM layers on the GPU: the time loop of kernels/rnn.h's problem, forward and backward
// through time (the formulas: kernels/rnn.inc). Per step, as the CPU's: one cuBLAS GEMM for the
// state (hh = h W_hhᵀ, every row; backward dh += dhh W_hh), then one kernel for the gates, a thread
// per (row, unit; kernels/cuda/rnn_kernels.cuh); rows past their length carry their state. The
// projected LSTM adds a GEMM a step each way (h' = m' W_hrᵀ; dm' = dh' W_hr) and a copy kernel.
// dW_hh (and dW_hr) is one GEMM over all steps, db_hh column sums in kernels/column_strips.h's order
// (the CPU's: sum_kernels.cuh's strips across the GPU). The lengths go to the device once per call.
#include <algorithm>
#include <vector>

#include "kernels/cuda/namespace.h"
#include "kernels/cuda/sum_kernels.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/rnn_kernels.cuh"
#include "kernels/rnn.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kThreads = 256;

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

// dW_hh = Σ_s dhh_sᵀ h_s (one GEMM over all steps; h has `state` features: H, or the projected
// LSTM's P), db_hh = Σ_s dhh_s
void weight_grads(const RnnProblem& p, int64_t steps, const float* dhh, const float* saved_h, float* dw_hh,
                  float* db_hh, int64_t state) {
  const int64_t GH = p.gates * p.H, rows = steps * p.B;
  if (dw_hh) {
    if (rows == 0) fill_f32(dw_hh, GH * state, 0.f);
    else sgemm(true, false, GH, state, rows, 1.f, dhh, GH, saved_h, state, 0.f, dw_hh, state);
  }
  if (db_hh) launch_column_sums(DenseColumns{dhh}, rows, GH, db_hh);  // db = Σ_r dhh[r, ·]
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
    QKV_LAUNCH(grid_for(B * H), kThreads, 0, s0, gru_step_kernel)(
        Step{B, T, H, s, len.device(), p.reverse}, p.x_proj, hh.p, p.b_hh, h_n, y, saved_gates);
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
    QKV_LAUNCH(grid_for(B * H), kThreads, 0, s0, gru_step_backward_kernel)(
        Step{B, T, H, s, len.device(), p.reverse}, saved_gates, saved_h, dy, dh.p, dx_proj, dhh_s);
    QKV_CUDA_LAUNCHED(gru_step_backward_kernel);
    sgemm(false, false, B, H, G, 1.f, dhh_s, G, p.w_hh, H, 1.f, dh.p, H);  // dh = z ∘ dh' + dhh W_hh
  }
  if (dh0) copy_d2d(dh0, dh.p, B * H);
  weight_grads(p, steps, dhh.p, saved_h, dw_hh, db_hh, p.H);
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
    QKV_LAUNCH(grid_for(B * H), kThreads, 0, s0, lstm_step_kernel)(
        Step{B, T, H, s, len.device(), p.reverse}, p.x_proj, hh.p, p.b_hh, h_n, c_n, y, saved_gates, saved_tanh_c);
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
    QKV_LAUNCH(grid_for(B * H), kThreads, 0, s0, lstm_step_backward_kernel)(
        Step{B, T, H, s, len.device(), p.reverse}, saved_gates, saved_c, saved_tanh_c, dy, dh.p, dc.p, dx_proj, dhh_s);
    QKV_CUDA_LAUNCHED(lstm_step_backward_kernel);
    sgemm(false, false, B, H, G, 1.f, dhh_s, G, p.w_hh, H, 1.f, dh.p, H);
  }
  if (dh0) copy_d2d(dh0, dh.p, B * H);
  if (dc0) copy_d2d(dc0, dc.p, B * H);
  weight_grads(p, steps, dhh.p, saved_h, dw_hh, db_hh, p.H);
}

// The projected LSTM (p.w_hh [4H, P], w_hr [P, H]): per step hh = h W_hhᵀ, the cell's kernel writing
// m' = o ∘ tanh c' (and c', the saved gates) for the rows it updates, hp = m' W_hrᵀ, and the rows it
// updated take h' = hp (and y). m' of a carried row is stale: its hp is never read.
void lstm_proj_forward(const RnnProblem& p, int64_t P, const float* w_hr, const float* h0, const float* c0, float* y,
                       float* h_n, float* c_n, float* saved_gates, float* saved_h, float* saved_c,
                       float* saved_tanh_c) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  cudaStream_t s0 = stream();
  fill_f32(y, B * T * P, 0.f);
  if (B == 0) return;
  copy_d2d(h_n, h0, B * P), copy_d2d(c_n, c0, B * H);  // the running state
  Lengths len(p);
  Scratch hh(B * G, s0), m(B * H, s0), hp(B * P, s0);
  fill_f32(m.p, B * H, 0.f);
  for (int64_t s = 0; s < len.steps; ++s) {
    const Step st{B, T, H, s, len.device(), p.reverse};
    sgemm(false, true, B, G, P, 1.f, h_n, P, p.w_hh, P, 0.f, hh.p, G);  // hh = h W_hhᵀ   [B, P] × [P, 4H]
    if (saved_h) copy_d2d(saved_h + s * B * P, h_n, B * P);
    if (saved_c) copy_d2d(saved_c + s * B * H, c_n, B * H);
    QKV_LAUNCH(grid_for(B * H), kThreads, 0, s0, lstm_step_kernel)(
        st, p.x_proj, hh.p, p.b_hh, m.p, c_n, nullptr, saved_gates, saved_tanh_c);
    QKV_CUDA_LAUNCHED(lstm_step_kernel);
    sgemm(false, true, B, P, H, 1.f, m.p, H, w_hr, H, 0.f, hp.p, P);  // hp = m' W_hrᵀ   [B, H] × [H, P]
    QKV_LAUNCH(grid_for(B * P), kThreads, 0, s0, lstm_proj_step_kernel)(st, P, hp.p, h_n, y);
    QKV_CUDA_LAUNCHED(lstm_proj_step_kernel);
  }
}

// Backward, per step from the last: dh'_s = dh + dy for the rows the step updated (dh → 0 there),
// dm' = dh'_s W_hr, the cell's backward with dm' as its dh', dh += dhh_s W_hh. Then dW_hh and db_hh
// as the plain LSTM's, and dW_hr = Σ_s dh'_sᵀ m'_s with m' recomputed from the saved gates.
void lstm_proj_backward(const RnnProblem& p, int64_t P, const float* w_hr, const float* saved_gates,
                        const float* saved_h, const float* saved_c, const float* saved_tanh_c, const float* dy,
                        const float* dh_n, const float* dc_n, float* dx_proj, float* dh0, float* dc0, float* dw_hh,
                        float* db_hh, float* dw_hr) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  cudaStream_t s0 = stream();
  fill_f32(dx_proj, B * T * G, 0.f);
  Lengths len(p);
  const int64_t steps = len.steps, S = steps > 0 ? steps : 1;
  Scratch dh(B * P, s0), dc(B * H, s0), dm(B * H, s0), dhh(S * B * G, s0), dhr(S * B * P, s0), ms(S * B * H, s0);
  if (dh_n) copy_d2d(dh.p, dh_n, B * P);
  else fill_f32(dh.p, B * P, 0.f);
  if (dc_n) copy_d2d(dc.p, dc_n, B * H);
  else fill_f32(dc.p, B * H, 0.f);
  fill_f32(dhh.p, S * B * G, 0.f);
  for (int64_t s = steps - 1; s >= 0; --s) {
    const Step st{B, T, H, s, len.device(), p.reverse};
    float *dhh_s = dhh.p + s * B * G, *dhr_s = dhr.p + s * B * P;
    QKV_LAUNCH(grid_for(B * P), kThreads, 0, s0, lstm_proj_step_backward_kernel)(st, P, dy, dh.p, dhr_s);
    QKV_CUDA_LAUNCHED(lstm_proj_step_backward_kernel);
    sgemm(false, false, B, H, P, 1.f, dhr_s, P, w_hr, H, 0.f, dm.p, H);  // dm' = dh' W_hr   [B, P] × [P, H]
    QKV_LAUNCH(grid_for(B * H), kThreads, 0, s0, lstm_step_backward_kernel)(
        st, saved_gates, saved_c, saved_tanh_c, nullptr, dm.p, dc.p, dx_proj, dhh_s);
    QKV_CUDA_LAUNCHED(lstm_step_backward_kernel);
    sgemm(false, false, B, P, G, 1.f, dhh_s, G, p.w_hh, P, 1.f, dh.p, P);  // dh += dhh W_hh   [B, 4H] × [4H, P]
  }
  if (dh0) copy_d2d(dh0, dh.p, B * P);
  if (dc0) copy_d2d(dc0, dc.p, B * H);
  weight_grads(p, steps, dhh.p, saved_h, dw_hh, db_hh, P);
  if (dw_hr) {  // dW_hr = Σ_s dh'_sᵀ m'_s   [P, H]
    if (steps * B == 0) {
      fill_f32(dw_hr, P * H, 0.f);
    } else {
      QKV_LAUNCH(grid_for(steps * B * H), kThreads, 0, s0, lstm_cell_output_kernel)(
          saved_gates, saved_tanh_c, steps * B, H, ms.p);
      QKV_CUDA_LAUNCHED(lstm_cell_output_kernel);
      sgemm(true, false, P, H, steps * B, 1.f, dhr.p, P, ms.p, H, 0.f, dw_hr, H);
    }
  }
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
