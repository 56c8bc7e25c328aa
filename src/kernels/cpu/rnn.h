// The CPU's recurrent kernels: kernels/rnn.inc (the GRU's and LSTM's formulas forward and backward,
// one declaration for every device), and the projected LSTM, which has CPU kernels only so far (its
// op dispatches with QKV_DISPATCH_CPU).
#pragma once

#include <cstdint>

#include "kernels/rnn.h"

namespace qkv::kernels::cpu {
#include "kernels/rnn.inc"

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
