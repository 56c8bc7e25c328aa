#include "qkv/nn/transformer_layer.h"

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/ops.h"

namespace qkv::nn {

namespace {

void check_options(const TransformerLayerOptions& o, const char* who) {
  QKV_CHECK(o.d_model > 0 && o.nhead > 0 && o.d_model % o.nhead == 0, who, ": d_model ", o.d_model,
            " must be a positive multiple of nhead ", o.nhead);
  QKV_CHECK(o.dim_feedforward > 0, who, ": dim_feedforward must be positive, got ", o.dim_feedforward);
  QKV_CHECK(o.dropout >= 0.f && o.dropout < 1.f, who, ": dropout must be in [0, 1), got ", o.dropout);
}

// The [B, L, E] view the layers compute on, and back.
Tensor to_batch_first(const Tensor& x, bool batch_first) {
  return batch_first || x.dim() != 3 ? x : x.transpose(0, 1);
}

}  // namespace

Tensor activate(const Tensor& x, Activation act, float p, Generator* gen, const Tensor& bias) {
  switch (act) {
    case Activation::relu: return relu(x, p, gen, bias);
    case Activation::gelu: return gelu(x, "none", p, gen, bias);
    case Activation::gelu_tanh: return gelu(x, "tanh", p, gen, bias);
    case Activation::silu: return dropout(silu(bias.defined() ? add(x, bias) : x), p, true, gen);
  }
  return x;
}

// FFN(x) = W₂ Dropout(act(W₁ x + b₁)) + b₂, b₁ added and the dropout made in the activation's pass
// (the first GEMM runs without its bias: its product is written once and read once)
Tensor feed_forward(const Tensor& x, const Linear& linear1, const Linear& linear2, Activation activation,
                    float p, bool training, Generator* gen) {
  return linear2.forward(activate(linear(x, linear1.weight), activation, training ? p : 0.f, gen, linear1.bias));
}

// FFN while decoding: no dropout, no tape, the layers' inference copies (on int8 rows the hidden
// activations quantized in the first product: ops/matmul.h).
static Tensor feed_forward_inference(const Tensor& x, const Linear& linear1, const Linear& linear2,
                                     Activation activation) {
  return qkv::feed_forward_inference(x, linear1.weight, linear1.weight_inference, linear1.bias,
                                     std::string(enum_name(activation)), linear2.weight, linear2.weight_inference,
                                     linear2.bias);
}

// ---- encoder layer ------------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o, Generator* gen)
    : opt(o), gen_(gen) {
  check_options(o, "TransformerEncoderLayer");
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, o.bias,
                                                                               0, 0, /*batch_first=*/true, gen));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias, gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias, gen));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
}

float TransformerEncoderLayer::residual_dropout() const { return is_training() ? opt.dropout : 0.f; }

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& kpm, bool is_causal,
                                        Tensor* weights_out) const {
  const Tensor x = to_batch_first(src, opt.batch_first);
  const int64_t B = x.dim() == 3 ? x.size(0) : 1, L = x.size(-2);
  const Tensor kpm_b = x.dim() == 3 || !kpm.defined() ? kpm : kpm.unsqueeze(0);
  return forward_masked(src, mha_attention_mask(src_mask, kpm_b, B, opt.nhead, L, L), is_causal, weights_out);
}

Tensor TransformerEncoderLayer::forward_masked(const Tensor& src, const Tensor& mask, bool is_causal,
                                               Tensor* weights_out, const ScoreTerm* term) const {
  Tensor x = to_batch_first(src, opt.batch_first);
  QKV_CHECK(!term || !opt.norm_first, "TransformerEncoderLayer: a score term is the post-LN layers' (DeBERTa's)");
  if (opt.norm_first) {  // x + SA(LN(x)), then + FF(LN(·)): the residual stream's form, summed
    x = forward_masked(ResidualStream{x, Tensor()}, mask, is_causal, weights_out).sum();
  } else {
    // SA(x) = Dropout(MultiHead(x, x, x)), FF(x) = Dropout(FFN(x)): each Dropout made in the pass of
    // the norm that follows it
    auto r = self_attn->forward_masked(x, x, x, mask, weights_out != nullptr, false, is_causal, term);
    if (weights_out) *weights_out = r.weights;
    const float p = residual_dropout();
    x = norm1->forward(x, r.output, p, gen_);  // LN(x + SA(x))
    x = norm2->forward(x, feed_forward(x, *linear1, *linear2, opt.activation, opt.dropout, is_training(), gen_), p,
                       gen_);  // LN(x + FF(x))
  }
  return to_batch_first(x, opt.batch_first);
}

