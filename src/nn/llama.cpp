#include "qkv/nn/llama.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

// ---- the config ----------------------------------------------------------------------------------

const io::Fields<LlamaConfig>& LlamaConfig::fields() {
  using F = io::Fields<LlamaConfig>;
  using C = LlamaConfig;
  static const F f("Llama config", {
                                       F::integer("vocab_size", &C::vocab_size, 1),
                                       F::integer("hidden_size", &C::hidden_size, 1),
                                       F::integer("intermediate_size", &C::intermediate_size, 1),
                                       F::integer("num_hidden_layers", &C::num_hidden_layers, 1),
                                       F::integer("num_attention_heads", &C::num_attention_heads, 1),
                                       F::integer("num_key_value_heads", &C::num_key_value_heads, 0),
                                       F::integer("head_dim", &C::head_dim, 0),
                                       F::integer("max_position_embeddings", &C::block_size, 1),
                                       F::number("rms_norm_eps", &C::rms_norm_eps, 1e-12, 1),
                                       F::number("rope_theta", &C::rope_theta, 1, 1e12),
                                       F::number("partial_rotary_factor", &C::partial_rotary_factor, 0, 1),
                                       F::choice("rope_scaling", &C::rope_scaling),
                                       F::number("rope_factor", &C::rope_factor, 1e-6, 1e6),
                                       F::number("rope_low_freq_factor", &C::rope_low_freq_factor, 1e-6, 1e6),
                                       F::number("rope_high_freq_factor", &C::rope_high_freq_factor, 1e-6, 1e6),
                                       F::integer("rope_original_max_position_embeddings",
                                                  &C::rope_original_max_position_embeddings, 1),
                                       F::numbers("rope_short_factor", &C::rope_short_factor, 1e-6, 1e6, 1 << 16),
                                       F::numbers("rope_long_factor", &C::rope_long_factor, 1e-6, 1e6, 1 << 16),
                                       F::number("rope_attention_factor", &C::rope_attention_factor, 1e-6, 1e6),
                                       F::boolean("qkv_bias", &C::qkv_bias),
                                       F::boolean("o_bias", &C::o_bias),
                                       F::boolean("mlp_bias", &C::mlp_bias),
                                       F::boolean("tie_word_embeddings", &C::tie_word_embeddings),
                                       F::boolean("qk_norm", &C::qk_norm),
                                       F::integer("sliding_window", &C::sliding_window, 0),
                                       F::integer("sliding_window_pattern", &C::sliding_window_pattern, 0),
                                       F::number("rope_local_theta", &C::rope_local_theta, 0, 1e12),
                                       F::boolean("embed_scale", &C::embed_scale),
                                       F::boolean("sandwich_norms", &C::sandwich_norms),
                                       F::number("query_pre_attn_scalar", &C::query_pre_attn_scalar, 0, 1e12),
                                       F::number("attn_logit_softcapping", &C::attn_logit_softcapping, 0, 1e12),
                                       F::number("final_logit_softcapping", &C::final_logit_softcapping, 0, 1e12),
                                       F::choice("hidden_act", &C::hidden_act),
                                       F::choice("norm", &C::norm),
                                       F::boolean("gated_mlp", &C::gated_mlp),
                                       F::boolean("parallel_residual", &C::parallel_residual),
                                       F::boolean("shared_norm", &C::shared_norm),
                                       F::boolean("lm_head_bias", &C::lm_head_bias),
                                       F::number("dropout", &C::dropout, 0, 1, /*hi_open=*/true),
                                   });
  return f;
}

