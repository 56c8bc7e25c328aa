#include "qkv/nn/transformer.h"

#include "qkv/nn/static_decoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/init.h"
#include "qkv/nn/static_decoding.h"
#include "qkv/ops.h"
#include "qkv/ops/embedding.h"

namespace qkv::nn {

// ---- encoder, decoder, Transformer -----------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& opt, int64_t n, Generator* gen, bool final_norm) {
  QKV_CHECK(n >= 1, "TransformerEncoder: num_layers must be at least 1, got ", n);
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<TransformerEncoderLayer>(opt, gen)));
  if (final_norm)
    norm = register_module("norm", std::make_shared<LayerNorm>(opt.d_model, opt.layer_norm_eps, true, opt.bias));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& kpm, std::vector<Tensor>* weights) const {
  const auto& o = layers[0]->opt;
  const bool batched = src.dim() == 3;
  const int64_t B = batched ? src.size(o.batch_first ? 0 : 1) : 1, S = src.size(batched && o.batch_first ? 1 : 0);
  const Tensor kpm_b = batched || !kpm.defined() ? kpm : kpm.unsqueeze(0);
  return forward_masked(src, mha_attention_mask(Tensor(), kpm_b, B, o.nhead, S, S), weights);
}

Tensor TransformerEncoder::forward_masked(const Tensor& src, const Tensor& mask, std::vector<Tensor>* weights) const {
  Tensor x = src;
  for (auto& layer : layers) {
    Tensor w;
    x = layer->forward_masked(x, mask, false, weights ? &w : nullptr);
    if (weights) weights->push_back(w);
  }
  return norm ? norm->forward(x) : x;
}

Tensor TransformerEncoder::forward_inference(const Tensor& src, const Tensor& mask) const {
  Tensor x = src;
  for (auto& layer : layers) x = layer->forward_inference(x, mask);
  return norm ? norm->forward(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& opt, int64_t n, Generator* gen, bool final_norm) {
  QKV_CHECK(n >= 1, "TransformerDecoder: num_layers must be at least 1, got ", n);
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<TransformerDecoderLayer>(opt, gen)));
  if (final_norm)
    norm = register_module("norm", std::make_shared<LayerNorm>(opt.d_model, opt.layer_norm_eps, true, opt.bias));
}

// Target padding needs no mask here: padding only follows a sentence's EOS, and the causal mask
// already hides later positions from every real one (padded positions are ignored by the loss).
Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& memory_kpm,
                                   std::vector<Tensor>* self_w, std::vector<Tensor>* cross_w) const {
  const auto& o = layers[0]->opt;
  const bool batched = tgt.dim() == 3;
  const int64_t B = batched ? tgt.size(o.batch_first ? 0 : 1) : 1, T = tgt.size(batched && o.batch_first ? 1 : 0),
                S = memory.size(batched && o.batch_first ? 1 : 0);
  const Tensor kpm_b = batched || !memory_kpm.defined() ? memory_kpm : memory_kpm.unsqueeze(0);
  return forward_masked(tgt, memory, mha_attention_mask(Tensor(), kpm_b, B, o.nhead, T, S), self_w, cross_w);
}

Tensor TransformerDecoder::forward_masked(const Tensor& tgt, const Tensor& memory, const Tensor& memory_mask,
                                          std::vector<Tensor>* self_w, std::vector<Tensor>* cross_w) const {
  Tensor x = tgt;
  for (auto& layer : layers) {
    Tensor sw, cw;
    x = layer->forward_masked(x, memory, Tensor(), memory_mask, /*tgt_is_causal=*/true, self_w ? &sw : nullptr,
                              cross_w ? &cw : nullptr);
    if (self_w) self_w->push_back(sw);
    if (cross_w) cross_w->push_back(cw);
  }
  return norm ? norm->forward(x) : x;
}

Transformer::Transformer(const TransformerLayerOptions& opt, int64_t ne, int64_t nd, Generator* gen, bool final_norm) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(opt, ne, gen, final_norm));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(opt, nd, gen, final_norm));
}

// ---- config --------------------------------------------------------------------------------------

Seq2SeqConfig Seq2SeqConfig::preset(const std::string& name) {
  Seq2SeqConfig c;
  if (name == "base") return c;
  if (name == "small") {
    c.d_model = 256, c.nhead = 8, c.num_encoder_layers = 3, c.num_decoder_layers = 3, c.dim_feedforward = 1024;
    return c;
  }
  if (name == "tiny") {
    c.d_model = 128, c.nhead = 4, c.num_encoder_layers = 2, c.num_decoder_layers = 2, c.dim_feedforward = 512;
    return c;
  }
  QKV_CHECK(false, "Transformer: unknown preset \"", name, "\" (expected base, small or tiny)");
  return c;
}

