// BERT (Devlin et al. 2019): a Transformer encoder read in both directions, trained to fill in
// masked tokens — Hugging Face's BertModel / BertForMaskedLM:
//
//   x₀ = LN(word[ids] + position[t] + token_type[types])        learned positions, segments 0/1
//   xₗ = EncoderLayer(xₗ₋₁, padding mask),  l = 1 … L             post-LN, bidirectional, GELU FFN
//   h  = LN_t(act(transform(x_L)))                                the MLM head's transform
//   logits = h word_embeddingsᵀ + decoder_bias                    decoder tied to the word embedding
//
// or, in place of the MLM head, a classifier (BertFor{Sequence,Token}Classification and their
// RoBERTa and DistilBERT kin):
//
//   sequence:  logits = W_c act_p(W_p x_L[0] + b_p) + b_c          [B, num_labels]  (the first token,
//              act_p = tanh (BERT's pooler, RoBERTa's head) or relu (DistilBERT's pre_classifier))
//   token:     logits = W_c x_L + b_c                               [B, T, num_labels]
//   span:      the same with num_labels = 2: [..., 0] an answer's start, [..., 1] its end
//              (…ForQuestionAnswering's qa_outputs)
//
// RoBERTa counts positions from padding_idx + 1 and gives padding tokens position padding_idx
// (padding_idx ≥ 0); DistilBERT has no token types (type_vocab_size 0). MPNet adds to every layer's
// attention scores a learned bias per head and relative position (T5's bidirectional buckets,
// relative_attention_num_buckets > 0), shared by the layers:
//
//   scores_h(i, j) = q_i·k_j / √d + bias[bucket(j − i), h]
//   bucket(r): n = −r; (n < 0) · N/2 + (|n| < N/4 ? |n| : min(N/4 + ⌊ln(|n| / (N/4)) / ln(D / (N/4)) · N/4⌋, N/2 − 1))
//
// with N buckets and D = relative_attention_max_distance (MPNet: 32 and 128; the logarithm in
// float32, as transformers computes it). DeBERTa (v2 and v3) scores content and relative position
// apart instead (relative_span > 0; nn/disentangled_attention.h):
//
//   scores(i, j) = (q_i·k_j + q_i·Pᴷ[δ(i, j)] + k_j·Pᵠ[δ(i, j)]) / √(D·f),   Pᴷ, Pᵠ = R W_{K,Q}ᵀ + b
//
// over relative embeddings R [2·relative_span, E] shared by the layers (LayerNorm'd where
// norm_relative_embeddings), often without absolute positions (absolute_positions false), with
// embeddings of embedding_size projected to E before their LayerNorm (embed_proj, no bias) where the
// two differ, and a GELU pooler (ContextPooler) before its sequence classifier. ELECTRA projects its
// narrower embeddings after their LayerNorm instead (project_after_norm: LN over embedding_size, then
// embed_proj with a bias), and its classifier's dense layer is GELU'd too. ALBERT projects as ELECTRA
// does and shares one layer's parameters among all its layers (shared_layers: xₗ = Layer(xₗ₋₁) with the
// same Layer for l = 1 … L), its MLM head's transform narrowing to embedding_size.
//
// The layers are torch.nn's TransformerEncoderLayer (norm_first = false), the one block qkv's
// encoder–decoder and GPT are built from; a padded key (attention_mask 0) gets no weight.
// Parameter names: word_embeddings.weight, position_embeddings.weight, token_type_embeddings.weight,
// embeddings_norm.*, layers.{i}.(self_attn|linear1|linear2|norm1|norm2).*, and with the head
// transform.*, transform_norm.*, decoder_bias; DeBERTa's and ELECTRA's embed_proj.*, rel_embeddings.weight,
// rel_embeddings_norm.* (models/hf/bert.cpp and deberta.cpp map Hugging Face's names).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "qkv/io/config.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/disentangled_attention.h"
#include "qkv/nn/encoder_heads.h"
#include "qkv/nn/transformer_layer.h"