LlamaConfig LlamaConfig::from_json(const nlohmann::json& j) {
  LlamaConfig c = fields().from_json(j);
  QKV_CHECK(c.head_dim > 0 || c.hidden_size % c.num_attention_heads == 0, "Llama config: hidden_size ", c.hidden_size,
            " must be a multiple of num_attention_heads ", c.num_attention_heads, " (or head_dim given)");
  QKV_CHECK(c.num_attention_heads % c.kv_heads() == 0, "Llama config: num_attention_heads ", c.num_attention_heads,
            " must be a multiple of num_key_value_heads ", c.kv_heads());
  QKV_CHECK(c.rotary_dim() >= 2, "Llama config: partial_rotary_factor ", c.partial_rotary_factor,
            " leaves fewer than 2 rotary features of head_dim ", c.head_size());
  QKV_CHECK(c.rope_scaling != RopeScaling::llama3 || c.rope_high_freq_factor > c.rope_low_freq_factor,
            "Llama config: llama3 rope scaling needs rope_high_freq_factor > rope_low_freq_factor");
  QKV_CHECK(c.rope_local_theta == 0 || c.rope_local_theta >= 1, "Llama config: rope_local_theta ", c.rope_local_theta,
            " must be 0 (as every layer's) or at least 1");
  QKV_CHECK(c.rope_scaling != RopeScaling::longrope || c.rope_local_theta == 0,
            "Llama config: longrope with rope_local_theta is not supported");
  for (const auto& [name, value] : {std::pair{"query_pre_attn_scalar", c.query_pre_attn_scalar},
                                    std::pair{"attn_logit_softcapping", c.attn_logit_softcapping},
                                    std::pair{"final_logit_softcapping", c.final_logit_softcapping}})
    QKV_CHECK(value == 0 || value >= 1e-6, "Llama config: ", name, " ", value, " must be 0 (none) or at least 1e-6");
  QKV_CHECK(!c.parallel_residual || !c.sandwich_norms,
            "Llama config: parallel_residual with sandwich_norms is not supported");
  QKV_CHECK(!c.shared_norm || c.parallel_residual, "Llama config: shared_norm needs parallel_residual");
  QKV_CHECK(!c.lm_head_bias || !c.tie_word_embeddings, "Llama config: lm_head_bias needs an untied head");
  return c;
}

nlohmann::json LlamaConfig::to_json() const { return fields().to_json(*this); }

int64_t LlamaConfig::rotary_dim() const {
  const auto rot = static_cast<int64_t>(static_cast<double>(head_size()) * partial_rotary_factor);
  return rot - rot % 2;
}

std::string LlamaConfig::describe() const {
  return detail::concat("Llama ", num_hidden_layers, " layers, ", num_attention_heads, " heads (", kv_heads(),
                        " key/value), ", hidden_size, " dims, block ", block_size, ", vocab ", vocab_size);
}

// ---- rotary positions ----------------------------------------------------------------------------

// θᵢ = rope_theta^(−2i/rot), i < rot/2, then rope_scaling:
//   linear:  θᵢ / factor   (positions stretched by factor)
//   llama3:  wavelengths λᵢ = 2π/θᵢ longer than L/low_freq_factor are divided by factor, shorter
//            than L/high_freq_factor kept, and those between interpolated:
//            s = (L/λᵢ − low) / (high − low),  θᵢ' = (1 − s)·θᵢ/factor + s·θᵢ   (L: the original context)
//   longrope: θᵢ / fᵢ, f the short or the long factors; cos and sin · attention_factor
RotaryEmbedding::RotaryEmbedding(const LlamaConfig& c, bool long_factors) {
  const int64_t rot = c.rotary_dim();
  if (c.rope_scaling == RopeScaling::longrope)
    for (const auto& [name, factors] :
         {std::pair{"rope_short_factor", &c.rope_short_factor}, std::pair{"rope_long_factor", &c.rope_long_factor}})
      QKV_CHECK(static_cast<int64_t>(factors->size()) == rot / 2, "Llama config: longrope's ", name,
                " must hold one factor for each of the ", rot / 2, " rotary frequencies, got ", factors->size());
  // sized by the config before any weight: charged to a loader's budget (a crafted head_dim or
  // hidden_size of 10¹² asked 4 GB here — the config fuzzer's find)
  AllocationBudget::charge_current(sizeof(double) * static_cast<size_t>(rot / 2));
  inv_freq.reserve(static_cast<size_t>(rot / 2));
  for (int64_t i = 0; i < rot / 2; ++i) {
    double theta = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(rot));
    if (c.rope_scaling == RopeScaling::linear) {
      theta /= c.rope_factor;
    } else if (c.rope_scaling == RopeScaling::llama3) {
      const double L = static_cast<double>(c.rope_original_max_position_embeddings);
      const double wavelen = 2 * std::numbers::pi / theta;
      const double low_wavelen = L / c.rope_low_freq_factor, high_wavelen = L / c.rope_high_freq_factor;
      if (wavelen > low_wavelen) {
        theta /= c.rope_factor;
      } else if (wavelen >= high_wavelen) {
        const double s = (L / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
        theta = (1 - s) * theta / c.rope_factor + s * theta;
      }
    } else if (c.rope_scaling == RopeScaling::longrope) {
      theta /= (long_factors ? c.rope_long_factor : c.rope_short_factor)[static_cast<size_t>(i)];
    }
    inv_freq.push_back(theta);
  }
  if (c.rope_scaling == RopeScaling::longrope) attention_factor = static_cast<float>(c.rope_attention_factor);
}

