#include "qkv/nn/rnn_seq2seq.h"

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

// ---- config --------------------------------------------------------------------------------------

const io::Fields<RNNSeq2SeqConfig>& RNNSeq2SeqConfig::fields() {
  using F = io::Fields<RNNSeq2SeqConfig>;
  using C = RNNSeq2SeqConfig;
  static const F f("recurrent translator config",
                   {
                       F::integer("vocab_size", &C::vocab_size, 5),
                       F::integer("embedding_dim", &C::embedding_dim, 1, 1 << 16),
                       F::integer("hidden_size", &C::hidden_size, 1, 1 << 16),
                       F::integer("encoder_layers", &C::encoder_layers, 1, 64),
                       F::integer("decoder_layers", &C::decoder_layers, 1, 64),
                       F::boolean("bidirectional_encoder", &C::bidirectional_encoder),
                       F::choice("attention", &C::attention),
                       F::integer("attention_dim", &C::attention_dim, 0, 1 << 16),
                       F::boolean("input_feeding", &C::input_feeding),
                       F::boolean("scaled_score", &C::scaled_score),
                       F::number("dropout", &C::dropout, 0, 1, /*hi_open=*/true),
                       // a GRU has no position table to bound it: 4096 tokens, far past any sentence
                       F::integer("max_len", &C::max_len, 2, 4096),
                       F::integer("pad_id", &C::pad_id, 0, INT32_MAX),
                       F::integer("bos_id", &C::bos_id, 0, INT32_MAX),
                       F::integer("eos_id", &C::eos_id, 0, INT32_MAX),
                   });
  return f;
}

RNNSeq2SeqConfig RNNSeq2SeqConfig::from_json(const nlohmann::json& j) {
  RNNSeq2SeqConfig c = fields().from_json(j);
  const bool luong = c.attention == RecurrentAttention::dot || c.attention == RecurrentAttention::general;
  QKV_CHECK(!c.input_feeding || luong, "recurrent translator config: input_feeding is Luong's (attention dot or "
            "general), not ", enum_name(c.attention));
  QKV_CHECK(c.attention != RecurrentAttention::dot || c.encoder_width() == c.hidden_size,
            "recurrent translator config: dot scores need encoder states as wide as the decoder's (",
            c.encoder_width(), " vs hidden_size ", c.hidden_size, "): use \"general\", or a unidirectional encoder");
  for (auto [name, id] : {std::pair{"pad_id", c.pad_id}, std::pair{"bos_id", c.bos_id}, std::pair{"eos_id", c.eos_id}})
    QKV_CHECK(id < c.vocab_size, "recurrent translator config: ", name, " ", id, " is outside the vocabulary of ",
              c.vocab_size);
  // EOS is what ends a search; one that is also the padding is masked as padding and never ends it
  QKV_CHECK(c.eos_id != c.pad_id, "recurrent translator config: eos_id ", c.eos_id, " is also the pad_id");
  return c;
}

std::string RNNSeq2SeqConfig::describe() const {
  std::string a = attention == RecurrentAttention::none ? "no attention"
                                                        : std::string(enum_name(attention)) + " attention";
  if (input_feeding) a += " with input feeding";
  return detail::concat("GRU ", encoder_layers, "+", decoder_layers, " layers (", bidirectional_encoder ? "bi" : "uni",
                        "directional encoder), hidden ", hidden_size, ", embedding ", embedding_dim, ", ", a,
                        ", vocab ", vocab_size);
}

// ---- the model -----------------------------------------------------------------------------------

RNNSeq2Seq::RNNSeq2Seq(const RNNSeq2SeqConfig& c, Generator* gen) : config(c), gen_(gen) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t E = c.embedding_dim, H = c.hidden_size, K = c.encoder_width();
  const bool luong = c.attention == RecurrentAttention::dot || c.attention == RecurrentAttention::general;
  embedding = register_module("embedding", std::make_shared<Embedding>(c.vocab_size, E, -1, &g));
  // N(0, E^−½): the embedding is also the output projection (tied), whose logits then have unit scale
  Tensor ew = embedding->weight.detach();
  init::normal_(ew, g, 0.f, 1.f / std::sqrt(static_cast<float>(E)));
  RNNOptions eo;
  eo.input_size = E, eo.hidden_size = H, eo.num_layers = c.encoder_layers, eo.batch_first = true;
  eo.bidirectional = c.bidirectional_encoder, eo.dropout = c.dropout;
  encoder = register_module("encoder", std::make_shared<GRU>(eo, gen));
  // s_0 from the encoder's final states, unless it is the context vector itself (no attention, K = H)
  if (c.attention != RecurrentAttention::none || K != H)
    bridge = register_module("bridge", std::make_shared<Linear>(K, H, true, &g));
  RNNOptions dopt;
  dopt.input_size = c.attention == RecurrentAttention::none || c.attention == RecurrentAttention::additive
                        ? E + K
                        : E + (c.input_feeding ? H : 0);
  dopt.hidden_size = H, dopt.num_layers = c.decoder_layers, dopt.batch_first = true, dopt.dropout = c.dropout;
  decoder = register_module("decoder", std::make_shared<GRU>(dopt, gen));
  if (c.attention == RecurrentAttention::additive)
    attention = register_module("attention", std::make_shared<Alignment>(AlignmentScore::additive, H, K,
                                                                         c.attention_dim ? c.attention_dim : H, &g));
  if (luong) {
    attention = register_module("attention", std::make_shared<Alignment>(
                                                 c.attention == RecurrentAttention::dot ? AlignmentScore::dot
                                                                                        : AlignmentScore::general,
                                                 H, K, 0, &g));
    if (c.scaled_score) attention->scale = 1.f / std::sqrt(static_cast<float>(H));
    combine = register_module("combine", std::make_shared<Linear>(K + H, H, /*bias=*/false, &g));
  }
  readout = register_module("readout", std::make_shared<Linear>(luong ? H : E + H + K, E, true, &g));
}

