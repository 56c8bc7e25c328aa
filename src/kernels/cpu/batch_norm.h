// The CPU's batch norm kernels: kernels/batch_norm.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/batch_norm.inc"
}  // namespace qkv::kernels::cpu
