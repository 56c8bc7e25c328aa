// The shape of an elementwise loop over strided operands, shared by every device's elementwise
// kernels: dims merged wherever every operand allows it ("coalesced"), so the common cases — dense
// same-shape operands, a bias broadcast along rows — become one or two flat loops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qkv::kernels {

struct StridedLoop {
  std::vector<int64_t> shape;                  // coalesced, at least one dim
  std::vector<std::vector<int64_t>> strides;   // per operand (output first), same rank as shape
};

// Row-major strides of a dense tensor of this shape, and its element count.
inline std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t acc = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) st[d] = acc, acc *= shape[d];
  return st;
}
inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Merges dims i-1 and i wherever, for every operand, stride[i-1] == stride[i] * shape[i].
StridedLoop coalesce(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides);

}  // namespace qkv::kernels