namespace qkv::nn {

struct BertConfig {
  int64_t vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12,
          intermediate_size = 3072, max_position_embeddings = 512, type_vocab_size = 2;
  Activation hidden_act = Activation::gelu;  // the FFN's and the MLM transform's
  float layer_norm_eps = 1e-12f;
  float dropout = 0.f;    // hidden_dropout_prob (embeddings, residual branches, attention weights)
  bool mlm_head = true;   // BertForMaskedLM's head; false: BertModel, hidden states only
  bool mlm_exact_gelu = false;  // the MLM transform's activation is exact GELU (RoBERTa's), not hidden_act
  int64_t padding_idx = -1;     // ≥ 0: RoBERTa's positions (padding_idx + 1 + t; padding at padding_idx)
  BertClassifier classifier = BertClassifier::none;  // a classification head (in place of the MLM head)
  int64_t num_labels = 0;
  std::vector<std::string> labels;  // id2label, num_labels of them
  BertProblem problem_type = BertProblem::auto_;
  BertPooler pooler = BertPooler::none;  // the sequence classifier's dense layer on the first token
  // sentence-transformers' settings (a folder with modules.json), read by qkv embed:
  BertPooling pooling = BertPooling::unset;
  bool normalize = false;      // the embedding divided by its L2 norm (the Normalize module)
  int64_t max_seq_length = 0;  // inputs cut to this many tokens (0: the model's positions)
  ScoreActivation score_activation = ScoreActivation::unset;  // a cross-encoder's (sentence-transformers')
  int64_t relative_attention_num_buckets = 0;                 // > 0: MPNet's relative position bias (N, even)
  int64_t relative_attention_max_distance = 128;              // D
  // DeBERTa's (v2, v3):
  int64_t embedding_size = 0;             // the embeddings' width where it is not hidden_size (then embed_proj)
  bool project_after_norm = false;        // ELECTRA's order: LN(embeddings), then embed_proj (with a bias)
  bool absolute_positions = true;         // learned absolute positions (position_biased_input)
  int64_t relative_span = 0;              // > 0: disentangled attention over 2·span relative embeddings
  int64_t position_buckets = 0;           // > 0: its log buckets (relative_span = position_buckets)
  int64_t max_relative_positions = 0;     // M, the log buckets' reach
  bool c2p = true, p2c = true;            // pos_att_type's terms
  bool norm_relative_embeddings = false;  // norm_rel_ebd "layer_norm"
  bool shared_layers = false;             // ALBERT: one layer's parameters (layers.0) run num_hidden_layers times

  static const io::Fields<BertConfig>& fields();
  static BertConfig from_json(const nlohmann::json& j);  // fields() plus hidden_size % heads == 0
  nlohmann::json to_json() const;
  int64_t width() const { return hidden_size; }
  int64_t embedding_width() const { return embedding_size > 0 ? embedding_size : hidden_size; }
  std::string describe() const;  // "BERT 12 layers, 12 heads, 768 dims, 512 positions, vocab 30522"
  // The longest input: max_position_embeddings, less RoBERTa's padding_idx + 1.
  int64_t max_tokens() const {
    return padding_idx >= 0 ? max_position_embeddings - padding_idx - 1 : max_position_embeddings;
  }
};

// T5's bidirectional bucket of a relative position r = j − i, of num_buckets (N) and max_distance (D):
// bucket(r) above.
int64_t relative_position_bucket(int64_t r, int64_t num_buckets, int64_t max_distance);

class Bert : public Module {
 public:
  using Config = BertConfig;
  explicit Bert(const BertConfig& config, Generator* gen = nullptr);

