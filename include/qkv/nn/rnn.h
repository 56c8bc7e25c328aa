// GRU and LSTM, as torch.nn.GRU / torch.nn.LSTM (same arguments, parameter names and gate order):
// multi-layer, bidirectional, batch_first, dropout between layers, initial states, and padded
// batches with per-sequence lengths (what pack_padded_sequence gives PyTorch: each sequence's
// state stops at its own end, outputs past it are 0, h_n is its state there; a reverse direction
// starts from each sequence's own end).
//
//   layer l, direction d:   X_proj = X W_ihᵀ + b_ih        one GEMM over every step
//                           (y, h_n) = gru_scan / lstm_scan(X_proj, h0, W_hh, b_hh)   ops/rnn.h
//   the next layer reads [y_fwd, y_bwd] (through dropout when training)
//
// LSTM with proj_size P > 0 (torch's projected LSTM): h_t = W_hr (o_t ∘ tanh c_t), so h and the
// output have P features while c keeps H; the layer's time loop is lstm_proj_scan.
//
// Parameters: weight_ih_l{k}[_reverse] [G·H, in], weight_hh_l{k}[_reverse] [G·H, R],
// bias_ih_l{k}[_reverse], bias_hh_l{k}[_reverse] [G·H] (G = 3 for GRU, 4 for LSTM), and with
// proj_size weight_hr_l{k}[_reverse] [P, H]; R = P with proj_size, else H; in = input_size for
// layer 0, D·R above. All drawn from U(−1/√H, 1/√H) as PyTorch does — a PyTorch state_dict loads
// one to one.
#pragma once

#include <vector>

#include "qkv/core/rng.h"
#include "qkv/nn/module.h"

namespace qkv::nn {

struct RNNOptions {
  int64_t input_size = 0, hidden_size = 0, num_layers = 1;
  bool bias = true, batch_first = false, bidirectional = false;
  float dropout = 0.f;  // on the outputs of every layer but the last, when training
  int64_t proj_size = 0;  // LSTM only: h_t = W_hr (o_t ∘ tanh c_t) has proj_size features (0: none)
};

// What GRU and LSTM share: the parameters of each layer and direction, and the layer loop.
class RecurrentBase : public Module {
 public:
  RNNOptions opt;
  int64_t directions() const { return opt.bidirectional ? 2 : 1; }

 protected:
  RecurrentBase(const RNNOptions& o, int64_t gates, const char* who, Generator* gen);
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh, w_hr;  // w_hr: the LSTM's projection (proj_size > 0), else undefined
  };
  std::vector<Weights> weights_;  // layer-major: [l·D + d]
  Generator* gen_;
};

class GRU : public RecurrentBase {
 public:
  explicit GRU(const RNNOptions& opt, Generator* gen = nullptr);
  struct Output {
    Tensor output;  // [B, T, D·H] (batch_first) or [T, B, D·H]; 0 past each sequence's length
    Tensor h_n;     // [L·D, B, H]
  };
  // input [B, T, input_size] (batch_first) or [T, B, input_size]; h0 [L·D, B, H] (undefined: zeros);
  // lengths: one per sequence (empty: all T).
  Output forward(const Tensor& input, const Tensor& h0 = Tensor(), const std::vector<int64_t>& lengths = {}) const;
};

class LSTM : public RecurrentBase {
 public:
  explicit LSTM(const RNNOptions& opt, Generator* gen = nullptr);
  struct Output {
    Tensor output;  // [B, T, D·R] (batch_first) or [T, B, D·R]; R = proj_size, or H without it
    Tensor h_n;     // [L·D, B, R]
    Tensor c_n;     // [L·D, B, H]
  };
  // h0 [L·D, B, R], c0 [L·D, B, H] (undefined: zeros); lengths as GRU's.
  Output forward(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor(),
                 const std::vector<int64_t>& lengths = {}) const;
};

}  // namespace qkv::nn
