// The CUDA kernels. Every kernel both devices have is declared once, in the device-neutral
// kernels/*.inc files (their formulas and contracts), included below inside this namespace as
// kernels/cpu/*.h include them inside kernels::cpu: a changed signature there changes both, and the
// CUDA build (compiled wherever nvcc is, a GPU or not) stops at any definition or call that no
// longer matches. Pointers are device memory of the current device (ops set it with
// cuda::DeviceGuard); work is queued on its current stream (qkv/core/cuda.h) and the functions
// return without waiting, except those that return a value to the host (sum_f64, sum_squares_f64);
// the checks of ids and targets on the device are deferred (cuda::deferred_check). Compiled by nvcc into qkv_kernels only with
// -DQKV_CUDA=ON; ops include this header through src/ops/dispatch.h.
//
// Which ops have CUDA kernels, and which still run on the CPU only: docs/ARCHITECTURE.md,
// "Adding a device".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/adam.h"
#include "kernels/conv.h"
#include "kernels/cuda/namespace.h"
#include "kernels/dropout_mask.h"
#include "kernels/residual_gradient.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/functors.h"
#include "kernels/paged_attention.h"
#include "kernels/pool.h"
#include "kernels/rnn.h"
#include "qkv/core/dtype.h"

QKV_CUDA_LAUNCHERS_BEGIN

#include "kernels/activation.inc"
#include "kernels/adam.inc"
#include "kernels/additive_score.inc"
#include "kernels/batch_norm.inc"
#include "kernels/clip.inc"
#include "kernels/conv.inc"
#include "kernels/copy.inc"
#include "kernels/cross_entropy.inc"
#include "kernels/elementwise.inc"
#include "kernels/embedding.inc"
#include "kernels/gemm.inc"
#include "kernels/gemm_bf16.inc"
#include "kernels/group_norm.inc"
#include "kernels/index.inc"
#include "kernels/layer_norm.inc"
#include "kernels/paged_attention.inc"
#include "kernels/pool.inc"
#include "kernels/rms_norm.inc"
#include "kernels/rnn.inc"
#include "kernels/softmax.inc"
#include "kernels/sample.inc"
#include "kernels/topk.inc"

// ---- the CUDA backend's own (used by its kernels; ops call the shared ones above) ---------------
// dst = f32(f16(src)), IEEE half, ties to even (attention's f16 compute).
void round_to_f16(const float* src, float* dst, int64_t n);
void fill_zero(void* p, size_t bytes);
void fill_f32(float* p, int64_t n, float value);

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
