// Linked against qkv_core only (tests/CMakeLists.txt): tensors, devices, views, byte copies and
// reading values back need nothing from a floor above (conversions and element copies are ops').
// It exits 0 when the values are right.
#include <cstdio>

#include "qkv/core/tensor.h"
#include "qkv/core/utf8.h"

int main() {
  using namespace qkv;
  TensorBase t = TensorBase::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  TensorBase v = t.as_strided({3, 2}, {1, 3}, 0);  // the transpose, as a raw view
  TensorBase c = v.host_contiguous_copy(), d = TensorBase::zeros({3, 2});
  d.copy_bytes_(c);
  const bool ok = v.to_vector() == std::vector<float>{1, 4, 2, 5, 3, 6} && c.is_contiguous() &&
                  d.to_vector() == v.to_vector() && t.to(Device::cpu()).same(t) && utf8::length("h\u00e9") == 2;
  std::printf("%s\n", ok ? "core links alone" : "wrong values");
  return ok ? 0 : 1;
}
