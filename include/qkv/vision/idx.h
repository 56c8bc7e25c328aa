// The IDX format of MNIST and Fashion-MNIST (LeCun's), plain or gzip-compressed:
//
//   0x00 0x00 <type> <ndim>      type 0x08: unsigned bytes (the only one image sets use)
//   ndim × big-endian u32        the sizes
//   the data, row-major
//
// A missing, truncated or corrupt file, another element type, or a size over the caller's bound is
// a qkv::Error naming the file and the problem; memory stays bounded by the sizes the header
// states and the bound (the data is read after the header is checked, never grown unboundedly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::vision {

struct IdxArray {
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // row-major, shape's product bytes
};

// max_bytes bounds the data the header may announce (default 1 GiB).
IdxArray read_idx(const std::string& path, uint64_t max_bytes = uint64_t{1} << 30);

}  // namespace qkv::vision
