#include "testing.h"

#include <algorithm>

namespace qkv::testing {

double rel_error(const std::vector<float>& a, const std::vector<float>& b, double floor) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    ref = std::max(ref, static_cast<double>(std::fabs(b[i])));
  }
  if (a.size() != b.size()) return INFINITY;
  return diff / std::max(ref, floor);
}

Tensor param(const Shape& shape, uint64_t seed, float scale) {
  Generator g(seed);
  Tensor t = Tensor::randn(shape, g, 0.f, scale);
  t.requires_grad_();
  return t;
}

}  // namespace qkv::testing
