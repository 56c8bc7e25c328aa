// cuBLAS, opened (dlopen) when the first GEMM runs on a GPU — not when qkv starts. Linked as a
// library, libcublas.so.13 and its libcublasLt.so.13 cost every process that loads qkv about
// 210 MB of resident memory, a GPU or not (measured: python3 with ctypes.CDLL of either, 13 → 224 MB
// peak RSS); CTranslate2 opens cuBLAS the same way. The functions qkv calls, by their cuBLAS types.
#pragma once

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
QKV_CUDA_LAUNCHERS_END
#else
namespace qkv::kernels::cuda {
// The library, opened on the first call (by its soname, then at the toolkit's path this build saw):
// a qkv::Error naming both and dlerror's reason when it cannot be opened or lacks a function.
const CublasLibrary& cublas();
}  // namespace qkv::kernels::cuda
#endif
