// Copies, conversions and fills, on the tensor's own device: each a dispatched kernel
// (kernels/copy.inc, one declaration that every device defines). Core moves bytes — between
// devices (TensorBase::copy_bytes_), or gathered on the host (host_contiguous_copy) — and reads
// nothing as numbers; what reads or writes elements is here.
#include "dispatch.h"
#include "kernels/cpu/copy.h"
#include "qkv/ops/tensor.h"

namespace qkv {

namespace {

// The first element of t's view, as bytes.
const void* first_byte(const TensorBase& t) {
  return static_cast<const char*>(t.impl().storage->ptr()) + t.offset() * dtype_size(t.dtype());
}
void* first_byte(TensorBase& t) { return static_cast<char*>(t.impl().storage->ptr()) + t.offset() * dtype_size(t.dtype()); }

}  // namespace

// A dense tensor outside autograd (no grad asked, no op recorded: every tensor of an inference step)
// is already what detach() would make of it — the same values, shape and storage — and is handed on
// as it is: a detach is a new TensorImpl and its shape and strides, three allocations, and decoding
// calls dense ~55 times a token (a sixth of a greedy step's allocations, Zen 3).
Tensor dense(const Tensor& t) {
  if (!t.is_contiguous()) return t.contiguous_copy();
  return !t.requires_grad() && t.is_leaf() ? t : t.detach();
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  if (device.is_cpu()) return TensorBase::zeros(shape, dtype);
  ops_detail::check_device("zeros", device);
  Tensor out = empty(shape, dtype, device);
  QKV_DISPATCH("zeros", device, k::fill(out.impl().storage->ptr(), dtype, out.numel(), 0.f));
  return out;
}

// out = a dense copy of this view (elements of any dtype, moved as they are)
Tensor Tensor::contiguous_copy() const {
  const Device d = ops_detail::device_of("contiguous_copy", {this});
  Tensor out = empty(shape(), dtype(), d);
  QKV_DISPATCH("contiguous_copy", d,
               k::copy_strided(shape(), out.impl().storage->ptr(), first_byte(*this), strides(), dtype_size(dtype())));
  return out;
}

// out = this, each element converted to `t` (kernels/copy.inc's rules)
Tensor Tensor::to(DType t) const {
  const Device d = ops_detail::device_of("to", {this});
  if (t == dtype()) return contiguous_copy();
  const Tensor src = dense(*this);
  Tensor out = empty(shape(), t, d);
  QKV_DISPATCH("to", d, k::convert(first_byte(src), dtype(), out.impl().storage->ptr(), t, numel()));
  return out;
}

// this[i] = value for every element of the view
Tensor& Tensor::fill_(float value) {
  const Device d = ops_detail::device_of("fill_", {this});
  ++impl().storage->writes;
  if (is_contiguous()) {
    QKV_DISPATCH("fill_", d, k::fill(first_byte(*this), dtype(), numel(), value));
    return *this;
  }
  // a strided view: the value once, copied to every element (its strides all 0)
  Tensor one = empty({}, dtype(), d);
  QKV_DISPATCH("fill_", d, k::fill(one.impl().storage->data, dtype(), 1, value));
  return copy_(one);
}

// this[i] = src[i] (src broadcast to this view's shape); between devices, dense bytes of one dtype
Tensor& Tensor::copy_(const TensorBase& src) {
  ++impl().storage->writes;
  if (device() != src.device()) {
    TensorBase::copy_bytes_(src);
    return *this;
  }
  const Device d = ops_detail::device_of("copy_", {this, &src});
  if (src.dtype() != dtype()) return copy_(Tensor(src).to(dtype()));
  const Shape src_strides = broadcast_strides(src, shape());
  QKV_DISPATCH("copy_", d,
               k::copy_strided_to(shape(), first_byte(*this), strides(), first_byte(src), src_strides,
                                  dtype_size(dtype())));
  return *this;
}

}  // namespace qkv
