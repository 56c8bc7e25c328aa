// The order every device's topk kernel selects by (kernels/topk.inc), written once so that the CPU
// and the GPU pick the same entries: one 64-bit key an entry, larger = better.
#pragma once

#include <cstdint>
#include <cstring>

#include "qkv/core/host_device.h"

namespace qkv::kernels {

// order(x): an unsigned integer that compares as the floats do — a negative float's bits inverted, a
// positive one's sign bit set; −0 equal to +0 (NaN: the caller's; topk_key puts it above every number).
QKV_HOST_DEVICE inline uint32_t float_order(float x) {
  if (x == 0.f) x = 0.f;  // −0 → +0
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// key(x, i) = (order(x) << 32) | (2³² − 1 − i): by value first — NaN above every number (as
// torch.topk), −0 equal to +0 —, then the lower index first.
QKV_HOST_DEVICE inline uint64_t topk_key(float x, int64_t i) {
  const uint32_t bits = x != x ? 0xffffffffu : float_order(x);
  return (static_cast<uint64_t>(bits) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}

}  // namespace qkv::kernels