ResidualStream TransformerEncoderLayer::forward_masked(const ResidualStream& x, const Tensor& mask, bool is_causal,
                                                      Tensor* weights_out) const {
  QKV_CHECK(opt.norm_first, "TransformerEncoderLayer: the residual stream form is pre-LN's (norm_first)");
  // x = the stream's sum and LN₁(x), one pass
  const SumAndNorm in = norm1->forward_with_sum(x);
  auto r = self_attn->forward_masked(in.normalized, in.normalized, in.normalized, mask, weights_out != nullptr, false,
                                     is_causal);
  if (weights_out) *weights_out = r.weights;
  // y = x + SA(LN₁(x)) and LN₂(y) in one pass (SA's dropout in it too); y + FF(LN₂(y)) left pending,
  // FF's dropout with it
  const float p = residual_dropout();
  const SumAndNorm y = norm2->forward_with_sum(in.sum, r.output, p, gen_);
  return {y.sum, feed_forward(y.normalized, *linear1, *linear2, opt.activation, opt.dropout, is_training(), gen_), p,
          gen_};
}

Tensor TransformerEncoderLayer::forward_cached(const Tensor& x, KVCache& cache) const {
  if (opt.norm_first) return forward_cached(ResidualStream{x, Tensor()}, cache).sum();
  NoGradGuard no_grad;
  Tensor y = norm1->forward(x, self_attn->forward_cached(x, cache));
  return norm2->forward(y, feed_forward_inference(y, *linear1, *linear2, opt.activation));
}

ResidualStream TransformerEncoderLayer::forward_cached(const ResidualStream& x, KVCache& cache) const {
  QKV_CHECK(opt.norm_first, "TransformerEncoderLayer: the residual stream form is pre-LN's (norm_first)");
  NoGradGuard no_grad;
  const SumAndNorm in = norm1->forward_with_sum(x);
  const SumAndNorm y = norm2->forward_with_sum(in.sum, self_attn->forward_cached(in.normalized, cache));
  return {y.sum, feed_forward_inference(y.normalized, *linear1, *linear2, opt.activation)};
}

ResidualStream TransformerEncoderLayer::forward_paged(const ResidualStream& x, PagedKVCache& cache, int64_t layer,
                                                     const PagedStep& step) const {
  QKV_CHECK(opt.norm_first, "TransformerEncoderLayer: the residual stream form is pre-LN's (norm_first)");
  NoGradGuard no_grad;
  const SumAndNorm in = norm1->forward_with_sum(x);
  const SumAndNorm y = norm2->forward_with_sum(in.sum, self_attn->forward_paged(in.normalized, cache, layer, step));
  return {y.sum, feed_forward_inference(y.normalized, *linear1, *linear2, opt.activation)};
}

Tensor TransformerEncoderLayer::forward_inference(const Tensor& x, const Tensor& mask, const ScoreTerm* term) const {
  NoGradGuard no_grad;
  auto ff = [&](const Tensor& h) { return feed_forward_inference(h, *linear1, *linear2, opt.activation); };
  QKV_CHECK(!term || !opt.norm_first, "TransformerEncoderLayer: a score term is the post-LN layers' (DeBERTa's)");
  if (opt.norm_first) {
    const SumAndNorm y = norm2->forward_with_sum(x, self_attn->forward_inference(norm1->forward(x), mask));
    return y.sum + ff(y.normalized);  // y + FF(LN(y)), y = x + SA(LN(x))
  }
  Tensor y = norm1->forward(x, self_attn->forward_inference(x, mask, term));  // LN(x + SA(x))
  return norm2->forward(y, ff(y));                                      // LN(y + FF(y))
}

// ---- decoder layer ------------------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o, Generator* gen)
    : opt(o), gen_(gen) {
  check_options(o, "TransformerDecoderLayer");
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, o.bias,
                                                                               0, 0, /*batch_first=*/true, gen));
  multihead_attn = register_module(
      "multihead_attn", std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, o.bias, 0, 0, true, gen));
  linear1 = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias, gen));
  linear2 = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias, gen));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
}

void TransformerEncoderLayer::set_inference_weights(InferenceWeights weights) {
  self_attn->set_inference_weights(weights);
  linear1->set_inference_weights(weights);
  linear2->set_inference_weights(weights);
}

void TransformerEncoderLayer::clear_inference_weights() {
  self_attn->in_proj_inference = {}, self_attn->in_proj_slices = {}, self_attn->out_proj->weight_inference = {};
  linear1->weight_inference = {}, linear2->weight_inference = {};
}

void TransformerDecoderLayer::set_inference_weights(InferenceWeights weights) {
  self_attn->set_inference_weights(weights);
  multihead_attn->set_inference_weights(weights);
  linear1->set_inference_weights(weights);
  linear2->set_inference_weights(weights);
}

