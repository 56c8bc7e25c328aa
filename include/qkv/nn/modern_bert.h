// ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer"): BERT's encoder read in both
// directions, rebuilt as a modern decoder's body — Hugging Face's ModernBertModel and its heads:
//
//   x₀ = Dropout(LN_e(tok_embeddings[ids]))                       no position embedding, no token types
//   h  = xₗ₋₁ + Wo(Attn_l(RoPE_l(q), RoPE_l(k), v)),  q|k|v = Wqkv(LN_a(xₗ₋₁))   (LN_a: none in layer 0)
//   xₗ = h + Wo'(act(a) ⊙ g),  a|g = Wi(LN_m(h))                  pre-LN, a gated MLP (GeGLU)
//   y  = LN_f(x_L)                                                 the last hidden states [B, T, E]
//
// Attn_l is bidirectional scaled dot-product attention (1/√D, padding keys masked). Layers 0, N,
// 2N, … (N = global_attn_every_n_layers; or the checkpoint's layer_types) are global: every key,
// RoPE base global_rope_theta; the others local: keys within local_attention / 2 positions either
// way, |i − j| ≤ local_attention / 2, RoPE base local_rope_theta. Every LayerNorm has a bias only
// with norm_bias, the projections only with attention_bias / mlp_bias.
//
// Heads (ModernBertPredictionHead: head(z) = LN_h(act_c(dense(z))), act_c = classifier_activation):
//   masked LM:  logits = head(y) tok_embeddingsᵀ + decoder_bias        the decoder tied to the embedding
//   sequence:   logits = W_c head(pool(y)) + b_c    pool = y[:, 0] (classifier_pooling "cls") or the
//               mean over the tokens (padding left out, "mean")          [B, num_labels]
//   token:      logits = W_c head(y) + b_c                               [B, T, num_labels]
//   span:       the same with num_labels 2 (…ForQuestionAnswering: start and end logits)
//
// Parameter names are Hugging Face's without "model.": embeddings.tok_embeddings.weight,
// embeddings.norm.*, layers.{i}.attn_norm.* (i > 0), layers.{i}.attn.Wqkv.*, layers.{i}.attn.Wo.*,
// layers.{i}.mlp_norm.*, layers.{i}.mlp.Wi.*, layers.{i}.mlp.Wo.*, final_norm.*, head.dense.*,
// head.norm.*, decoder_bias (decoder.bias), classifier.* (models/hf/modernbert.cpp).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "qkv/io/config.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/encoder_heads.h"
#include "qkv/nn/llama.h"
#include "qkv/nn/residual_stream.h"
#include "qkv/nn/transformer_layer.h"

namespace qkv::nn {

struct ModernBertConfig {
  int64_t vocab_size = 50368, hidden_size = 768, intermediate_size = 1152, num_hidden_layers = 22,
          num_attention_heads = 12, max_position_embeddings = 8192;
  Activation hidden_activation = Activation::gelu;  // the gated MLP's
  float norm_eps = 1e-5f;
  bool norm_bias = false, attention_bias = false, mlp_bias = false;
  int64_t local_attention = 128;           // a local layer's window: keys within local_attention / 2 either way
  int64_t global_attn_every_n_layers = 3;  // N: layers 0, N, 2N, … global (where layer_types is empty)
  std::vector<std::string> layer_types;    // "full_attention" / "sliding_attention" per layer (empty: by N)
  double global_rope_theta = 160000, local_rope_theta = 10000;
  float dropout = 0.f;       // embedding, attention, MLP and classifier dropout while training
  bool mlm_head = true;      // ModernBertForMaskedLM's head and decoder
  bool decoder_bias = true;  // the MLM decoder's bias
  Activation classifier_activation = Activation::gelu;  // the prediction head's
  bool classifier_bias = false;                         // the prediction head's dense bias
  BertPooling classifier_pooling = BertPooling::cls;    // the sequence classifier's: cls or mean
  BertClassifier classifier = BertClassifier::none;     // a classification head (in place of the MLM head)
  int64_t num_labels = 0;
  std::vector<std::string> labels;  // id2label, num_labels of them
  BertProblem problem_type = BertProblem::auto_;
  // sentence-transformers' settings (a folder with modules.json), read by qkv embed:
  BertPooling pooling = BertPooling::unset;
  bool normalize = false;
  int64_t max_seq_length = 0;
  ScoreActivation score_activation = ScoreActivation::unset;
  int64_t type_vocab_size = 0;  // none (MaskedLanguageModel asks): token_type_ids must be all 0