const io::Fields<Seq2SeqConfig>& Seq2SeqConfig::fields() {
  using F = io::Fields<Seq2SeqConfig>;
  static const F f("Transformer config",
                   {
                       F::handled_elsewhere("preset"),
                       F::integer("vocab_size", &Seq2SeqConfig::vocab_size, 5),
                       F::integer("d_model", &Seq2SeqConfig::d_model, 2),
                       F::integer("nhead", &Seq2SeqConfig::nhead, 1),
                       F::integer("num_encoder_layers", &Seq2SeqConfig::num_encoder_layers, 1),
                       F::integer("num_decoder_layers", &Seq2SeqConfig::num_decoder_layers, 1),
                       F::integer("dim_feedforward", &Seq2SeqConfig::dim_feedforward, 1),
                       F::number("dropout", &Seq2SeqConfig::dropout, 0, 1, /*hi_open=*/true),
                       F::choice("activation", &Seq2SeqConfig::activation),
                       F::boolean("norm_first", &Seq2SeqConfig::norm_first),
                       F::choice("positions", &Seq2SeqConfig::positions),
                       F::integer("max_len", &Seq2SeqConfig::max_len, 2),
                       F::integer("pad_id", &Seq2SeqConfig::pad_id, 0, INT32_MAX),
                       F::integer("bos_id", &Seq2SeqConfig::bos_id, 0, INT32_MAX),
                       F::integer("eos_id", &Seq2SeqConfig::eos_id, 0, INT32_MAX),
                       F::boolean("final_norm", &Seq2SeqConfig::final_norm),
                       F::boolean("logits_bias", &Seq2SeqConfig::logits_bias),
                       F::boolean("scale_embedding", &Seq2SeqConfig::scale_embedding),
                   });
  return f;
}

nlohmann::json Seq2SeqConfig::to_json() const { return fields().to_json(*this); }

Seq2SeqConfig Seq2SeqConfig::from_json(const nlohmann::json& j) {
  QKV_CHECK(j.is_object(), "Transformer config: expected a JSON object, got ", j.dump());
  const auto preset_name = j.find("preset");
  QKV_CHECK(preset_name == j.end() || preset_name->is_string(), "Transformer config: \"preset\" must be base, small or "
            "tiny, got ", preset_name->dump());
  Seq2SeqConfig c = fields().from_json(j, preset(preset_name == j.end() ? "base" : preset_name->get<std::string>()));
  QKV_CHECK(c.d_model % c.nhead == 0, "Transformer config: d_model ", c.d_model, " must be a multiple of nhead ",
            c.nhead);
  QKV_CHECK(c.positions == Positions::learned || c.d_model % 2 == 0,
            "Transformer config: sinusoidal positions need an even d_model");
  for (auto [name, id] : {std::pair{"pad_id", c.pad_id}, std::pair{"bos_id", c.bos_id}, std::pair{"eos_id", c.eos_id}})
    QKV_CHECK(id < c.vocab_size, "Transformer config: ", name, " ", id, " is outside the vocabulary of ", c.vocab_size);
  // EOS is what ends a search; one that is also the padding is masked as padding and never ends it
  QKV_CHECK(c.eos_id != c.pad_id, "Transformer config: eos_id ", c.eos_id, " is also the pad_id");
  return c;
}

std::string Seq2SeqConfig::describe() const {
  return detail::concat("Transformer ", num_encoder_layers, "+", num_decoder_layers, " layers, d_model ", d_model, ", ",
                        nhead, " heads, d_ff ", dim_feedforward, ", vocab ", vocab_size);
}

TransformerLayerOptions Seq2SeqConfig::layer_options() const {
  TransformerLayerOptions o;
  o.d_model = d_model, o.nhead = nhead, o.dim_feedforward = dim_feedforward, o.dropout = dropout;
  o.activation = activation, o.norm_first = norm_first, o.batch_first = true, o.bias = true;
  return o;
}

// ---- the translation model -----------------------------------------------------------------------