// cos/sin[t, i] = cos/sin(t · θ_{i mod rot/2}): the angles repeated over both halves.
std::pair<Tensor, Tensor> RotaryEmbedding::tables(int64_t pos0, int64_t T, Device device) const {
  const int64_t half = static_cast<int64_t>(inv_freq.size()), rot = 2 * half, need = pos0 + T;
  if (!cos_.defined() || cos_.size(0) < need) {
    const int64_t n = std::max<int64_t>(need, cos_.defined() ? 2 * cos_.size(0) : 64);
    std::vector<float> c(static_cast<size_t>(n * rot)), s(c.size());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < rot; ++i) {
        // HF computes the angle in f32 (t · θ rounded to f32, then cos); so do we, to match it
        const float angle = static_cast<float>(t) * static_cast<float>(inv_freq[static_cast<size_t>(i % half)]);
        // (· attention_factor after the f32 rounding, as HF's emb.cos() * attention_scaling)
        c[static_cast<size_t>(t * rot + i)] =
            static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
        s[static_cast<size_t>(t * rot + i)] =
            static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
      }
    cos_ = Tensor::from_vector(c, {n, rot}), sin_ = Tensor::from_vector(s, {n, rot});
  }
  if (device.is_cpu()) return {cos_.slice(0, pos0, need), sin_.slice(0, pos0, need)};
  if (!cos_on_.defined() || cos_on_.device() != device || cos_on_.size(0) != cos_.size(0)) {
    if (cos_on_.defined()) retired_.push_back(cos_on_), retired_.push_back(sin_on_);
    cos_on_ = cos_.to(device), sin_on_ = sin_.to(device);
  }
  return {cos_on_.slice(0, pos0, need), sin_on_.slice(0, pos0, need)};
}

// ---- one decoder layer ---------------------------------------------------------------------------

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, Generator* gen, int64_t index)
    : config(c), window(c.window(index)), gen_(gen) {
  const int64_t E = c.hidden_size, H = c.num_attention_heads, Hkv = c.kv_heads(), D = c.head_size();
  q_proj = register_module("self_attn.q_proj", std::make_shared<Linear>(E, H * D, c.qkv_bias, gen));
  k_proj = register_module("self_attn.k_proj", std::make_shared<Linear>(E, Hkv * D, c.qkv_bias, gen));
  v_proj = register_module("self_attn.v_proj", std::make_shared<Linear>(E, Hkv * D, c.qkv_bias, gen));
  o_proj = register_module("self_attn.o_proj", std::make_shared<Linear>(H * D, E, c.o_bias, gen));
  if (c.gated_mlp)
    gate_proj = register_module("mlp.gate_proj", std::make_shared<Linear>(E, c.intermediate_size, c.mlp_bias, gen));
  up_proj = register_module("mlp.up_proj", std::make_shared<Linear>(E, c.intermediate_size, c.mlp_bias, gen));
  down_proj = register_module("mlp.down_proj", std::make_shared<Linear>(c.intermediate_size, E, c.mlp_bias, gen));
  input_layernorm = register_parameter("input_layernorm.weight", Tensor::ones({E}));
  if (!c.shared_norm)
    post_attention_layernorm = register_parameter("post_attention_layernorm.weight", Tensor::ones({E}));
  if (c.norm == LlamaNorm::layer) {
    input_layernorm_bias = register_parameter("input_layernorm.bias", Tensor::zeros({E}));
    if (!c.shared_norm)
      post_attention_layernorm_bias = register_parameter("post_attention_layernorm.bias", Tensor::zeros({E}));
  }
  if (c.sandwich_norms) {
    pre_feedforward_layernorm = register_parameter("pre_feedforward_layernorm.weight", Tensor::ones({E}));
    post_feedforward_layernorm = register_parameter("post_feedforward_layernorm.weight", Tensor::ones({E}));
  }
  if (c.qk_norm) {
    q_norm = register_parameter("self_attn.q_norm.weight", Tensor::ones({D}));
    k_norm = register_parameter("self_attn.k_norm.weight", Tensor::ones({D}));
  }
}

// proj(n) [B, T, heads·D] → [B, T, heads, D]; with qk_norm each head x ← x / √(mean(x²) + ε) · γ
Tensor LlamaDecoderLayer::heads_of(const Linear& proj, const Tensor& gamma, const Tensor& n, int64_t heads,
                                   bool inference) const {
  const Tensor p =
      (inference ? proj.forward_inference(n) : proj.forward(n)).view({n.size(0), n.size(1), heads, config.head_size()});
  return gamma.defined() ? rms_norm(p, gamma, static_cast<float>(config.rms_norm_eps)) : p;
}

