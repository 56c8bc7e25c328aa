#include "kernels/cuda/cublas_library.h"

#include "qkv/core/shared_library.h"

namespace qkv::kernels::cuda {

const CublasLibrary& cublas() {
  static const CublasLibrary lib = [] {
    // by its soname, then at the toolkit's path this build saw
    static const SharedLibrary so("cuBLAS", {QKV_CUBLAS_SONAME, QKV_CUBLAS_PATH},
                                  "install the CUDA toolkit's cuBLAS or put its folder on LD_LIBRARY_PATH");
    CublasLibrary l{};
    so.bind(l.create, "cublasCreate_v2");
    so.bind(l.set_math_mode, "cublasSetMathMode");
    so.bind(l.set_stream, "cublasSetStream_v2");
    so.bind(l.sgeam, "cublasSgeam");
    so.bind(l.sgemm, "cublasSgemm_v2");
    so.bind(l.gemm_ex, "cublasGemmEx");
    so.bind(l.status_name, "cublasGetStatusName");
    so.bind(l.status_string, "cublasGetStatusString");
    return l;
  }();
  return lib;
}

const CublasLtLibrary& cublas_lt() {
  static const CublasLtLibrary lib = [] {
    static const SharedLibrary so("cuBLASLt", {QKV_CUBLASLT_SONAME, QKV_CUBLASLT_PATH},
                                  "install the CUDA toolkit's cuBLAS or put its folder on LD_LIBRARY_PATH");
    CublasLtLibrary l{};
    so.bind(l.create, "cublasLtCreate");
    so.bind(l.desc_create, "cublasLtMatmulDescCreate");
    so.bind(l.desc_set, "cublasLtMatmulDescSetAttribute");
    so.bind(l.layout_create, "cublasLtMatrixLayoutCreate");
    so.bind(l.preference_create, "cublasLtMatmulPreferenceCreate");
    so.bind(l.preference_set, "cublasLtMatmulPreferenceSetAttribute");
    so.bind(l.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    so.bind(l.matmul, "cublasLtMatmul");
    so.bind(l.desc_destroy, "cublasLtMatmulDescDestroy");
    so.bind(l.layout_destroy, "cublasLtMatrixLayoutDestroy");
    so.bind(l.preference_destroy, "cublasLtMatmulPreferenceDestroy");
    return l;
  }();
  return lib;
}

}  // namespace qkv::kernels::cuda
