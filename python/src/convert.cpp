#include "convert.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/half.h"

namespace qkv::python {

namespace {

using nb::dlpack::dtype_code;

// The qkv dtype an array of DLPack dtype `t` is viewed as without a copy, if any.
bool native_dtype(nb::dlpack::dtype t, DType* out) {
  if (t.lanes != 1) return false;
  const auto code = static_cast<dtype_code>(t.code);
  if (code == dtype_code::Float && t.bits == 32) return *out = DType::f32, true;
  if (code == dtype_code::Bfloat && t.bits == 16) return *out = DType::bf16, true;
  if (code == dtype_code::Bool && t.bits == 8) return *out = DType::boolean, true;
  if (code == dtype_code::Int && t.bits == 32) return *out = DType::i32, true;
  return false;
}

std::string dlpack_name(nb::dlpack::dtype t) {
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  return std::string(t.code < 7 ? codes[t.code] : "code") + std::to_string(t.bits);
}

// One element of a foreign dtype as f32 (floats) or i32 (integers), the types qkv copies into.
double read_element(const uint8_t* p, nb::dlpack::dtype t) {
  const auto code = static_cast<dtype_code>(t.code);
  if (code == dtype_code::Float) {
    if (t.bits == 64) return *reinterpret_cast<const double*>(p);
    if (t.bits == 32) return *reinterpret_cast<const float*>(p);
    if (t.bits == 16) return f16_to_f32(*reinterpret_cast<const f16*>(p));
  } else if (code == dtype_code::Bfloat && t.bits == 16) {
    return bf16_to_f32(bf16{*reinterpret_cast<const uint16_t*>(p)});
  } else if (code == dtype_code::Int) {
    if (t.bits == 64) return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    if (t.bits == 32) return *reinterpret_cast<const int32_t*>(p);
    if (t.bits == 16) return *reinterpret_cast<const int16_t*>(p);
    if (t.bits == 8) return *reinterpret_cast<const int8_t*>(p);
  } else if (code == dtype_code::UInt) {
    if (t.bits == 8) return *p;
    if (t.bits == 16) return *reinterpret_cast<const uint16_t*>(p);
    if (t.bits == 32) return *reinterpret_cast<const uint32_t*>(p);
  } else if (code == dtype_code::Bool && t.bits == 8) {
    return *p ? 1.0 : 0.0;
  }
  throw nb::type_error(("qkv: arrays of " + dlpack_name(t) +
                        " cannot become qkv tensors (float64/32/16, bfloat16, int8–64, uint8–32 and bool can)")
                           .c_str());
}

// The qkv dtype a copy of an array of dtype t takes: bool and bfloat16 stay, integers → int32,
// floating point → float32 (as torch.tensor makes float32 of Python floats).
DType copy_dtype(nb::dlpack::dtype t) {
  const auto code = static_cast<dtype_code>(t.code);
  if (code == dtype_code::Bool) return DType::boolean;
  if (code == dtype_code::Bfloat) return DType::bf16;
  if (code == dtype_code::Int || code == dtype_code::UInt) {
    QKV_CHECK(t.bits < 64 || code == dtype_code::Int, "qkv: uint64 arrays cannot become qkv tensors");
    return DType::i32;
  }
  return DType::f32;
}

// Copies a strided array of any dtype into the dense tensor `out`, element by element, in order.
void copy_strided(const uint8_t* base, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  nb::dlpack::dtype t, const Tensor& out) {
  const size_t item = t.bits / 8, n = static_cast<size_t>(out.numel()), nd = shape.size();
  std::vector<int64_t> idx(nd, 0);
  DType native;
  const bool same = native_dtype(t, &native) && native == out.dtype();
  auto* dst = static_cast<uint8_t*>(out.impl().storage->data);
  for (size_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < nd; ++d) off += idx[d] * strides[d];
    const uint8_t* src = base + off * static_cast<int64_t>(item);
    if (same) {
      std::memcpy(dst + i * item, src, item);
    } else {
      const double v = read_element(src, t);
      switch (out.dtype()) {
        case DType::f32: reinterpret_cast<float*>(dst)[i] = static_cast<float>(v); break;
        case DType::i32:
          // qkv has no int64: a value int32 cannot hold is an OverflowError, never a wrapped number.
          if (!(v >= -2147483648.0 && v <= 2147483647.0))
            throw std::overflow_error(detail::concat("qkv: element ", i, " (in order) of an ", dlpack_name(t),
                                                     " array is ", static_cast<int64_t>(v),
                                                     ", which qkv's int32 cannot hold (qkv has no int64 tensors)"));
          reinterpret_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
          break;
        case DType::boolean: dst[i] = v != 0.0; break;
        case DType::bf16: reinterpret_cast<bf16*>(dst)[i] = f32_to_bf16(static_cast<float>(v)); break;
        case DType::i8: reinterpret_cast<int8_t*>(dst)[i] = static_cast<int8_t>(v); break;  // (never: copy_dtype gives i32)
        case DType::f8e4m3: reinterpret_cast<f8e4m3*>(dst)[i] = f32_to_f8e4m3(static_cast<float>(v)); break;  // (never)
      }
    }
    for (size_t d = nd; d-- > 0;) {  // next index, last dimension fastest
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Dense row-major (dimensions of size 1 may have any stride)?
bool row_major(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

// The elements a strided view reaches from its first one, 1 + Σ (n_d − 1)·s_d, for strides ≥ 0 and
// no empty dimension; 0 where the view cannot be taken as it is (a negative stride, an empty array,
// an extent past int64).
int64_t strided_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t extent = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 || strides[d] < 0) return 0;
    int64_t span = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &span) || __builtin_add_overflow(extent, span, &extent))
      return 0;
  }
  return extent;
}

