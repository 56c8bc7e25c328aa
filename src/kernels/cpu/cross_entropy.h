// The CPU's cross entropy kernels: kernels/cross_entropy.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {
#include "kernels/cross_entropy.inc"
}  // namespace qkv::kernels::cpu
