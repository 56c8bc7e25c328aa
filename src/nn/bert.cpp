#include "qkv/nn/bert.h"

#include <cmath>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/ops/inference_weight.h"
#include "qkv/nn/encoder_inputs.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

const io::Fields<BertConfig>& BertConfig::fields() {
  using F = io::Fields<BertConfig>;
  static const F f(
      "BERT config",
      {
          F::integer("vocab_size", &BertConfig::vocab_size, 1),
          F::integer("hidden_size", &BertConfig::hidden_size, 1),
          F::integer("num_hidden_layers", &BertConfig::num_hidden_layers, 1),
          F::integer("num_attention_heads", &BertConfig::num_attention_heads, 1),
          F::integer("intermediate_size", &BertConfig::intermediate_size, 1),
          F::integer("max_position_embeddings", &BertConfig::max_position_embeddings, 1),
          F::integer("type_vocab_size", &BertConfig::type_vocab_size, 0),
          F::choice("hidden_act", &BertConfig::hidden_act),
          F::number("layer_norm_eps", &BertConfig::layer_norm_eps, 1e-30, 1),
          F::number("dropout", &BertConfig::dropout, 0, 1, /*hi_open=*/true),
          F::boolean("mlm_head", &BertConfig::mlm_head),
          F::boolean("mlm_exact_gelu", &BertConfig::mlm_exact_gelu),
          F::integer("padding_idx", &BertConfig::padding_idx, -1),
          F::choice("classifier", &BertConfig::classifier),
          F::integer("num_labels", &BertConfig::num_labels, 0, 1 << 20),
          F::texts("labels", &BertConfig::labels, 1 << 20),
          F::choice("problem_type", &BertConfig::problem_type),
          F::choice("pooler", &BertConfig::pooler),
          F::choice("pooling", &BertConfig::pooling),
          F::boolean("normalize", &BertConfig::normalize),
          F::integer("max_seq_length", &BertConfig::max_seq_length, 0),
          F::choice("score_activation", &BertConfig::score_activation),
          F::integer("relative_attention_num_buckets", &BertConfig::relative_attention_num_buckets, 0, 1 << 16),
          F::integer("relative_attention_max_distance", &BertConfig::relative_attention_max_distance, 1, 1 << 30),
          F::integer("embedding_size", &BertConfig::embedding_size, 0),
          F::boolean("project_after_norm", &BertConfig::project_after_norm),
          F::boolean("absolute_positions", &BertConfig::absolute_positions),
          F::integer("relative_span", &BertConfig::relative_span, 0, 1 << 16),
          F::integer("position_buckets", &BertConfig::position_buckets, 0, 1 << 16),
          F::integer("max_relative_positions", &BertConfig::max_relative_positions, 0, 1 << 30),
          F::boolean("c2p", &BertConfig::c2p),
          F::boolean("p2c", &BertConfig::p2c),
          F::boolean("norm_relative_embeddings", &BertConfig::norm_relative_embeddings),
          F::boolean("shared_layers", &BertConfig::shared_layers),
      });
  return f;
}

