// sample_rows on the CPU (formula: kernels/sample.inc): each row in index order, as decode::Sampler's
// softmax_probs and sample_from compute it, rows in parallel.
#include "kernels/cpu/sample.h"

#include <cmath>
#include <vector>

#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

int32_t greedy(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == x[j] && (best < 0 || x[j] > x[best])) best = j;  // (NaN never chosen)
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

int32_t draw(const float* x, int64_t n, double T, double u) {
  std::vector<float> t(static_cast<size_t>(n));
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    t[static_cast<size_t>(j)] = static_cast<float>(x[j] / T);
    if (t[static_cast<size_t>(j)] > m) m = t[static_cast<size_t>(j)];
  }
  if (!std::isfinite(m)) return -1;
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (size_t j = 0; j < p.size(); ++j) sum += p[j] = std::exp(static_cast<double>(t[j]) - static_cast<double>(m));
  if (!(sum > 0)) return -1;  // a NaN logit
  for (double& v : p) v /= sum;
  double cum = 0;
  int64_t last = -1;
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] <= 0) continue;
    last = static_cast<int64_t>(j);
    cum += p[j];
    if (u < cum) return static_cast<int32_t>(j);
  }
  return static_cast<int32_t>(last);
}

}  // namespace

void sample_rows(const float* x, int64_t rows, int64_t n, const double* temperature, const double* u, int32_t* out) {
  parallel_for(rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      out[r] = temperature[r] <= 0 ? greedy(x + r * n, n) : draw(x + r * n, n, temperature[r], u[r]);
  });
}

}  // namespace qkv::kernels::cpu
