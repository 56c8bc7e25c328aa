// GRU and LSTM layers on the CPU: the fused time loop of kernels/rnn.h's problem, forward and
// backward through time. Per step: one GEMM (state × W_hhᵀ, all rows), then the gates row by row.
//
// GRU (PyTorch's gate order r, z, n; hh = h W_hhᵀ + b_hh):
//   r = σ(x_r + hh_r)    z = σ(x_z + hh_z)    n = tanh(x_n + r ∘ hh_n)    h' = (1 − z) ∘ n + z ∘ h
// backward, given dh' (from the output and the next step):
//   dn = dh' (1 − z)   dz = dh' (h − n)   dh = dh' z + dhh W_hh
//   dn̂ = dn (1 − n²)   dr̂ = dn̂ hh_n r (1 − r)   dẑ = dz z (1 − z)
//   dx = [dr̂, dẑ, dn̂]   dhh = [dr̂, dẑ, dn̂ ∘ r]   dW_hh = Σ_t dhh_tᵀ h_t   db_hh = Σ_t dhh_t
//
// LSTM (i, f, g, o; ĝ = x + hh):
//   i = σ(ĝ_i)  f = σ(ĝ_f)  g = tanh(ĝ_g)  o = σ(ĝ_o)   c' = f ∘ c + i ∘ g   h' = o ∘ tanh(c')
// backward:
//   dc' += dh' o (1 − tanh² c')   do = dh' tanh c'   di = dc' g   df = dc' c   dg = dc' i   dc = dc' f
//   dĝ = [di i(1−i), df f(1−f), dg (1−g²), do o(1−o)] = dx = dhh   dh = dhh W_hh
//
// LSTM with a projection (torch's proj_size P > 0; W_hh [4H, P], W_hr [P, H]; h has P features, c H):
//   m' = o ∘ tanh(c')   h' = m' W_hrᵀ            (the cell above with m' in place of its h')
// backward, given dh' [P]:
//   dm' = dh' W_hr   dW_hr = Σ_t dh'_tᵀ m'_t   the cell's backward with dm' for dh'   dh = dhh W_hh
//
// Saved for the backward (training only): per step the gates and the state the step started from.
#pragma once

#include <cstdint>

#include "kernels/rnn.h"

namespace qkv::kernels::cpu {

// h0 [B, H] → y [B, T, H] (zero past each length), h_n [B, H]. saved_gates [T, B, 4H] (r, z, n, hh_n)
// and saved_h [T, B, H] (the state before each step) may be null (inference).
void gru_forward(const RnnProblem& p, const float* h0, float* y, float* h_n, float* saved_gates, float* saved_h);
// dy [B, T, H] and dh_n [B, H] may be null (no gradient flowed there). Writes dx_proj [B, T, 3H],
// dh0 [B, H], dw_hh [3H, H], and db_hh [3H] when not null.
void gru_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* dy,
                  const float* dh_n, float* dx_proj, float* dh0, float* dw_hh, float* db_hh);

// h0, c0 [B, H] → y [B, T, H], h_n, c_n [B, H]. saved_gates [T, B, 4H] (i, f, g, o), saved_h and
// saved_c [T, B, H] (h and c before each step), saved_tanh_c [T, B, H] (tanh c'); null for inference.
void lstm_forward(const RnnProblem& p, const float* h0, const float* c0, float* y, float* h_n, float* c_n,
                  float* saved_gates, float* saved_h, float* saved_c, float* saved_tanh_c);
void lstm_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* saved_c,
                   const float* saved_tanh_c, const float* dy, const float* dh_n, const float* dc_n, float* dx_proj,
                   float* dh0, float* dc0, float* dw_hh, float* db_hh);

// The projected LSTM (p.w_hh is [4H, P]; w_hr [P, H]): h0 [B, P], c0 [B, H] → y [B, T, P], h_n [B, P],
// c_n [B, H]. Saved as lstm_forward's, but saved_h is [T, B, P]; m' = o ∘ tanh c' is recomputed.
void lstm_proj_forward(const RnnProblem& p, int64_t P, const float* w_hr, const float* h0, const float* c0, float* y,
                       float* h_n, float* c_n, float* saved_gates, float* saved_h, float* saved_c, float* saved_tanh_c);
// dy [B, T, P], dh_n [B, P], dc_n [B, H] may be null. Writes dx_proj [B, T, 4H], dh0 [B, P], dc0 [B, H],
// dw_hh [4H, P], dw_hr [P, H], and db_hh [4H] when not null.
void lstm_proj_backward(const RnnProblem& p, int64_t P, const float* w_hr, const float* saved_gates,
                        const float* saved_h, const float* saved_c, const float* saved_tanh_c, const float* dy,
                        const float* dh_n, const float* dc_n, float* dx_proj, float* dh0, float* dc0, float* dw_hh,
                        float* db_hh, float* dw_hr);

}  // namespace qkv::kernels::cpu
