#include "qkv/nn/gpt.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

const io::Fields<GPTConfig>& GPTConfig::fields() {
  using F = io::Fields<GPTConfig>;
  static const F f("GPT config", {
                                     F::integer("vocab_size", &GPTConfig::vocab_size, 1),
                                     F::integer("block_size", &GPTConfig::block_size, 1),
                                     F::integer("n_layer", &GPTConfig::n_layer, 1),
                                     F::integer("n_head", &GPTConfig::n_head, 1),
                                     F::integer("n_embd", &GPTConfig::n_embd, 1),
                                     F::number("dropout", &GPTConfig::dropout, 0, 1, /*hi_open=*/true),
                                     F::boolean("bias", &GPTConfig::bias),
                                     F::choice("activation", &GPTConfig::activation),
                                     F::number("layer_norm_eps", &GPTConfig::layer_norm_eps, 1e-12, 1),
                                     F::integer("n_inner", &GPTConfig::n_inner, 0),
                                     F::integer("position_offset", &GPTConfig::position_offset, 0, 1 << 16),
                                 });
  return f;
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  GPTConfig c = fields().from_json(j);
  QKV_CHECK(c.n_embd % c.n_head == 0, "GPT config: n_embd ", c.n_embd, " must be a multiple of n_head ", c.n_head);
  return c;
}

nlohmann::json GPTConfig::to_json() const { return fields().to_json(*this); }

std::string GPTConfig::describe() const {
  return detail::concat("GPT ", n_layer, " layers, ", n_head, " heads, ", n_embd, " dims, block ", block_size, ", vocab ",
                        vocab_size);
}

GPT::GPT(const GPTConfig& c, Generator* gen) : config(c), gen_(gen) {
  Generator& g = gen ? *gen : default_generator();
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, -1, &g));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size + c.position_offset, c.n_embd, -1, &g));
  TransformerLayerOptions o;
  o.d_model = c.n_embd, o.nhead = c.n_head, o.dim_feedforward = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
  o.dropout = c.dropout, o.activation = c.activation, o.layer_norm_eps = c.layer_norm_eps;
  o.norm_first = true, o.bias = c.bias, o.batch_first = true;
  for (int64_t i = 0; i < c.n_layer; ++i)
    h.push_back(register_module("h." + std::to_string(i), std::make_shared<TransformerEncoderLayer>(o, gen)));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_eps, true, c.bias));

  // nanoGPT's initialization: N(0, 0.02) for every weight matrix and embedding, zero biases, and
  // N(0, 0.02/√(2·n_layer)) for the projections that write into the residual stream.
  for (auto& [name, p] : named_parameters()) {
    Tensor t = p.detach();
    const bool residual_proj = name.ends_with("out_proj.weight") || name.ends_with("linear2.weight");
    if (name.ends_with("norm1.weight") || name.ends_with("norm2.weight") || name == "ln_f.weight") continue;
    if (p.dim() >= 2)
      init::normal_(t, g, 0.f, residual_proj ? 0.02f / std::sqrt(2.f * static_cast<float>(c.n_layer)) : 0.02f);
    else
      init::zeros_(t);
  }
}

// x₀ = Dropout(wte[idx] + wpe[pos0 … pos0+T−1])   (rows past position_offset)
Tensor GPT::embed(const Tensor& idx, int64_t pos0) const {
  QKV_CHECK(idx.dim() == 2 && idx.dtype() == DType::i32, "GPT: idx must be i32 [B, T], got ", shape_str(idx.shape()));
  const int64_t T = idx.size(1);
  QKV_CHECK(T >= 1 && pos0 + T <= config.block_size, "GPT: positions ", pos0, " … ", pos0 + T - 1,
            " exceed block_size ", config.block_size);
  Tensor pos = position_table().slice(0, pos0, pos0 + T);
  return dropout(wte->forward(idx) + pos, config.dropout, is_training(), gen_);
}

Tensor GPT::final_hidden(const Tensor& idx, AttentionMaps* maps) const {
  // the residual stream: each block's last sum is made in the next one's first LayerNorm (or LN_f)
  ResidualStream x{embed(idx, 0), Tensor()};
  for (auto& block : h) {
    Tensor w;
    x = block->forward_masked(x, Tensor(), /*is_causal=*/true, maps ? &w : nullptr);
    if (maps) maps->decoder_self.push_back(w);
  }
  return ln_f->forward(x);
}

// logits = LN_f(x) wteᵀ
Tensor GPT::forward(const Tensor& idx, AttentionMaps* maps) const { return linear(final_hidden(idx, maps), wte->weight); }

// cross_entropy(LN_f(x) wteᵀ, targets), without the logits
Tensor GPT::loss(const Tensor& idx, const Tensor& targets) const {
  QKV_CHECK(targets.shape() == idx.shape(), "GPT::loss: targets ", shape_str(targets.shape()), " should match idx ",
            shape_str(idx.shape()));
  const Tensor x = final_hidden(idx, nullptr);  // [B, T, E]
  return linear_cross_entropy(x.reshape({-1, config.n_embd}), wte->weight, targets.reshape({-1}));
}

Tensor GPT::forward_cached(const Tensor& idx, std::vector<KVCache>& caches) const {
  NoGradGuard no_grad;
  if (caches.size() != h.size()) caches.assign(h.size(), KVCache{});
  ResidualStream x{embed(idx, caches[0].length), Tensor()};
  for (size_t i = 0; i < h.size(); ++i) x = h[i]->forward_cached(x, caches[i]);
  const int64_t T = idx.size(1);
  return linear_inference(ln_f->forward(x.select(1, T - 1)), wte->weight, wte_inference);  // the last position only
}

PagedKVCache GPT::make_paged_cache(int64_t pages, int64_t page_size, Device device, DType dtype) const {
  const int64_t D = config.n_embd / config.n_head;
  return PagedKVCache(config.n_layer, pages, page_size, config.n_head, D, D, device, dtype);
}

Tensor GPT::step_paged(const Tensor& ids, const PagedStep& step, PagedKVCache& cache) const {
  NoGradGuard no_grad;
  QKV_CHECK(ids.dim() == 1 && ids.dtype() == DType::i32 && ids.size(0) == step.tokens(), "GPT::step_paged: ids must be i32 [",
            step.tokens(), "], got ", ids.str());
  QKV_CHECK(cache.layers() == static_cast<int64_t>(h.size()), "GPT::step_paged: a cache of ", cache.layers(),
            " layers for a model of ", h.size());
  // x₀ = wte[ids] + wpe[positions] (positions < block_size: the caller's window), [1, T, E]
  ResidualStream x{(wte->forward(ids) + embedding(step.positions, position_table())).unsqueeze(0), Tensor()};
  for (size_t i = 0; i < h.size(); ++i) x = h[i]->forward_paged(x, cache, static_cast<int64_t>(i), step);
  const Tensor last = step.last_rows(x.sum().squeeze(0));  // [sequences, E]
  return linear_inference(ln_f->forward(last), wte->weight, wte_inference);
}

void GPT::set_inference_weights(InferenceWeights weights) {
  for (auto& block : h) block->set_inference_weights(weights);
  wte_inference = InferenceWeight(wte->weight, weights);
}

}  // namespace qkv::nn
