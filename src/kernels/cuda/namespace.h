// The namespace of the CUDA backend's launchers — kernels.h's and attention_kernels.h's declarations,
// the .cu files' definitions, launch.h's host helpers (stream(), Scratch, …): qkv::kernels::cuda. Under the tests' host emulation
// (tests/kernels/cuda_emulation.h defines QKV_CUDA_EMULATION) an inline namespace within it, so that a
// test which compiles a .cu file on the host (its launchers' QKV_LAUNCH run the kernels there) defines
// launchers of its own beside the library's, not a second body for the same names.
#pragma once

#ifdef QKV_CUDA_EMULATION
#define QKV_CUDA_LAUNCHERS_BEGIN \
  namespace qkv::kernels::cuda { \
  inline namespace emulated {
#define QKV_CUDA_LAUNCHERS_END \
  }                            \
  }
#else
#define QKV_CUDA_LAUNCHERS_BEGIN namespace qkv::kernels::cuda {
#define QKV_CUDA_LAUNCHERS_END }
#endif
