#include "qkv/nn/captioner.h"

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

// ---- config --------------------------------------------------------------------------------------

const io::Fields<CaptionerConfig>& CaptionerConfig::fields() {
  using F = io::Fields<CaptionerConfig>;
  using C = CaptionerConfig;
  static const F f("captioner config", {
                                           F::integer("in_channels", &C::in_channels, 1, 64),
                                           F::integer("image_height", &C::image_height, 1, 4096),
                                           F::integer("image_width", &C::image_width, 1, 4096),
                                           F::integers("channels", &C::channels, 1, 4096, 8),
                                           F::integers("blocks", &C::blocks, 1, 64, 8),
                                           F::numbers("mean", &C::mean, -1e3, 1e3, 64),
                                           F::numbers("std", &C::std, 1e-6, 1e3, 64),
                                           F::boolean("grid_positions", &C::grid_positions),
                                           F::integer("vocab_size", &C::vocab_size, 5),
                                           F::integer("embedding_dim", &C::embedding_dim, 1, 1 << 16),
                                           F::integer("hidden_size", &C::hidden_size, 1, 1 << 16),
                                           F::integer("attention_dim", &C::attention_dim, 0, 1 << 16),
                                           F::choice("attention", &C::attention),
                                           F::boolean("gate", &C::gate),
                                           F::number("doubly_stochastic", &C::doubly_stochastic, 0, 1e3),
                                           F::number("dropout", &C::dropout, 0, 1, /*hi_open=*/true),
                                           // a GRU has no position table to bound it: 4096 tokens, far past any
                                           // caption; 10⁹ with no EOS decoded for days (issue 43)
                                           F::integer("max_len", &C::max_len, 2, 4096),
                                           F::integer("pad_id", &C::pad_id, 0, INT32_MAX),
                                           F::integer("bos_id", &C::bos_id, 0, INT32_MAX),
                                           F::integer("eos_id", &C::eos_id, 0, INT32_MAX),
                                       });
  return f;
}

ConvNetConfig CaptionerConfig::encoder_config() const {
  ConvNetConfig c;
  c.in_channels = in_channels, c.image_height = image_height, c.image_width = image_width;
  c.num_classes = 0;
  c.channels = channels, c.blocks = blocks, c.mean = mean, c.std = std;
  return c;
}

std::array<int64_t, 2> CaptionerConfig::grid() const {
  int64_t h = image_height, w = image_width;
  for (size_t s = 1; s < channels.size(); ++s) h = (h + 1) / 2, w = (w + 1) / 2;  // 3×3, stride 2, padding 1
  return {h, w};
}

CaptionerConfig CaptionerConfig::from_json(const nlohmann::json& j) {
  CaptionerConfig c = fields().from_json(j);
  // the encoder's own checks (stages, mean/std per channel, the image not halved to nothing)
  try {
    ConvNetConfig::from_json(c.encoder_config().to_json());
  } catch (const Error& err) {
    throw Error(detail::concat("captioner config: its encoder's ", err.what()));  // "… convnet config: …"
  }
  QKV_CHECK(!c.gate || c.attention != CaptionAttention::none,
            "captioner config: the gate β scales the attention's context; without attention set \"gate\": false");
  for (auto [name, id] : {std::pair{"pad_id", c.pad_id}, std::pair{"bos_id", c.bos_id}, std::pair{"eos_id", c.eos_id}})
    QKV_CHECK(id < c.vocab_size, "captioner config: ", name, " ", id, " is outside the vocabulary of ", c.vocab_size);
  // EOS is what ends a search; one that is also the padding is masked as padding and never ends it
  QKV_CHECK(c.eos_id != c.pad_id, "captioner config: eos_id ", c.eos_id, " is also the pad_id");
  return c;
}

std::string CaptionerConfig::describe() const {
  const auto [h, w] = grid();
  std::string s = "captioner: ResNet ";
  for (size_t i = 0; i < channels.size(); ++i) {
    if (i) s += '-';
    s += std::to_string(channels[i]);
  }
  s += detail::concat(" → ", h, "×", w, " grid of ", feature_dim(), ", GRU ", hidden_size, ", embedding ",
                      embedding_dim, ", ");
  s += attention == CaptionAttention::none ? "no attention (mean feature)"
                                           : std::string("additive attention") + (gate ? " with gate β" : "");
  return s + (grid_positions ? ", grid positions" : "") + detail::concat(", vocab ", vocab_size);
}

// ---- the model -----------------------------------------------------------------------------------

