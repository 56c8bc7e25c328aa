// The recurrent problem every device's RNN kernels solve (kernels/<device>/rnn.h declares them):
// one direction of one GRU or LSTM layer over a padded batch, the time loop inside the kernel.
//
// The input projections of every step arrive precomputed (x_proj = x W_ihᵀ + b_ih: one GEMM over
// all steps, outside); each step multiplies the state by W_hh once. Rows have their own lengths:
// row b is updated at its steps 0 … len_b − 1 only (in reverse, from len_b − 1 down to 0), its state
// carried unchanged after, and its outputs past its length stay 0 (as pack_padded_sequence gives).
#pragma once

#include <cstdint>

namespace qkv::kernels {

struct RnnProblem {
  int64_t B = 0, T = 0, H = 0;
  int64_t gates = 3;               // 3: GRU (r, z, n); 4: LSTM (i, f, g, o)
  const int64_t* lengths = nullptr;  // [B], each in [0, T]
  bool reverse = false;
  const float* x_proj = nullptr;   // [B, T, gates·H]
  const float* w_hh = nullptr;     // [gates·H, H]
  const float* b_hh = nullptr;     // [gates·H], or null
  // The time index row b is at in step s (s = 0 … T − 1), or −1 when row b is past its length.
  int64_t time(int64_t b, int64_t s) const {
    if (s >= lengths[b]) return -1;
    return reverse ? lengths[b] - 1 - s : s;
  }
};

}  // namespace qkv::kernels