BertConfig BertConfig::from_json(const nlohmann::json& j) {
  BertConfig c = fields().from_json(j);
  QKV_CHECK(c.hidden_size % c.num_attention_heads == 0, "BERT config: hidden_size ", c.hidden_size,
            " must be a multiple of num_attention_heads ", c.num_attention_heads);
  QKV_CHECK(c.padding_idx < c.max_position_embeddings - 1, "BERT config: padding_idx ", c.padding_idx,
            " leaves no position of max_position_embeddings ", c.max_position_embeddings);
  if (c.classifier == BertClassifier::none) {
    QKV_CHECK(
        c.num_labels == 0 && c.labels.empty() && c.pooler == BertPooler::none,
        "BERT config: num_labels, labels and pooler need a classifier (\"classifier\": \"sequence\" or \"token\")");
  } else {
    QKV_CHECK(!c.mlm_head, "BERT config: a classifier replaces the MLM head (\"mlm_head\": false)");
    QKV_CHECK(c.num_labels >= 1, "BERT config: a classifier needs num_labels ≥ 1");
    QKV_CHECK(c.labels.empty() || static_cast<int64_t>(c.labels.size()) == c.num_labels,
              "BERT config: ", c.labels.size(), " labels for num_labels ", c.num_labels);
    QKV_CHECK(pools_sequence(c.classifier) || c.pooler == BertPooler::none,
              "BERT config: a token classifier has no pooler");
    QKV_CHECK(c.classifier != BertClassifier::span || c.num_labels == 2,
              "BERT config: a question-answering head has 2 outputs (start, end), not ", c.num_labels);
    QKV_CHECK(c.classifier != BertClassifier::choice || c.num_labels == 1,
              "BERT config: a multiple-choice head has 1 output (a choice's score), not ", c.num_labels);
  }
  QKV_CHECK(c.max_seq_length <= c.max_tokens(), "BERT config: max_seq_length ", c.max_seq_length,
            " is more than the model's ", c.max_tokens(), " positions");
  QKV_CHECK(c.relative_attention_num_buckets % 2 == 0 &&
                (c.relative_attention_num_buckets == 0 ||
                 c.relative_attention_max_distance > c.relative_attention_num_buckets / 4),
            "BERT config: relative_attention_num_buckets ", c.relative_attention_num_buckets,
            " must be even, and relative_attention_max_distance ", c.relative_attention_max_distance,
            " more than a quarter of it");
  QKV_CHECK(c.relative_span == 0 || c.relative_attention_num_buckets == 0,
            "BERT config: relative_span (DeBERTa's) and relative_attention_num_buckets (MPNet's) exclude each other");
  QKV_CHECK(c.position_buckets == 0 || (c.relative_span == c.position_buckets && c.position_buckets >= 4 &&
                                        c.max_relative_positions - 1 > c.position_buckets / 2),
            "BERT config: position_buckets ", c.position_buckets, " needs relative_span equal to it (", c.relative_span,
            "), at least 4, and max_relative_positions ", c.max_relative_positions, " more than half of it + 1");
  QKV_CHECK(c.absolute_positions || c.padding_idx < 0,
            "BERT config: RoBERTa's positions (padding_idx) need "
            "absolute_positions");
  if (c.labels.empty())  // transformers' default id2label: LABEL_0, LABEL_1, …
    for (int64_t i = 0; i < c.num_labels; ++i) c.labels.push_back("LABEL_" + std::to_string(i));
  return c;
}

nlohmann::json BertConfig::to_json() const { return fields().to_json(*this); }

std::string BertConfig::describe() const {
  return detail::concat(
      "BERT ", num_hidden_layers, " layers, ", num_attention_heads, " heads, ", hidden_size, " dims, ",
      max_position_embeddings, " positions, ", type_vocab_size, " token types, vocab ", vocab_size,
      relative_span > 0 ? detail::concat(", disentangled attention (", relative_span, " relative positions each way)")
                        : std::string(),
      shared_layers ? std::string(", one layer's parameters shared by all (ALBERT)") : std::string(),
      classifier == BertClassifier::sequence ? detail::concat(", sequence classifier (", num_labels, " labels)")
      : classifier == BertClassifier::token  ? detail::concat(", token classifier (", num_labels, " labels)")
      : classifier == BertClassifier::span   ? std::string(", question-answering head (answer start and end)")
      : classifier == BertClassifier::choice ? std::string(", multiple-choice head (a score per choice)")
      : mlm_head                             ? std::string(", MLM head")
                                             : std::string(", no MLM head"));
}

