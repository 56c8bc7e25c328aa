// safetensors read/write: the header is JSON (nlohmann), the data raw little-endian bytes.
#include "qkv/io/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "qkv/io/file.h"
#include "qkv/io/json.h"

namespace qkv::io {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

// The dtypes qkv reads and writes, as named in the file.
enum class FileType { F32, F16, BF16, I32, I64, BOOL, I8 };

const char* file_type_name(FileType t) {
  switch (t) {
    case FileType::F32: return "F32";
    case FileType::F16: return "F16";
    case FileType::BF16: return "BF16";
    case FileType::I32: return "I32";
    case FileType::I64: return "I64";
    case FileType::BOOL: return "BOOL";
    case FileType::I8: return "I8";
  }
  return "?";
}
size_t file_type_size(FileType t) {
  switch (t) {
    case FileType::F32: case FileType::I32: return 4;
    case FileType::F16: case FileType::BF16: return 2;
    case FileType::I64: return 8;
    case FileType::BOOL: case FileType::I8: return 1;
  }
  return 0;
}
bool parse_file_type(const std::string& s, FileType& t) {
  for (FileType c : {FileType::F32, FileType::F16, FileType::BF16, FileType::I32, FileType::I64, FileType::BOOL,
                     FileType::I8}) {
    if (s == file_type_name(c)) {
      t = c;
      return true;
    }
  }
  return false;
}

FileType stored_type(DType d, StoreAs store) {
  if (d == DType::i32) return FileType::I32;
  if (d == DType::boolean) return FileType::BOOL;
  if (d == DType::i8) return FileType::I8;
  switch (store) {
    case StoreAs::kKeep: return d == DType::bf16 ? FileType::BF16 : FileType::F32;
    case StoreAs::kF32: return FileType::F32;
    case StoreAs::kF16: return FileType::F16;
    case StoreAs::kBF16: return FileType::BF16;
  }
  return FileType::F32;
}

// The bytes of `t` as `ft` (one of stored_type's answers for its dtype), row-major, into `dst`.
// The bytes of a host tensor's first element (its offset counts elements, not bytes).
const char* first_byte(const TensorBase& t) {
  return t.data<char>() - t.offset() + t.offset() * static_cast<int64_t>(dtype_size(t.dtype()));
}

void encode(const TensorBase& t, FileType ft, char* dst) {
  const size_t n = static_cast<size_t>(t.numel());
  if (n == 0) return;
  const bool same = (ft == FileType::F32 && t.dtype() == DType::f32) ||
                    (ft == FileType::BF16 && t.dtype() == DType::bf16) ||
                    (ft == FileType::I32 && t.dtype() == DType::i32) ||
                    (ft == FileType::BOOL && t.dtype() == DType::boolean) ||
                    (ft == FileType::I8 && t.dtype() == DType::i8);
  if (same) {
    // (a GPU tensor's bytes come to the host first: TensorBase::to names a strided one)
    TensorBase c = !t.device().is_cpu() ? t.to(Device::cpu()) : t.is_contiguous() ? t : t.host_contiguous_copy();
    std::memcpy(dst, first_byte(c), n * dtype_size(t.dtype()));
    if (ft == FileType::BOOL)
      for (size_t i = 0; i < n; ++i) dst[i] = dst[i] != 0;
    return;
  }
  std::vector<float> v = t.to_vector();  // f32 ↔ bf16 → f16 conversions
  for (size_t i = 0; i < n; ++i) {
    uint16_t bits = ft == FileType::F16 ? f32_to_f16(v[i]).bits : f32_to_bf16(v[i]).bits;
    if (ft == FileType::F32)
      std::memcpy(dst + 4 * i, &v[i], 4);
    else
      std::memcpy(dst + 2 * i, &bits, 2);
  }
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// The header's reference implementation refuses headers above 100 MB; so do we, rather than allocate
// whatever a corrupt length asks for.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

// File layout (all integers little-endian):
//   u64 N                      header length in bytes
//   N bytes of JSON            {"__metadata__": {str: str, ...},            (optional)
//                               "name": {"dtype": "F32"|"F16"|"BF16"|"I32"|"BOOL",
//                                        "shape": [d0, d1, ...],
//                                        "data_offsets": [begin, end]}, ...}
//                              padded with spaces so that 8 + N is a multiple of 8
//   the data                   each tensor's row-major bytes at [begin, end) relative to the start of
//                              the data; the tensors tile the data exactly, in the order given

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorBase>>& tensors,
                      const std::map<std::string, std::string>& metadata, StoreAs store,
                      const std::set<std::string>& keep) {
  // Everything is checked before the file is touched.
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(!name.empty(), "save_safetensors: '", path, "': a tensor has an empty name");
    QKV_CHECK(name != "__metadata__", "save_safetensors: '", path, "': '__metadata__' is reserved, not a tensor name");
    QKV_CHECK(names.insert(name).second, "save_safetensors: '", path, "': duplicate tensor name '", name, "'");
    QKV_CHECK(t.defined(), "save_safetensors: '", path, "': tensor '", name, "' is undefined");
  }

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::vector<FileType> types;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    FileType ft = stored_type(t.dtype(), keep.contains(name) ? StoreAs::kKeep : store);
    types.push_back(ft);
    uint64_t nbytes = static_cast<uint64_t>(t.numel()) * file_type_size(ft);
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = file_type_name(ft);
    e["shape"] = t.shape();
    e["data_offsets"] = {offset, offset + nbytes};
    header[name] = std::move(e);
    offset += nbytes;
  }
  std::string json;
  try {
    json = header.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(detail::concat("save_safetensors: '", path, "': a name or metadata string is not valid UTF-8 (",
                               e.what(), ")"));
  }
  json.append((8 - json.size() % 8) % 8, ' ');

  // Written tensor by tensor: a host tensor stored as it is, straight from its memory; any other
  // (converted, strided, on a GPU, booleans normalized) through one buffer of its size — never the
  // whole file in memory (a checkpoint of weights and Adam's moments is 3× the model).
  write_file_atomic(path, [&](const ByteSink& write) {
    std::string head(8, '\0');
    const uint64_t n = json.size();
    std::memcpy(head.data(), &n, 8);
    write(head);
    write(json);
    std::string buffer;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorBase& t = tensors[i].second;
      const size_t bytes = static_cast<size_t>(t.numel()) * file_type_size(types[i]);
      if (bytes == 0) continue;
      const bool as_is = t.device().is_cpu() && t.is_contiguous() && types[i] != FileType::BOOL &&
                         ((types[i] == FileType::F32 && t.dtype() == DType::f32) ||
                          (types[i] == FileType::BF16 && t.dtype() == DType::bf16) ||
                          (types[i] == FileType::I32 && t.dtype() == DType::i32) ||
                          (types[i] == FileType::I8 && t.dtype() == DType::i8));
      if (as_is) {
        write(std::string_view(first_byte(t), bytes));
        continue;
      }
      buffer.resize(bytes);
      encode(t, types[i], buffer.data());
      write(buffer);
    }
  });
}

