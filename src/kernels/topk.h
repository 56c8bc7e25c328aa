// The order every device's topk kernel selects by (kernels/topk.inc), written once so that the CPU
// and the GPU pick the same entries: one 64-bit key an entry, larger = better.
#pragma once

#include <cstdint>
#include <cstring>

#include "qkv/core/host_device.h"

namespace qkv::kernels {

// key(x, i) = (order(x) << 32) | (2³² − 1 − i): by value first — NaN above every number (as
// torch.topk), −0 equal to +0 —, then the lower index first. order maps floats to unsigned integers
// that compare as the floats do: a negative float's bits inverted, a positive one's sign bit set.
QKV_HOST_DEVICE inline uint64_t topk_key(float x, int64_t i) {
  uint32_t bits;
  if (x != x) bits = 0xffffffffu;
  else {
    if (x == 0.f) x = 0.f;  // −0 → +0
    std::memcpy(&bits, &x, sizeof bits);
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  }
  return (static_cast<uint64_t>(bits) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}

}  // namespace qkv::kernels
