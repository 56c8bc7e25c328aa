// Recurrent layers' time loops as ops: one direction of one GRU or LSTM layer over a padded batch,
// forward and backward through time in one node (the formulas are in kernels/cpu/rnn.h). The input
// projections of every step come in precomputed — x_proj = x W_ihᵀ + b_ih, one linear over all
// steps — so the loop does one state GEMM per step; the weight gradient of W_hh is one GEMM over
// all steps after it.
//
//   gru_scan:   x_proj [B, T, 3H], h0 [B, H], w_hh [3H, H], b_hh [3H] → {y [B, T, H], h_n [B, H]}
//   lstm_scan:  x_proj [B, T, 4H], h0, c0 [B, H], w_hh [4H, H], b_hh [4H] → {y, h_n, c_n}
//   lstm_proj_scan (torch's proj_size P: h' = (o ∘ tanh c') W_hrᵀ): x_proj [B, T, 4H], h0 [B, P],
//               c0 [B, H], w_hh [4H, P], b_hh [4H], w_hr [P, H] → {y [B, T, P], h_n [B, P], c_n [B, H]}
//
// lengths (one per row, ≤ T; empty: every row T long): row b runs over steps 0 … len_b − 1 only
// (reverse: from len_b − 1 down to 0), y is 0 past its length and h_n is its state at its last
// step — what pack_padded_sequence gives PyTorch's RNNs. b_hh may be undefined (no bias).
// Gradients flow to x_proj, the initial states, w_hh and b_hh (and w_hr).
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

std::vector<Tensor> gru_scan(const Tensor& x_proj, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                             const std::vector<int64_t>& lengths = {}, bool reverse = false);
std::vector<Tensor> lstm_scan(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                              const Tensor& b_hh, const std::vector<int64_t>& lengths = {}, bool reverse = false);
std::vector<Tensor> lstm_proj_scan(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                                   const Tensor& b_hh, const Tensor& w_hr, const std::vector<int64_t>& lengths = {},
                                   bool reverse = false);

}  // namespace qkv
