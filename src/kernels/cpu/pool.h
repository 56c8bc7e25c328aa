// The CPU's pool kernels: kernels/pool.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

#include "kernels/pool.h"

namespace qkv::kernels::cpu {
#include "kernels/pool.inc"
}  // namespace qkv::kernels::cpu
