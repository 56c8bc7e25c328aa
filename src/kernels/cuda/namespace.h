// The namespace of the CUDA backend's launchers — kernels.h's and attention_kernels.h's declarations,
// the .cu files' definitions, launch.h's host helpers (stream(), Scratch, …): qkv::kernels::cuda.
// Under the tests' host emulation (tests/kernels/cuda_emulation.h defines QKV_CUDA_EMULATION) an
// unnamed namespace in an inline one within it: a test that compiles a .cu file on the host (its
// QKV_LAUNCH runs the kernels there) has launchers of its own, local to the test's file — neither a
// second body for the library's names nor a clash with another test file that compiles the same .cu
// — and apart from the kernel headers' unnamed namespace, so that a .cu file's own constants do not
// make a kernel header's names ambiguous.
#pragma once

#ifdef QKV_CUDA_EMULATION
#define QKV_CUDA_LAUNCHERS_BEGIN \
  namespace qkv::kernels::cuda {   \
  inline namespace emulated {      \
  namespace {
#define QKV_CUDA_LAUNCHERS_END \
  }                            \
  }                            \
  }
#else
#define QKV_CUDA_LAUNCHERS_BEGIN namespace qkv::kernels::cuda {
#define QKV_CUDA_LAUNCHERS_END }
#endif
