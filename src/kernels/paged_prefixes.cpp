// Finding the tokens that share their sequences' first pages (kernels/paged_prefixes.h).
#include "kernels/paged_prefixes.h"

namespace qkv::kernels {

std::vector<PagedGroup> paged_shared_prefixes(const int32_t* table, const int32_t* seq, const int32_t* len,
                                              const PagedShape& s) {
  std::vector<PagedGroup> groups;
  if (s.T < 2) return groups;
  const int64_t tk = tile_keys(s), least = kCascadeMinTiles * tk;
  auto row = [&](int64_t t) { return table + static_cast<int64_t>(seq[t]) * s.max_pages; };
  std::vector<int64_t> order;  // the tokens that may share: enough keys, none hidden by a window
  for (int64_t t = 0; t < s.T; ++t)
    if (len[t] >= least && (s.window == 0 || len[t] <= s.window)) order.push_back(t);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row(a)[0] < row(b)[0]; });
  for (size_t i = 0; i < order.size();) {
    size_t e = i + 1;
    while (e < order.size() && row(order[e])[0] == row(order[i])[0]) ++e;
    if (e - i >= 2) {
      // the common whole pages: every token sees them whole, every row lists them alike
      const int32_t* lead = row(order[i]);
      int64_t P = s.max_pages;
      for (size_t x = i; x < e; ++x) {
        const int32_t* r = row(order[x]);
        const int64_t whole = std::min<int64_t>(P, len[order[x]] / s.page_size);
        int64_t c = 0;
        while (c < whole && r[c] == lead[c]) ++c;
        P = c;
      }
      const int64_t keys = P * s.page_size / tk * tk;
      if (keys >= least) groups.push_back({std::vector<int64_t>(order.begin() + i, order.begin() + e), keys});
    }
    i = e;
  }
  return groups;
}

PagedCascadeArrays paged_cascade_arrays(const std::vector<PagedGroup>& groups, int64_t T) {
  PagedCascadeArrays a;
  a.from.assign(static_cast<size_t>(T), -1);
  for (const PagedGroup& g : groups) {
    const auto n = static_cast<int64_t>(g.tokens.size()), first = static_cast<int64_t>(a.tokens.size());
    for (int64_t t : g.tokens) a.tokens.push_back(static_cast<int32_t>(t)), a.from[static_cast<size_t>(t)] = static_cast<int32_t>(g.keys);
    // blocks of about equal counts, each ≤ kCascadeBlockTokens
    const int64_t blocks = (n + kCascadeBlockTokens - 1) / kCascadeBlockTokens;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t x0 = b * n / blocks, x1 = (b + 1) * n / blocks;
      a.blocks.insert(a.blocks.end(), {static_cast<int32_t>(first + x0), static_cast<int32_t>(x1 - x0), static_cast<int32_t>(g.keys)});
      a.max_count = std::max(a.max_count, x1 - x0);
    }
    a.max_keys = std::max(a.max_keys, g.keys);
  }
  return a;
}

}  // namespace qkv::kernels