Seq2SeqTransformer::Seq2SeqTransformer(const Seq2SeqConfig& c, Generator* gen) : config(c), gen_(gen) {
  Generator& g = gen ? *gen : default_generator();
  embedding = register_module("embedding", std::make_shared<Embedding>(c.vocab_size, c.d_model, -1, &g));
  pos = register_module("pos_embedding", std::make_shared<PositionalEncoding>(c.max_len, c.d_model, c.positions, &g));
  transformer = register_module("transformer", std::make_shared<Transformer>(c.layer_options(), c.num_encoder_layers,
                                                                            c.num_decoder_layers, gen, c.final_norm));
  // Initialization as torch.nn.Transformer (Xavier-uniform for every matrix of the layers) and
  // N(0, d_model^−½) for the shared embedding, so that E·√d_model has unit scale.
  for (auto& [name, p] : transformer->named_parameters()) {
    Tensor t = p.detach();
    if (p.dim() >= 2) init::xavier_uniform_(t, g);
  }
  Tensor e = embedding->weight.detach();
  init::normal_(e, g, 0.f, 1.f / std::sqrt(static_cast<float>(c.d_model)));
  if (c.logits_bias) final_logits_bias = register_parameter("final_logits_bias", Tensor::zeros({1, c.vocab_size}));
}

Tensor Seq2SeqTransformer::logits(const Tensor& h, bool inference) const {
  Tensor b = final_logits_bias.defined() ? final_logits_bias.view({config.vocab_size}) : Tensor();
  return inference ? linear_inference(h, embedding->weight, embedding_inference, b) : linear(h, embedding->weight, b);
}

Tensor Seq2SeqTransformer::source_mask(const Tensor& src) const {
  QKV_CHECK(src.dim() == 2 && src.dtype() == DType::i32, "Transformer: token ids must be i32 [B, S], got ",
            shape_str(src.shape()));
  return attention_mask_from_padding(eq(src, static_cast<float>(config.pad_id)));  // [B, 1, 1, S]
}

Tensor Seq2SeqTransformer::embed(const Tensor& ids, int64_t pos0, bool inference) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "Transformer: token ids must be i32 [B, L], got ",
            shape_str(ids.shape()));
  // (ids follow the model: a batch made on the host meets weights on a GPU here)
  const Tensor on_device = ids.to(embedding->weight.device());
  Tensor x = inference ? qkv::embedding_inference(on_device, embedding->weight, embedding_inference)
                       : embedding->forward(on_device);
  if (config.scale_embedding) x = mul(x, std::sqrt(static_cast<float>(config.d_model)));
  return dropout(x + pos->forward(ids.size(1), pos0), config.dropout, is_training(), gen_);
}

Seq2SeqTransformer::Encoded Seq2SeqTransformer::encode(const Tensor& src, std::vector<Tensor>* weights,
                                                       bool inference) const {
  Encoded e;
  const Tensor on_device = src.to(embedding->weight.device());  // the sources follow the model
  e.mask = source_mask(on_device);
  e.memory = inference && !weights ? transformer->encoder->forward_inference(embed(on_device, 0, true), e.mask)
                                   : transformer->encoder->forward_masked(embed(on_device, 0, inference), e.mask, weights);
  return e;
}

Tensor Seq2SeqTransformer::decoded(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps) const {
  QKV_CHECK(src.dim() == 2 && tgt_in.dim() == 2 && src.size(0) == tgt_in.size(0), "Transformer: src ",
            shape_str(src.shape()), " and tgt ", shape_str(tgt_in.shape()), " must be [B, S] and [B, T]");
  const Encoded e = encode(src, maps ? &maps->encoder_self : nullptr);
  return transformer->decoder->forward_masked(embed(tgt_in, 0), e.memory, e.mask,
                                              maps ? &maps->decoder_self : nullptr, maps ? &maps->cross : nullptr);
}

Tensor Seq2SeqTransformer::forward(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps) const {
  return logits(decoded(src, tgt_in, maps), false);  // logits = h Eᵀ (+ bias)
}

Tensor Seq2SeqTransformer::loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float eps) const {
  QKV_CHECK(tgt_out.shape() == tgt_in.shape(), "Transformer::loss: tgt_out ", shape_str(tgt_out.shape()),
            " should match tgt_in ", shape_str(tgt_in.shape()));
  // cross_entropy(h Eᵀ + b, tgt_out), without the logits (ops/loss.h's linear_cross_entropy)
  const Tensor h = decoded(src, tgt_in, nullptr);  // [B, T, E]
  const Tensor b = final_logits_bias.defined() ? final_logits_bias.view({config.vocab_size}) : Tensor();
  return linear_cross_entropy(h.reshape({-1, h.size(-1)}), embedding->weight, tgt_out.to(h.device()).reshape({-1}), b,
                              config.pad_id, eps);
}

// ---- decoding ------------------------------------------------------------------------------------

