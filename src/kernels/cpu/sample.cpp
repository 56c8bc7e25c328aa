// sample_rows on the CPU (formula: kernels/sample.inc): each row in decode::Sampler's order — its
// filters' (decode/sampling.cpp) and its draw's, bit for bit —, rows in parallel. Top-p sorts only as
// far as its nucleus reaches (the same prefix as Sampler's full stable sort).
#include "kernels/cpu/sample.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/penalties.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

int32_t greedy(const float* x, int64_t n) {
  int64_t best = -1;
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == x[j] && (best < 0 || x[j] > x[best])) best = j;  // (NaN never chosen)
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

// top-k: t_j below the k-th largest → −∞ (ties with it kept). The k-th largest, counting ties: the
// smallest of a min-heap of the k largest seen (one comparison for most t when k is small), or
// nth_element for a large k.
void keep_top_k(std::vector<float>& t, int64_t k) {
  float kth;
  if (k <= 4096) {
    std::vector<float> heap(t.begin(), t.begin() + k);
    std::make_heap(heap.begin(), heap.end(), std::greater<float>());
    for (size_t j = static_cast<size_t>(k); j < t.size(); ++j)
      if (t[j] > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = t[j];
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    kth = heap.front();
  } else {
    std::vector<float> sorted = t;
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    kth = sorted[static_cast<size_t>(k - 1)];
  }
  for (float& v : t)
    if (v < kth) v = -INFINITY;
}

// top-p over e_j = exp(t_j − m): q_j = e_j / Σ e; in order of q descending (ties: the lower index),
// the tokens until Σ q reaches p stay, the others' e_j → 0. Only the q > 0 are ordered, and only as
// far as the sum goes — blocks of 64, 256, 1024 … each split off the rest by nth_element and sorted
// (the order is total: the prefix is a full stable sort's); a sum that never reaches p (its rounding)
// keeps every token (those with q = 0 draw nothing).
void keep_top_p(std::vector<double>& e, double p) {
  double sum = 0;
  for (double v : e) sum += v;
  std::vector<std::pair<double, int32_t>> q;  // (q_j, j) for q_j > 0
  for (size_t j = 0; j < e.size(); ++j)
    if (const double v = e[j] / sum; v > 0) q.emplace_back(v, static_cast<int32_t>(j));
  const auto before = [](const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  double cum = 0;
  size_t kept = 0;
  bool reached = false;
  for (size_t block = 64; !reached && kept < q.size(); block *= 4) {
    const size_t end = std::min(q.size(), kept + block);
    const auto from = q.begin() + static_cast<std::ptrdiff_t>(kept), to = q.begin() + static_cast<std::ptrdiff_t>(end);
    if (to != q.end()) std::nth_element(from, to, q.end(), before);
    std::sort(from, to, before);
    while (kept < end && !reached) reached = (cum += q[kept++].first) >= p;
  }
  if (!reached) return;
  std::vector<char> keep(e.size(), 0);
  for (size_t i = 0; i < kept; ++i) keep[static_cast<size_t>(q[i].second)] = 1;
  for (size_t j = 0; j < e.size(); ++j)
    if (!keep[j]) e[j] = 0;
}

int32_t draw(const float* x, int64_t n, double T, int64_t k, double top_p, double u) {
  std::vector<float> t(static_cast<size_t>(n));
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float v = t[static_cast<size_t>(j)] = static_cast<float>(x[j] / T);
    if (v != v) return -1;  // a NaN: no distribution
    if (v > m) m = v;
  }
  if (!std::isfinite(m)) return -1;
  if (k > 0 && k < n) keep_top_k(t, k);  // (the largest t stays: m is the survivors' maximum too)
  std::vector<double> e(static_cast<size_t>(n));  // exp(t_j − m): top-p's weights and the draw's
  for (size_t j = 0; j < e.size(); ++j) e[j] = std::exp(static_cast<double>(t[j]) - static_cast<double>(m));
  if (top_p < 1) keep_top_p(e, top_p);
  double sum = 0;
  for (double v : e) sum += v;
  double cum = 0;
  int64_t last = -1;
  for (size_t j = 0; j < e.size(); ++j) {
    const double p = e[j] / sum;
    if (p <= 0) continue;
    last = static_cast<int64_t>(j);
    cum += p;
    if (u < cum) return static_cast<int32_t>(j);
  }
  return static_cast<int32_t>(last);
}

}  // namespace

void sample_rows(const float* x, int64_t rows, int64_t n, const double* params, int32_t* out) {
  parallel_for(rows, 2, [&](int64_t b, int64_t e) {  // (one row: no parallel region)
    for (int64_t r = b; r < e; ++r) {
      const double* a = params + 4 * r;  // (T, k, p, u)
      out[r] = a[0] <= 0 ? greedy(x + r * n, n) : draw(x + r * n, n, a[0], static_cast<int64_t>(a[1]), a[2], a[3]);
    }
  });
}

void apply_penalties(float* x, int64_t n, const int32_t* seen, int64_t m, const float* penalties) {
  for (int64_t e = 0; e < m; ++e) {
    const int32_t* s = seen + 4 * e;  // (row, token, count, in prompt)
    const float* r = penalties + 3 * s[0];
    float& v = x[s[0] * n + s[1]];
    v = penalized(v, s[2], s[3] != 0, r[0], r[1], r[2]);
  }
}

}  // namespace qkv::kernels::cpu
