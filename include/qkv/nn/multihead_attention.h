// MultiheadAttention, as torch.nn.MultiheadAttention:
//
//   head_i = Attention(Q W_Qⁱ, K W_Kⁱ, V W_Vⁱ),   MultiHead(Q, K, V) = Concat(head_1..head_h) W_O
//
// Self-attention when query, key and value are the same tensor (one fused [3E, E] projection);
// cross-attention when keys/values come from another sequence, of another length (and, with
// kdim/vdim, another width). Parameters and their names follow PyTorch so a state_dict loads one to
// one: in_proj_weight [3E, E] (or q_proj_weight/k_proj_weight/v_proj_weight when kdim/vdim ≠ E),
// in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E].
//
// forward()'s masks follow nn.MultiheadAttention (not F.scaled_dot_product_attention!): in a boolean
// attn_mask or key_padding_mask, true means "may NOT attend" (padding); a float mask is added.
// attn_mask is [L, S] or [B·num_heads, L, S]; key_padding_mask is [B, S]. They are converted at this
// boundary into qkv's one convention (ops/mask.h); forward_masked takes a mask already converted,
// as the layers of a model do.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "qkv/nn/linear.h"
#include "qkv/nn/paged_kv_cache.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/mask.h"

namespace qkv::nn {

// The keys and values of the past, per head, for decoding without recomputation (seed 004, "KV
// caching"): k [B, H, capacity, D], v [B, H, capacity, Dv], positions 0..length−1 filled. The
// capacity grows (by a quarter, in steps of 16 positions) as steps are appended.
struct KVCache {
  Tensor k, v;
  int64_t length = 0;
  int64_t batch() const { return k.defined() ? k.size(0) : 0; }
  int64_t capacity() const { return k.defined() ? k.size(2) : 0; }
  // Keeps batch rows `index` (in that order, repeats allowed): beam search reorders hypotheses.
  void reorder(const std::vector<int64_t>& index);
  // Appends T positions, k/v [B, Hkv, T, D] (any strides), growing the capacity as needed.
  void append(const Tensor& k, const Tensor& v);
  // The filled part, [B, H, length, D] views.
  Tensor keys() const { return k.slice(2, 0, length); }
  Tensor values() const { return v.slice(2, 0, length); }
};

// A decoder-only model's decoding state (what models::LanguageModel hands out for GPT and Llama):
// one KV cache per layer; beam search reorders its rows.
struct KVCacheState {
  std::vector<KVCache> caches;
  int64_t rows() const { return caches.empty() ? 0 : caches[0].batch(); }
  int64_t length() const { return caches.empty() ? 0 : caches[0].length; }
  void reorder(const std::vector<int64_t>& index, bool /*sources_changed*/ = true) {
    for (auto& c : caches) c.reorder(index);
  }
};

// One decoding step's indices over caches in slots, i32 on the caches' device (nn/static_decoding.h:
// decoding with the same shapes every step, for CUDA graphs). Self-attention's caches are pools of
// slots [slots, H, 1, D] — paged attention's pages of one slot (ops/paged_attention.h) —: row r's new
// key and value go to slots[r], and it attends over the slots history[r, 0 … self_len[r]) — its
// positions, wherever beam search's regrouping left them, so that regrouping copies no keys (a
// hypothesis's past is a list of slots, and hypotheses of one beam share theirs). Cross-attention's
// caches hold each source's keys as one page, [B, H, S, D]: row r reads source[r]'s first
// source_len[r] keys (a source's padding comes last).
struct SlotStep {
  Tensor slots;       // [R]
  Tensor rows;        // [R]: 0 … R−1, row r's row of history
  Tensor history;     // [R, C]
  Tensor self_len;    // [R]
  Tensor sources;     // [B, 1]: 0 … B−1, the cross caches' block table
  Tensor source;      // [R]
  Tensor source_len;  // [R]
};

// nn.MultiheadAttention's attn_mask ([L, S] or [B·H, L, S]) and key_padding_mask ([B, S]) — true =
// masked out, or float added — as one mask in qkv's convention, broadcastable to [B, H, L, S]
// (shapes checked, naming the mask).
Tensor mha_attention_mask(const Tensor& attn_mask, const Tensor& key_padding_mask, int64_t B, int64_t H, int64_t L,
                          int64_t S);

// A term of self-attention's scores that depends on the projected queries and keys, added before the
// softmax (DeBERTa's disentangled attention, nn/disentangled_attention.h):
//
//   scores = scale · Q Kᵀ + add(Q, K) + mask,    Q, K [B, H, L, D] → add [B, H, L, L]
//
// scale: 1/√D unless the term says otherwise.
struct ScoreTerm {
  std::function<Tensor(const Tensor& Qh, const Tensor& Kh)> add;
  std::optional<float> scale;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, float dropout = 0.f, bool bias = true, int64_t kdim = 0,
                     int64_t vdim = 0, bool batch_first = false, Generator* gen = nullptr);

