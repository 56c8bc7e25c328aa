#include "dispatch.h"

namespace qkv::ops_detail {

Device device_of(const char* op, std::initializer_list<const TensorBase*> operands) {
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
  if (!d.is_cpu()) no_kernels(op, d);
  return d;
}

void no_kernels(const char* op, Device d) {
  throw Error(detail::concat(op, ": no kernels for ", d.str(), " tensors in this build of qkv (it has cpu only; "
                             "docs/ARCHITECTURE.md, \"Adding a device\")"));
}

}  // namespace qkv

namespace qkv {

Tensor Tensor::to(Device device) const {
  if (this->device() == device) return *this;
  return (is_contiguous() ? *this : contiguous()).TensorBase::to(device);
}

}  // namespace qkv
