// The CPU's additive score kernels: kernels/additive_score.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/additive_score.inc"
}  // namespace qkv::kernels::cpu
