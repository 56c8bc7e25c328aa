// Copies, conversions and fills that run where the tensor lives. TensorBase (core) does them on the
// host; a GPU tensor's go to its backend's kernels (kernels/cuda: copy_strided, the conversions,
// fill). Core moves bytes between devices; what reads or writes elements on a device is here.
#include "dispatch.h"
#include "qkv/ops/tensor.h"

namespace qkv {

namespace {

// The first element of t's view, as bytes.
const void* first_byte(const TensorBase& t) {
  return static_cast<const char*>(t.impl().storage->data) + t.offset() * dtype_size(t.dtype());
}

}  // namespace

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  if (device.is_cpu()) return TensorBase::zeros(shape, dtype);
  ops_detail::check_device("zeros", device);
  Tensor out = empty(shape, dtype, device);
#ifdef QKV_WITH_CUDA
  cuda::DeviceGuard guard(device.index);
  kernels::cuda::fill_zero(out.impl().storage->data, static_cast<size_t>(out.numel()) * dtype_size(dtype));
  return out;
#else
  ops_detail::no_kernels("zeros", device);
#endif
}

Tensor Tensor::contiguous_copy() const {
  if (device().is_cpu()) return TensorBase::contiguous_copy();
  ops_detail::check_device("contiguous_copy", device());
  Tensor out = empty(shape(), dtype(), device());
#ifdef QKV_WITH_CUDA
  cuda::DeviceGuard guard(device().index);
  kernels::cuda::copy_strided(shape(), out.impl().storage->data, first_byte(*this), strides(), dtype_size(dtype()));
  return out;
#else
  ops_detail::no_kernels("contiguous_copy", device());
#endif
}

Tensor Tensor::to(DType t) const {
  if (device().is_cpu()) return TensorBase::to(t);
  ops_detail::check_device("to", device());
  if (t == dtype()) return contiguous_copy();
#ifdef QKV_WITH_CUDA
  const Tensor src = is_contiguous() ? *this : contiguous_copy();
  Tensor out = empty(shape(), t, device());
  cuda::DeviceGuard guard(device().index);
  const int64_t n = numel();
  const void* in = first_byte(src);
  void* o = out.impl().storage->data;
  namespace k = kernels::cuda;
  if (dtype() == DType::f32 && t == DType::bf16)
    k::convert_to_bf16(static_cast<const float*>(in), static_cast<bf16*>(o), n);
  else if (dtype() == DType::bf16 && t == DType::f32)
    k::bf16_to_f32(static_cast<const bf16*>(in), static_cast<float*>(o), n);
  else if (dtype() == DType::boolean && t == DType::f32)
    k::bool_to_f32(static_cast<const uint8_t*>(in), static_cast<float*>(o), n);
  else if (dtype() == DType::i32 && t == DType::f32)
    k::i32_to_f32(static_cast<const int32_t*>(in), static_cast<float*>(o), n);
  else
    QKV_CHECK(false, "Tensor::to(", dtype_name(t), "): ", str(), " — this conversion has no ", device().str(),
              " kernel yet (f32↔bf16, bool→f32 and i32→f32 do)");
  return out;
#else
  ops_detail::no_kernels("to", device());
#endif
}

Tensor& Tensor::fill_(float value) {
  if (device().is_cpu()) {
    TensorBase::fill_(value);
    return *this;
  }
  ops_detail::check_device("fill_", device());
#ifdef QKV_WITH_CUDA
  QKV_CHECK(is_contiguous() && dtype() == DType::f32, "fill_: ", str(), " — on ", device().str(),
            " only dense f32 tensors can be filled so far");
  cuda::DeviceGuard guard(device().index);
  kernels::cuda::fill_f32(data(), numel(), value);
  return *this;
#else
  ops_detail::no_kernels("fill_", device());
#endif
}

Tensor& Tensor::copy_(const TensorBase& src) {
  if ((device().is_cpu() && src.device().is_cpu()) || device() != src.device()) {
    TensorBase::copy_(src);  // on the host, or dense bytes between devices
    return *this;
  }
  ops_detail::check_device("copy_", device());
  QKV_CHECK(dtype() == src.dtype(), "copy_: ", src.str(), " into ", str(), ": on ", device().str(),
            " both must have one dtype (convert with .to(dtype) first)");
  const Shape src_strides = broadcast_strides(src, shape());
#ifdef QKV_WITH_CUDA
  cuda::DeviceGuard guard(device().index);
  kernels::cuda::copy_strided_to(shape(), static_cast<char*>(impl().storage->data) + offset() * dtype_size(dtype()),
                                 strides(), first_byte(src), src_strides, dtype_size(dtype()));
  return *this;
#else
  ops_detail::no_kernels("copy_", device());
#endif
}

}  // namespace qkv