Bert::Bert(const BertConfig& c, Generator* gen) : config(c), gen_(gen) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t W = c.embedding_width();
  word_embeddings = register_module("word_embeddings", std::make_shared<Embedding>(c.vocab_size, W, -1, &g));
  if (c.absolute_positions)
    position_embeddings =
        register_module("position_embeddings", std::make_shared<Embedding>(c.max_position_embeddings, W, -1, &g));
  if (c.type_vocab_size > 0)
    token_type_embeddings =
        register_module("token_type_embeddings", std::make_shared<Embedding>(c.type_vocab_size, W, -1, &g));
  if (W != c.hidden_size)
    embed_proj = register_module("embed_proj", std::make_shared<Linear>(W, c.hidden_size, c.project_after_norm, &g));
  embeddings_norm = register_module(
      "embeddings_norm", std::make_shared<LayerNorm>(c.project_after_norm ? W : c.hidden_size, c.layer_norm_eps));
  TransformerLayerOptions o;
  o.d_model = c.hidden_size, o.nhead = c.num_attention_heads, o.dim_feedforward = c.intermediate_size;
  o.dropout = c.dropout, o.activation = c.hidden_act, o.layer_norm_eps = c.layer_norm_eps;
  o.norm_first = false, o.bias = true, o.batch_first = true;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(c.shared_layers && i > 0 ? layers.front()  // ALBERT: layers.0 again
                                              : register_module("layers." + std::to_string(i),
                                                                std::make_shared<TransformerEncoderLayer>(o, &g)));
  if (c.mlm_head) {
    transform = register_module("transform", std::make_shared<Linear>(c.hidden_size, W, true, &g));
    transform_norm = register_module("transform_norm", std::make_shared<LayerNorm>(W, c.layer_norm_eps));
    decoder_bias = register_parameter("decoder_bias", Tensor::zeros({c.vocab_size}));
  }
  if (c.pooler != BertPooler::none)
    pooler_dense = register_module("pooler", std::make_shared<Linear>(c.hidden_size, c.hidden_size, true, &g));
  if (c.classifier != BertClassifier::none)
    classifier = register_module("classifier", std::make_shared<Linear>(c.hidden_size, c.num_labels, true, &g));
  if (c.relative_attention_num_buckets > 0)
    relative_attention_bias =
        register_module("relative_attention_bias",
                        std::make_shared<Embedding>(c.relative_attention_num_buckets, c.num_attention_heads, -1, &g));
  if (c.relative_span > 0) {
    rel_embeddings =
        register_module("rel_embeddings", std::make_shared<Embedding>(2 * c.relative_span, c.hidden_size, -1, &g));
    if (c.norm_relative_embeddings)
      rel_embeddings_norm =
          register_module("rel_embeddings_norm", std::make_shared<LayerNorm>(c.hidden_size, c.layer_norm_eps));
  }
  // BERT's initialization (initializer_range 0.02): N(0, 0.02) for every matrix and embedding, zero
  // biases, LayerNorms at 1 / 0.
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p.detach();
    if (name.find("norm") != std::string::npos) continue;
    if (p.dim() >= 2) init::normal_(t, g, 0.f, 0.02f);
    else init::zeros_(t);
  }
}

Tensor Bert::embed(const Tensor& ids, const Tensor& types) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "BERT: input_ids must be i32 [B, T], got ",
            shape_str(ids.shape()));
  const int64_t B = ids.size(0), T = ids.size(1);
  QKV_CHECK(T >= 1 && T <= config.max_tokens(), "BERT: ", T, " tokens, more than the model's ", config.max_tokens(),
            " positions (max_position_embeddings ", config.max_position_embeddings,
            config.padding_idx >= 0 ? " less padding_idx + 1)" : ")");
  QKV_CHECK(!types.defined() || (types.shape() == ids.shape() && types.dtype() == DType::i32),
            "BERT: token_type_ids must be i32 ", shape_str(ids.shape()), " as input_ids, got ",
            shape_str(types.shape()));
  QKV_CHECK(!types.defined() || config.type_vocab_size > 0 || types.to_ints() == std::vector<int32_t>(B * T, 0),
            "BERT: this model has no token types (type_vocab_size 0), and token_type_ids holds one");
  // x₀ = Dropout(LN(word[ids] + position[0 … T−1] + token_type[types]))
  Tensor x = word_embeddings->forward(ids);
  if (!position_embeddings) {
    // DeBERTa-v3: no absolute positions, the relative ones in every layer's attention
  } else if (config.padding_idx < 0) {
    x = x + position_embeddings->weight.slice(0, 0, T);
  } else {
    // RoBERTa: position = padding_idx + (the count of non-padding tokens up to t) at a token,
    // padding_idx at a padding token (transformers' create_position_ids_from_input_ids)
    const std::vector<int32_t> v = ids.to_ints();
    std::vector<int32_t> pos(v.size());
    for (int64_t b = 0; b < B; ++b) {
      int32_t n = 0;
      for (int64_t t = 0; t < T; ++t) {
        const size_t i = static_cast<size_t>(b * T + t);
        pos[i] = v[i] == config.padding_idx ? static_cast<int32_t>(config.padding_idx)
                                            : static_cast<int32_t>(config.padding_idx) + ++n;
      }
    }
    x = x + position_embeddings->forward(Tensor::from_ints(pos, {B, T}).to(ids.device()));
  }
  if (token_type_embeddings)
    x = types.defined() ? x + token_type_embeddings->forward(types) : x + token_type_embeddings->weight.select(0, 0);
  // [B, T, embedding_size] → [B, T, E]: projected, then LN (DeBERTa's); or LN, then projected (ELECTRA's)
  if (config.project_after_norm) {
    x = dropout(embeddings_norm->forward(x), config.dropout, is_training(), gen_);
    return embed_proj ? embed_proj->forward(x) : x;  // [B, T, E]
  }
  if (embed_proj) x = embed_proj->forward(x);
  return dropout(embeddings_norm->forward(x), config.dropout, is_training(), gen_);  // [B, T, E]
}

