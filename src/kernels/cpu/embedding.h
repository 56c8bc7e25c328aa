// The CPU's embedding kernels: kernels/embedding.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/embedding.inc"
}  // namespace qkv::kernels::cpu