Tensor LlamaDecoderLayer::query_heads(const Tensor& n, bool inference) const {
  return heads_of(*q_proj, q_norm, n, config.num_attention_heads, inference);
}

Tensor LlamaDecoderLayer::key_heads(const Tensor& n, bool inference) const {
  return heads_of(*k_proj, k_norm, n, config.kv_heads(), inference);
}

// act(x): SiLU, tanh-GELU or GELU
Tensor LlamaDecoderLayer::activate(const Tensor& x) const {
  return config.hidden_act == LlamaActivation::silu        ? silu(x)
         : config.hidden_act == LlamaActivation::gelu_tanh ? gelu(x, "tanh")
                                                           : gelu(x);
}

// down_proj(act(gate_proj(m)) ⊙ up_proj(m)): SiLU's product one op (ops/activation.h silu_mul), the
// others' two; ungated (GPT-NeoX): down_proj(act(up_proj(m)))
Tensor LlamaDecoderLayer::mlp(const Tensor& m, bool inference) const {
  auto project = [inference](const Linear& l, const Tensor& x) {
    return inference ? l.forward_inference(x) : l.forward(x);
  };
  const Tensor up = project(*up_proj, m);
  if (!gate_proj) return project(*down_proj, activate(up));
  const Tensor gate = project(*gate_proj, m);
  return project(*down_proj, config.hidden_act == LlamaActivation::silu ? silu_mul(gate, up) : mul(activate(gate), up));
}

namespace {

// Norm(x): RMSNorm with γ, or LayerNorm with γ and β where β is given
Tensor norm_of(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  return beta.defined() ? layer_norm(x, {x.size(-1)}, gamma, beta, eps) : rms_norm(x, gamma, eps);
}

// The stream's sum and Norm(sum), in one pass when a delta is pending.
SumAndNorm sum_and_norm(const ResidualStream& x, const Tensor& gamma, const Tensor& beta, float eps) {
  if (!x.delta.defined()) return {x.base, norm_of(x.base, gamma, beta, eps)};
  if (beta.defined())
    return add_layer_norm_with_sum(x.base, x.delta, {x.base.size(-1)}, gamma, beta, eps, x.delta_dropout, x.generator);
  return add_rms_norm_with_sum(x.base, x.delta, gamma, eps, x.delta_dropout, x.generator);
}

}  // namespace

Tensor LlamaDecoderLayer::input_norm(const Tensor& x) const {
  return norm_of(x, input_layernorm, input_layernorm_bias, static_cast<float>(config.rms_norm_eps));
}

// h = x + Dropout(o) and m = RMSNorm₂(h) in one pass, then {h, Dropout(MLP(m))} with the MLP's branch
// pending (its dropout made in the next norm's pass); sandwich_norms (Gemma 3):
//   h = x + Dropout(RMSNorm_post_attention(o)),  m = RMSNorm_pre_feedforward(h),  {h,
//   Dropout(RMSNorm_post_feedforward(MLP(m)))}
//   parallel_residual (GPT-NeoX): {x, Dropout(o) + Dropout(MLP(Norm₂(x)))}
ResidualStream LlamaDecoderLayer::after_attention(const Tensor& x, const Tensor& n, const Tensor& o, bool inference,
                                                  float p) const {
  const float eps = static_cast<float>(config.rms_norm_eps);
  if (config.parallel_residual) {
    const Tensor m = mlp(
        config.shared_norm ? n : norm_of(x, post_attention_layernorm, post_attention_layernorm_bias, eps), inference);
    if (p == 0.f) return {x, add(o, m)};
    return {x, add(dropout(o, p, true, gen_), dropout(m, p, true, gen_))};
  }
  if (!config.sandwich_norms) {
    const SumAndNorm hm =
        sum_and_norm(ResidualStream{x, o, p, gen_}, post_attention_layernorm, post_attention_layernorm_bias, eps);
    return {hm.sum, mlp(hm.normalized, inference), p, gen_};
  }
  const SumAndNorm hm =
      add_rms_norm_with_sum(x, rms_norm(o, post_attention_layernorm, eps), pre_feedforward_layernorm, eps, p, gen_);
  return {hm.sum, rms_norm(mlp(hm.normalized, inference), post_feedforward_layernorm, eps), p, gen_};
}

