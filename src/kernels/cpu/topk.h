// The CPU's topk kernel: kernels/topk.inc (its order and contract, one declaration for every device).
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {
#include "kernels/topk.inc"
}  // namespace qkv::kernels::cpu
