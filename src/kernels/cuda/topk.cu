// topk on the GPU (order and contract: kernels/topk.inc, kernels/topk.h): a block a row picks its k
// entries one round at a time — round j takes the largest key below round j − 1's, each thread over
// its strided share of the row, then a block-wide maximum. k ≤ 129 in decoding (2·beam + 1), so k
// passes over a row that stays in L1 cost less than a sort; the same entries as the CPU's heap.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/topk.h"

namespace qkv::kernels::cuda {
namespace {

struct MaxKey {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};

__global__ void topk_kernel(const float* x, int64_t n, int64_t k, float* values, int32_t* indices) {
  const float* row = x + blockIdx.x * n;
  uint64_t last = 0;
  for (int64_t j = 0; j < k; ++j) {
    uint64_t best = 0;  // below every key (−∞'s is 0x007fffff·2³² + …)
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const uint64_t key = topk_key(__ldg(row + i), i);
      if ((j == 0 || key < last) && key > best) best = key;
    }
    best = block_reduce(best, MaxKey{}, uint64_t{0});
    last = best;
    if (threadIdx.x == 0) {
      const auto i = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
      values[blockIdx.x * k + j] = row[i];
      indices[blockIdx.x * k + j] = i;
    }
  }
}

}  // namespace

void topk(const float* x, int64_t rows, int64_t n, int64_t k, float* values, int32_t* indices) {
  if (rows == 0 || k == 0) return;
  QKV_CHECK(rows < (int64_t{1} << 31), "topk: ", rows, " rows; the CUDA kernel takes fewer than 2^31");
  topk_kernel<<<static_cast<unsigned>(rows), 256, 0, stream()>>>(x, n, k, values, indices);
  QKV_CUDA_LAUNCHED(topk_kernel);
}

}  // namespace qkv::kernels::cuda