Tensor Bert::encode(const Tensor& ids, const Tensor& types, const Tensor& attention_mask, AttentionMaps* maps) const {
  Tensor x = embed(ids, types);  // [B, T, E]
  const int64_t B = ids.size(0), T = ids.size(1);
  // The padding mask [B, 1, 1, T], true = key j may be attended to (attention_mask 1); MPNet's
  // relative position bias added where the model has one.
  const std::vector<bool> keep = tokens_kept(attention_mask, ids, "BERT");
  const Tensor mask = attention_mask_of(keep, B, T, x.device());
  // DeBERTa: the relative embeddings R [2k, E] (LayerNorm'd, dropped out in training) and the gathers
  // for T tokens, once for every layer
  std::optional<DisentangledPositions> positions;
  if (rel_embeddings) {
    Tensor r = rel_embeddings->weight;
    if (rel_embeddings_norm) r = rel_embeddings_norm->forward(r);
    DisentangledOptions o;
    o.span = config.relative_span, o.position_buckets = config.position_buckets;
    o.max_relative_positions = config.max_relative_positions, o.c2p = config.c2p, o.p2c = config.p2c;
    positions.emplace(dropout(r, config.dropout, is_training(), gen_), T, o);
  }
  // xₗ = LN(h + FFN(h)), h = LN(xₗ₋₁ + SelfAttention(xₗ₋₁))   (post-LN, every key but padding)
  const bool int8 = int8_layers_ && !is_training() && !autograd::grad_enabled() && !maps;
  for (const auto& layer : layers) {
    std::optional<ScoreTerm> term;
    if (positions) term = positions->term(*layer->self_attn, int8);
    const ScoreTerm* t = term ? &*term : nullptr;
    if (int8) {  // the same layer on its int8 rows
      x = layer->forward_inference(x, mask, t);
      continue;
    }
    Tensor w;
    x = layer->forward_masked(x, mask, /*is_causal=*/false, maps ? &w : nullptr, t);
    if (maps) maps->encoder_self.push_back(w);
  }
  return x;  // [B, T, E]
}

// (the logarithm's steps in float32, as transformers' MPNetEncoder.relative_position_bucket takes them)
int64_t relative_position_bucket(int64_t r, int64_t num_buckets, int64_t max_distance) {
  const int64_t half = num_buckets / 2, max_exact = half / 2;
  int64_t n = -r, bucket = n < 0 ? half : 0;
  n = n < 0 ? -n : n;
  if (n < max_exact) return bucket + n;
  const float scaled =
      std::log(static_cast<float>(n) / static_cast<float>(max_exact)) /
      static_cast<float>(std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact))) *
      static_cast<float>(half - max_exact);
  return bucket + std::min(max_exact + static_cast<int64_t>(scaled), half - 1);
}