  struct Output {
    Tensor output;   // [B, L, E] (batch_first) or [L, B, E]; [L, E] for unbatched input
    Tensor weights;  // [B, L, S] averaged over heads, or [B, H, L, S]; undefined unless need_weights
  };
  // query [B, L, E] / [L, B, E] / [L, E]; key [.., S, kdim]; value [.., S, vdim]. The masks in
  // nn.MultiheadAttention's convention, converted here (mha_attention_mask).
  Output forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = Tensor(),
                 bool need_weights = true, const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                 bool is_causal = false) const;
  // The same with one mask already in qkv's convention (ops/mask.h: boolean true = may attend, or
  // additive; broadcastable to [B, H, L, S]): what the Transformer layers call, with the mask their
  // model converted once.
  // `term`, when given (self-attention only), adds its scores (ScoreTerm).
  Output forward_masked(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask,
                        bool need_weights = false, bool average_attn_weights = true, bool is_causal = false,
                        const ScoreTerm* term = nullptr) const;

  // ---- decoding (no tape; batch_first layout [B, T, E] whatever batch_first says) --------------
  // Self-attention of x [B, T, E] at positions cache.length … cache.length+T−1: appends this step's
  // keys and values to the cache and attends causally to everything cached (query i sees keys
  // 0 … cache.length+i). Equal to forward(x, x, x, is_causal) over the whole sequence, row by row.
  Tensor forward_cached(const Tensor& x, KVCache& cache) const;
  // Self-attention of one step's tokens of many sequences, x [1, T, E] (nn/paged_kv_cache.h): writes
  // their keys and values into layer `layer` of the pool at step.slots and attends, token t over its
  // sequence's keys 0 … its position. Equal to forward_cached on each sequence alone.
  Tensor forward_paged(const Tensor& x, PagedKVCache& cache, int64_t layer, const PagedStep& step) const;
  // Self-attention of x [B, L, E] under `mask` (qkv's convention, broadcastable to [B, H, L, L];
  // undefined: none), all at once: an encoder's while decoding, reading what set_inference_weights
  // made (the int8 rows, when it made them). Equal to forward_masked(x, x, x, mask).output with
  // f32 weights.
  Tensor forward_inference(const Tensor& x, const Tensor& mask, const ScoreTerm* term = nullptr) const;
  // K and V of a memory [B, S, kdim/vdim], computed once (cross-attention while decoding).
  KVCache project_kv(const Tensor& key, const Tensor& value) const;
  // Cross-attention of query [B·G, T, E] over precomputed K/V of B memory rows (rows g·… of a group
  // of G consecutive query rows share memory row b: beam search's hypotheses of one source); mask in
  // qkv's convention, e.g. the sources' [B, 1, 1, S] (true = a real token), converted once per batch.
  Tensor forward_cross_cached(const Tensor& query, const KVCache& kv, const Tensor& mask = Tensor()) const;
  // Decoding over caches in slots (SlotStep), one token a row, x [R, 1, E] → [R, 1, E]: self-
  // attention writes the row's key and value to its slot and attends over its history; cross-
  // attention reads its source's keys. Each equal to forward_cached / forward_cross_cached of the
  // same rows up to the order of the sums (paged_attention's kernel, not the dense one).
  Tensor forward_slots(const Tensor& x, const Tensor& k_pool, const Tensor& v_pool, const SlotStep& step) const;
  Tensor forward_cross_slots(const Tensor& query, const Tensor& k_pool, const Tensor& v_pool, const SlotStep& step) const;

  // bf16 copies of the projection weights for decoding steps (see Linear::set_inference_weights).
  void set_inference_weights(InferenceWeights weights);
  // x W_iᵀ + b_i for i = 0 (Q), 1 (K), 2 (V), x [..., E] → [..., E]: a row block of in_proj_weight, or
  // q/k/v_proj_weight. inference: read what set_inference_weights made (bf16 copy, int8 rows, packed copy).
  Tensor project(const Tensor& x, int i, bool inference) const;

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  float dropout;
  bool batch_first;
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;
  InferenceWeight in_proj_inference;  // what decoding reads for in_proj_weight (set_inference_weights)
  // its row blocks for Q, K and V, each with its own packed copy (made once, kept)
  std::array<InferenceWeight, 3> in_proj_slices;

 private:
  std::array<Tensor, 3> self_projections(const Tensor& x) const;  // Q, K, V of x while decoding
  Tensor attend_inference(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionOptions& opt) const;
  Generator* gen_;  // attention-weight dropout draws from it (default_generator() when null)
};

}  // namespace qkv::nn