// The scores' scale (1/√query_pre_attn_scalar where given, else the kernels' 1/√D) and soft cap
AttentionOptions LlamaDecoderLayer::scores() const {
  AttentionOptions o;
  if (config.query_pre_attn_scalar > 0) o.scale = static_cast<float>(1.0 / std::sqrt(config.query_pre_attn_scalar));
  o.softcap = static_cast<float>(config.attn_logit_softcapping);
  return o;
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& mask,
                                  bool is_causal, Tensor* weights_out) const {
  return forward(ResidualStream{x, Tensor()}, cos, sin, mask, is_causal, weights_out).sum();
}

ResidualStream LlamaDecoderLayer::forward(const ResidualStream& stream, const Tensor& cos, const Tensor& sin,
                                          const Tensor& mask, bool is_causal, Tensor* weights_out) const {
  const float eps = static_cast<float>(config.rms_norm_eps), p = is_training() ? config.dropout : 0.f;
  // x = the stream's sum, n = RMSNorm₁(x): one pass
  const SumAndNorm xn = sum_and_norm(stream, input_layernorm, input_layernorm_bias, eps);
  const int64_t B = xn.sum.size(0), T = xn.sum.size(1), H = config.num_attention_heads, Hkv = config.kv_heads(),
                D = config.head_size();
  const Tensor& n = xn.normalized;
  // Q, K rotated by position: [B, H, T, D], [B, Hkv, T, D]
  Tensor q = apply_rotary_pos_emb(query_heads(n, false).transpose(1, 2), cos, sin);
  Tensor k = apply_rotary_pos_emb(key_heads(n, false).transpose(1, 2), cos, sin);
  Tensor v = v_proj->forward(n).view({B, T, Hkv, D}).transpose(1, 2);
  AttentionOptions opt = scores();
  opt.attn_mask = mask, opt.is_causal = is_causal, opt.enable_gqa = Hkv != H, opt.dropout_p = p, opt.generator = gen_;
  Tensor a;
  if (weights_out) {
    AttentionResult r = scaled_dot_product_attention_with_weights(q, k, v, opt);
    a = r.output, *weights_out = r.weights;
  } else {
    a = scaled_dot_product_attention(q, k, v, opt);
  }
  // o_proj(heads concatenated), then the residual and the MLP
  return after_attention(xn.sum, n, o_proj->forward(a.transpose(1, 2).reshape({B, T, H * D})), false, p);
}

ResidualStream LlamaDecoderLayer::forward_cached(const ResidualStream& stream, const Tensor& cos, const Tensor& sin,
                                                 const Tensor& mask, bool is_causal, KVCache& cache) const {
  const float eps = static_cast<float>(config.rms_norm_eps);
  const SumAndNorm xn = sum_and_norm(stream, input_layernorm, input_layernorm_bias, eps);
  const int64_t B = xn.sum.size(0), T = xn.sum.size(1), H = config.num_attention_heads, Hkv = config.kv_heads(),
                D = config.head_size();
  const Tensor& n = xn.normalized;
  Tensor q = apply_rotary_pos_emb(query_heads(n, true).transpose(1, 2), cos, sin);
  Tensor k = apply_rotary_pos_emb(key_heads(n, true).transpose(1, 2), cos, sin);
  Tensor v = v_proj->forward_inference(n).view({B, T, Hkv, D}).transpose(1, 2);
  cache.append(k, v);
  AttentionOptions opt = scores();
  opt.attn_mask = mask, opt.is_causal = is_causal, opt.enable_gqa = Hkv != H;
  Tensor a = scaled_dot_product_attention(q, cache.keys(), cache.values(), opt);
  return after_attention(xn.sum, n, o_proj->forward_inference(a.transpose(1, 2).reshape({B, T, H * D})), true, 0.f);
}

ResidualStream LlamaDecoderLayer::forward_paged(const ResidualStream& stream, const Tensor& cos, const Tensor& sin,
                                                PagedKVCache& cache, int64_t layer, const PagedStep& step) const {
  const float eps = static_cast<float>(config.rms_norm_eps);
  const SumAndNorm xn = sum_and_norm(stream, input_layernorm, input_layernorm_bias, eps);
  const int64_t T = xn.sum.size(1), H = config.num_attention_heads, Hkv = config.kv_heads(), D = config.head_size();
  const Tensor& n = xn.normalized;  // [1, T, E]
  // q, k rotated each at its token's position ([1, H, T, D] as apply_rotary_pos_emb takes them), then
  // token-major [T, H, D] for the pool
  auto rotated = [&](const Tensor& p, int64_t heads) {  // p [1, T, heads, D]
    return apply_rotary_pos_emb(p.transpose(1, 2), cos, sin).transpose(1, 2).reshape({T, heads, D});
  };
  const Tensor q = rotated(query_heads(n, true), H), k = rotated(key_heads(n, true), Hkv);
  const AttentionOptions o = scores();
  const Tensor a = attend_paged(q, k, v_proj->forward_inference(n).reshape({T, Hkv, D}), cache, layer, step, window,
                                o.scale, o.softcap);  // [T, H, D]
  return after_attention(xn.sum, n, o_proj->forward_inference(a.reshape({1, T, H * D})), true, 0.f);
}

