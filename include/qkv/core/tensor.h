// TensorBase: an n-dimensional view (shape, strides, offset, dtype) onto shared storage on a device.
//
// Many tensors may share one Storage: as_strided and detach make views without copying. This is
// the part of a tensor the core can define on its own — memory, metadata, raw views and host
// access to the elements of CPU tensors. The tensor users write code with is qkv::Tensor
// (qkv/ops/tensor.h), which adds the differentiable methods (reshape, transpose, sum, backward, …)
// on top: as PyTorch's at::TensorBase and at::Tensor. A TensorBase converts to a Tensor implicitly.
//
// A tensor also carries the autograd bookkeeping PyTorch users expect (requires_grad, grad,
// grad_fn): the core only stores it; the tape lives in autograd/ and reverse mode in ops/.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/device.h"
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

// A 64-byte aligned, uninitialized buffer on a device (from allocator_for(device)), or memory
// someone else owns (from_blob: released by their deleter, never by qkv).
struct Storage {
  Storage(size_t nbytes, Device device);
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  // The memory, for reading or writing; a qkv::Error saying why once release() gave it back.
  void* ptr() const {
    if (!data) [[unlikely]]
      check_held();
    return data;
  }
  // Gives the memory back while the tensors over it keep their shapes (and nbytes stays, so views
  // of them can still be made): a later read or write of their values is a qkv::Error saying
  // `why`. A model loaded for int8 decoding releases the f32 weights only its int8 kernels read
  // (models/load.h).
  void release(std::string why);
  void* data = nullptr;
  size_t nbytes = 0;
  size_t capacity = 0;  // bytes actually allocated, >= nbytes
  Device device;
  std::function<void(void*)> deleter;  // set: external memory
  std::string released;                // set by release(): why the memory is gone
  // Writes into the memory after it was first written, made through the in-place ops (fill_, copy_,
  // add_, mul_, log_softmax_, adam_update_): a copy of the values kept beside them (ops/autocast.h's
  // bf16 copies of activations) is theirs while this has not moved.
  uint64_t writes = 0;

 private:
  void check_held() const;  // throws when released
};

// A bound on the bytes the current thread may allocate for tensors while it lives (nested budgets:
// the innermost counts): past it, allocation is a qkv::Error saying `what` — e.g. a model built
// from a file's config may allocate no more than the file's tensors justify, so a crafted config
// cannot exhaust memory before its tensors are checked.
class AllocationBudget {
 public:
  AllocationBudget(size_t bytes, std::string what);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;
  void charge(size_t bytes);  // throws when past the bound
  // Charges the current thread's innermost budget, if any: host memory a builder sizes by its config
  // outside tensors (a table of rotary frequencies) is bounded as the tensors are.
  static void charge_current(size_t bytes);

 private:
  size_t left_;
  std::string what_;
  AllocationBudget* outer_;
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
  // Run by reverse mode once it has accumulated this leaf's last gradient of the pass
  // (torch.Tensor.register_post_accumulate_grad_hook): the data-parallel reducer starts sending a
  // gradient while the rest of the backward pass still runs. Keyed by handle, for removal.
  std::vector<std::pair<int, std::function<void()>>> post_accumulate_grad_hooks;
};

class Generator;

