// How an op reaches a device's kernels — private to ops, the one place that knows which kernel
// namespaces exist (CTranslate2's DEVICE_DISPATCH is the model):
//
//   const Device d = device_of("relu", {&x});            // every operand on one device, or an error
//   Tensor out = Tensor::empty(x.shape(), DType::f32, d);
//   QKV_DISPATCH("relu", d, k::relu_forward(x.data(), out.data(), n));
//
// Inside the statement, `k` names the kernels of the operands' device: kernels::cpu today. A new
// device adds its namespace (kernels::cuda, with the same functions) as one more case below; an op
// whose operands live on a device without kernels in this build gets a qkv::Error naming the op and
// the device, before any memory is touched.
#pragma once

#include <initializer_list>

#include "qkv/ops/tensor.h"

namespace qkv::ops_detail {

// The device all defined operands share; a qkv::Error naming the op when they differ, or when it is
// a device this build has no kernels for.
Device device_of(const char* op, std::initializer_list<const TensorBase*> operands);
[[noreturn]] void no_kernels(const char* op, Device d);

}  // namespace qkv::ops_detail

// A build with a CUDA backend defines QKV_WITH_CUDA and compiles src/kernels/cuda/: its case.
#ifdef QKV_WITH_CUDA
#define QKV_DISPATCH_CUDA_CASE(...)                \
  case ::qkv::DeviceType::cuda: {                  \
    namespace k = ::qkv::kernels::cuda;            \
    __VA_ARGS__;                                   \
    break;                                         \
  }
#else
#define QKV_DISPATCH_CUDA_CASE(...)
#endif

#define QKV_DISPATCH(OP, DEVICE, ...)                       \
  do {                                                      \
    switch ((DEVICE).type) {                                \
      case ::qkv::DeviceType::cpu: {                        \
        namespace k = ::qkv::kernels::cpu;                  \
        __VA_ARGS__;                                        \
        break;                                              \
      }                                                     \
      QKV_DISPATCH_CUDA_CASE(__VA_ARGS__)                   \
      default: ::qkv::ops_detail::no_kernels(OP, DEVICE);   \
    }                                                       \
  } while (0)
