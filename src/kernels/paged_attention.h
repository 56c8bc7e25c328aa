// The shape of an attention over a paged KV cache (kernels/paged_attention.inc declares its kernels
// once, with the formulas): how many query tokens and heads, the cache's pages, and how a token finds
// its sequence's pages. Device-neutral (QKV_HOST_DEVICE-free plain data): both devices read it.
#pragma once

#include <cstdint>

#include "qkv/core/dtype.h"  // (bf16: the .inc's caches)

namespace qkv::kernels {

struct PagedShape {
  int64_t T = 0;          // query tokens (every sequence's new tokens, one after another)
  int64_t H = 1;          // query heads
  int64_t Hkv = 1;        // key/value heads (H a multiple: grouped-query attention)
  int64_t D = 0, Dv = 0;  // key and value head widths
  int64_t page_size = 16; // key/value slots per page
  int64_t pages = 0;      // pages in the cache (slots: pages · page_size)
  int64_t rows = 0;       // block-table rows (sequences)
  int64_t max_pages = 0;  // a block-table row's width: the most pages one sequence holds
  float scale = 1.f;      // on q·k (1/√D by default)
  int64_t window = 0;     // > 0: a query sees only the last `window` keys (Mistral's sliding window)
  float softcap = 0.f;    // > 0: scores soft-capped, softcap · tanh(s / softcap) (Gemma 2)
};

// The GPU's cascade: tokens that share their sequences' first pages (kernels/paged_prefixes.h's
// groups, found on the host and uploaded by ops' paged_prefixes) attend to those keys together.
// Device arrays, int32:
//   blocks [n_blocks, 3], each {first, count, keys}: tokens[first … first + count − 1] (one group's)
//     share their sequences' keys 0 … keys − 1;
//   tokens: the groups' tokens, each group's together;
//   from [T]: a token's first key past its group's shared ones (−1: in no group).
struct PagedCascade {
  const int32_t* blocks = nullptr;
  const int32_t* tokens = nullptr;
  const int32_t* from = nullptr;
  int64_t n_blocks = 0;
  int64_t max_keys = 0;   // the most keys a block shares
  int64_t max_count = 0;  // the most tokens a block holds
};

}  // namespace qkv::kernels
