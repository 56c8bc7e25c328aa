// The CPU's conv kernels: kernels/conv.inc (their formulas and contracts, one declaration for every
// device), computed by oneDNN's convolution primitives. They run on oneDNN's blocked layouts
// (nChw8c on AVX2, nChw16c on AVX-512), with the NCHW operands reordered in and out: measured on
// Zen 3 at ResNet sizes that is 1.1–1.5× faster than oneDNN on NCHW itself, which is im2col + GEMM
// (`qkv bench conv2d`; docs/BENCHMARKS.md). A primitive is JIT-compiled once per problem and kept.
#pragma once

#include <cstdint>

#include "kernels/conv.h"

namespace qkv::kernels::cpu {
#include "kernels/conv.inc"
}  // namespace qkv::kernels::cpu