int64_t Seq2SeqTransformer::DecoderState::rows() const {
  if (fixed) return fixed->rows();
  if (use_cache) return static_cast<int64_t>(row_source.size());
  return memory_mask.defined() ? memory_mask.size(0) : 0;
}

int64_t Seq2SeqTransformer::DecoderState::length() const {
  if (fixed) return fixed->length();
  if (!use_cache) return prefix.empty() ? 0 : static_cast<int64_t>(prefix[0].size());
  return self.empty() ? 0 : self[0].length;
}

void Seq2SeqTransformer::DecoderState::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  if (fixed) return fixed->reorder(index);  // (the sources' pages stay: rows name their source)
  if (!use_cache) {
    std::vector<std::vector<int32_t>> p;
    for (int64_t i : index) p.push_back(prefix[static_cast<size_t>(i)]);
    prefix = std::move(p);
    if (!sources_changed) return;
    memory_mask = index_select(memory_mask, 0, index);
    memory = index_select(memory, 0, index);  // the rows follow their hypotheses
    return;
  }
  for (auto& c : self) c.reorder(index);
  std::vector<int64_t> rs;
  for (int64_t i : index) {
    QKV_CHECK(0 <= i && i < static_cast<int64_t>(row_source.size()), "DecoderState::reorder: row ", i, " of ",
              row_source.size());
    rs.push_back(row_source[static_cast<size_t>(i)]);
  }
  row_source = std::move(rs);
  if (!sources_changed) return;
  // Keep the sources still decoded, in the order their rows first appear; the source side moves
  // only when that is not already its order (a sentence finished, or rows changed source).
  std::vector<int64_t> kept, renumber(static_cast<size_t>(memory_mask.size(0)), -1);
  for (int64_t& s : row_source) {
    int64_t& n = renumber[static_cast<size_t>(s)];
    if (n < 0) n = static_cast<int64_t>(kept.size()), kept.push_back(s);
    s = n;
  }
  bool same = static_cast<int64_t>(kept.size()) == memory_mask.size(0);
  for (size_t j = 0; same && j < kept.size(); ++j) same = kept[j] == static_cast<int64_t>(j);
  if (same) return;
  for (auto& c : cross) c.reorder(kept);
  memory_mask = index_select(memory_mask, 0, kept);
}

// Whether rows come in equal consecutive groups per source, in source order (row r of G per group
// reads source r / G): the shared source side serves them as is. Otherwise it is expanded, once,
// to one row per hypothesis.
void Seq2SeqTransformer::DecoderState::group_sources() {
  const auto R = static_cast<int64_t>(row_source.size()), B = memory_mask.size(0);
  bool grouped = B > 0 && R % B == 0;
  for (int64_t r = 0; grouped && r < R; ++r) grouped = row_source[static_cast<size_t>(r)] == r / (R / B);
  if (grouped) return;
  for (auto& c : cross) c.reorder(row_source);
  memory_mask = index_select(memory_mask, 0, row_source);
  for (int64_t r = 0; r < R; ++r) row_source[static_cast<size_t>(r)] = r;
}

Seq2SeqTransformer::DecoderState Seq2SeqTransformer::start_static_decoding(const Tensor& src, bool graphs) const {
  // (a model or sources it cannot decode: StaticBatch says why)
  static std::mutex mu;  // (static_decoder_ is read and replaced by any thread that decodes)
  std::shared_ptr<StaticDecoder> d;
  std::unique_lock<std::mutex> hold;
  {
    std::lock_guard<std::mutex> lock(mu);
    d = static_decoder_;
    if (!d || &d->model() != this || d->graphs_asked() != graphs) d = static_decoder_ = std::make_shared<StaticDecoder>(*this, graphs);
    hold = d->claim();
  }
  if (!hold.owns_lock()) {  // another batch decodes with it: pools of this batch's own
    d = std::make_shared<StaticDecoder>(*this, graphs);
    hold = d->claim();
  }
  DecoderState s;
  s.fixed = std::make_shared<StaticBatch>(d, std::move(hold), src);
  return s;
}

