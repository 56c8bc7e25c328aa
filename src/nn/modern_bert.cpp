#include "qkv/nn/modern_bert.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/encoder_inputs.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"
#include "qkv/ops/mask.h"
#include "qkv/ops/rotary.h"

namespace qkv::nn {

const io::Fields<ModernBertConfig>& ModernBertConfig::fields() {
  using F = io::Fields<ModernBertConfig>;
  using C = ModernBertConfig;
  static const F f("ModernBERT config",
                   {
                       F::integer("vocab_size", &C::vocab_size, 1),
                       F::integer("hidden_size", &C::hidden_size, 1),
                       F::integer("intermediate_size", &C::intermediate_size, 1),
                       F::integer("num_hidden_layers", &C::num_hidden_layers, 1),
                       F::integer("num_attention_heads", &C::num_attention_heads, 1),
                       F::integer("max_position_embeddings", &C::max_position_embeddings, 1),
                       F::choice("hidden_activation", &C::hidden_activation),
                       F::number("norm_eps", &C::norm_eps, 1e-30, 1),
                       F::boolean("norm_bias", &C::norm_bias),
                       F::boolean("attention_bias", &C::attention_bias),
                       F::boolean("mlp_bias", &C::mlp_bias),
                       F::integer("local_attention", &C::local_attention, 0),
                       F::integer("global_attn_every_n_layers", &C::global_attn_every_n_layers, 1),
                       F::texts("layer_types", &C::layer_types, 1 << 16, 32),
                       F::number("global_rope_theta", &C::global_rope_theta, 1, 1e30),
                       F::number("local_rope_theta", &C::local_rope_theta, 1, 1e30),
                       F::number("dropout", &C::dropout, 0, 1, /*hi_open=*/true),
                       F::boolean("mlm_head", &C::mlm_head),
                       F::boolean("decoder_bias", &C::decoder_bias),
                       F::choice("classifier_activation", &C::classifier_activation),
                       F::boolean("classifier_bias", &C::classifier_bias),
                       F::choice("classifier_pooling", &C::classifier_pooling, {BertPooling::cls, BertPooling::mean}),
                       F::choice("classifier", &C::classifier),
                       F::integer("num_labels", &C::num_labels, 0, 1 << 20),
                       F::texts("labels", &C::labels, 1 << 20),
                       F::choice("problem_type", &C::problem_type),
                       F::choice("pooling", &C::pooling),
                       F::boolean("normalize", &C::normalize),
                       F::integer("max_seq_length", &C::max_seq_length, 0),
                       F::choice("score_activation", &C::score_activation),
                       F::integer("type_vocab_size", &C::type_vocab_size, 0, 0),
                   });
  return f;
}

ModernBertConfig ModernBertConfig::from_json(const nlohmann::json& j) {
  ModernBertConfig c = fields().from_json(j);
  QKV_CHECK(c.hidden_size % c.num_attention_heads == 0 && (c.hidden_size / c.num_attention_heads) % 2 == 0,
            "ModernBERT config: hidden_size ", c.hidden_size, " must be a multiple of num_attention_heads ",
            c.num_attention_heads, " with an even head size (rotary positions turn pairs)");
  QKV_CHECK(c.layer_types.empty() || static_cast<int64_t>(c.layer_types.size()) == c.num_hidden_layers,
            "ModernBERT config: ", c.layer_types.size(), " layer_types for ", c.num_hidden_layers, " layers");
  for (const std::string& t : c.layer_types)
    QKV_CHECK(t == "full_attention" || t == "sliding_attention", "ModernBERT config: layer_types holds '", t,
              "' (full_attention or sliding_attention)");
  if (c.classifier == BertClassifier::none) {
    QKV_CHECK(c.num_labels == 0 && c.labels.empty(),
              "ModernBERT config: num_labels and labels need a classifier (\"classifier\": \"sequence\" or \"token\")");
  } else {
    QKV_CHECK(!c.mlm_head, "ModernBERT config: a classifier replaces the MLM head (\"mlm_head\": false)");
    QKV_CHECK(c.num_labels >= 1, "ModernBERT config: a classifier needs num_labels ≥ 1");
    QKV_CHECK(c.labels.empty() || static_cast<int64_t>(c.labels.size()) == c.num_labels,
              "ModernBERT config: ", c.labels.size(), " labels for num_labels ", c.num_labels);
    QKV_CHECK(c.classifier != BertClassifier::span || c.num_labels == 2,
              "ModernBERT config: a question-answering head has 2 outputs (start, end), not ", c.num_labels);
    QKV_CHECK(c.classifier != BertClassifier::choice || c.num_labels == 1,
              "ModernBERT config: a multiple-choice head has 1 output (a choice's score), not ", c.num_labels);
  }
  QKV_CHECK(c.max_seq_length <= c.max_tokens(), "ModernBERT config: max_seq_length ", c.max_seq_length,
            " is more than the model's ", c.max_tokens(), " positions");
  if (c.labels.empty())  // transformers' default id2label: LABEL_0, LABEL_1, …
    for (int64_t i = 0; i < c.num_labels; ++i) c.labels.push_back("LABEL_" + std::to_string(i));
  return c;
}

nlohmann::json ModernBertConfig::to_json() const { return fields().to_json(*this); }

bool ModernBertConfig::global(int64_t layer) const {
  if (!layer_types.empty()) return layer_types[static_cast<size_t>(layer)] == "full_attention";
  return layer % global_attn_every_n_layers == 0;
}

std::string ModernBertConfig::describe() const {
  int64_t n_global = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) n_global += global(l);
  return detail::concat(
      "ModernBERT ", num_hidden_layers, " layers (", n_global, " global, the others within ", local_attention / 2,
      " tokens), ", num_attention_heads, " heads, ", hidden_size, " dims, ", max_position_embeddings,
      " positions, vocab ", vocab_size,
      classifier == BertClassifier::sequence ? detail::concat(", sequence classifier (", num_labels, " labels)")
      : classifier == BertClassifier::token  ? detail::concat(", token classifier (", num_labels, " labels)")
      : classifier == BertClassifier::span   ? std::string(", question-answering head (answer start and end)")
      : classifier == BertClassifier::choice ? std::string(", multiple-choice head (a score per choice)")
      : mlm_head                             ? std::string(", MLM head")
                                             : std::string(", no MLM head"));
}