RNNSeq2Seq::Encoded RNNSeq2Seq::encode(const Tensor& source) const {
  QKV_CHECK(source.dim() == 2 && source.dtype() == DType::i32, "recurrent translator: token ids must be i32 [B, S], got ",
            shape_str(source.shape()));
  const Tensor src = source.to(device());  // the sources follow the model (as the Transformer's)
  const int64_t B = src.size(0), S = src.size(1), H = config.hidden_size;
  const Tensor real = ne(src, static_cast<float>(config.pad_id));  // [B, S] true at real tokens
  std::vector<int64_t> lengths;  // (on the host: the scans' row lengths)
  for (float n : sum(real.to(DType::f32), {1}).to(Device::cpu()).to_vector()) lengths.push_back(static_cast<int64_t>(n));
  Encoded e;
  e.mask = real.view({B, 1, S});  // qkv's convention (true = may attend), [B, 1, S]
  auto r = encoder->forward(dropout(embedding->forward(src), config.dropout, is_training(), gen_), Tensor(), lengths);
  e.memory = r.output;  // [B, S, K], 0 at padding
  // the last layer's final states: forward (at each source's end) and backward (back at its start)
  const int64_t D = encoder->directions(), top = (config.encoder_layers - 1) * D;
  const Tensor last = D == 2 ? cat({r.h_n.select(0, top), r.h_n.select(0, top + 1)}, -1) : r.h_n.select(0, top);
  if (config.attention == RecurrentAttention::none) e.z = last;  // the single context vector
  const Tensor s0 = bridge ? tanh(bridge->forward(last)) : last;  // [B, H]
  e.s0 = s0.unsqueeze(0).expand({config.decoder_layers, B, H});
  if (attention) e.keys = attention->project_keys(e.memory);
  return e;
}

Tensor RNNSeq2Seq::decode_step(const Tensor& emb, const Encoded& enc, Tensor& s, Tensor& feed, Tensor* weights) const {
  const int64_t top = config.decoder_layers - 1;
  auto run = [&](const Tensor& x) { s = decoder->forward(x.unsqueeze(1), s).h_n; };  // one step of the GRU
  switch (config.attention) {
    case RecurrentAttention::none: {  // s_i = GRU([e; z], s_{i−1});  o = [e; s_i; z]
      run(cat({emb, enc.z}, -1));
      return cat({emb, s.select(0, top), enc.z}, -1);
    }
    case RecurrentAttention::additive: {  // c_i from s_{i−1};  s_i = GRU([e; c_i], s_{i−1});  o = [e; s_i; c_i]
      auto a = attention->forward(s.select(0, top).unsqueeze(1), enc.memory, enc.keys, enc.mask);
      const Tensor c = a.context.select(1, 0);
      if (weights) *weights = a.weights.select(1, 0);
      run(cat({emb, c}, -1));
      return cat({emb, s.select(0, top), c}, -1);
    }
    default: {  // Luong: s_i = GRU([e; h̃_{i−1}], s_{i−1});  c_i from s_i;  h̃_i = tanh(W_c [c_i; s_i])
      run(config.input_feeding ? cat({emb, feed}, -1) : emb);
      const Tensor st = s.select(0, top);
      auto a = attention->forward(st.unsqueeze(1), enc.memory, enc.keys, enc.mask);
      if (weights) *weights = a.weights.select(1, 0);
      const Tensor ht = tanh(combine->forward(cat({a.context.select(1, 0), st}, -1)));
      if (config.input_feeding) feed = ht;
      return ht;
    }
  }
}

