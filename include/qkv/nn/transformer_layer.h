// TransformerEncoderLayer and TransformerDecoderLayer, as torch.nn (same arguments, same parameter
// names, same order of operations), the blocks both the encoder–decoder Transformer and the GPT are
// built from (seeds 003–004, "Attention Is All You Need" §3.1):
//
//   post-LN (the paper):   x = LN(x + Dropout(Sublayer(x)))        for each sublayer
//   pre-LN (norm_first):   x = x + Dropout(Sublayer(LN(x)))
//
//   encoder sublayers: self-attention, feed-forward
//   decoder sublayers: masked self-attention, cross-attention over the encoder output, feed-forward
//   FFN(x) = W₂ Dropout(act(W₁ x + b₁)) + b₂,   act = ReLU (the paper) or GELU
//
// Parameters: self_attn.*, [multihead_attn.*,] linear1.{weight,bias}, linear2.*, norm1.*, norm2.*
// [, norm3.*] — a PyTorch state_dict loads one to one. Layouts follow batch_first.
#pragma once

#include <string>

#include "qkv/nn/embedding.h"
#include "qkv/nn/multihead_attention.h"

namespace qkv::nn {

// The feed-forward activation: ReLU (the paper), GELU (exact, erf), or GELU's tanh approximation.
enum class Activation : uint8_t { relu, gelu, gelu_tanh, silu };
constexpr EnumTable<Activation, 4> enum_table(Activation) {
  return {"activation",
          {{{Activation::relu, "relu"}, {Activation::gelu, "gelu"}, {Activation::gelu_tanh, "gelu_tanh"}, {Activation::silu, "silu"}}}};
}

struct TransformerLayerOptions {
  int64_t d_model = 512, nhead = 8, dim_feedforward = 2048;
  float dropout = 0.1f;
  Activation activation = Activation::relu;
  float layer_norm_eps = 1e-5f;
  bool batch_first = true;
  bool norm_first = false;  // false: post-LN as the paper; true: pre-LN (GPT-2 style)
  bool bias = true;         // biases of the linear layers, attention projections and LayerNorms
};

// act(x) for the activation chosen (relu, gelu, gelu_tanh, silu); with dropout_p, Dropout(act(x)) —
// one pass for relu and the GELUs (ops/activation.h), act then dropout for silu; with `bias` (a linear
// layer's, its GEMM run without it), act(x + bias), the addition in the same pass (relu, the GELUs).
Tensor activate(const Tensor& x, Activation activation, float dropout_p = 0.f, Generator* gen = nullptr,
                const Tensor& bias = Tensor());

// The feed-forward sublayer FFN(x) = W₂ Dropout(act(W₁ x + b₁)) + b₂ (dropout = the layer's).
Tensor feed_forward(const Tensor& x, const Linear& linear1, const Linear& linear2, Activation activation,
                    float dropout_p, bool training, Generator* gen);

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& opt, Generator* gen = nullptr);

  // src [B, L, E] (batch_first) or [L, B, E]. src_mask [L, L] / [B·H, L, L] and
  // src_key_padding_mask [B, L] as MultiheadAttention (true = may NOT attend). weights_out, when
  // given, receives the self-attention weights [B, H, L, L] (the reference kernel then runs).
  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false, Tensor* weights_out = nullptr) const;
  // The same with the self-attention mask already in qkv's convention (ops/mask.h), as
  // TransformerEncoder and GPT call it: converted once per batch, not once per layer. `term`, when
  // given, adds its scores to the self-attention's (post-LN only; MultiheadAttention's ScoreTerm).
  Tensor forward_masked(const Tensor& src, const Tensor& mask, bool is_causal = false, Tensor* weights_out = nullptr,
                        const ScoreTerm* term = nullptr) const;
  // A pre-LN (norm_first) layer on the residual stream between layers (nn/residual_stream.h), x
  // batch-first [B, L, E]: the incoming pending sum is made in LN₁'s pass, and the output is
  // {y, FF(LN₂(y))}, y = x + SA(LN₁(x)), with its sum left for the next layer's LN₁ or the final norm.
  ResidualStream forward_masked(const ResidualStream& x, const Tensor& mask, bool is_causal = false,
                                Tensor* weights_out = nullptr) const;

  // Decoding (no tape): x [B, T, E] at positions cache.length…+T−1, causal over everything cached.
  Tensor forward_cached(const Tensor& x, KVCache& cache) const;
  // The same on the residual stream (pre-LN only).
  ResidualStream forward_cached(const ResidualStream& x, KVCache& cache) const;
  // The same for one step of many sequences, x [1, T, E] (nn/paged_kv_cache.h), pre-LN: self_attn's
  // forward_paged on layer `layer` of the pool.
  ResidualStream forward_paged(const ResidualStream& x, PagedKVCache& cache, int64_t layer, const PagedStep& step) const;
  // Decoding's encoder (no tape): x [B, L, E] whole under `mask` (qkv's convention), reading what
  // set_inference_weights made (int8 rows where the model's encoder takes them).
  Tensor forward_inference(const Tensor& x, const Tensor& mask, const ScoreTerm* term = nullptr) const;
  void set_inference_weights(InferenceWeights weights);  // bf16 weight copies for decoding steps
  // Back on the training path's f32 products: no copies, no int8 rows.
  void clear_inference_weights();

  TransformerLayerOptions opt;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  // the residual's dropout probability, applied in the next norm's pass: opt.dropout in training, else 0
  float residual_dropout() const;
  Generator* gen_;
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& opt, Generator* gen = nullptr);

  // tgt [B, T, E], memory [B, S, E] (batch_first). Masks as torch.nn.TransformerDecoderLayer.
  // self_weights_out / cross_weights_out, when given, receive [B, H, T, T] / [B, H, T, S].
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 Tensor* self_weights_out = nullptr, Tensor* cross_weights_out = nullptr) const;
  // The same with both masks already in qkv's convention (ops/mask.h), as TransformerDecoder calls it.
  Tensor forward_masked(const Tensor& tgt, const Tensor& memory, const Tensor& self_mask, const Tensor& cross_mask,
                        bool tgt_is_causal = false, Tensor* self_weights_out = nullptr,
                        Tensor* cross_weights_out = nullptr) const;

  // Decoding (no tape): x [B, T, E]; self_cache grows by T; cross holds K/V of the memory, computed
  // once per source by multihead_attn->project_kv(memory). memory_mask: the source's mask in qkv's
  // convention ([B, 1, 1, S], true = a real token).
  Tensor forward_cached(const Tensor& x, KVCache& self_cache, const KVCache& cross,
                        const Tensor& memory_mask = Tensor()) const;
  // The same over caches in slots (SlotStep; nn/static_decoding.h), x [R, 1, E]: self-attention's
  // pools self_k/self_v [slots, H, 1, D], cross-attention's cross_k/cross_v [B, H, S, D].
  Tensor forward_slots(const Tensor& x, const Tensor& self_k, const Tensor& self_v, const Tensor& cross_k,
                       const Tensor& cross_v, const SlotStep& step) const;
  void set_inference_weights(InferenceWeights weights);

  TransformerLayerOptions opt;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  // the residual's dropout probability, applied in the next norm's pass: opt.dropout in training, else 0
  float residual_dropout() const;
  Generator* gen_;
};

}  // namespace qkv::nn
