#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstring>

#include "kernels/cpu/onednn_call.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
    return;
  }
  dnnl_status_t st;
  {
    const OneDnnCall call;  // no signal handled inside oneDNN's kernels (kernels/cpu/onednn_call.h)
    st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  QKV_CHECK(st == dnnl_success, "sgemm: oneDNN failed (status ", static_cast<int>(st), ") for M=", M, " N=", N,
            " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

void fill_bias_rows(float* C, int64_t ldc, const float* bias, int64_t M, int64_t N) {
  for (int64_t i = 0; i < M; ++i) std::memcpy(C + i * ldc, bias, static_cast<size_t>(N) * sizeof(float));
}

// The bias rows, then the product accumulated onto them: C = op(A) op(B) + bias, the sum of the
// product's terms first, then the bias (BLAS's beta·C after α·AB)
void sgemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  fill_bias_rows(C, ldc, bias, M, N);
  sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 1.f, C, ldc);
}

void sgemm_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   int64_t sa, const float* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc,
                   int64_t sc, int64_t batch) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const double flops = 2.0 * M * N * K;
  if (batch > 1 && flops < 4e6 && num_threads() > 1 && !in_parallel_region()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i) sgemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
    return;
  }
  for (int64_t i = 0; i < batch; ++i) sgemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

}  // namespace qkv::kernels::cpu
