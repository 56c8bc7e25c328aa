// The CPU's index kernels: kernels/index.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/index.inc"
}  // namespace qkv::kernels::cpu
