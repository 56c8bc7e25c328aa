// Llama: the decoder-only Transformer of Llama 2/3, Qwen2, Qwen3, Mistral, Phi-3, SmolLM, Gemma 2 and 3, GPT-NeoX —
// GPT's causal language model with RMSNorm, rotary positions, a gated MLP and grouped-query attention:
//
//   x₀ = embed_tokens[idx]  (· √E: embed_scale, Gemma 3)           no position embedding
//   h  = xₗ₋₁ + o_proj(Attn(RoPE(q_proj(n)), RoPE(k_proj(n)), v_proj(n))),  n = RMSNorm₁(xₗ₋₁)
//        (qk_norm, Qwen3 and Gemma 3: each head of q_proj(n) and k_proj(n) RMS-normalized,
//        γ = q_norm / k_norm [D], before RoPE)
//   xₗ = h + down_proj(act(gate_proj(m)) ⊙ up_proj(m)),  m = RMSNorm₂(h),  act = SiLU or tanh-GELU
//   logits = RMSNorm(x_L) lm_headᵀ                                  lm_head tied to embed_tokens or not
//            (final_logit_softcapping c > 0, Gemma 2: c · tanh(logits / c))
//
// GPT-NeoX (Pythia) is the same network with LayerNorms (norm "layer": γ and β), an ungated MLP
// (gated_mlp false: down_proj(act(up_proj(m)))) and, with parallel_residual, both branches read the
// layer's input: xₗ = x + o_proj(Attn(…LN₁(x)…)) + MLP(LN₂(x)); Phi's shared_norm reads LN₁(x) in both,
// and its head adds a bias (lm_head_bias).
//
// sandwich_norms (Gemma 2 and 3) normalizes each branch's output too, with four norms a layer:
//   h  = xₗ₋₁ + RMSNorm_post_attention(o_proj(Attn(…)))
//   xₗ = h + RMSNorm_post_feedforward(MLP(RMSNorm_pre_feedforward(h)))
//
// Attn is causal scaled dot-product attention with H query heads sharing Hkv key/value heads
// (H % Hkv == 0; Hkv = H is plain multi-head, 1 is multi-query), its scores q·k / √query_pre_attn_scalar
// (√head_dim unless given), soft-capped c · tanh(s / c) with attn_logit_softcapping c > 0 (Gemma 2:
// before the mask), optionally limited to the last
// `sliding_window` keys — on every layer (Mistral, Phi-3), or on all but every sliding_window_pattern-th
// (Gemma 2: N = 2, Gemma 3: 6 — layers N−1, 2N−1, … see every key). RoPE rotates each head's first
// rot = head_dim · partial_rotary_factor features by position t at angles t·θᵢ, θᵢ = rope_theta^(−2i/rot),
// with rope_scaling's variants; the windowed layers of a model with rope_local_theta use that base,
// unscaled. longrope's factors depend on the sequence's length (Hugging Face's Phi-3): the short ones
// while it is at most rope_original_max_position_embeddings tokens, the long ones at every position of
// a longer one — a cache made short is fed again from position 0 as its sequence grows past that
// (refeed_at(): decode::generate does it).
//
// Parameter names are Hugging Face's, without the "model." prefix: embed_tokens.weight,
// layers.{i}.self_attn.(q|k|v|o)_proj.*, layers.{i}.mlp.(gate|up|down)_proj.*,
// layers.{i}.(input|post_attention)_layernorm.weight, layers.{i}.self_attn.(q|k)_norm.weight
// (qk_norm only), layers.{i}.(pre|post)_feedforward_layernorm.weight (sandwich_norms only),
// norm.weight, lm_head.weight (untied only). (Gemma's RMSNorms scale by 1 + w: its converter stores
// γ = 1 + w; Phi-3's fused qkv_proj and gate_up_proj are split into these by its converter.)
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "qkv/io/config.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/residual_stream.h"