namespace {

// RoPE over each head's D features with base θ (the default rope_type: no scaling)
LlamaConfig rope_config(const ModernBertConfig& c, double theta) {
  LlamaConfig r;
  r.hidden_size = c.hidden_size, r.num_attention_heads = c.num_attention_heads, r.rope_theta = theta;
  return r;
}

}  // namespace

// ---- one layer -----------------------------------------------------------------------------------

ModernBertLayer::ModernBertLayer(const ModernBertConfig& c, int64_t index, Generator* gen)
    : heads(c.num_attention_heads), activation(c.hidden_activation), dropout_p(c.dropout), gen_(gen) {
  const int64_t E = c.hidden_size, F = c.intermediate_size;
  if (index > 0)
    attn_norm = register_module("attn_norm", std::make_shared<LayerNorm>(E, c.norm_eps, true, c.norm_bias));
  Wqkv = register_module("attn.Wqkv", std::make_shared<Linear>(E, 3 * E, c.attention_bias, gen));
  Wo = register_module("attn.Wo", std::make_shared<Linear>(E, E, c.attention_bias, gen));
  mlp_norm = register_module("mlp_norm", std::make_shared<LayerNorm>(E, c.norm_eps, true, c.norm_bias));
  Wi = register_module("mlp.Wi", std::make_shared<Linear>(E, 2 * F, c.mlp_bias, gen));
  mlp_Wo = register_module("mlp.Wo", std::make_shared<Linear>(F, E, c.mlp_bias, gen));
}

