// The CPU's layer norm kernels: kernels/layer_norm.inc (their formulas and contracts, one declaration for
// every device).
#pragma once

#include <cstdint>

#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"

namespace qkv::kernels::cpu {
#include "kernels/layer_norm.inc"
}  // namespace qkv::kernels::cpu