Tensor Bert::attention_mask_of(const std::vector<bool>& keep, int64_t B, int64_t T, Device device) const {
  if (!relative_attention_bias) return keep.empty() ? Tensor() : Tensor::from_bools(keep, {B, 1, 1, T}).to(device);
  const int64_t N = config.relative_attention_num_buckets;
  std::vector<int32_t> buckets(static_cast<size_t>(T * T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      buckets[static_cast<size_t>(i * T + j)] =
          static_cast<int32_t>(relative_position_bucket(j - i, N, config.relative_attention_max_distance));
  // bias[bucket(j − i), h] → [1, H, T, T] (its gradient reaches the table in training)
  const Tensor bias =
      relative_attention_bias->forward(Tensor::from_ints(buckets, {T, T}).to(device)).permute({2, 0, 1}).unsqueeze(0);
  if (keep.empty()) return bias;
  std::vector<float> add(keep.size());  // − ∞ at the padded keys (encode checked that a row keeps a token)
  for (size_t k = 0; k < keep.size(); ++k) add[k] = keep[k] ? 0.f : -std::numeric_limits<float>::infinity();
  return bias + Tensor::from_vector(add, {B, 1, 1, T}).to(device);  // [B, H, T, T]
}

std::vector<Tensor> Bert::layer_matrices() const {
  std::vector<Tensor> out;
  for (const auto& l : config.shared_layers ? std::vector{layers.front()} : layers)
    for (const Tensor& w :
         {l->self_attn->in_proj_weight, l->self_attn->out_proj->weight, l->linear1->weight, l->linear2->weight})
      out.push_back(w);
  return out;
}

void Bert::set_inference_weights(InferenceWeights weights) {
  int8_layers_ = weights == InferenceWeights::int8 && word_embeddings->weight.device().is_cpu();
  for (const auto& l : config.shared_layers ? std::vector{layers.front()} : layers) {
    if (int8_layers_) {
      l->set_inference_weights(InferenceWeights::int8);
    } else {
      l->clear_inference_weights();  // back on the f32 parameters: no copies
    }
  }
}

std::vector<Tensor> Bert::int8_only_weights() const { return int8_layers_ ? layer_matrices() : std::vector<Tensor>{}; }
std::vector<Tensor> Bert::int8_file_weights() const { return layer_matrices(); }

Tensor Bert::forward(const Tensor& ids, const Tensor& types, const Tensor& attention_mask, AttentionMaps* maps) const {
  QKV_CHECK(config.mlm_head, "BERT: this model has no masked-language-model head (a BertModel: hidden states only; "
                             "fill-mask needs a BertForMaskedLM)");
  const auto [weight, bias] = mlm_decoder();
  return linear(mlm_transform(encode(ids, types, attention_mask, maps)), weight, bias);  // [B, T, V]
}

Tensor Bert::mlm_transform(const Tensor& x) const {
  QKV_CHECK(config.mlm_head, "BERT: this model has no masked-language-model head (a BertModel: hidden states only)");
  // h = LN_t(act(transform(x)))   (transform's bias added in the activation's pass)
  const Activation act = config.mlm_exact_gelu ? Activation::gelu : config.hidden_act;
  return transform_norm->forward(activate(linear(x, transform->weight), act, 0.f, nullptr, transform->bias));
}

std::pair<Tensor, Tensor> Bert::mlm_decoder() const {
  QKV_CHECK(config.mlm_head, "BERT: this model has no masked-language-model head (a BertModel: hidden states only)");
  return {word_embeddings->weight, decoder_bias};  // the decoder tied to the word embedding
}

Tensor Bert::classify(const Tensor& ids, const Tensor& types, const Tensor& attention_mask, AttentionMaps* maps) const {
  QKV_CHECK(classifier,
            "BERT: this model has no classifier (convert a …ForSequenceClassification or "
            "…ForTokenClassification folder)");
  Tensor x = encode(ids, types, attention_mask, maps);  // [B, T, E]
  if (!pools_sequence(config.classifier))               // (token, span)
    return classifier->forward(dropout(x, config.dropout, is_training(), gen_));  // [B, T, num_labels]
  // h = act_p(W_p x[:, 0] + b_p);  logits = W_c h + b_c
  Tensor h = x.select(1, 0);  // [B, E]
  if (pooler_dense) {
    h = linear(h, pooler_dense->weight, pooler_dense->bias);
    h = config.pooler == BertPooler::tanh   ? tanh(h)
        : config.pooler == BertPooler::gelu ? activate(h, Activation::gelu)
                                            : relu(h);
  }
  return classifier->forward(dropout(h, config.dropout, is_training(), gen_));  // [B, num_labels]
}

}  // namespace qkv::nn
