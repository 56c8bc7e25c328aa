// LayerNorm over the last n features of each of `rows` rows (dense):
//   μ = mean(x), σ² = mean((x − μ)²), x̂ = (x − μ)/√(σ² + ε), y = γ·x̂ + β
// backward (per row, with g = dy·γ):
//   dx = (1/√(σ² + ε)) · (g − mean(g) − x̂ · mean(g·x̂)),  dγ = Σ_rows dy·x̂,  dβ = Σ_rows dy
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// gamma/beta may be null (no affine). mean/rstd (length rows) are saved for the backward.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t n, float eps);
// dgamma/dbeta may be null; they are overwritten (not accumulated).
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n);

}  // namespace qkv::kernels::cpu
