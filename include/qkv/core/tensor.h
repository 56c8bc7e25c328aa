// Tensor: an n-dimensional view (shape, strides, offset, dtype) onto shared storage.
//
// Many tensors may share one Storage: reshape/transpose/permute/slice make views without copying;
// contiguous() copies only when the view is not already row-major dense. A tensor also carries the
// autograd bookkeeping PyTorch users expect (requires_grad, grad, grad_fn) — the core only stores
// it; the tape lives in src/autograd and the differentiable functions in src/ops.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/core/error.h"

namespace qkv {

using Shape = std::vector<int64_t>;

namespace autograd {
struct Node;
}

// Bytes held by all live Storages now, and the most ever held since the last reset_peak_bytes():
// what a benchmark reports as the tensor memory an op needs.
int64_t allocated_bytes();
int64_t peak_allocated_bytes();
void reset_peak_bytes();

// A 64-byte aligned, uninitialized buffer (from the caching allocator, core/allocator.h).
struct Storage {
  explicit Storage(size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  size_t capacity = 0;  // bytes actually allocated, >= nbytes
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements, into storage
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;         // accumulated gradient (leaves, or retain_grad)
  std::shared_ptr<autograd::Node> grad_fn;  // the op that produced this tensor (non-leaves)
  int output_nr = 0;                        // which of grad_fn's outputs this is (split has several)
  bool retains_grad = false;
};

class Generator;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories ----------------------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, float value, DType dtype = DType::f32);
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);
  static Tensor scalar(float value) { return from_vector({value}, {}); }
  static Tensor arange(int64_t n);
  static Tensor randn(const Shape& shape, Generator& gen, float mean = 0.f, float std = 1.f);
  static Tensor rand(const Shape& shape, Generator& gen, float low = 0.f, float high = 1.f);
  // Boolean tensors (masks) hold one byte per element, 0 or 1 (DType::boolean).
  static Tensor from_bools(const std::vector<bool>& values, const Shape& shape);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape);

  // ---- metadata -----------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const { return impl().shape[wrap_dim(d)]; }
  int64_t stride(int64_t d) const { return impl().strides[wrap_dim(d)]; }
  int64_t numel() const;
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  bool is_contiguous() const;
  bool is_bool() const { return dtype() == DType::boolean; }
  // d in [-dim, dim) → [0, dim); throws otherwise.
  int64_t wrap_dim(int64_t d) const;
  std::string str() const;  // "Tensor[2,3] f32"

  // ---- data ---------------------------------------------------------------------------------
  // Pointer to the first element of this view (storage + offset).
  template <typename T = float>
  T* data() const {
    return static_cast<T*>(impl().storage->data) + impl().offset;
  }
  // A dense row-major copy of the values (f32 and boolean).
  std::vector<float> to_vector() const;
  float item() const;
  std::vector<int32_t> to_ints() const;  // i32 tensors
  // Shares storage: same values, no autograd history.
  Tensor detach() const;
  // Raw strided view (no autograd, no checks beyond storage bounds).
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // Copies `src` (broadcastable to this shape) into this tensor's view, in place, no autograd.
  void copy_(const Tensor& src);
  void fill_(float value);
  // Dense copy with the same values (no autograd history).
  Tensor contiguous_copy() const;
  // This dtype → another (f32 ↔ bf16 ↔ boolean); a copy, no autograd.
  Tensor to(DType dtype) const;

  // ---- autograd state ---------------------------------------------------------------------------
  bool requires_grad() const { return defined() && impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  Tensor grad() const;
  void set_grad(const Tensor& g);
  void zero_grad();  // drops the gradient, as PyTorch's set_to_none
  void retain_grad();
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  // Reverse-mode: d(this)/d(leaves), seeded with `grad` (ones for a scalar when omitted).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // ---- differentiable views and conveniences (defined in src/ops) ----------------------------
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

  TensorImpl& impl() const {
    QKV_CHECK(impl_ != nullptr, "Tensor: use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Row-major strides of a dense tensor of this shape.
Shape contiguous_strides(const Shape& shape);
int64_t numel_of(const Shape& shape);
// Broadcast two shapes as NumPy/PyTorch do; throws naming `op` when they don't broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides of `t` viewed at the broadcast shape `out` (0 along broadcast dims).
Shape broadcast_strides(const Tensor& t, const Shape& out);

}  // namespace qkv
