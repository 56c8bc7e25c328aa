#include "qkv/core/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "qkv/core/allocator.h"
#include "qkv/core/cuda.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"

namespace qkv {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
std::atomic<int64_t> g_allocated{0}, g_peak{0};
}
int64_t allocated_bytes() { return g_allocated.load(); }
int64_t peak_allocated_bytes() { return g_peak.load(); }
void reset_peak_bytes() { g_peak.store(g_allocated.load()); }

namespace {
thread_local AllocationBudget* t_budget = nullptr;
}

AllocationBudget::AllocationBudget(size_t bytes, std::string what)
    : left_(bytes), what_(std::move(what)), outer_(t_budget) {
  t_budget = this;
}
AllocationBudget::~AllocationBudget() { t_budget = outer_; }
void AllocationBudget::charge(size_t bytes) {
  QKV_CHECK(bytes <= left_, what_, " (", bytes, " more bytes asked for, ", left_, " left of the bound)");
  left_ -= bytes;
}
void AllocationBudget::charge_current(size_t bytes) {
  if (t_budget) t_budget->charge(bytes);
}

Storage::Storage(size_t n, Device d) : nbytes(n), device(d) {
  // A tensor costs more than its bytes: its Storage, TensorImpl, the module's name for it and its
  // handles (about 800 bytes measured per parameter of a GPT block). Charged 1 KiB each, so that a
  // config of 10⁵ tiny layers is bounded by the budget like one of large ones (issue 43: n_layer
  // 100000 × n_embd 8 passed a 16 MiB budget with 1 GB of bookkeeping).
  if (t_budget) t_budget->charge(n + 1024);
  data = allocator_for(d).allocate(n ? n : 1, &capacity);
  if (!data) throw Error(detail::concat("Storage: cannot allocate ", n, " bytes on ", d.str()));
  int64_t now = g_allocated.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
Storage::Storage(void* p, size_t n, Device d, std::function<void(void*)> del)
    : data(p), nbytes(n), capacity(n), device(d), deleter(std::move(del)) {
  if (!deleter) deleter = [](void*) {};  // borrowed memory: nothing to release
}
Storage::~Storage() {
  if (!released.empty()) return;  // given back already
  if (deleter) {
    deleter(data);
    return;
  }
  allocator_for(device).deallocate(data, capacity);
  g_allocated.fetch_sub(static_cast<int64_t>(nbytes));
}

void Storage::release(std::string why) {
  QKV_CHECK(!why.empty(), "Storage::release: say why the memory is gone");
  if (!released.empty()) return;
  if (deleter) {
    deleter(data);
  } else {
    allocator_for(device).deallocate(data, capacity);
    g_allocated.fetch_sub(static_cast<int64_t>(nbytes));
  }
  data = nullptr, capacity = 0, deleter = nullptr;
  released = std::move(why);
}

void Storage::check_held() const {
  QKV_CHECK(released.empty(), released);
}

int64_t numel_of(const Shape& shape) {
  // Checked: a shape read from a file or a config may ask for more elements than int64 holds, and
  // a wrapped product would allocate a small buffer for a large tensor.
  int64_t n = 1;
  for (int64_t s : shape) {
    QKV_CHECK(s >= 0, "shape ", shape_str(shape), " has a negative size");
    QKV_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape_str(shape), " has more than 2^63 elements");
  }
  return n;
}

size_t bytes_of(const Shape& shape, DType dtype) {
  const int64_t n = numel_of(shape);
  size_t bytes = 0;
  QKV_CHECK(!__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &bytes), "shape ", shape_str(shape),
            " needs more bytes than an address space holds");
  return bytes;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    QKV_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " do not broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const TensorBase& t, const Shape& out) {
  Shape st(out.size(), 0);
  size_t lead = out.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i) {
    QKV_CHECK(t.shape()[i] == out[lead + i] || t.shape()[i] == 1, "broadcast: ", shape_str(t.shape()),
              " cannot be broadcast to ", shape_str(out));
    st[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  return st;
}

static TensorBase make(const Shape& shape, DType dtype, Device device = Device::cpu()) {
  for (int64_t s : shape) QKV_CHECK(s >= 0, "Tensor::empty: negative size in ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(bytes_of(shape, dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return TensorBase(std::move(impl));
}

TensorBase TensorBase::empty(const Shape& shape, DType dtype, Device device) { return make(shape, dtype, device); }

TensorBase TensorBase::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                                 std::function<void(void*)> deleter) {
  for (int64_t s : shape) QKV_CHECK(s >= 0, "Tensor::from_blob: negative size in ", shape_str(shape));
  QKV_CHECK(data != nullptr || numel_of(shape) == 0, "Tensor::from_blob: null data for shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, bytes_of(shape, dtype), device,
                                            std::move(deleter));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return TensorBase(std::move(impl));
}

TensorBase TensorBase::zeros(const Shape& shape, DType dtype) {
  TensorBase t = make(shape, dtype);
  std::memset(t.impl().storage->data, 0, t.impl().storage->nbytes);
  return t;
}

TensorBase TensorBase::full(const Shape& shape, float value, DType dtype) {
  TensorBase t = make(shape, dtype);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) store_from_f32(t.impl().storage->data, dtype, i, value);
  return t;
}