void LlamaDecoderLayer::set_inference_weights(InferenceWeights weights) {
  for (auto* l : {&q_proj, &k_proj, &v_proj, &o_proj, &gate_proj, &up_proj, &down_proj})
    if (*l) (*l)->set_inference_weights(weights);
}

// ---- the model -----------------------------------------------------------------------------------

namespace {

// The windowed layers' own rotary tables (rope_local_theta, unscaled), where a window and a base are given
std::shared_ptr<const RotaryEmbedding> local_rope(const LlamaConfig& c) {
  if (c.rope_local_theta <= 0 || c.sliding_window <= 0) return nullptr;
  LlamaConfig local = c;
  local.rope_theta = c.rope_local_theta, local.rope_scaling = RopeScaling::none;
  return std::make_shared<const RotaryEmbedding>(local);
}

// [T, past + T]: ops/mask.h's sliding window of W keys over the past and these T positions. Undefined
// where plain causal attention is the same (no window, or all keys within it), so that the callers
// can pass is_causal instead.
Tensor window_mask(int64_t W, int64_t T, int64_t past, Device device) {
  const int64_t S = past + T;
  if (W <= 0 || S <= W) return Tensor();
  return sliding_window_mask(T, S, W, past, device);
}

}  // namespace

Llama::Llama(const LlamaConfig& c, Generator* gen)
    : config(c),
      rope_(c),
      rope_local_(local_rope(c)),
      rope_long_(c.rope_scaling == RopeScaling::longrope ? std::make_shared<const RotaryEmbedding>(c, true) : nullptr) {
  Generator& g = gen ? *gen : default_generator();
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, -1, &g));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<LlamaDecoderLayer>(c, &g, i)));
  norm = register_parameter("norm.weight", Tensor::ones({c.hidden_size}));
  if (c.norm == LlamaNorm::layer) norm_bias = register_parameter("norm.bias", Tensor::zeros({c.hidden_size}));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<Linear>(c.hidden_size, c.vocab_size, c.lm_head_bias, &g));
  // Hugging Face's initialization (initializer_range 0.02): N(0, 0.02) for every matrix and
  // embedding, zero biases, RMSNorm scales at 1 (qk_norm's too).
  for (auto& [name, p] : named_parameters()) {
    if (name.ends_with("layernorm.weight") || name.ends_with("_norm.weight") || name == "norm.weight") continue;
    Tensor t = p.detach();
    if (p.dim() >= 2) init::normal_(t, g, 0.f, 0.02f);
    else init::zeros_(t);
  }
}

// embed_tokens[idx], · √E with embed_scale (Gemma 3: √E rounded to f32, as its embed_scale buffer)
Tensor Llama::embed(const Tensor& idx) const {
  const Tensor x = embed_tokens->forward(idx);
  return config.embed_scale ? mul(x, static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size)))) : x;
}

// logits = RMSNorm(x) Wᵀ, W = lm_head's weight or (tied) embed_tokens'; x's pending sum made in the norm's pass
Tensor Llama::final_norm(const ResidualStream& x) const {
  return sum_and_norm(x, norm, norm_bias, static_cast<float>(config.rms_norm_eps)).normalized;
}

const Tensor& Llama::output_weight() const { return lm_head ? lm_head->weight : embed_tokens->weight; }

// (final_logit_softcapping c > 0: c · tanh(logits / c))
Tensor Llama::head(const ResidualStream& x, bool inference) const {
  const Tensor h = final_norm(x);
  const Tensor bias = lm_head ? lm_head->bias : Tensor();  // (lm_head_bias, Phi's)
  const Tensor logits =
      inference ? linear_inference(h, output_weight(), head_inference, bias) : linear(h, output_weight(), bias);
  const auto c = static_cast<float>(config.final_logit_softcapping);
  return c > 0 ? mul(tanh(mul(logits, 1.f / c)), c) : logits;
}

