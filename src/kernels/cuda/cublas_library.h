// cuBLAS, opened (dlopen) when the first GEMM runs on a GPU — not when qkv starts. Linked as a
// library, libcublas.so.13 and its libcublasLt.so.13 cost every process that loads qkv about
// 210 MB of resident memory, a GPU or not (measured: python3 with ctypes.CDLL of either, 13 → 224 MB
// peak RSS); CTranslate2 opens cuBLAS the same way. The functions qkv calls, by their cuBLAS types.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "kernels/cuda/namespace.h"

namespace qkv::kernels::cuda {

struct CublasLibrary {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSgeam) sgeam;
  decltype(&::cublasSgemm_v2) sgemm;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType, int lda, const void* B, cudaDataType,
                            int ldb, const void* beta, void* C, cudaDataType, int ldc, cublasComputeType_t,
                            cublasGemmAlgo_t);  // (the C function; cuBLAS's C++ overload is inline)
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

// cuBLASLt's (libcublasLt.so, which libcublas.so loads anyway): the GEMMs with an epilogue — the linear
// layer's bias added as the product is written (gemm.cu's sgemm_bias, gemm_bf16_bias).
struct CublasLtLibrary {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtMatmulDescCreate) desc_create;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&::cublasLtMatmul) matmul;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
};

}  // namespace qkv::kernels::cuda

#ifdef QKV_CUDA_EMULATION
// Under the tests' host emulation: the calls on the host (tests/kernels/cuda_emulation.h), in the
// launchers' namespace (namespace.h), so that a test compiling gemm.cu has a cuBLAS of its own.
QKV_CUDA_LAUNCHERS_BEGIN
inline const CublasLibrary& cublas() {
  namespace e = ::qkv::emulation;
  static const CublasLibrary table{e::cublas_create, e::cublas_set_math_mode, e::cublas_set_stream, e::cublas_sgeam,
                                   e::cublas_sgemm,  e::cublas_gemm_ex,       e::cublas_status_name,
                                   e::cublas_status_string};
  return table;
}
inline const CublasLtLibrary& cublas_lt() {
  namespace e = ::qkv::emulation;
  static const CublasLtLibrary table{e::cublas_lt_create,         e::cublas_lt_desc_create,  e::cublas_lt_desc_set,
                                     e::cublas_lt_layout_create,  e::cublas_lt_preference_create,
                                     e::cublas_lt_preference_set, e::cublas_lt_heuristic,    e::cublas_lt_matmul,
                                     e::cublas_lt_desc_destroy,   e::cublas_lt_layout_destroy,
                                     e::cublas_lt_preference_destroy};
  return table;
}
QKV_CUDA_LAUNCHERS_END
#else
namespace qkv::kernels::cuda {
// The library, opened on the first call (by its soname, then at the toolkit's path this build saw):
// a qkv::Error naming both and dlerror's reason when it cannot be opened or lacks a function.
const CublasLibrary& cublas();
const CublasLtLibrary& cublas_lt();
}  // namespace qkv::kernels::cuda
#endif
