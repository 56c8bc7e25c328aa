// RMSNorm on the GPU (formulas: kernels/cpu/rms_norm.h). Forward and dx: a warp a row up to 1,024
// elements (the row in registers: residual_row.cuh), one block a row past it. dγ:
// column sums over the rows in strips, then the strips summed per column (no atomics: the result
// does not depend on their order), as layer_norm.cu.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/residual_row.cuh"
#include "kernels/cuda/rms_norm_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

namespace {

// The forward: a warp a row up to kWarpRowMax elements (residual_row.cuh), a block a row past it
template <bool Add>
void forward(const float* x, const float* res, const DropoutMask& drop, float* s, const float* gamma, float* y,
             float* rstd, int64_t rows, int64_t n, float eps, bf16* y16) {
  QKV_CHECK(rows <= 2147483647, Add ? "add_rms_norm: " : "rms_norm: ", rows,
            " rows; the CUDA kernel takes at most 2^31 - 1");
  if (n <= kWarpRowMax) {
    by_warp_row_slots(n, [&]<int P>() {
      QKV_LAUNCH(warp_rows_grid(rows), kThreads, 0, stream(), rms_norm_forward_warp_kernel<Add, P>)
      (x, res, drop, s, gamma, y, rstd, rows, n, eps, y16);
    });
    QKV_CUDA_LAUNCHED(rms_norm_forward_warp_kernel);
    return;
  }
  QKV_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream(), rms_norm_forward_kernel<Add>)
  (x, res, drop, s, gamma, y, rstd, n, eps, y16);
  QKV_CUDA_LAUNCHED(rms_norm_forward_kernel);
}

}  // namespace

void rms_norm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int64_t n, float eps,
                      bf16* y16) {
  if (rows == 0 || n == 0) return;
  forward<false>(x, nullptr, DropoutMask{}, nullptr, gamma, y, rstd, rows, n, eps, y16);
}

void add_rms_norm_forward(const float* x, const float* res, const DropoutMask& res_drop, const float* gamma, float* s,
                          float* y, float* rstd, int64_t rows, int64_t n, float eps, bf16* y16) {
  if (rows == 0 || n == 0) return;
  forward<true>(x, res, res_drop, s, gamma, y, rstd, rows, n, eps, y16);
}

void rms_norm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                       float* dgamma, int64_t rows, int64_t n, const ResidualGradient& res) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "rms_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  cudaStream_t s = stream();
  if (dx && n <= kWarpRowMax) {
    by_warp_row_slots(n, [&]<int P>() {
      QKV_LAUNCH(warp_rows_grid(rows), kThreads, 0, s, rms_norm_dx_warp_kernel<P>)
      (x, gamma, rstd, dy, dx, rows, n, res);
    });
    QKV_CUDA_LAUNCHED(rms_norm_dx_warp_kernel);
  } else if (dx) {
    QKV_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, s, rms_norm_dx_kernel)(x, gamma, rstd, dy, dx, n, res);
    QKV_CUDA_LAUNCHED(rms_norm_dx_kernel);
  }
  if (!dgamma) return;
  const int64_t strips = (rows + kStrip - 1) / kStrip;
  QKV_CHECK(strips <= 65535, "rms_norm: ", rows, " rows; the CUDA weight gradient takes at most ", 65535 * kStrip);
  float* partial = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), strips * n * sizeof(float), s));
  const dim3 grid(blocks_for(n), static_cast<unsigned>(strips));
  QKV_LAUNCH(grid, 256, 0, s, rms_norm_dgamma_partial)(x, rstd, dy, partial, rows, n);
  QKV_CUDA_LAUNCHED(rms_norm_dgamma_partial);
  QKV_LAUNCH(blocks_for(n), 256, 0, s, column_sums)(partial, strips, n, dgamma);
  QKV_CUDA_LAUNCHED(column_sums);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