namespace qkv::nn {

enum class RopeScaling : uint8_t { none, linear, llama3, longrope };
constexpr EnumTable<RopeScaling, 4> enum_table(RopeScaling) {
  return {"rope scaling",
          {{{RopeScaling::none, "none"},
            {RopeScaling::linear, "linear"},
            {RopeScaling::llama3, "llama3"},
            {RopeScaling::longrope, "longrope"}}}};
}

// The MLP's activation: SiLU (Llama's SwiGLU), GELU's tanh form (Gemma's GeGLU, gelu_pytorch_tanh), or
// GELU (GPT-NeoX's, ungated).
enum class LlamaActivation : uint8_t { silu, gelu_tanh, gelu };
constexpr EnumTable<LlamaActivation, 3> enum_table(LlamaActivation) {
  return {
      "activation",
      {{{LlamaActivation::silu, "silu"}, {LlamaActivation::gelu_tanh, "gelu_tanh"}, {LlamaActivation::gelu, "gelu"}}}};
}

// The layers' norms: RMSNorm (γ) or LayerNorm (γ and β: GPT-NeoX's), each at rms_norm_eps.
enum class LlamaNorm : uint8_t { rms, layer };
constexpr EnumTable<LlamaNorm, 2> enum_table(LlamaNorm) {
  return {"norm", {{{LlamaNorm::rms, "rms"}, {LlamaNorm::layer, "layer"}}}};
}

struct LlamaConfig {
  int64_t vocab_size = 32000, hidden_size = 256, intermediate_size = 688, num_hidden_layers = 4,
          num_attention_heads = 4, num_key_value_heads = 0 /* 0: = num_attention_heads */,
          head_dim = 0 /* 0: hidden_size / num_attention_heads */, block_size = 2048 /* max_position_embeddings */;
  double rms_norm_eps = 1e-6, rope_theta = 10000, partial_rotary_factor = 1;
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int64_t rope_original_max_position_embeddings = 8192;
  // longrope (Phi-3.5, Phi-4-mini): θᵢ / short_factorᵢ while a sequence is at most
  // rope_original_max_position_embeddings long, θᵢ / long_factorᵢ beyond (rot/2 each); cos and sin
  // scaled by rope_attention_factor
  std::vector<double> rope_short_factor, rope_long_factor;
  double rope_attention_factor = 1;
  bool qkv_bias = false, o_bias = false, mlp_bias = false, tie_word_embeddings = false;
  bool qk_norm = false;        // Qwen3, Gemma 3: an RMSNorm over each query and key head before RoPE
  int64_t sliding_window = 0;  // 0: none; else query t sees keys t − window + 1 … t
  // 0: the window on every layer; N: not on layers N−1, 2N−1, … (Gemma 3's global layers)
  int64_t sliding_window_pattern = 0;
  double rope_local_theta = 0;  // the windowed layers' RoPE base, without rope_scaling (0: as every layer's)
  bool embed_scale = false;     // Gemma: x₀ = embed_tokens[idx] · √E
  bool sandwich_norms = false;  // Gemma: each branch's output normalized too (four norms a layer)
  double query_pre_attn_scalar = 0;    // Gemma: the scores' scale 1/√this (0: 1/√head_dim)
  double attn_logit_softcapping = 0;   // Gemma 2: the attention scores soft-capped (0: not)
  double final_logit_softcapping = 0;  // Gemma 2: the logits soft-capped (0: not)
  LlamaActivation hidden_act = LlamaActivation::silu;
  // GPT-NeoX (Pythia): LayerNorms, an ungated MLP down_proj(act(up_proj(m))) (no gate_proj), and the
  // attention and the MLP side by side on the layer's input: xₗ = x + o_proj(Attn(Norm₁(x))) + MLP(Norm₂(x))
  LlamaNorm norm = LlamaNorm::rms;
  bool gated_mlp = true, parallel_residual = false;
  // Phi (1, 1.5, 2): with parallel_residual one norm (input_layernorm) before both branches — no
  // post_attention_layernorm —, and the output head's bias (untied heads only)
  bool shared_norm = false, lm_head_bias = false;
  float dropout = 0.f;         // on the attention weights and the residual branches, while training