float TransformerDecoderLayer::residual_dropout() const { return is_training() ? opt.dropout : 0.f; }

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory_in, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_kpm, const Tensor& memory_kpm,
                                        bool tgt_is_causal, Tensor* self_w, Tensor* cross_w) const {
  const Tensor x = to_batch_first(tgt, opt.batch_first), memory = to_batch_first(memory_in, opt.batch_first);
  const bool batched = x.dim() == 3;
  const int64_t B = batched ? x.size(0) : 1, T = x.size(-2), S = memory.size(-2);
  auto batch = [&](const Tensor& kpm) { return batched || !kpm.defined() ? kpm : kpm.unsqueeze(0); };
  return forward_masked(tgt, memory_in, mha_attention_mask(tgt_mask, batch(tgt_kpm), B, opt.nhead, T, T),
                        mha_attention_mask(memory_mask, batch(memory_kpm), B, opt.nhead, T, S), tgt_is_causal, self_w,
                        cross_w);
}

Tensor TransformerDecoderLayer::forward_masked(const Tensor& tgt, const Tensor& memory_in, const Tensor& self_mask,
                                               const Tensor& cross_mask, bool tgt_is_causal, Tensor* self_w,
                                               Tensor* cross_w) const {
  Tensor x = to_batch_first(tgt, opt.batch_first);
  Tensor memory = to_batch_first(memory_in, opt.batch_first);
  // SA(x) = Dropout(MaskedMultiHead(x, x, x)), CA(x) = Dropout(MultiHead(x, memory, memory)),
  // FF(x) = Dropout(FFN(x)): each Dropout made in the pass of the norm that follows it (p)
  auto sa = [&](const Tensor& h) {
    auto r = self_attn->forward_masked(h, h, h, self_mask, self_w != nullptr, false, tgt_is_causal);
    if (self_w) *self_w = r.weights;
    return r.output;
  };
  auto ca = [&](const Tensor& h) {
    auto r = multihead_attn->forward_masked(h, memory, memory, cross_mask, cross_w != nullptr, false);
    if (cross_w) *cross_w = r.weights;
    return r.output;
  };
  auto ff = [&](const Tensor& h) {
    return feed_forward(h, *linear1, *linear2, opt.activation, opt.dropout, is_training(), gen_);
  };
  const float p = residual_dropout();
  if (opt.norm_first) {
    // each residual sum and the next sublayer's LN of it in one pass
    SumAndNorm y = norm2->forward_with_sum(x, sa(norm1->forward(x)), p, gen_);
    y = norm3->forward_with_sum(y.sum, ca(y.normalized), p, gen_);
    x = ResidualStream{y.sum, ff(y.normalized), p, gen_}.sum();
  } else {
    x = norm1->forward(x, sa(x), p, gen_);
    x = norm2->forward(x, ca(x), p, gen_);
    x = norm3->forward(x, ff(x), p, gen_);
  }
  return to_batch_first(x, opt.batch_first);
}

Tensor TransformerDecoderLayer::forward_cached(const Tensor& x, KVCache& self_cache, const KVCache& cross,
                                               const Tensor& memory_mask) const {
  NoGradGuard no_grad;
  auto ff = [&](const Tensor& h) { return feed_forward_inference(h, *linear1, *linear2, opt.activation); };
  if (opt.norm_first) {
    SumAndNorm y = norm2->forward_with_sum(x, self_attn->forward_cached(norm1->forward(x), self_cache));
    y = norm3->forward_with_sum(y.sum, multihead_attn->forward_cross_cached(y.normalized, cross, memory_mask));
    return y.sum + ff(y.normalized);
  }
  Tensor y = norm1->forward(x, self_attn->forward_cached(x, self_cache));
  y = norm2->forward(y, multihead_attn->forward_cross_cached(y, cross, memory_mask));
  return norm3->forward(y, ff(y));
}

Tensor TransformerDecoderLayer::forward_slots(const Tensor& x, const Tensor& self_k, const Tensor& self_v,
                                              const Tensor& cross_k, const Tensor& cross_v, const SlotStep& step) const {
  NoGradGuard no_grad;
  auto ff = [&](const Tensor& h) { return feed_forward_inference(h, *linear1, *linear2, opt.activation); };
  auto sa = [&](const Tensor& h) { return self_attn->forward_slots(h, self_k, self_v, step); };
  auto ca = [&](const Tensor& h) { return multihead_attn->forward_cross_slots(h, cross_k, cross_v, step); };
  if (opt.norm_first) {  // as forward_cached, the attentions aside
    SumAndNorm y = norm2->forward_with_sum(x, sa(norm1->forward(x)));
    y = norm3->forward_with_sum(y.sum, ca(y.normalized));
    return y.sum + ff(y.normalized);
  }
  Tensor y = norm1->forward(x, sa(x));
  y = norm2->forward(y, ca(y));
  return norm3->forward(y, ff(y));
}

}  // namespace qkv::nn
