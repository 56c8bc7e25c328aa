// The bridge between qkv tensors and Python arrays (NumPy, PyTorch, anything with DLPack or the
// buffer protocol), through nanobind's ndarray:
//
//   into qkv   to_tensor(array)    no copy when the array is a dense row-major CPU array of a dtype
//                                   qkv has (float32, bfloat16, bool, int32); a copy otherwise
//   out of qkv to_array<F>(tensor) never a copy: the array views the tensor's memory and keeps the
//                                   tensor alive (F: nb::numpy, nb::pytorch, or nb::array_api:
//                                   an object with __dlpack__)
//
// Memory that Python owns stays alive while a qkv tensor views it: the tensor's storage holds a
// reference to the array and drops it (under the GIL) when its last view is gone.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "qkv/ops/tensor.h"

namespace qkv::python {

namespace nb = nanobind;

// qkv dtype ↔ DLPack dtype; "float32", "bfloat16", "bool", "int32" as PyTorch spells them.
nb::dlpack::dtype dlpack_dtype(DType t);
const char* dtype_str(DType t);
DType dtype_from_str(const std::string& name);

// The UTF-8 of a str argument: a TypeError naming `what` for another type, a ValueError naming it
// for a str UTF-8 cannot encode (a lone surrogate), never nanobind's bare std::bad_cast.
std::string utf8_arg(nb::handle obj, const char* what);

// The most dimensions an array made of a tensor may have (NumPy 1.x's NPY_MAXDIMS).
inline constexpr int64_t kMaxArrayDims = 32;

// Any array-like Python object (a qkv.Tensor is returned as is) → a qkv tensor.
Tensor to_tensor(nb::handle obj);

// A view of `t` as an array of framework F, sharing its memory (t is kept alive by the array).
template <typename... F>
nb::ndarray<F...> to_array(const Tensor& t);

}  // namespace qkv::python
