// The CPU's rms norm kernels: kernels/rms_norm.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"

namespace qkv::kernels::cpu {
#include "kernels/rms_norm.inc"
}  // namespace qkv::kernels::cpu
