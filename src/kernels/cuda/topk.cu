// topk on the GPU (order and contract: kernels/topk.inc, kernels/topk.h): a block a row picks its k
// entries one round at a time — round j takes the largest key below round j − 1's, each thread over
// its strided share of the row, then a block-wide maximum. k ≤ 129 in decoding (2·beam + 1), so k
// passes over a row that stays in L1 cost less than a sort; the same entries as the CPU's heap.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/topk.h"
#include "kernels/cuda/topk_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

void topk(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int32_t* indices) {
  if (rows == 0 || k == 0) return;
  QKV_CHECK(rows < (int64_t{1} << 31), "topk: ", rows, " rows; the CUDA kernel takes fewer than 2^31");
  QKV_LAUNCH(static_cast<unsigned>(rows), 256, 0, stream(), topk_kernel)(x, n, k, values, indices);
  QKV_CUDA_LAUNCHED(topk_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
