// The CPU's paged-attention kernels: kernels/paged_attention.inc (their formulas and contracts, one
// declaration for every device).
#pragma once

#include <cstdint>

#include "kernels/paged_attention.h"

namespace qkv::kernels::cpu {
#include "kernels/paged_attention.inc"

}  // namespace qkv::kernels::cpu
