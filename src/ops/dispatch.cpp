#include "dispatch.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "qkv/core/cuda.h"

namespace qkv::ops_detail {

Device device_of(const char* op, std::initializer_list<const TensorBase*> operands) {
  return device_of(op, std::span<const TensorBase* const>(operands.begin(), operands.size()));
}

Device device_of(const char* op, std::span<const TensorBase* const> operands) {
  const TensorBase* first = nullptr;
  for (const TensorBase* t : operands) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    QKV_CHECK(t->device() == first->device(), op, ": operands on different devices (", first->str(), " and ", t->str(),
              "); move them to one device with .to(device)");
  }
  const Device d = first ? first->device() : Device::cpu();
  check_device(op, d);
  return d;
}

void check_device(const char* op, Device d) {
  if (d.is_cpu()) return;
#ifdef QKV_WITH_CUDA
  if (d.type != DeviceType::cuda) no_kernels(op, d);
  // A GPU this machine does not have stops here too, before a kernel is asked to read its memory.
  QKV_CHECK(device_available(d), op, ": ", d.str(), " is not available (",
            cuda::device_count() == 0 ? std::string("this machine shows no CUDA GPU")
                                      : detail::concat("this machine has ", cuda::device_count(), " CUDA GPU(s)"),
            ")");
#else
  no_kernels(op, d);
#endif
}

Device cpu_device_of(const char* op, std::initializer_list<const TensorBase*> operands) {
  const Device d = device_of(op, operands);
  if (!d.is_cpu()) no_kernels(op, d);
  return d;
}

void no_kernels(const char* op, Device d) {
#ifdef QKV_WITH_CUDA
  throw Error(detail::concat(op, ": no ", d.str(), " kernel yet in qkv's CUDA backend (this op runs on the cpu "
                             "only; move its operands with .to(Device::cpu()); docs/ARCHITECTURE.md, \"Adding a "
                             "device\")"));
#else
  throw Error(detail::concat(op, ": no kernels for ", d.str(), " tensors in this build of qkv (it has cpu only; "
                             "docs/ARCHITECTURE.md, \"Adding a device\")"));
#endif
}

}  // namespace qkv

namespace qkv {

Tensor Tensor::to(Device device) const {
  if (this->device() == device) return *this;
  return (is_contiguous() ? *this : contiguous()).TensorBase::to(device);
}

}  // namespace qkv