  static const io::Fields<LlamaConfig>& fields();
  static LlamaConfig from_json(const nlohmann::json& j);  // fields() plus the divisibility checks
  nlohmann::json to_json() const;
  int64_t width() const { return hidden_size; }
  int64_t kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  int64_t rotary_dim() const;  // head_size · partial_rotary_factor, even
  // The keys layer `layer` sees back: sliding_window on a windowed layer, 0 (all) on the others.
  int64_t window(int64_t layer) const {
    return sliding_window > 0 && (sliding_window_pattern == 0 || (layer + 1) % sliding_window_pattern != 0)
               ? sliding_window
               : 0;
  }
  std::string describe() const;  // "Llama 4 layers, 4 heads (2 key/value), 256 dims, block 2048, vocab 32000"
};

// The rotation angles' cosines and sines, [T, rot] for positions pos0 … pos0+T−1 (computed in double,
// stored f32; cached up to the longest length asked so far).
class RotaryEmbedding {
 public:
  // (long_factors: longrope's long set rather than its short one)
  explicit RotaryEmbedding(const LlamaConfig& c, bool long_factors = false);
  std::pair<Tensor, Tensor> tables(int64_t pos0, int64_t T, Device device) const;
  std::vector<double> inv_freq;  // θᵢ, i < rot/2, after rope_scaling
  float attention_factor = 1;    // cos and sin scaled by it (longrope's)

 private:
  mutable Tensor cos_, sin_;  // [n, rot] for positions 0 … n−1 (CPU)
  // their copies on the device asked for last (a GPU's), so that a forward there uploads nothing
  // (and a recorded training step, train/step_graph.h, holds no copy from the host)
  mutable Tensor cos_on_, sin_on_;
  // their earlier copies there: a captured graph (decode/paged_graphs.h) still reads the one it was
  // captured with (the tables double as they grow: these hold less than the last)
  mutable std::vector<Tensor> retired_;
};

class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& c, Generator* gen, int64_t index = 0);  // index: the layer's place
  // x [B, T, E] at positions given by cos/sin [T, rot] → [B, T, E]; weights_out: [B, H, T, S].
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& mask, bool is_causal,
                 Tensor* weights_out = nullptr) const;
  // The same on the residual stream between layers (nn/residual_stream.h): the incoming pending sum
  // is made in RMSNorm₁'s pass, and the output is {h, MLP(RMSNorm₂(h))} with its sum left pending.
  ResidualStream forward(const ResidualStream& x, const Tensor& cos, const Tensor& sin, const Tensor& mask,
                         bool is_causal, Tensor* weights_out = nullptr) const;
  // Decoding: appends this layer's keys and values for x's T positions to `cache` and attends over
  // all it holds, with `mask` [T, S] (or is_causal) as Llama::step makes it.
  ResidualStream forward_cached(const ResidualStream& x, const Tensor& cos, const Tensor& sin, const Tensor& mask,
                                bool is_causal, KVCache& cache) const;
  // One step of many sequences, x [1, T, E] (nn/paged_kv_cache.h), each token at its own position
  // (cos/sin [T, rot]: its rows): its keys and values into layer `layer` of the pool, attention over
  // each token's sequence (within the layer's window, if any).
  ResidualStream forward_paged(const ResidualStream& x, const Tensor& cos, const Tensor& sin, PagedKVCache& cache,
                               int64_t layer, const PagedStep& step) const;
  void set_inference_weights(InferenceWeights weights);
  // n [B, T, E] → q_proj(n), k_proj(n) as heads [B, T, H or Hkv, D], each head RMS-normalized (qk_norm)
  Tensor query_heads(const Tensor& n, bool inference) const;
  Tensor key_heads(const Tensor& n, bool inference) const;
  Tensor input_norm(const Tensor& x) const;  // Norm₁(x): what the attention's projections read

  LlamaConfig config;
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;  // (gate_proj: gated_mlp)
  Tensor input_layernorm, post_attention_layernorm;                                       // the norms' γ [E]
  Tensor input_layernorm_bias, post_attention_layernorm_bias;    // their β [E] (norm layer; else undefined)
  Tensor pre_feedforward_layernorm, post_feedforward_layernorm;  // sandwich_norms' other two γ [E]
  Tensor q_norm, k_norm;                                         // qk_norm's γ [D] (undefined without it)
  int64_t window = 0;  // the keys it sees back (LlamaConfig::window of its index; 0: all)

 private:
  Tensor mlp(const Tensor& h, bool inference) const;
  Tensor activate(const Tensor& x) const;
  AttentionOptions scores() const;  // the scores' scale and soft cap (query_pre_attn_scalar, attn_logit_softcapping)
  // The layer after its attention: x + o and the MLP branch (sandwich_norms: both branches normalized),
  // the MLP's output left pending on the stream
  // (n: Norm₁(x), which the MLP reads too with shared_norm)
  ResidualStream after_attention(const Tensor& x, const Tensor& n, const Tensor& o, bool inference,
                                 float dropout_p) const;
  Tensor heads_of(const Linear& proj, const Tensor& gamma, const Tensor& n, int64_t heads, bool inference) const;
  Generator* gen_;
};