TensorBase TensorBase::ones(const Shape& shape, DType dtype) { return full(shape, 1.f, dtype); }

TensorBase TensorBase::from_vector(const std::vector<float>& values, const Shape& shape) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "Tensor::from_vector: ", values.size(),
            " values do not fill shape ", shape_str(shape));
  TensorBase t = make(shape, DType::f32);
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

TensorBase TensorBase::from_bools(const std::vector<bool>& values, const Shape& shape) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "Tensor::from_bools: ", values.size(),
            " values do not fill shape ", shape_str(shape));
  TensorBase t = make(shape, DType::boolean);
  uint8_t* p = t.data<uint8_t>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i] ? 1 : 0;
  return t;
}

TensorBase TensorBase::from_ints(const std::vector<int32_t>& values, const Shape& shape) {
  QKV_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "Tensor::from_ints: ", values.size(),
            " values do not fill shape ", shape_str(shape));
  TensorBase t = make(shape, DType::i32);
  if (!values.empty()) std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

std::vector<int32_t> TensorBase::to_ints() const {
  QKV_CHECK(dtype() == DType::i32, "Tensor::to_ints: tensor is ", dtype_name(dtype()), ", not i32");
  cuda::refuse_in_emulated_capture("Tensor::to_ints");
  if (!device().is_cpu()) return to(Device::cpu()).to_ints();
  TensorBase c = is_contiguous() ? *this : host_contiguous_copy();
  return std::vector<int32_t>(c.data<int32_t>(), c.data<int32_t>() + c.numel());
}

