// GEMM through cuBLAS (kernels/cpu/gemm.h's row-major contract). cuBLAS is column-major: a
// row-major C[M,N] is a column-major Cᵀ[N,M], and Cᵀ = op(B)ᵀ op(A)ᵀ, so the row-major product is
// cuBLAS's with the operands swapped and M, N exchanged — no data moves.
//
// f32 runs on the TF32 tensor cores (10-bit mantissa products, f32 accumulation: PyTorch's
// allow_tf32 = True, relative error ~3e-4); QKV_CUDA_TF32=0 in the environment keeps full f32.
// bf16: cublasGemmEx with bf16 operands, f32 compute and an f32 result.
#include <cublas_v2.h>

#include <cstdlib>
#include <vector>

#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

[[noreturn]] void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line) {
  throw Error(detail::concat(call, " failed (", file, ":", line, "): ", cublas().status_name(st), ", ",
                             cublas().status_string(st)));
}
#define QKV_CUBLAS_CHECK(call)                                                   \
  do {                                                                           \
    const cublasStatus_t qkv_cublas_status_ = (call);                            \
    if (qkv_cublas_status_ != CUBLAS_STATUS_SUCCESS) cublas_fail(qkv_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

bool tf32_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("QKV_CUDA_TF32");
    return !(env && env[0] == '0');
  }();
  return on;
}

// One cuBLAS handle per device and host thread, created on first use (a cuBLAS handle must not be
// used by two threads at once — qkv serve decodes for several models on several threads), bound to
// the current stream before each call. Never destroyed, as PyTorch's handle pool: destroying at
// exit could race the CUDA runtime's own teardown, and the threads that use them are few and long-lived.
cublasHandle_t handle() {
  thread_local std::vector<cublasHandle_t> handles;
  int device = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  if (static_cast<int>(handles.size()) <= device) handles.resize(device + 1, nullptr);
  cublasHandle_t& h = handles[device];
  if (!h) {
    QKV_CUBLAS_CHECK(cublas().create(&h));
    QKV_CUBLAS_CHECK(cublas().set_math_mode(h, tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  }
  QKV_CUBLAS_CHECK(cublas().set_stream(h, stream()));
  return h;
}

int checked_int(int64_t v, const char* what) {
  QKV_CHECK(v >= 0 && v <= 2147483647, "gemm: ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// K = 0: C = beta·C, as the CPU's gemm (no product to add; cuBLAS is not asked, since the empty
// operands' leading dimensions may be 0, which it refuses).
void scale_only(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  if (beta == 1.f) return;
  if (beta == 0.f) {  // (C is not read: NaN there does not survive, as BLAS's beta = 0)
    QKV_CUDA_CHECK(cudaMemset2DAsync(C, static_cast<size_t>(ldc) * sizeof(float), 0,
                                     static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M), stream()));
    return;
  }
  const float zero = 0.f;  // column-major Cᵀ [N, M] = beta·Cᵀ, in place (B unused at beta 0)
  QKV_CUBLAS_CHECK(cublas().sgeam(handle(), CUBLAS_OP_N, CUBLAS_OP_N, checked_int(N, "N"), checked_int(M, "M"), &beta, C,
                               checked_int(ldc, "ldc"), &zero, C, checked_int(ldc, "ldc"), C, checked_int(ldc, "ldc")));
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
  // Row-major C = op(A) op(B)  ≡  column-major Cᵀ = op(B)ᵀ op(A)ᵀ, with B's and A's stored forms.
  QKV_CUBLAS_CHECK(cublas().sgemm(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                               checked_int(N, "N"), checked_int(M, "M"), checked_int(K, "K"), &alpha, B,
                               checked_int(ldb, "ldb"), A, checked_int(lda, "lda"), &beta, C,
                               checked_int(ldc, "ldc")));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
               const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
  const float alpha = 1.f;
  QKV_CUBLAS_CHECK(cublas().gemm_ex(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                checked_int(N, "N"), checked_int(M, "M"), checked_int(K, "K"), &alpha, B,
                                CUDA_R_16BF, checked_int(ldb, "ldb"), A, CUDA_R_16BF, checked_int(lda, "lda"), &beta,
                                C, CUDA_R_32F, checked_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