ResidualStream ModernBertLayer::forward(const ResidualStream& stream, const Tensor& cos, const Tensor& sin,
                                        const Tensor& mask, bool inference, Tensor* weights_out) const {
  const float p = is_training() ? dropout_p : 0.f;
  auto project = [inference](const Linear& l, const Tensor& x) {
    return inference ? l.forward_inference(x) : l.forward(x);
  };
  // x = the stream's sum, n = LN_a(x) in one pass (layer 0: n = x)
  SumAndNorm xn;
  if (attn_norm) {
    xn = attn_norm->forward_with_sum(stream);
  } else {
    xn.sum = stream.sum(), xn.normalized = xn.sum;
  }
  const int64_t B = xn.sum.size(0), T = xn.sum.size(1), E = xn.sum.size(2), D = E / heads;
  // q|k|v = Wqkv(n) [B, T, 3, H, D] → each [B, H, T, D]; q, k rotated by position
  const Tensor qkv = project(*Wqkv, xn.normalized).view({B, T, 3, heads, D});
  const Tensor q = apply_rotary_pos_emb(qkv.select(2, 0).transpose(1, 2), cos, sin);
  const Tensor k = apply_rotary_pos_emb(qkv.select(2, 1).transpose(1, 2), cos, sin);
  const Tensor v = qkv.select(2, 2).transpose(1, 2);
  AttentionOptions opt;
  opt.attn_mask = mask, opt.dropout_p = p, opt.generator = gen_;
  Tensor a;  // [B, H, T, D]
  if (weights_out) {
    AttentionResult r = scaled_dot_product_attention_with_weights(q, k, v, opt);
    a = r.output, *weights_out = r.weights;
  } else {
    a = scaled_dot_product_attention(q, k, v, opt);
  }
  const Tensor o = project(*Wo, a.transpose(1, 2).reshape({B, T, E}));  // [B, T, E]
  // h = x + Dropout(o), m = LN_m(h): one pass; then the MLP Wo'(Dropout(act(a) ⊙ g)), a|g = Wi(m), left
  // pending on the stream (no dropout of its own: ModernBertMLP drops before Wo', not after)
  const SumAndNorm hm = mlp_norm->forward_with_sum(xn.sum, o, p, gen_);
  const Tensor ag = project(*Wi, hm.normalized);  // [B, T, 2F]
  const int64_t F = ag.size(2) / 2;
  const Tensor gated = mul(activate(ag.slice(2, 0, F), activation), ag.slice(2, F, 2 * F));
  return {hm.sum, project(*mlp_Wo, dropout(gated, p, p > 0.f, gen_)), 0.f, gen_};
}

void ModernBertLayer::set_inference_weights(InferenceWeights weights) {
  for (auto* l : {&Wqkv, &Wo, &Wi, &mlp_Wo}) (*l)->set_inference_weights(weights);
}

// ---- the model -----------------------------------------------------------------------------------

ModernBert::ModernBert(const ModernBertConfig& c, Generator* gen)
    : config(c),
      global_rope_(rope_config(c, c.global_rope_theta)),
      local_rope_(rope_config(c, c.local_rope_theta)),
      gen_(gen) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t E = c.hidden_size;
  tok_embeddings = register_module("embeddings.tok_embeddings", std::make_shared<Embedding>(c.vocab_size, E, -1, &g));
  embeddings_norm = register_module("embeddings.norm", std::make_shared<LayerNorm>(E, c.norm_eps, true, c.norm_bias));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<ModernBertLayer>(c, i, &g)));
  final_norm = register_module("final_norm", std::make_shared<LayerNorm>(E, c.norm_eps, true, c.norm_bias));
  if (c.mlm_head || c.classifier != BertClassifier::none) {
    head_dense = register_module("head.dense", std::make_shared<Linear>(E, E, c.classifier_bias, &g));
    head_norm = register_module("head.norm", std::make_shared<LayerNorm>(E, c.norm_eps, true, c.norm_bias));
  }
  if (c.mlm_head && c.decoder_bias) decoder_bias = register_parameter("decoder_bias", Tensor::zeros({c.vocab_size}));
  if (c.classifier != BertClassifier::none)
    classifier = register_module("classifier", std::make_shared<Linear>(E, c.num_labels, true, &g));
  // ModernBERT's initialization (initializer_range 0.02): N(0, 0.02) for every matrix and the
  // embedding, zero biases, LayerNorms at 1 / 0.
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p.detach();
    if (name.find("norm") != std::string::npos) continue;
    if (p.dim() >= 2)
      init::normal_(t, g, 0.f, 0.02f);
    else
      init::zeros_(t);
  }
}

