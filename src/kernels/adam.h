// What every device's Adam kernel takes (kernels/<device>/adam.h declares the kernel itself).
#pragma once

#include "qkv/core/host_device.h"

namespace qkv::kernels {

// The per-step constants of the update in kernels/cpu/adam.h.
struct AdamCoefficients {
  float beta1, beta2, eps, step_size, inv_sqrt_bc2, decay, l2;
};

// c with step_size, inv_sqrt_bc2 and decay read from `numbers` where it is set (adam.inc's step_numbers).
QKV_HOST_DEVICE inline AdamCoefficients with_step_numbers(AdamCoefficients c, const float* numbers) {
  if (numbers) c.step_size = numbers[0], c.inv_sqrt_bc2 = numbers[1], c.decay = numbers[2];
  return c;
}

}  // namespace qkv::kernels
