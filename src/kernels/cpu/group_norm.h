// The CPU's group norm kernels: kernels/group_norm.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/group_norm.inc"
}  // namespace qkv::kernels::cpu
