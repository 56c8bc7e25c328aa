// Group normalization on the CPU (PyTorch's group_norm, Wu & He 2018), over x [N, C, S] with the C
// channels in G groups of C/G: statistics per (sample, group) over its (C/G)·S values (biased),
//
//   x̂ = (x − μ_ng) / √(σ²_ng + ε),   y = γ_c x̂ + β_c
//
// backward, per (n, g) with K = (C/G)·S values and ĝ = γ_c dy:
//   dx = r_ng (ĝ − Σĝ / K − x̂ Σ(ĝ x̂) / K)     dγ_c = Σ_{n,s} dy x̂     dβ_c = Σ_{n,s} dy
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// weight/bias may be null. Writes y, and mean, rstd [N, G] for the backward.
void group_norm_forward(const float* x, const float* weight, const float* bias, float eps, int64_t N, int64_t C,
                        int64_t S, int64_t G, float* y, float* mean, float* rstd);
// dx, dweight, dbias may be null.
void group_norm_backward(const float* x, const float* dy, const float* mean, const float* rstd, const float* weight,
                         int64_t N, int64_t C, int64_t S, int64_t G, float* dx, float* dweight, float* dbias);

}  // namespace qkv::kernels::cpu
