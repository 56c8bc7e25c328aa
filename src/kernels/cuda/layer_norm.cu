// LayerNorm on the GPU (formulas: kernels/cpu/layer_norm.h). Forward and dx: a warp a row up to 1,024
// elements (the row in registers), one block a row past it; mean and variance in two passes (no
// E[x²] − E[x]² cancellation). dγ and dβ: column sums over the
// rows, each block summing a strip of rows into a partial, then the partials summed per column, so
// the result does not depend on atomics' order.
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/residual_row.cuh"
#include "kernels/cuda/layer_norm_kernels.cuh"

QKV_CUDA_LAUNCHERS_BEGIN

namespace {

// The forward: a warp a row up to kWarpRowMax elements, a block a row past it
template <bool Add>
void forward(const float* x, const float* res, const DropoutMask& drop, float* s, const float* gamma, const float* beta,
             float* y, float* mean, float* rstd, int64_t rows, int64_t n, float eps, bf16* y16) {
  QKV_CHECK(rows <= 2147483647, Add ? "add_layer_norm: " : "layer_norm: ", rows,
            " rows; the CUDA kernel takes at most 2^31 - 1");
  if (n <= kWarpRowMax) {
    by_warp_row_slots(n, [&]<int P>() {
      QKV_LAUNCH(warp_rows_grid(rows), kThreads, 0, stream(), layer_norm_forward_warp_kernel<Add, P>)
      (x, res, drop, s, gamma, beta, y, mean, rstd, rows, n, eps, y16);
    });
    QKV_CUDA_LAUNCHED(layer_norm_forward_warp_kernel);
    return;
  }
  QKV_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream(), layer_norm_forward_kernel<Add>)
  (x, res, drop, s, gamma, beta, y, mean, rstd, n, eps, y16);
  QKV_CUDA_LAUNCHED(layer_norm_forward_kernel);
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int64_t rows, int64_t n, float eps, bf16* y16) {
  if (rows == 0 || n == 0) return;
  forward<false>(x, nullptr, DropoutMask{}, nullptr, gamma, beta, y, mean, rstd, rows, n, eps, y16);
}

void add_layer_norm_forward(const float* x, const float* res, const DropoutMask& res_drop, const float* gamma,
                            const float* beta, float* s, float* y, float* mean, float* rstd, int64_t rows, int64_t n,
                            float eps, bf16* y16) {
  if (rows == 0 || n == 0) return;
  forward<true>(x, res, res_drop, s, gamma, beta, y, mean, rstd, rows, n, eps, y16);
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n, const ResidualGradient& res) {
  if (rows == 0 || n == 0) return;
  QKV_CHECK(rows <= 2147483647, "layer_norm: ", rows, " rows; the CUDA kernel takes at most 2^31 - 1");
  cudaStream_t s = stream();
  if (dx && n <= kWarpRowMax) {
    by_warp_row_slots(n, [&]<int P>() {
      QKV_LAUNCH(warp_rows_grid(rows), kThreads, 0, s, layer_norm_dx_warp_kernel<P>)
      (x, gamma, mean, rstd, dy, dx, rows, n, res);
    });
    QKV_CUDA_LAUNCHED(layer_norm_dx_warp_kernel);
  } else if (dx) {
    QKV_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, s, layer_norm_dx_kernel)(x, gamma, mean, rstd, dy, dx, n, res);
    QKV_CUDA_LAUNCHED(layer_norm_dx_kernel);
  }
  if (!dgamma && !dbeta) return;
  const int64_t strips = (rows + kStrip - 1) / kStrip;
  QKV_CHECK(strips <= 65535, "layer_norm: ", rows, " rows; the CUDA parameter gradients take at most ", 65535 * kStrip);
  float* partial = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), 2 * strips * n * sizeof(float), s));
  const dim3 grid(blocks_for(n), static_cast<unsigned>(strips));
  QKV_LAUNCH(grid, 256, 0, s, layer_norm_dparams_partial)(x, mean, rstd, dy, partial, partial + strips * n, rows, n);
  QKV_CUDA_LAUNCHED(layer_norm_dparams_partial);
  QKV_LAUNCH(blocks_for(n), 256, 0, s, column_sums)(partial, strips, n, dgamma);
  QKV_LAUNCH(blocks_for(n), 256, 0, s, column_sums)(partial + strips * n, strips, n, dbeta);
  QKV_CUDA_LAUNCHED(column_sums);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