TensorBase TensorBase::arange(int64_t n) {
  TensorBase t = make({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) t.data()[i] = static_cast<float>(i);
  return t;
}

float Generator::normal(uint64_t seed, uint64_t counter) {
  uint64_t b = bits(seed, counter);
  // Two 32-bit uniforms in (0, 1].
  float u1 = (static_cast<float>(b >> 40) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = static_cast<float>((b >> 8) & 0xFFFFFF) * (1.0f / 16777216.0f);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
}

Generator& default_generator() {
  static Generator g(0x5eed);
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

TensorBase TensorBase::randn(const Shape& shape, Generator& gen, float mean, float std) {
  TensorBase t = make(shape, DType::f32);
  int64_t n = t.numel();
  uint64_t base = gen.reserve(static_cast<uint64_t>(n));
  float* p = t.data();
  for (int64_t i = 0; i < n; ++i) p[i] = mean + std * Generator::normal(gen.seed(), base + i);
  return t;
}

TensorBase TensorBase::rand(const Shape& shape, Generator& gen, float low, float high) {
  TensorBase t = make(shape, DType::f32);
  int64_t n = t.numel();
  uint64_t base = gen.reserve(static_cast<uint64_t>(n));
  float* p = t.data();
  for (int64_t i = 0; i < n; ++i) p[i] = low + (high - low) * Generator::uniform(gen.seed(), base + i);
  return t;
}

int64_t TensorBase::numel() const { return numel_of(impl().shape); }

int64_t TensorBase::wrap_dim(int64_t d) const {
  int64_t n = dim();
  QKV_CHECK(d >= -n && d < n, "dimension ", d, " is out of range for a tensor of shape ",
            shape_str(shape()));
  return d < 0 ? d + n : d;
}

bool TensorBase::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

std::string TensorBase::str() const {
  if (!defined()) return "Tensor(undefined)";
  if (!device().is_cpu()) return detail::concat("Tensor", shape_str(shape()), " ", dtype_name(dtype()), ", ", device().str());
  return detail::concat("Tensor", shape_str(shape()), " ", dtype_name(dtype()));
}

// Visits every element of `t` in row-major order with its storage offset (relative to data()).
template <typename F>
static void for_each_offset(const Shape& shape, const Shape& strides, F&& f) {
  int64_t n = numel_of(shape);
  if (n == 0) return;
  int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  int64_t inner = shape[nd - 1], inner_stride = strides[nd - 1];
  for (int64_t i = 0; i < n; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(i + j, off + j * inner_stride);
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= (shape[d] - 1) * strides[d];
      idx[d] = 0;
    }
  }
}

void TensorBase::check_host(const char* method) const {
  QKV_CHECK(device().is_cpu(), "Tensor::", method, ": ", str(), " is on ", device().str(),
            "; element access on the host needs a CPU tensor (.to(Device::cpu()))");
}

TensorBase TensorBase::to(Device d) const {
  if (device() == d) return *this;
  QKV_CHECK(is_contiguous(), "Tensor::to(", d.str(), "): ", str(), " is a strided view; make it contiguous first");
  TensorBase out = make(shape(), dtype(), d);
  copy_bytes(out.impl().storage->data, d, static_cast<const char*>(impl().storage->ptr()) + offset() * dtype_size(dtype()),
             device(), static_cast<size_t>(numel()) * dtype_size(dtype()));
  return out;
}

std::vector<float> TensorBase::to_vector() const {
  cuda::refuse_in_emulated_capture("Tensor::to_vector / item");
  if (!device().is_cpu()) return to(Device::cpu()).to_vector();
  std::vector<float> out(static_cast<size_t>(numel()));
  const void* base = static_cast<const char*>(impl().storage->ptr()) + offset() * dtype_size(dtype());
  DType t = dtype();
  for_each_offset(shape(), strides(), [&](int64_t i, int64_t off) { out[i] = load_as_f32(base, t, off); });
  return out;
}

float TensorBase::item() const {
  QKV_CHECK(numel() == 1, "Tensor::item: tensor of shape ", shape_str(shape()), " has ", numel(),
            " elements, not 1");
  return to_vector()[0];
}

TensorBase TensorBase::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->shape = shape();
  impl2->strides = strides();
  impl2->offset = offset();
  impl2->dtype = dtype();
  return TensorBase(std::move(impl2));
}

TensorBase TensorBase::as_strided(Shape shp, Shape st, int64_t off) const {
  QKV_CHECK(shp.size() == st.size(), "as_strided: shape ", shape_str(shp), " and strides ", shape_str(st),
            " differ in rank");
  int64_t lo = off, hi = off;
  for (size_t i = 0; i < shp.size(); ++i) {
    if (shp[i] == 0) {
      lo = hi = off;
      break;
    }
    int64_t span = (shp[i] - 1) * st[i];
    (span < 0 ? lo : hi) += span;
  }
  int64_t cap = static_cast<int64_t>(impl().storage->nbytes / dtype_size(dtype()));
  QKV_CHECK(lo >= 0 && (numel_of(shp) == 0 || hi < cap), "as_strided: view ", shape_str(shp), " strides ",
            shape_str(st), " offset ", off, " falls outside storage of ", cap, " elements");
  // (detach() and then the new shape would copy this view's shape and strides only to replace them)
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->shape = std::move(shp);
  impl2->strides = std::move(st);
  impl2->offset = off;
  impl2->dtype = dtype();
  return TensorBase(std::move(impl2));
}

void TensorBase::copy_bytes_(const TensorBase& src) {
  QKV_CHECK(dtype() == src.dtype() && shape() == src.shape() && is_contiguous() && src.is_contiguous(), "Tensor::copy_: ",
            src.str(), " into ", str(), ": bytes are copied between dense tensors of one dtype and shape only");
  ++impl().storage->writes;
  copy_bytes(static_cast<char*>(impl().storage->ptr()) + offset() * dtype_size(dtype()), device(),
             static_cast<const char*>(src.impl().storage->ptr()) + src.offset() * dtype_size(src.dtype()), src.device(),
             static_cast<size_t>(numel()) * dtype_size(dtype()));
}

TensorBase TensorBase::host_contiguous_copy() const {
  check_host("host_contiguous_copy");
  TensorBase out = make(shape(), dtype());
  const size_t e = dtype_size(dtype());
  const char* src = static_cast<const char*>(impl().storage->ptr()) + offset() * e;
  char* dst = static_cast<char*>(out.impl().storage->data);
  for_each_offset(shape(), strides(), [&](int64_t i, int64_t off) { std::memcpy(dst + i * e, src + off * e, e); });
  return out;
}

TensorBase& TensorBase::requires_grad_(bool on) {
  QKV_CHECK(!on || dtype() == DType::f32, "requires_grad_: only f32 tensors can require gradients, not ",
            dtype_name(dtype()));
  QKV_CHECK(is_leaf() || on, "requires_grad_: cannot turn off requires_grad on a non-leaf tensor; use detach()");
  impl().requires_grad = on;
  return *this;
}

TensorBase TensorBase::grad() const { return impl().grad ? TensorBase(impl().grad) : TensorBase(); }

void TensorBase::set_grad(const TensorBase& g) {
  if (!g.defined()) {
    impl().grad.reset();
    return;
  }
  QKV_CHECK(g.shape() == shape(), "set_grad: gradient of shape ", shape_str(g.shape()),
            " for a tensor of shape ", shape_str(shape()));
  impl().grad = g.impl_ptr();
}

void TensorBase::zero_grad() { impl().grad.reset(); }

void TensorBase::retain_grad() { impl().retains_grad = true; }

int TensorBase::register_post_accumulate_grad_hook(std::function<void()> hook) {
  QKV_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook: only a leaf tensor that requires grad ",
            "accumulates into .grad");
  auto& hooks = impl().post_accumulate_grad_hooks;
  const int handle = hooks.empty() ? 0 : hooks.back().first + 1;
  hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void TensorBase::remove_post_accumulate_grad_hook(int handle) {
  auto& hooks = impl().post_accumulate_grad_hooks;
  std::erase_if(hooks, [handle](const auto& h) { return h.first == handle; });
}

}  // namespace qkv
