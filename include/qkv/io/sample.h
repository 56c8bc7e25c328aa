// A seeded sample of indices: what `--limit N` evaluates (qkv eval), so that N lines of a file sorted
// by length are not its N shortest. Floyd's algorithm on SplitMix64: the same sample for the same
// (n, k, seed) on every platform and standard library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "qkv/core/rng.h"

namespace qkv::io {

// k distinct indices of 0 … n − 1, each set of k equally likely (up to a 2⁻⁶⁴ bias), in increasing
// order; all of 0 … n − 1 when k ≥ n or k ≤ 0 (no limit).
inline std::vector<int64_t> sample_indices(int64_t n, int64_t k, uint64_t seed) {
  std::vector<int64_t> out;
  if (n <= 0) return out;
  if (k <= 0 || k >= n) {
    out.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = i;
    return out;
  }
  uint64_t state = seed;
  auto next = [&state] {  // SplitMix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::unordered_set<int64_t> chosen;
  chosen.reserve(static_cast<size_t>(k) * 2);
  out.reserve(static_cast<size_t>(k));
  for (int64_t j = n - k; j < n; ++j) {
    // t uniform in [0, j]: the high 64 bits of a 64 × 64-bit product (Lemire, without rejection)
    const auto t = static_cast<int64_t>(
        (static_cast<unsigned __int128>(next()) * static_cast<unsigned __int128>(j + 1)) >> 64);
    const int64_t pick = chosen.insert(t).second ? t : j;
    if (pick == j) chosen.insert(j);
    out.push_back(pick);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Examples in epochs (a training task's draws): draw k (k = 0, 1, …) is at(k) = order_e[k mod n] for
// epoch e = k / n, order_e a permutation of 0 … n − 1 — Fisher–Yates with the draws of
// (seed ^ epoch-key, i) — the same order whenever the epoch recurs, so a resumed run draws the same
// examples. Keeps the current epoch's order.
class EpochOrder {
 public:
  EpochOrder(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  int64_t at(uint64_t k) {
    const auto n = static_cast<uint64_t>(n_);
    const auto epoch = static_cast<int64_t>(k / n);
    if (epoch != epoch_) {
      order_.resize(n);
      for (uint64_t i = 0; i < n; ++i) order_[i] = static_cast<int64_t>(i);
      const uint64_t key = seed_ ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1));
      for (uint64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[Generator::bits(key, i) % (i + 1)]);
      epoch_ = epoch;
    }
    return order_[k % n];
  }
  int64_t size() const { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;
};

// The elements of `v` at `index` (increasing), in that order.
template <class T>
std::vector<T> take(const std::vector<T>& v, const std::vector<int64_t>& index) {
  std::vector<T> out;
  out.reserve(index.size());
  for (int64_t i : index) out.push_back(v[static_cast<size_t>(i)]);
  return out;
}

// 0 … n − 1 split into k rows held out (a validation set), drawn as sample_indices draws them, and the
// rest; both increasing.
struct HeldOut {
  std::vector<int64_t> held, rest;
};
inline HeldOut hold_out(int64_t n, int64_t k, uint64_t seed) {
  HeldOut out;
  out.held = sample_indices(n, k, seed);
  for (int64_t i = 0, j = 0; i < n; ++i) {
    if (j < static_cast<int64_t>(out.held.size()) && out.held[static_cast<size_t>(j)] == i)
      ++j;
    else
      out.rest.push_back(i);
  }
  return out;
}

}  // namespace qkv::io