Captioner::Captioner(const CaptionerConfig& c, Generator* gen) : config(c), gen_(gen) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t E = c.embedding_dim, H = c.hidden_size, D = c.feature_dim();
  encoder = register_module("encoder", std::make_shared<ConvNet>(c.encoder_config(), gen));
  if (c.grid_positions) {
    const auto [h, w] = c.grid();
    Tensor p = Tensor::empty({h * w, D});
    nn::init::normal_(p, g, 0.f, 0.02f);  // as GPT-2's learned positions
    positions = register_parameter("positions", p);
  }
  embedding = register_module("embedding", std::make_shared<Embedding>(c.vocab_size, E, -1, &g));
  // N(0, E^−½): the embedding is also the output projection (tied), whose logits then have unit scale
  Tensor ew = embedding->weight.detach();
  nn::init::normal_(ew, g, 0.f, 1.f / std::sqrt(static_cast<float>(E)));
  init = register_module("init", std::make_shared<Linear>(D, H, true, &g));
  if (c.attention == CaptionAttention::additive) {
    attention = register_module("attention", std::make_shared<Alignment>(AlignmentScore::additive, H, D,
                                                                         c.attention_dim ? c.attention_dim : H, &g));
    if (c.gate) gate = register_module("gate", std::make_shared<Linear>(H, 1, true, &g));
  }
  RNNOptions o;
  o.input_size = E + D, o.hidden_size = H, o.num_layers = 1, o.batch_first = true;
  decoder = register_module("decoder", std::make_shared<GRU>(o, gen));
  readout = register_module("readout", std::make_shared<Linear>(E + H + D, E, true, &g));
}

Captioner::Encoded Captioner::encode(const Tensor& images) const {
  // a = the trunk's grid, [B, D, h, w] → [B, L, D]
  const Tensor f = encoder->features(images);
  const int64_t B = f.size(0), D = f.size(1), L = f.size(2) * f.size(3);
  Encoded e;
  e.memory = f.reshape({B, D, L}).transpose(1, 2).contiguous();
  if (positions.defined()) {
    QKV_CHECK(positions.size(0) == L, "captioner: a grid of ", L, " cells, positions for ", positions.size(0));
    e.memory = add(e.memory, positions.unsqueeze(0));  // a_j + P_j
  }
  // ā = (1/L) Σ_j a_j;  s_0 = tanh(W_init ā)
  e.mean = mean(e.memory, {1});  // [B, D]
  e.s0 = tanh(init->forward(e.mean)).unsqueeze(0).contiguous();  // [1, B, H]
  if (attention) e.keys = attention->project_keys(e.memory);     // U a_j, [B, L, A]
  return e;
}

Tensor Captioner::decode_step(const Tensor& emb, const Encoded& enc, Tensor& s, Tensor* alpha) const {
  const Tensor prev = s.select(0, 0);  // s_{t−1} [B, H]
  Tensor z;                            // ẑ_t [B, D]
  if (attention) {
    // e_tj = vᵀ tanh(W s_{t−1} + U a_j), α_t = softmax_j(e_t), z_t = Σ_j α_tj a_j
    auto a = attention->forward(prev.unsqueeze(1), enc.memory, enc.keys, Tensor());
    z = a.context.select(1, 0);
    if (alpha) *alpha = a.weights.select(1, 0);  // [B, L]
    // β_t = σ(w_β · s_{t−1} + b_β), ẑ_t = β_t z_t
    if (gate) z = mul(z, sigmoid(gate->forward(prev)));
  } else {
    z = enc.mean;  // the baseline: ā at every step
  }
  // s_t = GRU([E y_{t−1}; ẑ_t], s_{t−1});  the output layer's input [E y_{t−1}; s_t; ẑ_t]
  s = decoder->forward(cat({emb, z}, -1).unsqueeze(1), s).h_n;
  return cat({emb, s.select(0, 0), z}, -1);
}

std::pair<Tensor, Tensor> Captioner::run(const Tensor& images, const Tensor& tgt_in) const {
  QKV_CHECK(images.dim() == 4 && tgt_in.dim() == 2 && tgt_in.dtype() == DType::i32 && images.size(0) == tgt_in.size(0),
            "captioner: images ", shape_str(images.shape()), " and captions ", shape_str(tgt_in.shape()),
            " must be [B, C, H, W] and i32 [B, T]");
  const Encoded enc = encode(images);
  const int64_t T = tgt_in.size(1);
  const Tensor emb = dropout(embedding->forward(tgt_in.to(device())), config.dropout, is_training(), gen_);  // [B, T, E]
  // the context of step t depends on the state of step t − 1: the decoder runs step by step
  Tensor s = enc.s0;
  std::vector<Tensor> os, as;
  for (int64_t t = 0; t < T; ++t) {
    Tensor a;
    os.push_back(decode_step(emb.select(1, t), enc, s, attention ? &a : nullptr));
    if (attention) as.push_back(a);
  }
  const Tensor o = stack(os, 1);  // [B, T, E + H + D]
  // logits = tanh(W_r o) Eᵀ
  Tensor logits = linear(tanh(readout->forward(dropout(o, config.dropout, is_training(), gen_))), embedding->weight);
  return {logits, attention ? stack(as, 1) : Tensor()};
}

