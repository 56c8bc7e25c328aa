// The CPU's sampling kernel: kernels/sample.inc (its formula and contract, one declaration for every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/sample.inc"
}  // namespace qkv::kernels::cpu
