// What every device's Adam kernel takes (kernels/<device>/adam.h declares the kernel itself).
#pragma once

namespace qkv::kernels {

// The per-step constants of the update in kernels/cpu/adam.h.
struct AdamCoefficients {
  float beta1, beta2, eps, step_size, inv_sqrt_bc2, decay, l2;
};

}  // namespace qkv::kernels
