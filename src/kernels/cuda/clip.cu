// Clipping by the global norm on the GPU (formulas: kernels/clip.inc), with no host round trip: a
// launch a chunk of ≤ kListTensors tensors writes each tensor's partial sums of squares (in double,
// kNormBlocks per tensor), then one block adds them all in a fixed order — the same bits every run —
// and writes ‖x‖ and s where the next kernel (Adam's list update) reads them.
#include <cmath>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/tensor_list.h"
#include "kernels/cuda/clip_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

void clip_coefficient(const float* const* x, const int64_t* n, int64_t count, double max_norm, float* out) {
  cudaStream_t s = stream();
  double* partial = nullptr;
  const int64_t partials = (count > 0 ? count : 1) * kNormBlocks;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), partials * sizeof(double), s));
  QKV_CUDA_CHECK(cudaMemsetAsync(partial, 0, partials * sizeof(double), s));  // empty tensors add nothing
  for_each_chunk<1>({x}, n, count, [&](const TensorList<1>& list, int64_t first, int tensors, int64_t) {
    QKV_LAUNCH(dim3(kNormBlocks, tensors), 256, 0, s, squares_kernel)(list, first, partial);
    QKV_CUDA_LAUNCHED(squares_kernel);
  });
  QKV_LAUNCH(1, 256, 0, s, clip_finish_kernel)(partial, partials, max_norm, out);
  QKV_CUDA_LAUNCHED(clip_finish_kernel);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