class TensorBase {
 public:
  TensorBase() = default;
  explicit TensorBase(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories ----------------------------------------------------------------------------
  // empty allocates on any device; the others compute their values on the host (CPU tensors:
  // .to(device) moves them).
  static TensorBase empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static TensorBase zeros(const Shape& shape, DType dtype = DType::f32);
  static TensorBase ones(const Shape& shape, DType dtype = DType::f32);
  static TensorBase full(const Shape& shape, float value, DType dtype = DType::f32);
  static TensorBase from_vector(const std::vector<float>& values, const Shape& shape);
  static TensorBase scalar(float value) { return from_vector({value}, {}); }
  static TensorBase arange(int64_t n);
  static TensorBase randn(const Shape& shape, Generator& gen, float mean = 0.f, float std = 1.f);
  static TensorBase rand(const Shape& shape, Generator& gen, float low = 0.f, float high = 1.f);
  // Boolean tensors (masks) hold one byte per element, 0 or 1 (DType::boolean).
  static TensorBase from_bools(const std::vector<bool>& values, const Shape& shape);
  static TensorBase from_ints(const std::vector<int32_t>& values, const Shape& shape);
  // A dense tensor over memory qkv does not own (torch.from_numpy / from_dlpack's way in): no copy;
  // `deleter` (if any) runs when the last view of it is gone. The memory must hold numel·itemsize
  // bytes on `device` and outlive the tensor when there is no deleter.
  static TensorBase from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu(),
                              std::function<void(void*)> deleter = nullptr);

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
  Device device() const { return impl().storage->device; }
  bool is_contiguous() const;
  bool is_bool() const { return dtype() == DType::boolean; }
  // d in [-dim, dim) → [0, dim); throws otherwise.
  int64_t wrap_dim(int64_t d) const;
  std::string str() const;  // "Tensor[2,3] f32" (", cuda:0" when not on the CPU)

  // ---- data ---------------------------------------------------------------------------------
  // Pointer to the first element of this view (storage + offset), in the device's memory.
  template <typename T = float>
  T* data() const {
    return static_cast<T*>(impl().storage->ptr()) + impl().offset;
  }
  // Shares storage: same values, no autograd history.
  TensorBase detach() const;
  // Raw strided view (no autograd, no checks beyond storage bounds).
  TensorBase as_strided(Shape shape, Shape strides, int64_t offset) const;  // (moved into the view)
  // A dense copy on `device` (the same tensor when it is already there): the bytes move between
  // memories, so a strided view must be made contiguous first (Tensor::to does).
  TensorBase to(Device device) const;

  // Element access on the host. These read or write CPU tensors in place; a tensor on another
  // device is a qkv::Error naming the method and the device, except where the values come back to
  // the host anyway (to_vector, item, to_ints copy a dense tensor from its device first).
  std::vector<float> to_vector() const;  // a dense row-major copy of the values (f32, bf16, boolean, i32)
  float item() const;
  std::vector<int32_t> to_ints() const;  // i32 tensors
  // Bytes only — what reads or writes elements as numbers (a strided or broadcast copy, a
  // conversion, a fill) is an op's, on the tensor's device: Tensor::copy_, to(DType), fill_,
  // contiguous_copy (src/ops/device_copy.cpp).
  // src's bytes into this tensor, on any two devices: both dense, of one dtype and shape.
  void copy_bytes_(const TensorBase& src);
  // A dense copy of this CPU tensor's view, its elements' bytes gathered in row-major order.
  TensorBase host_contiguous_copy() const;

  // ---- autograd state (stored here, used by autograd/ and ops/) ------------------------------
  bool requires_grad() const { return defined() && impl().requires_grad; }
  TensorBase& requires_grad_(bool on = true);
  TensorBase grad() const;
  void set_grad(const TensorBase& g);
  void zero_grad();  // drops the gradient, as PyTorch's set_to_none
  void retain_grad();
  // `hook` runs after each backward pass that accumulated into this leaf's .grad, once its last
  // contribution of the pass is in. Returns a handle for remove_post_accumulate_grad_hook.
  int register_post_accumulate_grad_hook(std::function<void()> hook);
  void remove_post_accumulate_grad_hook(int handle);
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }

  TensorImpl& impl() const {
    QKV_CHECK(impl_ != nullptr, "Tensor: use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const TensorBase& other) const { return impl_ == other.impl_; }

 private:
  void check_host(const char* method) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Row-major strides of a dense tensor of this shape.
Shape contiguous_strides(const Shape& shape);
// The elements of a shape, and the bytes of a dense tensor of it: a negative size or a product
// past int64 / size_t is a qkv::Error (never a wrapped, small count).
int64_t numel_of(const Shape& shape);
size_t bytes_of(const Shape& shape, DType dtype);
// Broadcast two shapes as NumPy/PyTorch do; throws naming `op` when they don't broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides of `t` viewed at the broadcast shape `out` (0 along broadcast dims).
Shape broadcast_strides(const TensorBase& t, const Shape& out);

}  // namespace qkv