const TensorBase* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

namespace {

// The whole file checked; the tensors read when with_data (else only the metadata is returned).
// Reads and checks the header (out.metadata; `on_header` sees every entry), then, if with_data, the
// tensors `wanted` names (all when it is empty), each converted and handed to `each`.
SafetensorsFile read_safetensors(const std::string& path, bool keep_bf16, bool with_data,
                                 const SafetensorsHeaderFn& on_header = {}, const SafetensorsWantedFn& wanted = {},
                                 const SafetensorsTensorFn& each = {}) {
  auto bad = [&](const auto&... args) { return Error(detail::concat("load_safetensors: '", path, "': ", args...)); };

  // stat() before the open: opening a FIFO with no writer would block (a model file is read at random).
  require_regular_file(path, "load_safetensors:", "a model file");
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(detail::concat("load_safetensors: cannot open '", path, "': ", std::strerror(errno)));
  struct stat st;
  if (::fstat(::fileno(f.get()), &st) != 0) throw bad("cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw bad("not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  auto read_exact = [&](void* dst, size_t n, const char* what) {
    if (n != 0 && std::fread(dst, 1, n, f.get()) != n)
      throw bad("cannot read ", what, ": ", std::ferror(f.get()) ? std::strerror(errno) : "unexpected end of file (truncated?)");
  };

  if (file_size < 8) throw bad("file is ", file_size, " bytes, too short for the 8-byte header length (truncated?)");
  uint64_t header_len = 0;
  read_exact(&header_len, 8, "the header length");
  if (header_len > file_size - 8)
    throw bad("header length ", header_len, " is larger than the rest of the file (", file_size - 8, " bytes)");
  if (header_len > kMaxHeaderBytes) throw bad("header length ", header_len, " is larger than the 100 MB limit");
  std::string header_text(static_cast<size_t>(header_len), '\0');
  read_exact(header_text.data(), header_text.size(), "the header");
  const uint64_t data_size = file_size - 8 - header_len;

  nlohmann::json header;
  try {
    header = parse_json(header_text, "header");
  } catch (const nlohmann::json::exception& e) {
    throw bad("header is not valid JSON: ", e.what());
  } catch (const Error& e) {
    throw bad(e.what());
  }
  if (!header.is_object()) throw bad("header JSON is not an object");

  struct Entry {
    std::string name;
    FileType type;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  SafetensorsFile out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not a JSON object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw bad("__metadata__ value of '", k, "' is not a string");
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw bad("entry '", name, "' is not a JSON object");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) throw bad("tensor '", name, "' has no \"", key, "\"");
    const auto& jd = v["dtype"];
    const auto& js = v["shape"];
    const auto& jo = v["data_offsets"];
    Entry e{name, FileType::F32, {}, 0, 0};
    if (!jd.is_string()) throw bad("tensor '", name, "': dtype is not a string");
    if (!parse_file_type(jd.get<std::string>(), e.type))
      throw bad("tensor '", name, "': unsupported dtype '", jd.get<std::string>(),
                "' (qkv reads F32, F16, BF16, I32, I64, I8 and BOOL)");
    if (!js.is_array()) throw bad("tensor '", name, "': shape is not an array");
    for (const auto& d : js) {
      if (d.is_number_unsigned()) {
        if (d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          throw bad("tensor '", name, "': dimension ", d.get<uint64_t>(), " is too large");
        e.shape.push_back(d.get<int64_t>());
      } else if (d.is_number_integer()) {
        throw bad("tensor '", name, "': negative dimension ", d.get<int64_t>(), " in shape ", js.dump());
      } else {
        throw bad("tensor '", name, "': shape ", js.dump(), " is not a list of integers");
      }
    }
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
      throw bad("tensor '", name, "': data_offsets ", jo.dump(), " are not two non-negative integers");
    e.begin = jo[0].get<uint64_t>();
    e.end = jo[1].get<uint64_t>();
    if (e.begin > e.end) throw bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] are reversed (begin > end)");
    if (e.end > data_size)
      throw bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] are out of range: the data has ",
                data_size, " bytes");
    // product(shape) · itemsize, refusing overflow (which could never match the offsets anyway).
    uint64_t need = file_type_size(e.type);
    bool overflow = false;
    for (int64_t d : e.shape) overflow = overflow || __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need);
    if (overflow || need != e.end - e.begin)
      throw bad("tensor '", name, "': size mismatch: data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin,
                " bytes but shape ", shape_str(e.shape), " of ", file_type_name(e.type), " needs ",
                overflow ? std::string("more than 2^64") : std::to_string(need));
    entries.push_back(std::move(e));
  }

  // The tensors must tile the data exactly: no overlaps, no gaps.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin < expected)
      throw bad("tensor '", e.name, "': data_offsets [", e.begin, ", ", e.end, "] overlap the previous tensor (which ends at ",
                expected, ")");
    if (e.begin > expected)
      throw bad("tensor '", e.name, "': data_offsets [", e.begin, ", ", e.end, "] leave a gap after byte ", expected);
    expected = e.end;
  }
  if (expected != data_size)
    throw bad("the tensors end at byte ", expected, " of the data but the file holds ", data_size,
              " data bytes (a gap at the end)");
  if (on_header) {
    std::vector<SafetensorsEntry> listed;
    for (const Entry& e : entries) listed.push_back({e.name, e.shape});
    on_header(out.metadata, listed);
  }
  if (!with_data) return out;

  // The data, in file order: sequential reads (a tensor not wanted is skipped over).
  for (const Entry& e : entries) {
    const size_t nbytes = static_cast<size_t>(e.end - e.begin);
    if (wanted && !wanted(e.name)) {
      if (std::fseek(f.get(), static_cast<long>(nbytes), SEEK_CUR) != 0)
        throw bad("cannot skip tensor '", e.name, "': ", std::strerror(errno));
      continue;
    }
    const size_t n = static_cast<size_t>(numel_of(e.shape));
    const std::string what = detail::concat("tensor '", e.name, "'");
    TensorBase t;
    switch (e.type) {
      case FileType::F32:
      case FileType::I32:
      case FileType::I8:
        t = TensorBase::empty(e.shape, e.type == FileType::F32   ? DType::f32
                                       : e.type == FileType::I32 ? DType::i32
                                                                 : DType::i8);
        read_exact(t.data<char>(), nbytes, what.c_str());
        break;
      case FileType::BOOL: {
        t = TensorBase::empty(e.shape, DType::boolean);
        read_exact(t.data<char>(), nbytes, what.c_str());
        uint8_t* p = t.data<uint8_t>();
        for (size_t i = 0; i < n; ++i) p[i] = p[i] != 0;
        break;
      }
      case FileType::BF16:
        if (keep_bf16) {
          t = TensorBase::empty(e.shape, DType::bf16);
          read_exact(t.data<char>(), nbytes, what.c_str());
          break;
        }
        [[fallthrough]];
      case FileType::F16: {
        std::vector<uint16_t> raw(n);
        read_exact(raw.data(), nbytes, what.c_str());
        t = TensorBase::empty(e.shape, DType::f32);
        float* p = t.data();
        if (e.type == FileType::F16)
          for (size_t i = 0; i < n; ++i) p[i] = f16_to_f32(f16{raw[i]});
        else
          for (size_t i = 0; i < n; ++i) p[i] = bf16_to_f32(bf16{raw[i]});
        break;
      }
      case FileType::I64: {
        std::vector<int64_t> raw(n);
        read_exact(raw.data(), nbytes, what.c_str());
        t = TensorBase::empty(e.shape, DType::i32);
        int32_t* p = t.data<int32_t>();
        for (size_t i = 0; i < n; ++i) {
          if (raw[i] < std::numeric_limits<int32_t>::min() || raw[i] > std::numeric_limits<int32_t>::max())
            throw bad("tensor '", e.name, "': I64 value ", raw[i], " at index ", i, " does not fit in i32");
          p[i] = static_cast<int32_t>(raw[i]);
        }
        break;
      }
    }
    if (each) each(e.name, std::move(t));
    else out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path, bool keep_bf16) {
  return read_safetensors(path, keep_bf16, /*with_data=*/true);
}

void stream_safetensors(const std::string& path, bool keep_bf16, const SafetensorsHeaderFn& header,
                        const SafetensorsWantedFn& wanted, const SafetensorsTensorFn& each) {
  QKV_CHECK(static_cast<bool>(each), "stream_safetensors: no function to hand the tensors to");
  read_safetensors(path, keep_bf16, /*with_data=*/true, header, wanted, each);
}

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  return read_safetensors(path, false, /*with_data=*/false).metadata;
}

}  // namespace qkv::io