Tensor RNNSeq2Seq::forward(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps) const {
  QKV_CHECK(src.dim() == 2 && tgt_in.dim() == 2 && src.size(0) == tgt_in.size(0), "recurrent translator: src ",
            shape_str(src.shape()), " and tgt ", shape_str(tgt_in.shape()), " must be [B, S] and [B, T]");
  const Encoded enc = encode(src);
  const int64_t B = tgt_in.size(0), T = tgt_in.size(1), H = config.hidden_size;
  const Tensor emb = dropout(embedding->forward(tgt_in.to(device())), config.dropout, is_training(), gen_);  // [B, T, E]
  Tensor o, w;  // the output layer's input [B, T, ·] and the alignments [B, T, S]
  const bool luong = config.attention == RecurrentAttention::dot || config.attention == RecurrentAttention::general;
  if (config.attention == RecurrentAttention::none) {
    // the decoder's input does not depend on its state: one fused scan over every step
    const Tensor z = enc.z.unsqueeze(1).expand({B, T, enc.z.size(-1)});
    const Tensor st = decoder->forward(cat({emb, z}, -1), enc.s0.contiguous()).output;
    o = cat({emb, st, z}, -1);
  } else if (luong && !config.input_feeding) {
    // likewise, and the alignments of every step in one batched product
    const Tensor st = decoder->forward(emb, enc.s0.contiguous()).output;  // [B, T, H]
    auto a = attention->forward(st, enc.memory, enc.keys, enc.mask);
    o = tanh(combine->forward(cat({a.context, st}, -1)));
    w = a.weights;
  } else {
    // the context of step i depends on the state of step i − 1: the decoder runs step by step
    Tensor s = enc.s0.contiguous(), feed = config.input_feeding ? Tensor::zeros({B, H}, DType::f32, device()) : Tensor();
    std::vector<Tensor> os, ws;
    for (int64_t t = 0; t < T; ++t) {
      Tensor wt;
      os.push_back(decode_step(emb.select(1, t), enc, s, feed, maps ? &wt : nullptr));
      if (maps) ws.push_back(wt);
    }
    o = stack(os, 1);
    if (maps) w = stack(ws, 1);
  }
  if (maps && w.defined()) maps->cross = {w.unsqueeze(1).detach()};  // [B, 1, T, S]: one layer, one head
  // logits = tanh(W_r o) Eᵀ
  return linear(tanh(readout->forward(dropout(o, config.dropout, is_training(), gen_))), embedding->weight);
}

Tensor RNNSeq2Seq::loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float eps) const {
  QKV_CHECK(tgt_out.shape() == tgt_in.shape(), "recurrent translator: tgt_out ", shape_str(tgt_out.shape()),
            " should match tgt_in ", shape_str(tgt_in.shape()));
  return cross_entropy(forward(src, tgt_in).reshape({-1, config.vocab_size}), tgt_out.to(device()).reshape({-1}),
                       config.pad_id, eps);
}

// ---- decoding ------------------------------------------------------------------------------------

int64_t RNNSeq2Seq::DecoderState::rows() const { return mask.defined() ? mask.size(0) : 0; }

void RNNSeq2Seq::DecoderState::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  if (!use_cache) {
    prefix.reorder(index);
  } else {
    s = index_select(s, 1, index);
    if (feed.defined()) feed = index_select(feed, 0, index);
  }
  if (!sources_changed) return;
  for (Tensor* t : {&memory, &keys, &mask, &src})
    if (t->defined()) *t = index_select(*t, 0, index);
}

RNNSeq2Seq::DecoderState RNNSeq2Seq::start_decoding(const Tensor& src, bool use_cache) const {
  NoGradGuard no_grad;
  DecoderState st;
  st.use_cache = use_cache;
  if (!use_cache) {  // the baseline: run the whole teacher-forced decoder over each prefix, every step
    st.src = src;
    st.mask = ne(src.to(device()), static_cast<float>(config.pad_id)).view({src.size(0), 1, src.size(1)});
    st.prefix = Prefixes(src.size(0));
    return st;
  }
  Encoded e = encode(src);
  st.s = e.s0.contiguous(), st.memory = e.memory, st.keys = e.keys, st.mask = e.mask;
  if (config.attention == RecurrentAttention::none) st.feed = e.z;
  if (config.input_feeding) st.feed = Tensor::zeros({src.size(0), config.hidden_size}, DType::f32, device());
  return st;
}

Tensor RNNSeq2Seq::step(const std::vector<int32_t>& tokens, DecoderState& st) const {
  NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(tokens.size());
  QKV_CHECK(n == st.rows(), "recurrent translator: ", n, " tokens for ", st.rows(), " decoder rows");
  ++st.fed;
  if (!st.use_cache) {
    const Tensor prefix = st.prefix.append(tokens);  // [n, T]
    return log_softmax(forward(st.src, prefix).select(1, prefix.size(1) - 1), -1);
  }
  Encoded e;
  e.memory = st.memory, e.keys = st.keys, e.mask = st.mask, e.z = st.feed;
  Tensor feed = st.feed;
  const Tensor o = decode_step(embedding->forward(Tensor::from_ints(tokens, {n}).to(device())), e, st.s, feed, nullptr);
  if (config.input_feeding) st.feed = feed;
  return log_softmax(linear_inference(tanh(readout->forward_inference(o)), embedding->weight, embedding_inference), -1);
}

void RNNSeq2Seq::set_inference_weights(InferenceWeights weights) {
  readout->set_inference_weights(weights);
  embedding_inference = InferenceWeight(embedding->weight, weights);
}

}  // namespace qkv::nn
