// How an op reaches a device's kernels — private to ops, the one place that knows which kernel
// namespaces exist (CTranslate2's DEVICE_DISPATCH is the model):
//
//   const Device d = device_of("relu", {&x});            // every operand on one device, or an error
//   Tensor out = Tensor::empty(x.shape(), DType::f32, d);
//   QKV_DISPATCH("relu", d, k::relu_forward(x.data(), out.data(), n));
//
// Inside the statement, `k` names the kernels of the operands' device: kernels::cpu, and
// kernels::cuda in a build with the CUDA backend (-DQKV_CUDA=ON defines QKV_WITH_CUDA). An op whose
// operands live on a device without kernels in this build gets a qkv::Error naming the op and the
// device, before any memory is touched.
//
// The CUDA backend is being built kernel by kernel (docs/ARCHITECTURE.md, "Adding a device"). An op
// whose kernels exist for the CPU alone says so at its two seams: `cpu_device_of` in place of
// `device_of` (so a GPU tensor stops there, before the op reads anything on the host) and
// QKV_DISPATCH_CPU in place of QKV_DISPATCH; a GPU tensor reaching it is a qkv::Error naming the op
// ("quantize: no cuda:0 kernel yet …"). Porting an op is writing its kernels in kernels::cuda and
// switching both back.
#pragma once

#include <initializer_list>
#include <span>

#include "qkv/core/thread_budget.h"
#include "qkv/ops/tensor.h"

namespace qkv::ops_detail {

// The device all defined operands share; a qkv::Error naming the op when they differ, or when it is
// a device this build has no kernels for.
Device device_of(const char* op, std::initializer_list<const TensorBase*> operands);
// The same for the operands of a list op (adam_update_ over every parameter).
Device device_of(const char* op, std::span<const TensorBase* const> operands);
// The same for an op with CPU kernels only: any other device is a qkv::Error naming the op.
Device cpu_device_of(const char* op, std::initializer_list<const TensorBase*> operands);
// That this build has kernels for `d` and this machine has it: a qkv::Error naming op and device if not.
void check_device(const char* op, Device d);
[[noreturn]] void no_kernels(const char* op, Device d);

}  // namespace qkv::ops_detail

// A build with a CUDA backend defines QKV_WITH_CUDA and compiles src/kernels/cuda/: its case.
#ifdef QKV_WITH_CUDA
#include "kernels/cuda/kernels.h"
#include "qkv/core/cuda.h"
#define QKV_DISPATCH_CUDA_CASE(DEVICE_INDEX, ...)  \
  case ::qkv::DeviceType::cuda: {                  \
    namespace k = ::qkv::kernels::cuda;            \
    ::qkv::cuda::DeviceGuard qkv_device_guard_(DEVICE_INDEX); \
    __VA_ARGS__;                                   \
    break;                                         \
  }
#else
#define QKV_DISPATCH_CUDA_CASE(DEVICE_INDEX, ...)
#endif

namespace qkv::ops_detail {
// Where a step's work goes (docs/CUDA.md, "Where a step's time goes"):
//   QKV_COUNT_OPS=1 — every dispatch counted by op name: how many kernels a training or decoding step
//                     asks of a device (a GPU's launches);
//   QKV_PROFILE=1   — torch.profiler's table: per op (its backward apart), the calls, the host's time
//                     in the dispatch (on a CPU the kernel itself; on a GPU queuing it) and on a GPU
//                     the device's time between two events around it, with the run's waits for the
//                     device and the host's time outside any op.
// Both print to standard error at exit (dispatch_profile.cpp).
extern const bool kCountDispatches;
extern const bool kProfileDispatches;

class DispatchScope {
 public:
  DispatchScope(const char* op, Device d) {
    if (d.type == DeviceType::cpu) budget_between_ops();  // the cores free now (core/thread_budget.h)
    if (kCountDispatches || kProfileDispatches) begin(op, d);
  }
  ~DispatchScope() {
    if (op_) end();
  }
  DispatchScope(const DispatchScope&) = delete;
  DispatchScope& operator=(const DispatchScope&) = delete;

 private:
  void begin(const char* op, Device d);
  void end();
  const char* op_ = nullptr;
  Device device_;
  int64_t t0_ns_ = 0;
  void* start_ = nullptr;  // the GPU's mark before the kernels
};

// Dispatches in its scope are a backward's (the profile lists them apart): set by the autograd engine.
class BackwardPhase {
 public:
  BackwardPhase();
  ~BackwardPhase();
  BackwardPhase(const BackwardPhase&) = delete;
  BackwardPhase& operator=(const BackwardPhase&) = delete;

 private:
  bool previous_;
};
}  // namespace qkv::ops_detail

#define QKV_DISPATCH(OP, DEVICE, ...)                       \
  do {                                                      \
    const ::qkv::ops_detail::DispatchScope qkv_dispatch_scope_(OP, DEVICE); \
    switch ((DEVICE).type) {                                \
      case ::qkv::DeviceType::cpu: {                        \
        namespace k = ::qkv::kernels::cpu;                  \
        __VA_ARGS__;                                        \
        break;                                              \
      }                                                     \
      QKV_DISPATCH_CUDA_CASE((DEVICE).index, __VA_ARGS__)   \
      default: ::qkv::ops_detail::no_kernels(OP, DEVICE);   \
    }                                                       \
  } while (0)

// An op whose kernels exist for the CPU alone (see above).
#define QKV_DISPATCH_CPU(OP, DEVICE, ...)                   \
  do {                                                      \
    if ((DEVICE).type != ::qkv::DeviceType::cpu) ::qkv::ops_detail::no_kernels(OP, DEVICE); \
    const ::qkv::ops_detail::DispatchScope qkv_dispatch_scope_(OP, DEVICE); \
    namespace k = ::qkv::kernels::cpu;                      \
    __VA_ARGS__;                                            \
  } while (0)