ResidualStream Llama::body(const Tensor& idx, AttentionMaps* maps, int64_t upto) const {
  QKV_CHECK(idx.dim() == 2 && idx.dtype() == DType::i32, "Llama: idx must be i32 [B, T], got ", shape_str(idx.shape()));
  const int64_t T = idx.size(1);
  QKV_CHECK(T >= 1 && T <= config.block_size, "Llama: ", T, " positions exceed max_position_embeddings ",
            config.block_size);
  ResidualStream x{embed(idx), Tensor()};  // [B, T, E]
  const Device device = x.base.device();
  // the rotary tables of the layers (and of the windowed ones, where theirs differ); the windowed
  // layers' mask (undefined, as the others': is_causal)
  const auto tables = rope_at(T).tables(0, T, device);
  const auto local = rope_local_ ? rope_local_->tables(0, T, device) : tables;
  const Tensor windowed = window_mask(config.sliding_window, T, 0, device);
  const size_t n = upto < 0 ? layers.size() : std::min(layers.size(), static_cast<size_t>(upto));
  for (size_t i = 0; i < n; ++i) {
    const LlamaDecoderLayer* layer = layers[i].get();
    const auto& [cos, sin] = layer->window > 0 ? local : tables;
    const Tensor m = layer->window > 0 ? windowed : Tensor();
    Tensor w;
    x = layer->forward(x, cos, sin, m, /*is_causal=*/!m.defined(), maps ? &w : nullptr);
    if (maps) maps->decoder_self.push_back(w);
  }
  return x;
}

Tensor Llama::forward(const Tensor& idx, AttentionMaps* maps) const { return head(body(idx, maps), false); }

// cross_entropy(RMSNorm(x) lm_headᵀ, targets), without the logits (ops/loss.h's linear_cross_entropy);
// with the logits where they are soft-capped or biased
Tensor Llama::loss(const Tensor& idx, const Tensor& targets) const {
  QKV_CHECK(targets.shape() == idx.shape(), "Llama::loss: targets ", shape_str(targets.shape()), " should match idx ",
            shape_str(idx.shape()));
  if (config.final_logit_softcapping > 0 || config.lm_head_bias) {
    const Tensor logits = forward(idx);  // [B, T, V]
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  }
  const Tensor h = final_norm(body(idx, nullptr));  // [B, T, E]
  return linear_cross_entropy(h.reshape({-1, h.size(-1)}), output_weight(), targets.reshape({-1}));
}

Tensor Llama::step(const Tensor& idx, DecoderState& state) const {
  NoGradGuard no_grad;
  QKV_CHECK(idx.dim() == 2 && idx.dtype() == DType::i32, "Llama: idx must be i32 [B, T], got ", shape_str(idx.shape()));
  if (state.caches.size() != layers.size()) state.caches.assign(layers.size(), KVCache{});
  const int64_t T = idx.size(1), pos0 = state.length();
  QKV_CHECK(T >= 1 && pos0 + T <= config.block_size, "Llama: positions ", pos0, " … ", pos0 + T - 1,
            " exceed max_position_embeddings ", config.block_size);
  ResidualStream x{embed(idx), Tensor()};
  const Device device = x.base.device();
  // longrope: a cache made with the short factors cannot take positions of a longer sequence (Hugging
  // Face's Phi-3 feeds the whole sequence again there, as decode::generate does at refeed_at())
  const int64_t refeed = refeed_at();
  QKV_CHECK(refeed == 0 || pos0 == 0 || pos0 > refeed || pos0 + T <= refeed, "Llama: longrope's cache of ", pos0,
            " positions was made with its short factors; past ", refeed,
            " tokens the sequence takes the long ones at every position: feed it again from position 0");
  const auto tables = rope_at(pos0 + T).tables(pos0, T, device);
  const auto local = rope_local_ ? rope_local_->tables(pos0, T, device) : tables;
  // the new positions see the cached ones and their own past: causal aligned bottom-right (undefined:
  // is_causal, or one position) — for the layers that see every key, and within the windowed ones'
  const Tensor full = T > 1 && pos0 > 0 ? causal_mask(T, pos0 + T, pos0, device) : Tensor();
  Tensor windowed = window_mask(config.sliding_window, T, pos0, device);
  if (!windowed.defined()) windowed = full;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& [cos, sin] = layers[i]->window > 0 ? local : tables;
    const Tensor& m = layers[i]->window > 0 ? windowed : full;
    x = layers[i]->forward_cached(x, cos, sin, m, /*is_causal=*/!m.defined() && T > 1, state.caches[i]);
  }
  return head(x.select(1, T - 1), true);  // the last position only
}

PagedKVCache Llama::make_paged_cache(int64_t pages, int64_t page_size, Device device, DType dtype) const {
  return PagedKVCache(config.num_hidden_layers, pages, page_size, config.kv_heads(), config.head_size(),
                      config.head_size(), device, dtype);
}