// Views (no copy) or copies a CPU array into a qkv tensor; `writable` arrays may be viewed: a dense
// row-major one as it is, a strided one (torch's x.split(C, 2)[i].view(B, L, H, D).transpose(1, 2),
// q, k and v of one fused projection) as a view of the memory it spans, which the array's producer
// holds (DLPack: every element a view indexes is valid) and the storage keeps alive.
template <typename... Args>
Tensor from_ndarray(const nb::ndarray<Args...>& a, bool writable) {
  QKV_CHECK(a.device_type() == nb::device::cpu::value,
            "qkv: the array is on a device qkv's Python module cannot read (device type ", a.device_type(),
            "); move it to the CPU first");
  std::vector<int64_t> shape(a.ndim()), strides(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) shape[d] = static_cast<int64_t>(a.shape(d)), strides[d] = a.stride(d);
  DType native;
  const bool dense = row_major(shape, strides);
  const int64_t extent = dense ? 0 : strided_extent(shape, strides);
  if (writable && native_dtype(a.dtype(), &native) && (dense || extent > 0)) {
    // The tensor's storage keeps the array alive; the reference is dropped under the GIL.
    auto* keep = new nb::ndarray<Args...>(a);
    auto release = [keep](void*) {
      if (!Py_IsInitialized()) return;  // interpreter gone: nothing to release
      nb::gil_scoped_acquire gil;
      delete keep;
    };
    void* data = const_cast<void*>(static_cast<const void*>(a.data()));
    if (dense) return Tensor::from_blob(data, shape, native, Device::cpu(), release);
    return Tensor::from_blob(data, {extent}, native, Device::cpu(), release).as_strided(shape, strides, 0);
  }
  Tensor out = Tensor::empty(shape, copy_dtype(a.dtype()));
  copy_strided(static_cast<const uint8_t*>(a.data()), shape, strides, a.dtype(), out);
  return out;
}

}  // namespace

nb::dlpack::dtype dlpack_dtype(DType t) {
  switch (t) {
    case DType::f32: return nb::dtype<float>();
    case DType::i32: return nb::dtype<int32_t>();
    case DType::boolean: return nb::dtype<bool>();
    case DType::bf16: return nb::dlpack::dtype{static_cast<uint8_t>(dtype_code::Bfloat), 16, 1};
    case DType::i8: return nb::dtype<int8_t>();
    case DType::f8e4m3:  // (NumPy has no float8; no qkv function gives Python one: a KV cache's own)
      throw nb::type_error("qkv: a float8_e4m3fn tensor cannot become an array; .to('float32') it first");
  }
  return nb::dtype<float>();
}

