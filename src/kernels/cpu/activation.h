// The CPU's activation kernels: kernels/activation.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

#include "kernels/dropout_mask.h"
#include "qkv/core/dtype.h"

namespace qkv::kernels::cpu {
#include "kernels/activation.inc"
}  // namespace qkv::kernels::cpu
