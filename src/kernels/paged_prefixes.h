// Which tokens of a paged-attention step share the first pages of their sequences (cascade attention:
// FlashInfer's "cascade inference"; Ye et al., 2024) — a shared system prompt, the n samples of one
// prompt, prefix caching's pages, a prompt's later chunk. Those tokens may attend to their common keys
// together, each page read once for all their query rows instead of once a token. Host code over the
// host's block table, device-neutral: the CPU's kernel (kernels/cpu/paged_attention.cpp) finds its
// groups here, and ops' paged_prefixes finds the GPU's here once a step (the GPU's block table is on
// the device: reading it back every layer would wait for the device).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/paged_attention.h"

namespace qkv::kernels {

// Keys are taken in tiles of about kTileKeys, whole pages, at fixed places (the CPU's kernel): tile i
// holds keys i·tile … (i+1)·tile − 1 of a sequence. A group shares whole tiles, so that on the CPU a
// token's output has the same bits in a group or alone.
constexpr int64_t kTileKeys = 128;
inline int64_t tile_keys(const PagedShape& s) { return s.page_size * std::max<int64_t>(1, kTileKeys / s.page_size); }

// Prefixes shared by several tokens over fewer tiles are attended token by token.
constexpr int64_t kCascadeMinTiles = 2;

// A group: tokens whose block-table rows begin with the same page, every one seeing at least two
// tiles of keys and none hidden by a window; they share the keys of their common whole pages, rounded
// down to whole tiles. Groups of one token, or sharing fewer than two tiles, are not made.
struct PagedGroup {
  std::vector<int64_t> tokens;  // ascending
  int64_t keys = 0;             // shared: keys 0 … keys − 1 of each
};
// table [rows, max_pages], seq and len [T] on the host (s.T, page_size, max_pages, window read)
std::vector<PagedGroup> paged_shared_prefixes(const int32_t* table, const int32_t* seq, const int32_t* len,
                                              const PagedShape& s);

// The GPU's cascade (kernels/paged_attention.h's PagedCascade) as host arrays: the groups cut into
// blocks of at most kCascadeBlockTokens tokens, each {first, count, keys} — tokens[first … first +
// count − 1] over their group's first `keys` keys —, the groups' tokens, and from[t]: a token's
// first key past its group's (−1: in no group).
constexpr int64_t kCascadeBlockTokens = 32;
struct PagedCascadeArrays {
  std::vector<int32_t> blocks, tokens, from;
  int64_t max_keys = 0, max_count = 0;
  int64_t n_blocks() const { return static_cast<int64_t>(blocks.size() / 3); }
};
PagedCascadeArrays paged_cascade_arrays(const std::vector<PagedGroup>& groups, int64_t T);

}  // namespace qkv::kernels
