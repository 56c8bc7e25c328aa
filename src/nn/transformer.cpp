#include "qkv/nn/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

// ---- encoder, decoder, Transformer -----------------------------------------------------------------

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& opt, int64_t n, Generator* gen) {
  QKV_CHECK(n >= 1, "TransformerEncoder: num_layers must be at least 1, got ", n);
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<TransformerEncoderLayer>(opt, gen)));
  norm = register_module("norm", std::make_shared<LayerNorm>(opt.d_model, opt.layer_norm_eps, true, opt.bias));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& kpm, std::vector<Tensor>* weights) const {
  Tensor x = src;
  for (auto& layer : layers) {
    Tensor w;
    x = layer->forward(x, Tensor(), kpm, false, weights ? &w : nullptr);
    if (weights) weights->push_back(w);
  }
  return norm->forward(x);
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& opt, int64_t n, Generator* gen) {
  QKV_CHECK(n >= 1, "TransformerDecoder: num_layers must be at least 1, got ", n);
  for (int64_t i = 0; i < n; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<TransformerDecoderLayer>(opt, gen)));
  norm = register_module("norm", std::make_shared<LayerNorm>(opt.d_model, opt.layer_norm_eps, true, opt.bias));
}

// Target padding needs no mask here: padding only follows a sentence's EOS, and the causal mask
// already hides later positions from every real one (padded positions are ignored by the loss).
Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& memory_kpm,
                                   std::vector<Tensor>* self_w, std::vector<Tensor>* cross_w) const {
  Tensor x = tgt;
  for (auto& layer : layers) {
    Tensor sw, cw;
    x = layer->forward(x, memory, Tensor(), Tensor(), Tensor(), memory_kpm, /*tgt_is_causal=*/true,
                       self_w ? &sw : nullptr, cross_w ? &cw : nullptr);
    if (self_w) self_w->push_back(sw);
    if (cross_w) cross_w->push_back(cw);
  }
  return norm->forward(x);
}

Transformer::Transformer(const TransformerLayerOptions& opt, int64_t ne, int64_t nd, Generator* gen) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(opt, ne, gen));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(opt, nd, gen));
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

nlohmann::json Seq2SeqConfig::to_json() const {
  return {{"vocab_size", vocab_size},
          {"d_model", d_model},
          {"nhead", nhead},
          {"num_encoder_layers", num_encoder_layers},
          {"num_decoder_layers", num_decoder_layers},
          {"dim_feedforward", dim_feedforward},
          {"dropout", dropout},
          {"activation", activation},
          {"norm_first", norm_first},
          {"positions", positions},
          {"max_len", max_len},
          {"pad_id", pad_id},
          {"bos_id", bos_id},
          {"eos_id", eos_id}};
}

