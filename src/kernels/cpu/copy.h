// The CPU's copies, conversions and fills: kernels/copy.inc (their contracts, one declaration for
// every device). Every pair of f32, bf16, boolean and i32 converts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {
#include "kernels/copy.inc"
}  // namespace qkv::kernels::cpu