  static const io::Fields<ModernBertConfig>& fields();
  static ModernBertConfig from_json(const nlohmann::json& j);  // fields() plus the consistency checks
  nlohmann::json to_json() const;
  int64_t width() const { return hidden_size; }
  int64_t max_tokens() const { return max_position_embeddings; }
  bool global(int64_t layer) const;  // the layer sees every key
  std::string describe() const;      // "ModernBERT 22 layers (8 global), 12 heads, 768 dims, 8192 positions, …"
};

class ModernBertLayer : public Module {
 public:
  ModernBertLayer(const ModernBertConfig& c, int64_t index, Generator* gen);
  // The stream x (its pending sum made in LN_a's pass) → {h, MLP(LN_m(h))} with that sum left pending;
  // cos/sin [T, D] the layer's rotary tables; mask as scaled_dot_product_attention takes it.
  // weights_out: the attention weights [B, H, T, T]. inference: the projections' int8 rows.
  ResidualStream forward(const ResidualStream& x, const Tensor& cos, const Tensor& sin, const Tensor& mask,
                         bool inference, Tensor* weights_out = nullptr) const;
  void set_inference_weights(InferenceWeights weights);

  int64_t heads;
  Activation activation;
  float dropout_p;                       // attention_dropout and mlp_dropout while training
  std::shared_ptr<LayerNorm> attn_norm;  // null in layer 0
  std::shared_ptr<Linear> Wqkv, Wo, Wi, mlp_Wo;
  std::shared_ptr<LayerNorm> mlp_norm;

 private:
  Generator* gen_;
};

class ModernBert : public Module {
 public:
  using Config = ModernBertConfig;
  explicit ModernBert(const ModernBertConfig& config, Generator* gen = nullptr);

  // input_ids i32 [B, T] (T ≤ max_position_embeddings); token_type_ids undefined or all 0;
  // attention_mask i32 [B, T] (1: a token, 0: padding; undefined: none) → the last hidden states
  // y [B, T, E]; `maps`, when given, receives each layer's attention weights [B, H, T, T].
  Tensor encode(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                const Tensor& attention_mask = Tensor(), AttentionMaps* maps = nullptr) const;
  // The same through the MLM head → logits [B, T, vocab_size]; without one: qkv::Error.
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                 const Tensor& attention_mask = Tensor(), AttentionMaps* maps = nullptr) const;
  // forward's head in two parts (as nn::Bert's): head(y) of any hidden states [..., E] → [..., E], and
  // the decoder (tok_embeddings.weight [V, E], decoder_bias [V] or undefined). Without the MLM head:
  // qkv::Error.
  Tensor mlm_transform(const Tensor& hidden) const;
  std::pair<Tensor, Tensor> mlm_decoder() const;
  // The same through the classifier → [B, num_labels] or [B, T, num_labels]; without one: qkv::Error.
  Tensor classify(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                  const Tensor& attention_mask = Tensor(), AttentionMaps* maps = nullptr) const;
  // The residual stream entering layer `layer` (0 … L; encode's without padding, before the final
  // norm) [B, T, E], and the rotary tables of that layer: the neuron view's inputs (decode/inspect.h).
  Tensor hidden_before(const Tensor& input_ids, int64_t layer) const;
  const RotaryEmbedding& rotary(int64_t layer) const;
  // int8 (the CPU): the layers' matrices as int8 rows, read under no_grad outside training without
  // attention maps (as nn::Bert); f32 and bf16: the f32 parameters.
  void set_inference_weights(InferenceWeights weights);
  std::vector<Tensor> int8_only_weights() const;
  std::vector<Tensor> int8_file_weights() const;

  ModernBertConfig config;
  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<LayerNorm> embeddings_norm, final_norm;
  std::vector<std::shared_ptr<ModernBertLayer>> layers;
  std::shared_ptr<Linear> head_dense;  // the prediction head (null: ModernBertModel, no head)
  std::shared_ptr<LayerNorm> head_norm;
  Tensor decoder_bias;                 // [vocab_size] (undefined without the MLM head or its bias)
  std::shared_ptr<Linear> classifier;  // [num_labels, E] (null without a classifier)

 private:
  Tensor head(const Tensor& z) const;  // LN_h(act_c(dense(z)))
  // encode's checks, masks and tables, then x₀ through layers 0 … upto − 1: the stream, its last sum pending
  ResidualStream body(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask, int64_t upto,
                      AttentionMaps* maps) const;
  std::vector<Tensor> layer_matrices() const;
  RotaryEmbedding global_rope_, local_rope_;
  Generator* gen_;
  bool int8_layers_ = false;
};

}  // namespace qkv::nn
