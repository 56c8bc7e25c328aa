// The KV cache of many sequences at once, in pages (vLLM's block manager; the attention that reads it:
// ops/paged_attention.h). One pool per layer; a
// sequence holds a list of pages (its block-table row), reserved when it is admitted and returned when
// it ends, so memory is bounded by the pool, not by the longest sequence times the batch, and a
// sequence that ends frees its room for the next at once (continuous batching:
// decode/batching_generator.h). A page holds each head's page_size keys in one run of memory:
// k [pages, Hkv, page_size, D], v [pages, Hkv, page_size, Dv].
//
// Prefix caching (vLLM's automatic prefix caching, SGLang's radix cache): a full page's keys and
// values depend only on the tokens from position 0 to its end, so a page one sequence filled serves
// every later sequence whose tokens begin the same way — a shared system prompt or few-shot preamble,
// a chat's earlier turns, the samples of one prompt — computed once. publish() makes a sequence's
// full pages findable; match_prefix() gives a new sequence the longest run of them its tokens begin
// with. A page is shared while any sequence holds it, and once none does it stays findable until its
// room is needed (the least recently released first). Matches are exact: a page is found by a hash
// of (its parent page, the parent's generation, its tokens) and then compared token for token, so a
// collision costs a miss, never another sequence's keys. A salt (a user's, say) starts a chain of its
// own: pages published under one salt are found only under it. Shared pages are only read: a
// sequence writes past its matched tokens, into pages of its own.
//
// A step (PagedStep) is every token the models compute together: some sequences' prompts (or chunks
// of them), other sequences' one new token each, one after another as [T] — each token with its
// sequence's row, its position, the slot its key and value go to, and the keys it sees.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "qkv/ops/paged_attention.h"
#include "qkv/ops/tensor.h"

namespace qkv::nn {

// A sequence's place in the pool: its pages in order and the tokens its cache holds.
struct PagedSequence {
  std::vector<int32_t> pages;
  int64_t length = 0;
  int64_t shared = 0;       // its first pages that are published or matched (read only from then on)
  bool publishing = true;   // false once a page of it could not be published (its later ones are not)
};

// One step's tokens, as the models read them: all i32 on the cache's device.
struct PagedStep {
  Tensor positions;    // [T]: each token's position in its sequence (its rotary angle, its wpe row)
  Tensor seq;          // [T]: its sequence's row of block_table
  Tensor seq_len;      // [T]: the keys it sees, itself included: position + 1
  Tensor slots;        // [T]: where its key and value go, page · page_size + offset
  Tensor block_table;  // [sequences, max_pages]: each sequence's pages (−1 past them)
  std::vector<int32_t> host_positions;  // positions, on the host (checked there against the model's limit)
  // longrope (nn/llama.h): per token, whether its sequence is past the model's refeed_at() and takes the
  // long factors at every position (set by the batching generator; empty: none is)
  std::vector<uint8_t> long_rope;
  // longrope inside a decoding graph (decode/paged_graphs.h), where long_rope cannot choose the tables
  // on the host: [T], the row each token reads of the short and long tables stacked — its position, or
  // positions_below + its position where long_rope says so (undefined: the model reads long_rope)
  Tensor rope_rows;
  // > 0: every position of this step and of the later ones replaying it stays below it — what the
  // tables a step reads by position (Llama's rotary angles) must cover when a graph captures it
  // (decode/paged_graphs.h: its bucket's widest context)
  int64_t positions_below = 0;
  std::vector<int64_t> last;  // per sequence, the index in T of its last token (whose logits are wanted)
  // x [T, E] → the rows of `last`, [sequences, E]: x itself where every token is its sequence's last
  // (a decoding step: no gather, nothing uploaded)
  Tensor last_rows(const Tensor& x) const;
  // The prompts fed whole from position 0 (≥ 2 tokens): their tokens [begin, begin + count) attend
  // only to each other, causally — a dense attention over this step's own keys, as fast as training's
  // (attend_paged) — and paged_len is seq_len with 0 for them (the paged kernel skips them).
  std::vector<std::pair<int64_t, int64_t>> fresh;
  // Chunks of at least `dense_from` tokens (plan's) that continue a sequence — a prompt's later chunk,
  // or what follows its cached prefix: tokens [begin, begin + count) at positions start … attend
  // densely over the sequence's keys gathered from its pages (its pages in order), causally from
  // start; paged_len is 0 for them too.
  struct Continued {
    int64_t begin, count, start;
    std::vector<int64_t> pages;
  };
  std::vector<Continued> continued;
  Tensor paged_len;  // [T]
  int64_t tokens() const { return positions.defined() ? positions.size(0) : 0; }
  // On a GPU, the tokens that share their sequences' first pages (ops' paged_prefixes over the host's
  // block table, seq and paged_len), found at the first layer that asks with `window` and kept for
  // the others; null on the CPU (its kernel finds them itself), where none share, or without the
  // host's block table (a graph's step: decode/paged_graphs.h).
  const PagedPrefixes* prefixes(int64_t window) const;
  Tensor host_block_table, host_seq, host_paged_len;  // on the cpu
  int64_t page_size = 0;
  mutable std::list<std::pair<int64_t, PagedPrefixes>> found;  // by window (a list: the pointers stay)
};

class PagedKVCache;

// What a KV cache keeps, by the name a user gives (vLLM's --kv-cache-dtype): "f32", "bf16", or "fp8"
// (also "fp8_e4m3", "f8e4m3": DType::f8e4m3, a byte a value). Another name is an Error naming these.
DType kv_cache_dtype(const std::string& name);
// Those names, in that order (a command line's choices).
std::vector<std::string> kv_cache_dtype_names();

// Self-attention of a step's tokens in layer `layer`: q [T, H, D], k [T, Hkv, D], v [T, Hkv, Dv] (the
// step's new keys and values) → [T, H, Dv]. Writes k and v into the pool (paged_kv_write), attends
// every token over its sequence through the pages (paged_attention), each fresh prompt over its
// own keys with the dense kernels (scaled_dot_product_attention, causal; the last `window` keys with
// a window > 0), and each continued chunk over its sequence's keys gathered from the pages, with the
// dense kernels too. Equal to each sequence's dense-cache attention, row by row. scale (1/√D unless
// given) and softcap (0: none) form the scores, as scaled_dot_product_attention's.
Tensor attend_paged(const Tensor& q, const Tensor& k, const Tensor& v, PagedKVCache& cache, int64_t layer,
                    const PagedStep& step, int64_t window = 0, std::optional<float> scale = {}, float softcap = 0.f);

class PagedKVCache {
 public:
  // layers pools of `pages` pages of `page_size` slots, each slot Hkv heads of D (keys) and Dv (values)
  // on `device`, in f32, bf16 or f8e4m3 (`dtype`: half or a quarter of the bytes a token, its keys and
  // values rounded as they are written — e4m3 saturating at ±448; vLLM's kv_cache_dtype). The memory
  // is reserved, not touched: pages never used stay unmapped.
  PagedKVCache(int64_t layers, int64_t pages, int64_t page_size, int64_t kv_heads, int64_t head_dim,
               int64_t v_head_dim, Device device = Device::cpu(), DType dtype = DType::f32);

  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t pages() const { return pages_; }
  int64_t page_size() const { return page_size_; }
  DType dtype() const { return k_.front().dtype(); }
  // pages no sequence holds: never used or released, and cached ones held by none (reusable)
  int64_t free_pages() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t cached_pages() const { return static_cast<int64_t>(cached_.size()); }  // findable by match_prefix
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  // Bytes of one token's keys and values across the layers (what a page costs: × page_size).
  int64_t bytes_per_token() const;
  Device device() const { return device_; }

