// The CPU's adam kernels: kernels/adam.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

#include "kernels/adam.h"
#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {
#include "kernels/adam.inc"
}  // namespace qkv::kernels::cpu