  // input_ids i32 [B, T] (T ≤ max_position_embeddings); token_type_ids i32 [B, T] (undefined: all
  // 0); attention_mask i32 [B, T] (1: a token, 0: padding; undefined: no padding) → the last
  // layer's hidden states [B, T, E]. `maps`, when given, receives each layer's self-attention
  // weights [B, H, T, T] (maps->encoder_self).
  Tensor encode(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                const Tensor& attention_mask = Tensor(), AttentionMaps* maps = nullptr) const;
  // The embeddings alone, x₀ [B, T, E]: what encode hands its first layer.
  Tensor embed(const Tensor& input_ids, const Tensor& token_type_ids = Tensor()) const;
  // The same through the MLM head → logits [B, T, vocab_size]; a model without it: qkv::Error.
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                 const Tensor& attention_mask = Tensor(), AttentionMaps* maps = nullptr) const;
  // forward's head in two parts, for a loss read at a few of the tokens (train/masked_lm_task.h: the
  // masked ones alone, by linear_cross_entropy): the transform h = LN_t(act(transform(x))) of any hidden
  // states x [..., E] → [..., E_w] (E_w: embedding_width()), and the decoder (word_embeddings.weight
  // [V, E_w], decoder_bias [V]), logits = h Wᵀ + b. Without the MLM head: qkv::Error.
  Tensor mlm_transform(const Tensor& hidden) const;
  std::pair<Tensor, Tensor> mlm_decoder() const;
  // The same through the classifier → logits [B, num_labels] (sequence) or [B, T, num_labels]
  // (token); a model without one: qkv::Error.
  Tensor classify(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                  const Tensor& attention_mask = Tensor(), AttentionMaps* maps = nullptr) const;
  // int8 (the CPU): the layers' matrices as int8 rows (ops/inference_weight.h), read by encode and
  // classify under no_grad outside training, without attention maps — on every CPU, 7-bit
  // activations included (AVX2 without VNNI): there a BERT-base's sentence embeddings stay at cosine
  // ≥ 0.9996 of f32's, closer than CTranslate2's int8 (docs/BENCHMARKS.md). f32 and bf16: the f32
  // parameters, nothing copied.
  void set_inference_weights(InferenceWeights weights);
  // What reads only int8 rows once they are set (the layers' matrices), and what qkv quantize stores
  // as int8 rows (the same, on every CPU; the embeddings and heads stay f32).
  std::vector<Tensor> int8_only_weights() const;
  std::vector<Tensor> int8_file_weights() const;

  BertConfig config;
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> embeddings_norm;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<Linear> transform;          // the MLM head (null without it)
  std::shared_ptr<LayerNorm> transform_norm;
  Tensor decoder_bias;                        // [vocab_size]
  std::shared_ptr<Linear> pooler_dense;       // the sequence classifier's [E, E] (null: pooler none)
  std::shared_ptr<Linear> classifier;         // [num_labels, E] (null without a classifier)
  std::shared_ptr<Embedding> relative_attention_bias;  // [N, num_heads] (null without MPNet's bias)
  std::shared_ptr<Linear> embed_proj;                  // [E, embedding_size] (null: the same widths)
  // (embeddings_norm: over E, or embedding_size where project_after_norm)
  std::shared_ptr<Embedding> rel_embeddings;           // [2·relative_span, E] (null: no disentangled attention)
  std::shared_ptr<LayerNorm> rel_embeddings_norm;      // (null: norm_relative_embeddings false)

 private:
  std::vector<Tensor> layer_matrices() const;
  // The mask every layer's attention takes, from `keep` [B·T] (true: a token; empty: no padding):
  // the padding mask [B, 1, 1, T] (bool, true = may be attended to; undefined without padding), or
  // with a relative position bias the float bias[bucket(j − i), h], − ∞ at padded keys, [B or 1, H, T, T].
  Tensor attention_mask_of(const std::vector<bool>& keep, int64_t B, int64_t T, Device device) const;
  Generator* gen_;
  bool int8_layers_ = false;
};

}  // namespace qkv::nn