Seq2SeqConfig Seq2SeqConfig::from_json(const nlohmann::json& j) {
  QKV_CHECK(j.is_object(), "Transformer config: expected a JSON object, got ", j.dump());
  Seq2SeqConfig c = preset(j.value("preset", std::string("base")));
  for (auto& [key, v] : j.items()) {
    auto pos_int = [&](auto& dst, int64_t lo) {
      QKV_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo, "Transformer config: \"", key,
                "\" must be an integer ≥ ", lo, ", got ", v.dump());
      dst = static_cast<std::remove_reference_t<decltype(dst)>>(v.get<int64_t>());
    };
    if (key == "preset") continue;
    if (key == "vocab_size") pos_int(c.vocab_size, 5);
    else if (key == "d_model") pos_int(c.d_model, 2);
    else if (key == "nhead") pos_int(c.nhead, 1);
    else if (key == "num_encoder_layers") pos_int(c.num_encoder_layers, 1);
    else if (key == "num_decoder_layers") pos_int(c.num_decoder_layers, 1);
    else if (key == "dim_feedforward") pos_int(c.dim_feedforward, 1);
    else if (key == "max_len") pos_int(c.max_len, 2);
    else if (key == "pad_id") pos_int(c.pad_id, 0);
    else if (key == "bos_id") pos_int(c.bos_id, 0);
    else if (key == "eos_id") pos_int(c.eos_id, 0);
    else if (key == "dropout") {
      QKV_CHECK(v.is_number() && v.get<double>() >= 0 && v.get<double>() < 1,
                "Transformer config: \"dropout\" must be in [0, 1), got ", v.dump());
      c.dropout = v.get<float>();
    } else if (key == "activation") {
      QKV_CHECK(v == "relu" || v == "gelu", "Transformer config: \"activation\" must be \"relu\" or \"gelu\", got ",
                v.dump());
      c.activation = v.get<std::string>();
    } else if (key == "positions") {
      QKV_CHECK(v == "sinusoidal" || v == "learned",
                "Transformer config: \"positions\" must be \"sinusoidal\" or \"learned\", got ", v.dump());
      c.positions = v.get<std::string>();
    } else if (key == "norm_first") {
      QKV_CHECK(v.is_boolean(), "Transformer config: \"norm_first\" must be true or false, got ", v.dump());
      c.norm_first = v.get<bool>();
    } else {
      QKV_CHECK(false, "Transformer config: unknown key \"", key,
                "\" (expected preset, vocab_size, d_model, nhead, num_encoder_layers, num_decoder_layers, "
                "dim_feedforward, dropout, activation, norm_first, positions, max_len, pad_id, bos_id, eos_id)");
    }
  }
  QKV_CHECK(c.d_model % c.nhead == 0, "Transformer config: d_model ", c.d_model, " must be a multiple of nhead ",
            c.nhead);
  QKV_CHECK(c.positions == "learned" || c.d_model % 2 == 0, "Transformer config: sinusoidal positions need an even d_model");
  for (auto [name, id] : {std::pair{"pad_id", c.pad_id}, std::pair{"bos_id", c.bos_id}, std::pair{"eos_id", c.eos_id}})
    QKV_CHECK(id < c.vocab_size, "Transformer config: ", name, " ", id, " is outside the vocabulary of ", c.vocab_size);
  return c;
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
  pos = register_module("pos_embedding", std::make_shared<PositionalEncoding>(c.max_len, c.d_model,
                                                                             c.positions == "learned", &g));
  transformer = register_module("transformer", std::make_shared<Transformer>(c.layer_options(), c.num_encoder_layers,
                                                                            c.num_decoder_layers, gen));
  // Initialization as torch.nn.Transformer (Xavier-uniform for every matrix of the layers) and
  // N(0, d_model^−½) for the shared embedding, so that E·√d_model has unit scale.
  for (auto& [name, p] : transformer->named_parameters()) {
    Tensor t = p.detach();
    if (p.dim() >= 2) init::xavier_uniform_(t, g);
  }
  Tensor e = embedding->weight.detach();
  init::normal_(e, g, 0.f, 1.f / std::sqrt(static_cast<float>(c.d_model)));
}

Tensor Seq2SeqTransformer::padding_mask(const Tensor& ids) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "Transformer: token ids must be i32 [B, L], got ",
            shape_str(ids.shape()));
  Tensor c = ids.contiguous();
  const int32_t* p = c.data<int32_t>();
  std::vector<bool> m(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < m.size(); ++i) m[i] = p[i] == config.pad_id;
  return Tensor::from_bools(m, ids.shape());
}

Tensor Seq2SeqTransformer::embed(const Tensor& ids, int64_t pos0) const {
  QKV_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "Transformer: token ids must be i32 [B, L], got ",
            shape_str(ids.shape()));
  Tensor x = mul(embedding->forward(ids), std::sqrt(static_cast<float>(config.d_model)));
  return dropout(x + pos->forward(ids.size(1), pos0), config.dropout, is_training(), gen_);
}

Tensor Seq2SeqTransformer::encode(const Tensor& src, Tensor* kpm_out, std::vector<Tensor>* weights) const {
  Tensor kpm = padding_mask(src);
  Tensor memory = transformer->encoder->forward(embed(src, 0), kpm, weights);
  if (kpm_out) *kpm_out = kpm;
  return memory;
}

