// Clipping by the global norm (torch.nn.utils.clip_grad_norm_'s numbers), computed where the
// gradients are and left there (formulas: kernels/clip.inc), so that a GPU's training step needs no
// host round trip: train::Adam::step takes the factor straight from the device.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

// grads: f32 tensors on one device, any layout (none: a CPU result with ‖g‖ = 0); max_norm ≥ 0 (inf: no clipping).
// Returns f32 [2] on that device: [‖g‖, min(1, max_norm / (‖g‖ + 1e-6))] — ‖g‖ = √(Σᵢ ‖gᵢ‖²) with
// the squares summed in double; the factor is 1 when ‖g‖ is NaN. Off the tape.
Tensor clip_coefficient(const std::vector<Tensor>& grads, double max_norm);

}  // namespace qkv
