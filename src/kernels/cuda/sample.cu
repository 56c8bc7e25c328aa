// sample_rows on the GPU (formula: kernels/sample.inc; the kernel: sample_kernels.cuh): a block a row.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/sample_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

void sample_rows(const float* x, int64_t rows, int64_t n, const double* params, int32_t* out) {
  if (rows == 0) return;
  QKV_CHECK(rows < (int64_t{1} << 31), "sample_rows: ", rows, " rows; the CUDA kernel takes fewer than 2^31");
  QKV_LAUNCH(static_cast<unsigned>(rows), kSampleThreads, 0, stream(), sample_rows_kernel)(x, n, params, out);
  QKV_CUDA_LAUNCHED(sample_rows_kernel);
}

void apply_penalties(float* x, int64_t n, const int32_t* seen, int64_t m, const float* penalties) {
  if (m == 0) return;
  const int64_t blocks = (m + 255) / 256;
  QKV_CHECK(blocks < (int64_t{1} << 31), "apply_penalties: ", m, " entries");
  QKV_LAUNCH(static_cast<unsigned>(blocks), 256, 0, stream(), apply_penalties_kernel)(x, n, seen, m, penalties);
  QKV_CUDA_LAUNCHED(apply_penalties_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
