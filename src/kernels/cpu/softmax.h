// The CPU's softmax kernels: kernels/softmax.inc (their formulas and contracts, one declaration for
// every device), and a row kernel of the CPU's own.
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/softmax.inc"

// One row, in place (x → softmax(x)); used by the attention kernels.
void softmax_row_inplace(float* x, int64_t n);

}  // namespace qkv::kernels::cpu
