// Cross-entropy with label smoothing over the rows of dense logits x [N, C], fused: the forward
// keeps only each row's log-sum-exp, and the backward recomputes the probabilities from it, so no
// [N, C] array of log-probabilities is written or kept (at C = 8000 that is 32 KB a row).
//   lse_n   = log Σ_c exp x_{n,c}                      (log p_{n,c} = x_{n,c} − lse_n)
//   ℓ_n     = −(1 − ε)(x_{n,y} − lse_n) − (ε/C) Σ_c (x_{n,c} − lse_n)
//   dx_{n,c} = (exp(x_{n,c} − lse_n) − ε/C − (1 − ε)[c = y_n]) · scale_n
// Rows whose target is `ignore` get ℓ = 0 and dx = 0.
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// The rows whose target is not ignore_index; *bad_row receives the first row whose target lies
// outside [0, C) (−1 when none).
int64_t count_targets(const int32_t* y, int64_t N, int64_t C, int64_t ignore, int64_t* bad_row);
void cross_entropy_forward(const float* x, const int32_t* y, int64_t N, int64_t C, float eps, int64_t ignore,
                           float* lse, float* loss);
void cross_entropy_backward(const float* x, const int32_t* y, const float* lse, const float* scale, int64_t N,
                            int64_t C, float eps, int64_t ignore, float* dx);

}  // namespace qkv::kernels::cpu
