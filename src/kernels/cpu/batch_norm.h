// Batch normalization on the CPU (PyTorch's batch_norm), over x [N, C, S] (S = the product of the
// dimensions after the channel: H·W for images):
//
//   training:  μ_c = mean_{n,s} x,  σ²_c = mean_{n,s} (x − μ_c)²  (biased),  x̂ = (x − μ_c) / √(σ²_c + ε)
//              running_mean ← (1 − m)·running_mean + m·μ_c;  running_var ← (1 − m)·running_var + m·σ²_c·M/(M − 1)
//   eval:      x̂ = (x − running_mean_c) / √(running_var_c + ε)
//   y = γ_c x̂ + β_c
//
// backward (M = N·S values per channel):
//   dβ_c = Σ dy    dγ_c = Σ dy x̂
//   training:  dx = γ_c r_c (dy − dβ_c / M − x̂ dγ_c / M)     (the statistics depend on x)
//   eval:      dx = γ_c r_c dy                                  r_c = 1 / √(σ²_c + ε)
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// weight/bias may be null (γ = 1, β = 0); running_mean/var may be null (training only: no update).
// Writes y, and mean [C] and rstd [C] (the statistics used, for the backward).
void batch_norm_forward(const float* x, const float* weight, const float* bias, float* running_mean,
                        float* running_var, bool training, float momentum, float eps, int64_t N, int64_t C, int64_t S,
                        float* y, float* mean, float* rstd);
// dx, dweight, dbias may be null (not needed).
void batch_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         bool training, int64_t N, int64_t C, int64_t S, float* dx, float* dweight, float* dbias);

}  // namespace qkv::kernels::cpu
