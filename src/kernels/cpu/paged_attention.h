// The CPU's paged-attention kernels: kernels/paged_attention.inc (their formulas and contracts, one
// declaration for every device).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/paged_attention.h"

namespace qkv::kernels::cpu {
#include "kernels/paged_attention.inc"

// Cascade attention (FlashInfer's "cascade inference"; Ye et al., 2024): tokens whose sequences begin
// with the same pages — a shared system prompt, the n samples of one prompt, prefix caching's pages,
// a prompt's later chunk — attend to those keys together, each page read once for all their query
// rows instead of once a token. A group: tokens whose block-table rows begin with the same page,
// every one seeing at least two tiles of keys (tiles: whole pages, ~128 keys; 256 at pages of 16) and
// none hidden by a window; they share the keys of their common whole pages, rounded down to whole
// tiles (paged_attention.cpp), so that a token's output has the same bits in a group or alone. Groups
// of one token, or sharing fewer than two tiles, are not made.
struct PagedGroup {
  std::vector<int64_t> tokens;  // ascending
  int64_t keys = 0;             // shared: keys 0 … keys − 1 of each
};
std::vector<PagedGroup> paged_shared_prefixes(const int32_t* table, const int32_t* seq, const int32_t* len,
                                              const PagedShape& s);

}  // namespace qkv::kernels::cpu
