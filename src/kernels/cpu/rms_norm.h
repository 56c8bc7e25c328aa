// RMSNorm over the last n features of each of `rows` rows (dense):
//   r = 1/√(mean(x²) + ε),  x̂ = x·r,  y = γ·x̂
// backward (per row, with g = dy·γ):
//   dx = r · (g − x̂ · mean(g·x̂)),  dγ = Σ_rows dy·x̂
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// gamma may be null (no scale); rstd (length rows, may be null) is saved for the backward.
void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t n, float eps);
// dgamma may be null; it is overwritten (not accumulated).
void rms_norm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                       float* dgamma, int64_t rows, int64_t n);

}  // namespace qkv::kernels::cpu
