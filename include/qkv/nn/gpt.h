// GPT: a decoder-only Transformer language model (seed 000: "a mask ensures each position can only
// see its past … N predictions in parallel with the cost of one forward pass"), as nanoGPT (and
// GPT-2 and OPT, imported by models/hf_convert):
//
//   x₀ = wte[idx] + wpe[pos]                         token + learned position embeddings
//   xₗ = Block(xₗ₋₁),  l = 1 … n_layer               pre-LN TransformerEncoderLayer, causal, GELU, 4× MLP
//   logits = LN_f(x_L) wteᵀ                          output head tied to the token embedding
//
// The blocks are the encoder–decoder's TransformerEncoderLayer (norm_first, activation gelu), not a
// second copy. Parameter names: wte.weight, wpe.weight, h.{i}.(self_attn|linear1|linear2|norm1|
// norm2).*, ln_f.* — the mapping to nanoGPT's names is in docs/ARCHITECTURE.md.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "qkv/io/config.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/transformer_layer.h"

namespace qkv::nn {

struct GPTConfig {
  int64_t vocab_size = 65, block_size = 64, n_layer = 4, n_head = 4, n_embd = 128;
  float dropout = 0.f;
  bool bias = false;  // biases in Linear layers and LayerNorms (nanoGPT's default: none)
  // GPT-2 (Hugging Face's GPT2LMHeadModel, imported by models/hf_convert) differs only in these:
  Activation activation = Activation::gelu;  // GPT-2: gelu_tanh ("gelu_new")
  float layer_norm_eps = 1e-5f;
  int64_t n_inner = 0;                       // the MLP's hidden width; 0: 4 · n_embd
  // OPT (OPTForCausalLM): position t reads wpe row t + position_offset (OPT's 2: its first rows serve a
  // padding convention); wpe then has block_size + position_offset rows
  int64_t position_offset = 0;

  static const io::Fields<GPTConfig>& fields();          // the keys of "model" in a config or model file
  static GPTConfig from_json(const nlohmann::json& j);  // fields() plus n_embd % n_head == 0
  nlohmann::json to_json() const;
  int64_t width() const { return n_embd; }  // the model dimension (what inverse_sqrt scales by)
  std::string describe() const;            // "GPT 4 layers, 4 heads, 128 dims, block 64, vocab 65"
};

class GPT : public Module {
 public:
  using Config = GPTConfig;
  explicit GPT(const GPTConfig& config, Generator* gen = nullptr);

  // idx: i32 [B, T], T ≤ block_size → logits [B, T, vocab_size]; `maps`, when given, receives
  // each block's causal self-attention weights [B, H, T, T] (maps->decoder_self).
  Tensor forward(const Tensor& idx, AttentionMaps* maps = nullptr) const;
  // Mean next-token cross-entropy of forward(idx) against targets [B, T] (i32), the head's product and
  // the loss a chunk of rows at a time (ops/loss.h's linear_cross_entropy: never the [B·T, V] logits).
  Tensor loss(const Tensor& idx, const Tensor& targets) const;

  // Decoding without recomputation: idx [B, T] at positions caches[0].length …; appends to the
  // caches (one per layer) and returns the logits of the last position, [B, vocab_size].
  Tensor forward_cached(const Tensor& idx, std::vector<KVCache>& caches) const;
  // The same as a decoding state (what models::LanguageModel hands out): one KV cache per layer.
  using DecoderState = KVCacheState;  // one KV cache per layer
  DecoderState start_decoding() const { return {}; }
  Tensor step(const Tensor& idx, DecoderState& state) const { return forward_cached(idx, state.caches); }
  // Many sequences in one step (continuous batching, decode/batching_generator.h): a pool for them
  // (`pages` pages of `page_size` tokens), and ids i32 [T] — step's tokens, at step.positions — →
  // the logits of each sequence's last token, [sequences, vocab_size].
  PagedKVCache make_paged_cache(int64_t pages, int64_t page_size, Device device, DType dtype = DType::f32) const;
  Tensor step_paged(const Tensor& ids, const PagedStep& step, PagedKVCache& cache) const;
  // wpe's rows of positions 0 … block_size − 1 ([block_size, E]: past position_offset)
  Tensor position_table() const {
    return wpe->weight.slice(0, config.position_offset, config.position_offset + config.block_size);
  }
  // Decoding steps read bf16 copies of the weights (half the memory traffic; ~3 significant
  // digits of weight): call after loading the weights. f32 (the default) drops the copies.
  void set_inference_weights(InferenceWeights weights);

  GPTConfig config;
  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> h;
  std::shared_ptr<LayerNorm> ln_f;
  InferenceWeight wte_inference;

 private:
  Tensor embed(const Tensor& idx, int64_t pos0) const;
  Tensor final_hidden(const Tensor& idx, AttentionMaps* maps) const;  // LN_f(x_L) [B, T, E]
  Generator* gen_;
};

}  // namespace qkv::nn