Tensor ModernBert::encode(const Tensor& ids, const Tensor& types, const Tensor& attention_mask,
                          AttentionMaps* maps) const {
  // y = LN_f(x_L) [B, T, E]
  return final_norm->forward(body(ids, types, attention_mask, static_cast<int64_t>(layers.size()), maps));
}

Tensor ModernBert::hidden_before(const Tensor& ids, int64_t layer) const {
  QKV_CHECK(layer >= 0 && layer <= static_cast<int64_t>(layers.size()), "ModernBERT: layer ", layer,
            " is out of range: the stream enters layers 0 … ", layers.size() - 1, " and leaves at ", layers.size());
  return body(ids, Tensor(), Tensor(), layer, nullptr).sum();
}

ResidualStream ModernBert::body(const Tensor& ids, const Tensor& types, const Tensor& attention_mask, int64_t upto,
                                AttentionMaps* maps) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "ModernBERT: input_ids must be i32 [B, T], got ",
            shape_str(ids.shape()));
  const int64_t B = ids.size(0), T = ids.size(1);
  QKV_CHECK(T >= 1 && T <= config.max_tokens(), "ModernBERT: ", T, " tokens, more than the model's ",
            config.max_tokens(), " positions (max_position_embeddings)");
  QKV_CHECK(!types.defined() || (types.shape() == ids.shape() && types.dtype() == DType::i32 &&
                                 types.to_ints() == std::vector<int32_t>(static_cast<size_t>(B * T), 0)),
            "ModernBERT: this model has no token types, and token_type_ids (", shape_str(types.shape()), ") holds one");
  // The global layers' mask: the padding [B, 1, 1, T] (true = key j may be attended to; undefined
  // without padding); the local layers': that and |i − j| ≤ local_attention / 2, [B, 1, T, T] with
  // padding (B·T² bytes: 2 MiB for 32 texts of 256 tokens), [T, T] without, undefined where every key
  // is within the window.
  const std::vector<bool> keep = tokens_kept(attention_mask, ids, "ModernBERT");
  Tensor global_mask, local_mask;
  if (std::find(keep.begin(), keep.end(), false) != keep.end())
    global_mask = Tensor::from_bools(keep, {B, 1, 1, T}).to(ids.device());
  const int64_t w = config.local_attention / 2;
  local_mask =
      T - 1 > w ? merge_attention_masks(global_mask, bidirectional_window_mask(T, w, ids.device())) : global_mask;
  const auto [gcos, gsin] = global_rope_.tables(0, T, ids.device());
  const auto [lcos, lsin] = local_rope_.tables(0, T, ids.device());

  // x₀ = Dropout(LN_e(tok_embeddings[ids]))   [B, T, E]
  const float p = is_training() ? config.dropout : 0.f;
  ResidualStream x{dropout(embeddings_norm->forward(tok_embeddings->forward(ids)), p, is_training(), gen_), Tensor()};
  const bool int8 = int8_layers_ && !is_training() && !autograd::grad_enabled() && !maps;
  for (size_t l = 0; l < static_cast<size_t>(upto); ++l) {
    const bool global = config.global(static_cast<int64_t>(l));
    Tensor weights;
    x = layers[l]->forward(x, global ? gcos : lcos, global ? gsin : lsin, global ? global_mask : local_mask, int8,
                           maps ? &weights : nullptr);
    if (maps) maps->encoder_self.push_back(weights);
  }
  return x;  // the stream entering layer `upto` (x_L for upto = L)
}

