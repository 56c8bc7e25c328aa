// The fused Adam / AdamW update on the GPU (formulas: kernels/adam.inc): one pass over θ, g, m,
// v (and θ's bf16 copy, where asked), each element read and written once, up to kListTensors
// tensors a launch.
#include <vector>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/tensor_list.h"
#include "kernels/cuda/adam_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

void adam_update_list(float* const* param, const float* const* grad, float* const* exp_avg, float* const* exp_avg_sq,
                      const int64_t* n, int64_t count, const AdamCoefficients& c, const float* step_numbers,
                      const float* clip_factor, bf16* const* bf16_copy) {
  // the copies as the list's fifth array (float pointers, as convert_to_bf16_list carries them; null
  // entries where a tensor has none)
  std::vector<float*> copies(static_cast<size_t>(count), nullptr);
  for (int64_t i = 0; bf16_copy && i < count; ++i) copies[static_cast<size_t>(i)] = reinterpret_cast<float*>(bf16_copy[i]);
  for_each_chunk<5>({param, grad, exp_avg, exp_avg_sq, copies.data()}, n, count,
                    [&](const TensorList<5>& list, int64_t, int tensors, int64_t most) {
                      const dim3 grid(blocks_for(most, 256, 4) > 1024 ? 1024 : blocks_for(most, 256, 4), tensors);
                      QKV_LAUNCH(grid, 256, 0, stream(), adam_list_kernel)(list, c, step_numbers, clip_factor);
                      QKV_CUDA_LAUNCHED(adam_list_kernel);
                    });
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
