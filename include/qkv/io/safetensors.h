// safetensors files (https://huggingface.co/docs/safetensors): named tensors plus string metadata, as
// Hugging Face and PyTorch users exchange weights. Reading validates the whole header against the
// file, so a truncated or corrupt file is a qkv::Error, never a crash or an out-of-bounds read.
#pragma once

#include <concepts>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/half.h"
#include "qkv/core/names.h"
#include "qkv/core/tensor.h"

namespace qkv::io {

// How floating tensors (f32 and bf16) are written: kKeep keeps their dtype (f32 → F32, bf16 → BF16);
// the others convert (F16 and BF16 round to nearest even, overflow to ±inf, keep subnormals).
// i32, i8 and boolean tensors are always written as I32, I8 and BOOL.
// The storage dtype of a file: what a training config's "model_dtype" and `qkv average --dtype` name
// ("f32", "f16", "bf16"; "keep" is the library's default).
enum class StoreAs { kKeep, kF32, kF16, kBF16 };
constexpr EnumTable<StoreAs, 4> enum_table(StoreAs) {
  return {"storage dtype",
          {{{StoreAs::kF32, "f32"}, {StoreAs::kF16, "f16"}, {StoreAs::kBF16, "bf16"}, {StoreAs::kKeep, "keep"}}}};
}

// Writes `tensors` (any strides; views are made contiguous) in the given order, with `metadata` as
// "__metadata__" (omitted when empty). Names must be unique, non-empty and not "__metadata__"; all
// is checked before anything is written. The file is written atomically (write_file_atomic). The
// tensors named in `keep` are written in their own dtype whatever `store` says (an int8 file's
// f32 scales: qkv quantize).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorBase>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}, StoreAs store = StoreAs::kKeep,
                      const std::set<std::string>& keep = {});
// The same for a list of a tensor type built on TensorBase (qkv::Tensor).
template <class T>
  requires(std::derived_from<T, TensorBase> && !std::same_as<T, TensorBase>)
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, T>>& tensors,
                      const std::map<std::string, std::string>& metadata = {}, StoreAs store = StoreAs::kKeep) {
  save_safetensors(path, std::vector<std::pair<std::string, TensorBase>>(tensors.begin(), tensors.end()), metadata,
                   store);
}

struct SafetensorsFile {
  std::vector<std::pair<std::string, TensorBase>> tensors;  // in file order (sorted by offset)
  std::map<std::string, std::string> metadata;
  const TensorBase* find(const std::string& name) const;  // nullptr if absent
};

// Reads a safetensors file: F32/F16/BF16 → f32 tensors (BF16 stays bf16 if keep_bf16), I32 → i32, I8 → i8,
// I64 → i32 (an error if a value does not fit), BOOL → boolean. Any other dtype is an error naming it.
// Throws qkv::Error naming the file and the problem: a file shorter than 8 bytes, a header length
// beyond the file, JSON that does not parse, an entry without dtype/shape/data_offsets, offsets out of
// range, reversed, overlapping or leaving gaps, a byte size ≠ product(shape)·itemsize, negative dims.
SafetensorsFile load_safetensors(const std::string& path, bool keep_bf16 = false);
// Streaming, for loading a model without holding the file's tensors beside it: the header is
// read and checked as above and `header` sees its metadata and every entry (name and shape, in
// file order) before any data is read; then each tensor `wanted` names (all, when `wanted` is
// empty) is read, converted as above and handed to `each`, which may keep it or let it go — at
// most one tensor is held here at a time. Errors as load_safetensors'.
struct SafetensorsEntry {
  std::string name;
  Shape shape;
};
using SafetensorsHeaderFn =
    std::function<void(const std::map<std::string, std::string>& metadata, const std::vector<SafetensorsEntry>& entries)>;
using SafetensorsWantedFn = std::function<bool(const std::string& name)>;
using SafetensorsTensorFn = std::function<void(const std::string& name, TensorBase&& tensor)>;
void stream_safetensors(const std::string& path, bool keep_bf16, const SafetensorsHeaderFn& header,
                        const SafetensorsWantedFn& wanted, const SafetensorsTensorFn& each);
// The header's __metadata__ alone, after the same checks of the whole header (no tensor is read).
std::map<std::string, std::string> load_safetensors_metadata(const std::string& path);

}  // namespace qkv::io