Tensor Llama::step_paged(const Tensor& ids, const PagedStep& step, PagedKVCache& cache) const {
  NoGradGuard no_grad;
  QKV_CHECK(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.size(0) == step.tokens(), "Llama::step_paged: ids must be i32 [",
            step.tokens(), "], got ", ids.str());
  QKV_CHECK(cache.layers() == static_cast<int64_t>(layers.size()), "Llama::step_paged: a cache of ", cache.layers(),
            " layers for a model of ", layers.size());
  ResidualStream x{embed(ids).unsqueeze(0), Tensor()};  // [1, T, E]
  // each token's rotary angles: the tables' rows at its position, gathered on the device by the
  // step's positions ([T, rot]; nothing uploaded, so a graph can hold it), the tables covering the
  // furthest position (checked on the host) or the step's bound
  QKV_CHECK(step.host_positions.size() == static_cast<size_t>(step.tokens()), "Llama::step_paged: the step's ",
            step.host_positions.size(), " host positions for ", step.tokens(), " tokens");
  int64_t furthest = 0;
  for (const int32_t at : step.host_positions) {
    QKV_CHECK(at >= 0 && at < config.block_size, "Llama::step_paged: position ", at, " exceeds max_position_embeddings ",
              config.block_size);
    furthest = std::max<int64_t>(furthest, at);
  }
  // (given rope_rows, the tables are positions_below rows each: what the rows index)
  const bool stacked = step.rope_rows.defined() && rope_long_;
  QKV_CHECK(!stacked || (furthest < step.positions_below && step.positions_below <= config.block_size &&
                         step.rope_rows.dim() == 1 && step.rope_rows.size(0) == step.tokens()),
            "Llama::step_paged: rope_rows for tables of ", step.positions_below, " rows, positions up to ", furthest,
            " of ", config.block_size);
  const int64_t rows =
      stacked ? step.positions_below : std::max(furthest + 1, std::min(step.positions_below, config.block_size));
  auto rows_at = [&](const RotaryEmbedding& rope) {
    const auto [cos_all, sin_all] = rope.tables(0, rows, x.base.device());
    return std::pair{embedding(step.positions, cos_all), embedding(step.positions, sin_all)};
  };
  // longrope: a token whose sequence is past refeed_at() reads the long factors' rows — row
  // rows + position of [short tables; long tables] — the others the short ones (a short token past
  // refeed_at() would mix the two in one sequence: refused)
  const bool any_long = std::find(step.long_rope.begin(), step.long_rope.end(), 1) != step.long_rope.end();
  QKV_CHECK(step.long_rope.empty() || step.long_rope.size() == step.host_positions.size(),
            "Llama::step_paged: the step's ", step.long_rope.size(), " longrope flags for ", step.host_positions.size(),
            " tokens");
  for (size_t t = 0; t < step.host_positions.size(); ++t)
    QKV_CHECK(
        refeed_at() == 0 || (!step.long_rope.empty() && step.long_rope[t]) || step.host_positions[t] < refeed_at(),
        "Llama::step_paged: position ", step.host_positions[t], " with longrope's short factors (", refeed_at(),
        " tokens at most)");
  auto longrope_rows = [&] {
    Tensor index = step.rope_rows;  // (a graph's: on the device already)
    if (!stacked) {
      std::vector<int32_t> at(step.host_positions);
      for (size_t t = 0; t < at.size(); ++t)
        if (step.long_rope[t]) at[t] += static_cast<int32_t>(rows);
      index = Tensor::from_ints(at, {static_cast<int64_t>(at.size())}).to(x.base.device());
    }
    const auto [cs, ss] = rope_.tables(0, rows, x.base.device());
    const auto [cl, sl] = rope_long_->tables(0, rows, x.base.device());
    return std::pair{embedding(index, cat({cs, cl}, 0)), embedding(index, cat({ss, sl}, 0))};
  };
  const auto tables = rope_long_ && (any_long || stacked) ? longrope_rows() : rows_at(rope_);
  const auto local = rope_local_ ? rows_at(*rope_local_) : tables;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& [cos, sin] = layers[i]->window > 0 ? local : tables;
    x = layers[i]->forward_paged(x, cos, sin, cache, static_cast<int64_t>(i), step);
  }
  const Tensor last = step.last_rows(x.sum().squeeze(0));  // [sequences, E]
  return head(ResidualStream{last, Tensor()}, true);
}

void Llama::set_inference_weights(InferenceWeights weights) {
  for (auto& layer : layers) layer->set_inference_weights(weights);
  head_inference = InferenceWeight(output_weight(), weights);
}

}  // namespace qkv::nn
