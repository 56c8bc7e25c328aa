// One Adam / AdamW update of n parameters, in place (the formulas are in qkv/train/optim.h):
//
//   g ← g + l2·θ                                      (Adam's L2 decay; l2 = 0 for AdamW)
//   m ← β₁ m + (1 − β₁) g          v ← β₂ v + (1 − β₂) g²
//   θ ← decay·θ − step_size · m / (√v · inv_sqrt_bc2 + ε)
//
// with step_size = lr / (1 − β₁ᵗ), inv_sqrt_bc2 = 1 / √(1 − β₂ᵗ), decay = 1 − lr·λ (AdamW) or 1.
#pragma once

#include <cstdint>

#include "kernels/adam.h"

namespace qkv::kernels::cpu {

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamCoefficients& c);

}  // namespace qkv::kernels::cpu