Tensor Captioner::forward(const Tensor& images, const Tensor& tgt_in, AttentionMaps* maps) const {
  auto [logits, alpha] = run(images, tgt_in);
  if (maps && alpha.defined()) {
    const auto [h, w] = config.grid();
    maps->cross = {alpha.unsqueeze(1).detach()};  // [B, 1, T, L]
    maps->image_grids = {{h, w, h, w}};
  }
  return logits;
}

// λ · mean_{b,j} (1 − Σ_t α_btj)², t over the real words (real [B, T] is 1 at them, 0 at padding)
Tensor Captioner::doubly_stochastic_penalty(const Tensor& alpha, const Tensor& real) {
  QKV_CHECK(alpha.dim() == 3 && real.dim() == 2 && real.size(0) == alpha.size(0) && real.size(1) == alpha.size(1),
            "doubly_stochastic_penalty: α ", shape_str(alpha.shape()), " and the word mask ", shape_str(real.shape()),
            " must be [B, T, L] and [B, T]");
  const Tensor seen = sum(mul(alpha, real.unsqueeze(-1)), {1});  // Σ_t α_btj, [B, L]
  const Tensor gap = add(mul(seen, -1.f), 1.f);                  // 1 − Σ_t α_btj
  return mean(mul(gap, gap));
}

Tensor Captioner::loss(const Tensor& images, const Tensor& tgt_in, const Tensor& tgt_out, float eps) const {
  QKV_CHECK(tgt_out.shape() == tgt_in.shape(), "captioner: tgt_out ", shape_str(tgt_out.shape()),
            " should match tgt_in ", shape_str(tgt_in.shape()));
  auto [logits, alpha] = run(images, tgt_in);
  const Tensor target = tgt_out.to(device());  // the captions follow the model, as the images do
  Tensor l = cross_entropy(logits.reshape({-1, config.vocab_size}), target.reshape({-1}), config.pad_id, eps);
  if (alpha.defined() && config.doubly_stochastic > 0) {
    const Tensor real = ne(target, static_cast<float>(config.pad_id)).to(DType::f32);  // [B, T]
    l = add(l, mul(doubly_stochastic_penalty(alpha, real), static_cast<float>(config.doubly_stochastic)));
  }
  return l;
}

// ---- decoding ------------------------------------------------------------------------------------

void Captioner::DecoderState::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  if (!use_cache) {
    prefix.reorder(index);
    if (sources_changed) images = index_select(images, 0, index);
    return;
  }
  s = index_select(s, 1, index);
  if (!sources_changed) return;
  for (Tensor* t : {&memory, &keys, &mean})
    if (t->defined()) *t = index_select(*t, 0, index);
}

Captioner::DecoderState Captioner::start_decoding(const Tensor& images, bool use_cache) const {
  NoGradGuard no_grad;
  DecoderState st;
  st.use_cache = use_cache;
  if (!use_cache) {  // the baseline: run the whole teacher-forced decoder over each prefix, every step
    st.images = images;
    st.prefix = Prefixes(images.size(0));
    return st;
  }
  Encoded e = encode(images);
  st.s = e.s0, st.memory = e.memory, st.keys = e.keys, st.mean = e.mean;
  return st;
}

Tensor Captioner::step(const std::vector<int32_t>& tokens, DecoderState& st) const {
  NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(tokens.size());
  QKV_CHECK(n == st.rows(), "captioner: ", n, " tokens for ", st.rows(), " decoder rows");
  ++st.fed;
  if (!st.use_cache) {
    const Tensor prefix = st.prefix.append(tokens);  // [n, T]
    return log_softmax(forward(st.images, prefix).select(1, prefix.size(1) - 1), -1);
  }
  Encoded e;
  e.memory = st.memory, e.keys = st.keys, e.mean = st.mean;
  const Tensor o = decode_step(embedding->forward(Tensor::from_ints(tokens, {n}).to(device())), e, st.s, nullptr);
  return log_softmax(linear_inference(tanh(readout->forward_inference(o)), embedding->weight, embedding_inference), -1);
}

void Captioner::set_inference_weights(InferenceWeights weights) {
  readout->set_inference_weights(weights);
  embedding_inference = InferenceWeight(embedding->weight, weights);
}

}  // namespace qkv::nn
