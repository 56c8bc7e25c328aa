#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "qkv/core/error.h"

namespace qkv::kernels::cuda {

const CublasLibrary& cublas() {
  static const CublasLibrary lib = [] {
    void* h = dlopen(QKV_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen(QKV_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      throw Error(detail::concat("cannot open cuBLAS (", QKV_CUBLAS_SONAME, ", or ", QKV_CUBLAS_PATH,
                                 "): ", why ? why : "no reason given",
                                 " — install the CUDA toolkit's cuBLAS or put its folder on LD_LIBRARY_PATH"));
    }
    CublasLibrary l{};
    auto bind = [h](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      QKV_CHECK(fn, "cuBLAS (", QKV_CUBLAS_SONAME, ") has no ", name, ": a different version than this build's");
    };
    bind(l.create, "cublasCreate_v2");
    bind(l.set_math_mode, "cublasSetMathMode");
    bind(l.set_stream, "cublasSetStream_v2");
    bind(l.sgeam, "cublasSgeam");
    bind(l.sgemm, "cublasSgemm_v2");
    bind(l.gemm_ex, "cublasGemmEx");
    bind(l.status_name, "cublasGetStatusName");
    bind(l.status_string, "cublasGetStatusString");
    return l;
  }();
  return lib;
}

}  // namespace qkv::kernels::cuda