  // Gives `s` pages enough for `tokens` tokens in all; false (nothing taken) when the pool lacks them.
  // Takes never-used or released pages first, then the least recently released cached ones.
  bool reserve(PagedSequence& s, int64_t tokens);
  // Returns s's pages to the pool (a cached page stays findable while its room is not needed); s is
  // empty after.
  void release(PagedSequence& s);

  // For s (holding no page yet) whose tokens begin with tokens[0, count): takes the cached pages of
  // the longest run of its full pages that other sequences published, at most count − 1 tokens (its
  // last token is computed, for its logits), and sets s.length to their tokens. Returns that length.
  int64_t match_prefix(PagedSequence& s, const int32_t* tokens, int64_t count, const std::string& salt = "");
  // Publishes s's pages whose slots are all written (s.length), s's tokens being tokens[0, s.length),
  // under `salt` (match_prefix's). A page equal to one already cached is left private, and s
  // publishes no more after it.
  void publish(PagedSequence& s, const int32_t* tokens, const std::string& salt = "");

  // The step of `seqs`, sequence i feeding new[i] ≥ 1 tokens at positions s.length …: checks each
  // has the pages, then advances each length by its new tokens (the model writes their slots). A
  // sequence feeding at least dense_from tokens past position 0 is a Continued chunk.
  PagedStep plan(const std::vector<PagedSequence*>& seqs, const std::vector<int64_t>& new_tokens,
                 int64_t dense_from = 32) const;

  // Layer l's pools, [pages, Hkv, page_size, D] and [pages, Hkv, page_size, Dv].
  const Tensor& keys(int64_t l) const { return k_.at(static_cast<size_t>(l)); }
  const Tensor& values(int64_t l) const { return v_.at(static_cast<size_t>(l)); }

 private:
  std::vector<Tensor> k_, v_;
  int64_t pages_, page_size_;
  // a page's holders and, once published, what finds it: the hash of (parent, parent's
  // generation, tokens), checked against the fields themselves. A page's generation counts its
  // evictions: a child published under an evicted parent is found no more.
  struct PageInfo {
    int32_t refs = 0;
    bool cached = false;
    uint64_t key = 0;
    int32_t parent = -1;
    uint32_t parent_generation = 0, generation = 0;
    std::vector<int32_t> tokens;
    std::string salt;  // a chain's first page: the salt it was published under
    std::list<int32_t>::iterator lru;  // its place in lru_ while cached and held by none
  };
  static uint64_t page_key(int32_t parent, uint32_t parent_generation, const std::string& salt, const int32_t* tokens,
                           int64_t n);
  int32_t take_page();  // a never-used or released page, else the least recently released cached one

  std::vector<int32_t> free_;  // pages no sequence holds and none can find (a stack: the last freed is reused first)
  std::vector<PageInfo> info_;
  std::unordered_map<uint64_t, int32_t> cached_;  // key → page
  std::list<int32_t> lru_;  // cached pages held by none, least recently released first
  Device device_;
};

}  // namespace qkv::nn