Tensor Seq2SeqTransformer::forward(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps) const {
  QKV_CHECK(src.dim() == 2 && tgt_in.dim() == 2 && src.size(0) == tgt_in.size(0), "Transformer: src ",
            shape_str(src.shape()), " and tgt ", shape_str(tgt_in.shape()), " must be [B, S] and [B, T]");
  Tensor kpm;
  Tensor memory = encode(src, &kpm, maps ? &maps->encoder_self : nullptr);
  Tensor h = transformer->decoder->forward(embed(tgt_in, 0), memory, kpm, maps ? &maps->decoder_self : nullptr,
                                           maps ? &maps->cross : nullptr);
  return linear(h, embedding->weight);  // logits = h Eᵀ
}

Tensor Seq2SeqTransformer::loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float eps) const {
  QKV_CHECK(tgt_out.shape() == tgt_in.shape(), "Transformer::loss: tgt_out ", shape_str(tgt_out.shape()),
            " should match tgt_in ", shape_str(tgt_in.shape()));
  Tensor logits = forward(src, tgt_in);
  return cross_entropy(logits.reshape({-1, config.vocab_size}), tgt_out.reshape({-1}), config.pad_id, eps);
}

// ---- decoding ------------------------------------------------------------------------------------

Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& index) {
  Tensor src = t.contiguous();
  const int64_t n = src.size(0);
  const size_t row_bytes = static_cast<size_t>(src.numel() / std::max<int64_t>(n, 1)) * dtype_size(src.dtype());
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(index.size());
  Tensor out = Tensor::empty(shape, src.dtype());
  // data<T>() offsets in elements: take the first element's address with an element-sized T
  auto bytes = [](const Tensor& x) -> uint8_t* {
    switch (dtype_size(x.dtype())) {
      case 4: return reinterpret_cast<uint8_t*>(x.data<float>());
      case 2: return reinterpret_cast<uint8_t*>(x.data<uint16_t>());
      default: return x.data<uint8_t>();
    }
  };
  const uint8_t* from = bytes(src);
  uint8_t* to = bytes(out);
  for (size_t i = 0; i < index.size(); ++i) {
    QKV_CHECK(index[i] >= 0 && index[i] < n, "gather_rows: row ", index[i], " out of range for ", n, " rows");
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(index[i]) * row_bytes, row_bytes);
  }
  return out;
}

void DecoderState::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  for (auto& c : self) c.reorder(index);
  if (!sources_changed) return;
  for (auto& c : cross) c.reorder(index);
  memory_key_padding_mask = gather_rows(memory_key_padding_mask, index);
}

DecoderState Seq2SeqTransformer::start_decoding(const Tensor& memory, const Tensor& kpm) const {
  NoGradGuard no_grad;
  DecoderState s;
  s.memory_key_padding_mask = kpm.contiguous();
  const auto& layers = transformer->decoder->layers;
  s.self.assign(layers.size(), KVCache{});
  for (auto& layer : layers) s.cross.push_back(layer->multihead_attn->project_kv(memory, memory));
  return s;
}

Tensor Seq2SeqTransformer::step(const std::vector<int32_t>& tokens, DecoderState& s) const {
  NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(tokens.size());
  QKV_CHECK(n == s.rows(), "Transformer::step: ", n, " tokens for ", s.rows(), " decoder rows");
  Tensor x = embed(Tensor::from_ints(tokens, {n, 1}), s.self[0].length);
  const auto& layers = transformer->decoder->layers;
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers[i]->forward_cached(x, s.self[i], s.cross[i], s.memory_key_padding_mask);
  Tensor h = transformer->decoder->norm->forward(x.select(1, 0));
  return log_softmax(linear_inference(h, embedding->weight, embedding_bf16), -1);
}

void Seq2SeqTransformer::set_inference_dtype(DType dtype) {
  for (auto& l : transformer->encoder->layers) l->set_inference_dtype(dtype);
  for (auto& l : transformer->decoder->layers) l->set_inference_dtype(dtype);
  embedding_bf16 = dtype == DType::bf16 ? embedding->weight.detach().to(DType::bf16) : Tensor();
}

}  // namespace qkv::nn