Seq2SeqTransformer::DecoderState Seq2SeqTransformer::start_decoding(const Tensor& src, bool use_cache) const {
  NoGradGuard no_grad;
  bool graphs = false;
  if (use_cache && static_decoding_wanted(embedding->weight.device(), &graphs) &&
      static_decoding_refusal(*this, src).empty())
    return start_static_decoding(src, graphs);
  const Encoded e = encode(src, nullptr, /*inference=*/true);
  DecoderState s;
  s.use_cache = use_cache;
  s.memory_mask = e.mask;
  if (!use_cache) {  // the baseline: keep the memory, recompute the decoder over each row's prefix
    s.memory = e.memory;
    s.prefix.assign(static_cast<size_t>(src.size(0)), {});
    return s;
  }
  const auto& layers = transformer->decoder->layers;
  s.self.assign(layers.size(), KVCache{});
  for (auto& layer : layers) s.cross.push_back(layer->multihead_attn->project_kv(e.memory, e.memory));
  s.row_source.resize(static_cast<size_t>(src.size(0)));
  for (size_t r = 0; r < s.row_source.size(); ++r) s.row_source[r] = static_cast<int64_t>(r);
  return s;
}

Tensor Seq2SeqTransformer::step(const std::vector<int32_t>& tokens, DecoderState& s) const {
  NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(tokens.size());
  QKV_CHECK(n == s.rows(), "Transformer::step: ", n, " tokens for ", s.rows(), " decoder rows");
  if (s.fixed) return s.fixed->step(tokens);
  if (!s.use_cache) {
    // Recompute: run the decoder over every row's whole prefix, keep the last position.
    for (size_t r = 0; r < s.prefix.size(); ++r) s.prefix[r].push_back(tokens[r]);  // the first step feeds BOS
    const auto T = static_cast<int64_t>(s.prefix[0].size());
    std::vector<int32_t> flat;
    for (auto& p : s.prefix) flat.insert(flat.end(), p.begin(), p.end());
    Tensor h = transformer->decoder->forward_masked(embed(Tensor::from_ints(flat, {n, T}), 0, true), s.memory,
                                                    s.memory_mask);
    return log_softmax(logits(h.select(1, T - 1), false), -1);
  }
  s.group_sources();
  Tensor x = embed(Tensor::from_ints(tokens, {n, 1}), s.self[0].length, true);
  const auto& layers = transformer->decoder->layers;
  for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->forward_cached(x, s.self[i], s.cross[i], s.memory_mask);
  Tensor h = transformer->decoder->final_norm(x.select(1, 0));
  Tensor b = final_logits_bias.defined() ? final_logits_bias.view({config.vocab_size}) : Tensor();
  return linear_log_softmax_inference(h, embedding->weight, embedding_inference, b);  // log_softmax(h Eᵀ (+ b))
}

void Seq2SeqTransformer::set_inference_weights(InferenceWeights weights) {
  for (auto& l : transformer->decoder->layers) l->set_inference_weights(weights);
  embedding_inference = InferenceWeight(embedding->weight, weights);
  // the encoder on int8 only with 8-bit activations; otherwise (and with f32 or bf16) the training
  // path's f32 products, no copies
  int8_encoder_ = weights == InferenceWeights::int8 && int8_activation_bits() == 8 &&
                  embedding->weight.device().is_cpu();
  for (auto& l : transformer->encoder->layers) {
    if (int8_encoder_)
      l->set_inference_weights(InferenceWeights::int8);
    else
      l->clear_inference_weights();
  }
}

// The decoder's matrices and the embedding (and the encoder's, with `encoder`); none where the
// decoder's attention has separate q/k/v projections (not this model's decoding path), and not the
// encoder's where its attention has them (its projections then read f32: MultiheadAttention::project).
std::vector<Tensor> Seq2SeqTransformer::int8_weights(bool encoder) const {
  std::vector<Tensor> out{embedding->weight};
  auto add = [&](const auto& layers, auto attentions) {
    for (const auto& l : layers) {
      for (const MultiheadAttention* a : attentions(*l)) {
        if (!a->in_proj_weight.defined()) return false;
        out.push_back(a->in_proj_weight);
        out.push_back(a->out_proj->weight);
      }
      out.push_back(l->linear1->weight);
      out.push_back(l->linear2->weight);
    }
    return true;
  };
  if (!add(transformer->decoder->layers, [](const TransformerDecoderLayer& l) {
        return std::array<const MultiheadAttention*, 2>{l.self_attn.get(), l.multihead_attn.get()};
      }))
    return {};
  const size_t decoder_end = out.size();
  if (encoder && !add(transformer->encoder->layers, [](const TransformerEncoderLayer& l) {
        return std::array<const MultiheadAttention*, 1>{l.self_attn.get()};
      }))
    out.resize(decoder_end);
  return out;
}

std::vector<Tensor> Seq2SeqTransformer::int8_only_weights() const { return int8_weights(int8_encoder_); }
std::vector<Tensor> Seq2SeqTransformer::int8_file_weights() const { return int8_weights(true); }

}  // namespace qkv::nn
