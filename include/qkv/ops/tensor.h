// Tensor: the tensor qkv's users and upper floors work with — a TensorBase (qkv/core/tensor.h:
// memory, device, shape, raw views) plus the differentiable methods, which record on the tape
// like every op (their backward rules are in src/ops/view.cpp and arith.cpp):
//
//   reshape/view, transpose/permute, slice/select, unsqueeze/squeeze, expand   views (no copy)
//   contiguous, clone                                                          copies
//   sum, mean                                                                  reductions
//   backward                                                                   reverse mode (ops/backward.h)
//
// The factories and the raw methods of TensorBase are re-declared here to return Tensor, so calls
// chain (Tensor::zeros({2, 3}).reshape({3, 2})).
#pragma once

#include <memory>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

class Tensor : public TensorBase {
 public:
  Tensor() = default;
  Tensor(const TensorBase& t) : TensorBase(t) {}  // NOLINT: implicit, as at::Tensor from TensorBase
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : TensorBase(std::move(impl)) {}

  // ---- factories (TensorBase's, returning Tensor) -------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu()) {
    return TensorBase::empty(shape, dtype, device);
  }
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32) { return TensorBase::zeros(shape, dtype); }
  static Tensor zeros(const Shape& shape, DType dtype, Device device);  // zeroed on `device`
  static Tensor ones(const Shape& shape, DType dtype = DType::f32) { return TensorBase::ones(shape, dtype); }
  static Tensor full(const Shape& shape, float value, DType dtype = DType::f32) {
    return TensorBase::full(shape, value, dtype);
  }
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape) {
    return TensorBase::from_vector(values, shape);
  }
  static Tensor scalar(float value) { return TensorBase::scalar(value); }
  static Tensor arange(int64_t n) { return TensorBase::arange(n); }
  static Tensor randn(const Shape& shape, Generator& gen, float mean = 0.f, float std = 1.f) {
    return TensorBase::randn(shape, gen, mean, std);
  }
  static Tensor rand(const Shape& shape, Generator& gen, float low = 0.f, float high = 1.f) {
    return TensorBase::rand(shape, gen, low, high);
  }
  static Tensor from_bools(const std::vector<bool>& values, const Shape& shape) {
    return TensorBase::from_bools(values, shape);
  }
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape) {
    return TensorBase::from_ints(values, shape);
  }
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu(),
                          std::function<void(void*)> deleter = nullptr) {
    return TensorBase::from_blob(data, shape, dtype, device, std::move(deleter));
  }

  // ---- raw methods (TensorBase's, returning Tensor; no autograd) ------------------------------
  Tensor detach() const { return TensorBase::detach(); }
  Tensor as_strided(Shape shape, Shape strides, int64_t offset) const {
    return TensorBase::as_strided(std::move(shape), std::move(strides), offset);
  }
  // On the tensor's own device, each a dispatched kernel (src/ops/device_copy.cpp, kernels/copy.inc):
  // a dense copy, an element type conversion (f32 ↔ bf16 ↔ boolean ↔ i32), and filling in place.
  Tensor contiguous_copy() const;
  Tensor to(DType dtype) const;
  Tensor& fill_(float value);
  // Copies src's values (broadcast to this shape, converted to this dtype) into this view, on the
  // tensor's device; between two devices, dense tensors of one dtype (TensorBase::copy_bytes_).
  Tensor& copy_(const TensorBase& src);
  // A copy on `device` (contiguous first when it is a strided view); itself when already there.
  Tensor to(Device device) const;
  Tensor grad() const { return TensorBase::grad(); }
  Tensor& requires_grad_(bool on = true) {
    TensorBase::requires_grad_(on);
    return *this;
  }

  // ---- differentiable views and copies (src/ops/view.cpp) ------------------------------------
  Tensor reshape(const Shape& shape) const;  // one -1 allowed; a view when strides allow
  Tensor view(const Shape& shape) const;     // like reshape, but never copies
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor select(int64_t dim, int64_t index) const;               // drops dim
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // broadcast view (stride 0), -1 keeps a size
  Tensor contiguous() const;                // itself when already dense
  Tensor clone() const;
  Tensor sum() const;
  Tensor mean() const;

  // Reverse mode: d(this)/d(leaves), seeded with `grad` (ones for a scalar when omitted).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
};

// t's values, detached and dense: t's own storage when it already is, a copy on its device otherwise
// (what an op hands its kernels). t itself when it is dense and outside autograd (no grad asked, no
// op recorded): it is then already detached.
Tensor dense(const Tensor& t);

}  // namespace qkv