const RotaryEmbedding& ModernBert::rotary(int64_t layer) const {
  return config.global(layer) ? global_rope_ : local_rope_;
}

Tensor ModernBert::head(const Tensor& z) const {
  return head_norm->forward(
      activate(linear(z, head_dense->weight), config.classifier_activation, 0.f, nullptr, head_dense->bias));
}

Tensor ModernBert::forward(const Tensor& ids, const Tensor& types, const Tensor& attention_mask,
                           AttentionMaps* maps) const {
  // logits = head(y) tok_embeddingsᵀ + decoder_bias   [B, T, V]
  const auto [weight, bias] = mlm_decoder();
  return linear(head(encode(ids, types, attention_mask, maps)), weight, bias);
}

namespace {
constexpr const char* kNoMlmHead =
    "ModernBERT: this model has no masked-language-model head (a ModernBertModel: hidden states only; fill-mask "
    "needs a ModernBertForMaskedLM)";
}  // namespace

Tensor ModernBert::mlm_transform(const Tensor& hidden) const {
  QKV_CHECK(config.mlm_head, kNoMlmHead);
  return head(hidden);
}

std::pair<Tensor, Tensor> ModernBert::mlm_decoder() const {
  QKV_CHECK(config.mlm_head, kNoMlmHead);
  return {tok_embeddings->weight, decoder_bias};
}

Tensor ModernBert::classify(const Tensor& ids, const Tensor& types, const Tensor& attention_mask,
                            AttentionMaps* maps) const {
  QKV_CHECK(classifier,
            "ModernBERT: this model has no classifier (convert a …ForSequenceClassification, "
            "…ForTokenClassification or …ForQuestionAnswering folder)");
  const Tensor y = encode(ids, types, attention_mask, maps);  // [B, T, E]
  const float p = is_training() ? config.dropout : 0.f;
  if (!pools_sequence(config.classifier))
    return classifier->forward(dropout(head(y), p, is_training(), gen_));  // [B, T, num_labels]
  Tensor pooled;                                                           // [B, E]
  if (config.classifier_pooling == BertPooling::cls) {
    pooled = y.select(1, 0);
  } else if (!attention_mask.defined()) {
    pooled = mean(y, {1});
  } else {
    // Σ_t m_t y_t / Σ_t m_t
    const Tensor m = attention_mask.to(DType::f32).unsqueeze(-1);  // [B, T, 1]
    pooled = div(sum(mul(y, m), {1}), sum(m, {1}));
  }
  return classifier->forward(dropout(head(pooled), p, is_training(), gen_));  // [B, num_labels]
}

std::vector<Tensor> ModernBert::layer_matrices() const {
  std::vector<Tensor> out;
  for (const auto& l : layers)
    for (const Tensor& w : {l->Wqkv->weight, l->Wo->weight, l->Wi->weight, l->mlp_Wo->weight}) out.push_back(w);
  return out;
}

void ModernBert::set_inference_weights(InferenceWeights weights) {
  int8_layers_ = weights == InferenceWeights::int8 && tok_embeddings->weight.device().is_cpu();
  for (const auto& l : layers) l->set_inference_weights(int8_layers_ ? InferenceWeights::int8 : InferenceWeights::f32);
}

std::vector<Tensor> ModernBert::int8_only_weights() const {
  return int8_layers_ ? layer_matrices() : std::vector<Tensor>{};
}
std::vector<Tensor> ModernBert::int8_file_weights() const { return layer_matrices(); }

}  // namespace qkv::nn
