// The flash pair in p.compute's precision on the GPU — attention.cu's f32 pair, attention_bf16.cu's
// bf16 and f16 — by the dispatch both devices share (kernels/attention_precision.inc). A file of its
// own, so that the host emulation can compile attention.cu's launchers without the WMMA pair
// (tests/kernels/attention_f32_emulation_test.cpp).
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN

#include "kernels/attention_precision.inc"

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
