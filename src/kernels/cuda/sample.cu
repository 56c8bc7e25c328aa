// sample_rows on the GPU (formula: kernels/sample.inc; the kernel: sample_kernels.cuh): a block a row.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/sample_kernels.cuh"

namespace qkv::kernels::cuda {

void sample_rows(const float* x, int64_t rows, int64_t n, const double* params, int32_t* out) {
  if (rows == 0) return;
  QKV_CHECK(rows < (int64_t{1} << 31), "sample_rows: ", rows, " rows; the CUDA kernel takes fewer than 2^31");
  sample_rows_kernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, stream()>>>(x, n, params, out);
  QKV_CUDA_LAUNCHED(sample_rows_kernel);
}

}  // namespace qkv::kernels::cuda