class Llama : public Module {
 public:
  using Config = LlamaConfig;
  explicit Llama(const LlamaConfig& config, Generator* gen = nullptr);

  // idx i32 [B, T], T ≤ block_size → logits [B, T, vocab_size]; maps->decoder_self gets [B, H, T, T] per layer.
  Tensor forward(const Tensor& idx, AttentionMaps* maps = nullptr) const;
  // Mean next-token cross-entropy against targets [B, T], the head's product and the loss a chunk of
  // rows at a time (ops/loss.h's linear_cross_entropy: never the [B·T, V] logits).
  Tensor loss(const Tensor& idx, const Tensor& targets) const;

  using DecoderState = KVCacheState;  // one KV cache per layer
  DecoderState start_decoding() const { return {}; }
  // idx [B, T] at positions state.length() … → the logits of the last position, [B, vocab_size].
  Tensor step(const Tensor& idx, DecoderState& state) const;
  // Many sequences in one step (continuous batching, decode/batching_generator.h): a pool for them,
  // and ids i32 [T] at step.positions → the logits of each sequence's last token, [sequences, vocab_size].
  PagedKVCache make_paged_cache(int64_t pages, int64_t page_size, Device device, DType dtype = DType::f32) const;
  Tensor step_paged(const Tensor& ids, const PagedStep& step, PagedKVCache& cache) const;
  void set_inference_weights(InferenceWeights weights);
  // The residual stream [B, T, E] after the first `upto` layers (−1: all of them) — what forward's
  // head reads, or (decode/inspect.cpp's neuron view) what layer `upto`'s norm reads.
  ResidualStream body(const Tensor& idx, AttentionMaps* maps = nullptr, int64_t upto = -1) const;
  // The rotary tables layer `layer` uses in a sequence of `length` tokens (decode/inspect.cpp's neuron
  // view rotates q and k with them).
  const RotaryEmbedding& rotary(int64_t layer = -1, int64_t length = 0) const {
    return rope_local_ && layer >= 0 && config.window(layer) > 0 ? *rope_local_ : rope_at(length);
  }
  // longrope: the length past which a sequence takes the long factors at every position, so that a
  // cache made shorter must be fed again from position 0 (decode::generate does); 0: never.
  int64_t refeed_at() const {
    return config.rope_scaling == RopeScaling::longrope ? config.rope_original_max_position_embeddings : 0;
  }

  LlamaConfig config;
  std::shared_ptr<Embedding> embed_tokens;
  std::vector<std::shared_ptr<LlamaDecoderLayer>> layers;
  Tensor norm;                      // the final norm's γ [E]
  Tensor norm_bias;                 // its β [E] (norm layer; else undefined)
  std::shared_ptr<Linear> lm_head;  // null when tied to embed_tokens
  InferenceWeight head_inference;

 private:
  Tensor head(const ResidualStream& x, bool inference) const;  // RMSNorm then the output projection
  Tensor final_norm(const ResidualStream& x) const;              // the RMSNorm of the layers' last sum
  const Tensor& output_weight() const;                           // lm_head's, or embed_tokens' where tied
  Tensor embed(const Tensor& idx) const;                         // embed_tokens[idx] (· √E: embed_scale)
  RotaryEmbedding rope_;
  std::shared_ptr<const RotaryEmbedding> rope_local_;  // the windowed layers' (rope_local_theta), or null
  std::shared_ptr<const RotaryEmbedding> rope_long_;   // longrope's long factors, or null
  // the tables of a sequence of `length` tokens: longrope's long ones past refeed_at()
  const RotaryEmbedding& rope_at(int64_t length) const {
    return rope_long_ && length > config.rope_original_max_position_embeddings ? *rope_long_ : rope_;
  }
};

}  // namespace qkv::nn
