// Softmax and log-softmax over the rows of a dense [rows, n] matrix, forward and backward.
//   softmax:      y_j = exp(x_j − max x) / Σ_k exp(x_k − max x)
//   backward:     dx_j = y_j · (dy_j − Σ_k dy_k y_k)
//   log_softmax:  y_j = x_j − max x − log Σ_k exp(x_k − max x)
//   backward:     dx_j = dy_j − exp(y_j) · Σ_k dy_k
//   log_mean_exp: y_j = log((1/k) Σ_i exp(x_ij)) = m_j + log Σ_i exp(x_ij − m_j) − log k,  m_j = max_i x_ij
// A row that is entirely −inf (every position masked) gives zeros, not NaN, in softmax.
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t n);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t n);
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n);

// Across k arrays of n values (an ensemble's log-probabilities, decode/ensemble.h); −inf in all
// k gives −inf.
void log_mean_exp(const float* const* x, int64_t k, float* y, int64_t n);

// One row, in place (x → softmax(x)); used by the attention kernels.
void softmax_row_inplace(float* x, int64_t n);

}  // namespace qkv::kernels::cpu
