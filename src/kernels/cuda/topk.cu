// topk on the GPU (order and contract: kernels/topk.inc, kernels/topk.h): a block a row picks its k
// entries one round at a time — round j takes the largest key below round j − 1's, each thread over
// its strided share of the row, then a block-wide maximum. k ≤ 129 in decoding (2·beam + 1), so k
// passes over a row that stays in L1 cost less than a sort; the same entries as the CPU's heap.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/topk.h"
#include "kernels/cuda/topk_kernels.cuh"

namespace qkv::kernels::cuda {

void topk(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int32_t* indices) {
  if (rows == 0 || k == 0) return;
  QKV_CHECK(rows < (int64_t{1} << 31), "topk: ", rows, " rows; the CUDA kernel takes fewer than 2^31");
  topk_kernel<<<static_cast<unsigned>(rows), 256, 0, stream()>>>(x, n, k, values, indices);
  QKV_CUDA_LAUNCHED(topk_kernel);
}

}  // namespace qkv::kernels::cuda
