// The CPU's gradient-clipping kernel: kernels/clip.inc (its formulas and contract, one declaration
// for every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/clip.inc"
}  // namespace qkv::kernels::cpu