const char* dtype_str(DType t) {
  return t == DType::f32    ? "float32"
         : t == DType::bf16 ? "bfloat16"
         : t == DType::i32  ? "int32"
         : t == DType::i8   ? "int8"
         : t == DType::f8e4m3 ? "float8_e4m3fn"
                            : "bool";
}

DType dtype_from_str(const std::string& name) {
  for (DType t : {DType::f32, DType::bf16, DType::i32, DType::boolean})
    if (name == dtype_str(t) || name == dtype_name(t)) return t;
  throw nb::value_error(("qkv: unknown dtype '" + name + "' (float32, bfloat16, int32 or bool)").c_str());
}

std::string utf8_arg(nb::handle obj, const char* what) {
  if (!nb::isinstance<nb::str>(obj))
    throw nb::type_error(detail::concat("qkv: ", what, " must be a str, not ", nb::type_name(obj.type()).c_str()).c_str());
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
  if (!utf8) {  // a lone surrogate ("\ud800"): Python's UnicodeEncodeError, said for this argument
    nb::python_error e;
    throw nb::value_error(detail::concat("qkv: ", what, " is not valid Unicode: ", e.value().is_valid()
                                                                                        ? nb::str(e.value()).c_str()
                                                                                        : "a lone surrogate").c_str());
  }
  return std::string(utf8, static_cast<size_t>(size));
}

Tensor to_tensor(nb::handle obj) {
  if (nb::isinstance<Tensor>(obj)) return nb::cast<Tensor>(obj);
  nb::object held;  // a torch tensor that requires grad exports only its detached view
  if (nb::hasattr(obj, "requires_grad") && nb::hasattr(obj, "detach") && nb::cast<bool>(obj.attr("requires_grad")))
    held = obj.attr("detach")(), obj = held;
  {
    nb::ndarray<> a;  // writable: may be viewed
    if (nb::try_cast(obj, a, false)) return from_ndarray(a, true);
  }
  {
    nb::ndarray<nb::ro> a;  // read-only (a NumPy array with writeable=False): copied
    if (nb::try_cast(obj, a, false)) return from_ndarray(a, false);
  }
  // Python scalars and (nested) lists: through NumPy, as torch.tensor reads them.
  nb::object np = nb::module_::import_("numpy");
  nb::object arr = np.attr("asarray")(obj);
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(arr, a, false))
    throw nb::type_error(("qkv: cannot make a tensor of a " +
                          std::string(nb::type_name(obj.type()).c_str()) + " (give a NumPy array, a torch "
                          "tensor, a qkv.Tensor, a number or a nested list of numbers)")
                             .c_str());
  return from_ndarray(a, false);
}

template <typename... F>
nb::ndarray<F...> to_array(const Tensor& t) {
  QKV_CHECK(t.device().is_cpu(), "qkv: ", t.str(), " is not on the CPU; .to('cpu') it first");
  // NumPy 1.x holds at most 32 dimensions; nanobind aborts the interpreter on an array it cannot make.
  if (t.dim() > kMaxArrayDims)
    throw nb::value_error(detail::concat("qkv: a tensor of ", t.dim(), " dimensions cannot become an array (at most ",
                                         kMaxArrayDims, ")").c_str());
  std::vector<size_t> shape(static_cast<size_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) shape[static_cast<size_t>(d)] = static_cast<size_t>(t.size(d));
  const Shape& strides = t.strides();
  void* ptr = static_cast<uint8_t*>(t.impl().storage->ptr()) + t.offset() * static_cast<int64_t>(dtype_size(t.dtype()));
  nb::capsule owner(new Tensor(t.detach()), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::ndarray<F...>(ptr, shape.size(), shape.data(), owner, strides.data(), dlpack_dtype(t.dtype()),
                        nb::device::cpu::value);
}

template nb::ndarray<nb::numpy> to_array<nb::numpy>(const Tensor&);
template nb::ndarray<nb::pytorch> to_array<nb::pytorch>(const Tensor&);
template nb::ndarray<nb::array_api> to_array<nb::array_api>(const Tensor&);

}  // namespace qkv::python
