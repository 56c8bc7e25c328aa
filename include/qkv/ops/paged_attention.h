// Attention over a paged KV cache (vLLM's PagedAttention), for serving many sequences at once: the
// keys and values of every sequence live in one pool of fixed-size pages, a sequence's pages listed
// in its row of a block table, so a sequence grows a page at a time, frees its pages when it ends,
// and sequences of any lengths decode together in one step (decode/batching_generator.h; the pool:
// nn/paged_kv_cache.h). Formulas: kernels/paged_attention.inc.
//
// Inference only: no backward (a tensor that requires a gradient, under grad mode, is refused).
#pragma once

#include <optional>

#include "qkv/ops/tensor.h"

namespace qkv {

// q [T, H, D]: T query tokens, token t of the sequence in block-table row seq[t], seeing its keys
// 0 … seq_len[t]−1 (the last `window` of them, window > 0); k_cache [pages, Hkv, page_size, D],
// v_cache [pages, Hkv, page_size, Dv] (H a multiple of Hkv); block_table i32 [rows, max_pages]; seq,
// seq_len i32 [T] → out [T, H, Dv]. scale: 1/√D unless given; softcap > 0: the scores soft-capped,
// as scaled_dot_product_attention's (ops/attention.h). Every index is checked (a CPU
// block table: each page a token reads lies in the cache). The caches are f32, or bf16 (half the memory;
// vLLM's kv_cache_dtype), or f8e4m3 (a quarter; vLLM's "fp8"): widened to f32 as they are read, q and
// the sums f32.
//
// prefixes (a GPU's, optional): the tokens that share their sequences' first pages, as paged_prefixes
// found them in these block_table, seq and seq_len — they attend to those keys together (cascade
// attention), each shared page read once for all of them. The CPU finds them itself, and ignores it.
class PagedPrefixes;
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                       const Tensor& seq, const Tensor& seq_len, std::optional<double> scale = {}, int64_t window = 0,
                       const PagedPrefixes* prefixes = nullptr, double softcap = 0);

// The tokens of a step whose sequences begin with the same pages (kernels/paged_prefixes.h's groups:
// at least two tiles of 128 keys in common, none hidden by the window), found on the host once for
// every layer's paged_attention on `device` — the GPU's block table lies on the device, and reading it
// back every layer would wait for the device. block_table, seq and seq_len on the CPU (as
// paged_attention's, checked alike), page_size the caches'; an empty plan where no tokens share.
// Made only by paged_prefixes (the GPU trusts its indices); paged_attention checks that it was found
// for as many tokens, as wide a block table, the same pages and window.
class PagedPrefixes {
 public:
  bool empty() const { return blocks_ == 0; }
  int64_t blocks() const { return blocks_; }      // blocks of ≤ 32 tokens of one group
  int64_t tokens() const { return tokens_; }      // tokens in a group
  int64_t max_keys() const { return max_keys_; }  // the most keys a group shares
  const Tensor& data() const { return data_; }    // i32: the blocks [n, 3], the tokens, each token's first own key [T]

 private:
  friend PagedPrefixes paged_prefixes(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, Device);
  friend Tensor paged_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, std::optional<double>, int64_t, const PagedPrefixes*, double);
  Tensor data_;
  int64_t blocks_ = 0, tokens_ = 0, max_keys_ = 0, max_count_ = 0;
  int64_t T_ = 0, rows_ = 0, max_pages_ = 0, page_size_ = 0, window_ = 0;  // what it was found for
};
PagedPrefixes paged_prefixes(const Tensor& block_table, const Tensor& seq, const Tensor& seq_len, int64_t page_size,
                             int64_t window, Device device);

// Writes T tokens' keys k [T, Hkv, D] and values v [T, Hkv, Dv] into slots[t] (i32 [T], distinct,
// each < pages · page_size: page slots[t] / page_size, offset slots[t] mod page_size; −1: a padding
// token's, not written — vLLM's PAD_SLOT_ID) of k_cache and v_cache, in place (a bf16 or f8e4m3 cache: rounded to nearest even; f8e4m3 saturating at ±448,
// with no scale, as vLLM's fp8 cache with its default scales of 1).
void paged_kv_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slots);

}  // namespace qkv
