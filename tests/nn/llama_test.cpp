// nn::Llama and its blocks: the RMSNorm kernels against the formula composed of plain ops (forward
// and backward), finite differences through a whole tiny Llama, and decoding with the KV cache
// (GQA, a sliding window) against the full forward. Its numbers against transformers are
// tests/models/hf_convert_test.cpp's.
#include <gtest/gtest.h>

#include <map>

#include "qkv/decode/generate.h"
#include "qkv/models/registry.h"
#include "qkv/ops.h"
#include "qkv/nn/init.h"
#include "qkv/nn/llama.h"
#include "qkv/ops/gradcheck.h"
#include "testing.h"

namespace qkv {
namespace {

using testing::param;

// rms_norm's fused kernels against x / √(mean(x²) + ε) · γ written with the ops it replaces.
TEST(Llama, RmsNormKernelsMatchTheFormula) {
  for (int64_t n : {2, 7, 64, 129}) {  // (n = 1: dx ≈ r·g·ε/(x² + ε), all rounding)
    SCOPED_TRACE(n);
    Tensor x = param({3, 5, n}, 1), w = param({n}, 2);
    Tensor y = rms_norm(x, w, 1e-6f);
    Tensor ref = mul(div(x, sqrt(add(mean(mul(x, x), {-1}, true), 1e-6f))), w);
    EXPECT_TENSOR_NEAR(y, ref, 1e-6);
    Tensor g = param({3, 5, n}, 3);
    auto grads = [&](const Tensor& out) {
      x.zero_grad(), w.zero_grad();
      sum(mul(out, g)).backward();
      return std::pair{x.grad(), w.grad()};
    };
    auto [dx, dw] = grads(rms_norm(x, w, 1e-6f));
    auto [rx, rw] = grads(mul(div(x, sqrt(add(mean(mul(x, x), {-1}, true), 1e-6f))), w));
    EXPECT_TENSOR_NEAR(dx, rx, 1e-5);
    EXPECT_TENSOR_NEAR(dw, rw, 1e-5);
    EXPECT_TENSOR_NEAR(rms_norm(x, Tensor(), 1e-5f), div(x, sqrt(add(mean(mul(x, x), {-1}, true), 1e-5f))), 1e-6);
  }
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-5f); },
                   (std::vector<Tensor>{param({4, 6}, 4), param({6}, 5)}));
  EXPECT_NE(testing::error_of([] { rms_norm(Tensor::zeros({2, 3}), Tensor::zeros({4}), 1e-5f); }).find("rms_norm: weight"),
            std::string::npos);
}

// The rotary frequencies are sized by the config before any weight is: a loader's budget bounds them
// as it bounds the tensors (a config of hidden_size 7,922,337,203,684 — the config fuzzer's find —
// grew this table until the fuzzer's memory limit, with no weight yet allocated to trip the budget).
TEST(Llama, RotaryTableChargesTheBuilderBudget) {
  nn::LlamaConfig c;
  c.hidden_size = 64, c.num_attention_heads = 1;  // 32 frequencies: 256 bytes
  {
    AllocationBudget budget(100, "a 100-byte budget");
    EXPECT_NE(testing::error_of([&] { nn::RotaryEmbedding r(c); }).find("100-byte budget"), std::string::npos);
  }
  AllocationBudget budget(1000, "a 1000-byte budget");
  EXPECT_EQ(nn::RotaryEmbedding(c).inv_freq.size(), 32u);
  const std::string e = testing::error_of([] {
    AllocationBudget small(size_t{2} << 20, "a 2 MiB model");
    for (const models::ModelType& t : models::model_types())
      if (std::string(t.name) == "llama") t.build(nlohmann::json::parse(R"({"hidden_size": 7922337203684})"), nullptr);
  });
  EXPECT_NE(e.find("2 MiB model"), std::string::npos) << e;
}

TEST(Llama, RotaryAndSiluGradcheck) {
  Tensor cos = param({5, 4}, 6).detach(), sin = param({5, 4}, 7).detach();
  // partial rotary: 4 of 6 features rotate
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return apply_rotary_pos_emb(in[0], cos, sin); },
                   (std::vector<Tensor>{param({2, 3, 5, 6}, 8)}));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return silu(in[0]); }, (std::vector<Tensor>{param({17}, 9)}));
}

nn::LlamaConfig tiny(int64_t window = 0, bool qk_norm = false) {
  nn::LlamaConfig c;
  c.vocab_size = 50, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.block_size = 32, c.sliding_window = window;
  c.qkv_bias = true, c.rope_scaling = nn::RopeScaling::llama3, c.rope_factor = 4, c.rope_original_max_position_embeddings = 8;
  c.qk_norm = qk_norm;
  return c;
}

// Gemma 3's form: embeddings ·√E, four norms a layer, tanh-GELU gate, qk_norm; with a window, every
// second layer global and the windowed ones on their own RoPE base
nn::LlamaConfig gemma_like(int64_t window = 0) {
  nn::LlamaConfig c = tiny(window, /*qk_norm=*/true);
  c.embed_scale = true, c.sandwich_norms = true, c.hidden_act = nn::LlamaActivation::gelu_tanh;
  c.sliding_window_pattern = 2, c.rope_local_theta = 100;
  return c;
}

// Gemma 2's form: Gemma 3's without qk_norm or a local RoPE base, the scores scaled by 1/√6 (head_dim
// 4) and soft-capped at 0.5 — low enough that every score bends (these scores are O(1)) — and the
// logits capped at 0.3
nn::LlamaConfig gemma2_like(int64_t window = 0) {
  nn::LlamaConfig c = tiny(window);
  c.embed_scale = true, c.sandwich_norms = true, c.hidden_act = nn::LlamaActivation::gelu_tanh;
  c.sliding_window_pattern = 2, c.query_pre_attn_scalar = 6;
  c.attn_logit_softcapping = 0.5, c.final_logit_softcapping = 0.3;
  return c;
}

// qk_norm's γ away from their initial ones (as a trained Qwen3's), so that a γ read wrong shows
void randomize_qk_norms(nn::Llama& m, Generator& g) {
  for (auto& L : m.layers)
    for (Tensor* gamma : {&L->q_norm, &L->k_norm, &L->pre_feedforward_layernorm, &L->post_feedforward_layernorm})
      if (gamma->defined()) {
        Tensor t = gamma->detach();
        nn::init::normal_(t, g, 1.f, 0.3f);
      }
}

// The loss's gradient with respect to the parameter `name` of m against finite differences (the input
// is the parameter itself: gradcheck perturbs it in place and the model reads it), on 8 tokens.
void expect_loss_gradcheck(const nn::Llama& m, const std::string& name, double eps = 1e-2) {
  SCOPED_TRACE(name);
  const Tensor idx = Tensor::from_ints({1, 4, 9, 16, 25, 36, 49, 0}, {1, 8});
  const Tensor tgt = Tensor::from_ints({4, 9, 16, 25, 36, 49, 0, 1}, {1, 8});
  Tensor p;
  for (auto& [n, t] : m.named_parameters())
    if (n == name) p = t;
  ASSERT_TRUE(p.defined());
  autograd::GradcheckOptions o;
  o.eps = eps, o.atol = 3e-3, o.rtol = 3e-2;
  auto r = autograd::gradcheck([&](const std::vector<Tensor>&) { return m.loss(idx, tgt); }, {p}, o);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Llama, LossGradientsMatchFiniteDifferences) {
  Generator g(3);
  nn::Llama m(tiny(4), &g);
  // the gradient of every parameter of the first layer's attention and MLP, and the final norm
  for (const std::string name : {"layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.bias",
                                 "layers.0.mlp.gate_proj.weight", "layers.1.input_layernorm.weight", "norm.weight"})
    expect_loss_gradcheck(m, name);
}

// Qwen3's qk_norm: the gradients of the per-head norms' γ and of the projections under them; Gemma 3's
// form: its sandwich norms, its tanh-GELU gate, its windowed and global layers; Gemma 2's: through its
// soft-capped scores and logits
TEST(Llama, QkNormAndGemmaGradientsMatchFiniteDifferences) {
  Generator g(4), g2(6);
  nn::Llama qwen(tiny(0, /*qk_norm=*/true), &g), gemma(gemma_like(3), &g), gemma2(gemma2_like(3), &g2);
  randomize_qk_norms(qwen, g), randomize_qk_norms(gemma, g), randomize_qk_norms(gemma2, g2);
  for (auto& L : gemma2.layers)  // scores of spread ~1 against the cap of 0.5 (at N(0, 0.02), all ≈ 0)
    for (nn::Linear* proj : {L->q_proj.get(), L->k_proj.get()}) {
      Tensor w = proj->weight.detach();
      nn::init::normal_(w, g2, 0.f, 0.25f);
    }
  for (const std::string name : {"layers.0.self_attn.q_proj.weight", "layers.1.self_attn.k_proj.weight",
                                 "layers.0.post_feedforward_layernorm.weight", "norm.weight"})
    expect_loss_gradcheck(gemma2, name);
  for (const std::string name : {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight",
                                 "layers.1.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.bias"})
    expect_loss_gradcheck(qwen, name);
  for (const std::string name :
       {"layers.0.post_attention_layernorm.weight", "layers.1.pre_feedforward_layernorm.weight",
        "layers.0.post_feedforward_layernorm.weight", "layers.0.mlp.gate_proj.weight",
        "layers.1.self_attn.k_norm.weight"})
    expect_loss_gradcheck(gemma, name);
  // (the embeddings, N(0, 0.02), enter the stream ×√E = 4: a step of 10⁻² would move a row by a
  // quarter of its size, far past where the loss is linear)
  expect_loss_gradcheck(gemma, "embed_tokens.weight", 1e-3);
}

// Llama as its formula composed of plain ops — add, then rms_norm, at every residual — with the
// model's own parameters: the reference for the residual stream (nn/residual_stream.h), whose sums
// are made in the next norm's pass. (The MLP's product is the model's one op, silu_mul, which the op
// table checks against PyTorch's F.silu(gate) * up.)
Tensor unfused_llama(const nn::Llama& m, const Tensor& idx) {
  const nn::LlamaConfig& c = m.config;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t B = idx.size(0), T = idx.size(1), H = c.num_attention_heads, Hkv = c.kv_heads(), D = c.head_size();
  Tensor x = m.embed_tokens->forward(idx);
  if (c.embed_scale) x = mul(x, std::sqrt(static_cast<float>(c.hidden_size)));
  auto [cos, sin] = m.rotary().tables(0, T, x.device());
  for (const auto& L : m.layers) {
    Tensor n = rms_norm(x, L->input_layernorm, eps);
    Tensor q = L->q_proj->forward(n).view({B, T, H, D}), k = L->k_proj->forward(n).view({B, T, Hkv, D});
    if (c.qk_norm) q = rms_norm(q, L->q_norm, eps), k = rms_norm(k, L->k_norm, eps);  // Qwen3: each head
    q = apply_rotary_pos_emb(q.transpose(1, 2), cos, sin);
    k = apply_rotary_pos_emb(k.transpose(1, 2), cos, sin);
    Tensor v = L->v_proj->forward(n).view({B, T, Hkv, D}).transpose(1, 2);
    AttentionOptions opt;
    opt.is_causal = true, opt.enable_gqa = Hkv != H;
    if (c.query_pre_attn_scalar > 0) opt.scale = static_cast<float>(1.0 / std::sqrt(c.query_pre_attn_scalar));
    opt.softcap = static_cast<float>(c.attn_logit_softcapping);
    Tensor a = scaled_dot_product_attention(q, k, v, opt);
    Tensor o = L->o_proj->forward(a.transpose(1, 2).reshape({B, T, H * D}));
    if (c.sandwich_norms) {  // Gemma 3: h = x + RMSNorm(o), x' = h + RMSNorm(down(gelu(gate) · up)) of RMSNorm(h)
      Tensor h = add(x, rms_norm(o, L->post_attention_layernorm, eps));
      Tensor u = rms_norm(h, L->pre_feedforward_layernorm, eps);
      Tensor f = L->down_proj->forward(mul(gelu(L->gate_proj->forward(u), "tanh"), L->up_proj->forward(u)));
      x = add(h, rms_norm(f, L->post_feedforward_layernorm, eps));
      continue;
    }
    Tensor h = add(x, o);
    Tensor u = rms_norm(h, L->post_attention_layernorm, eps);
    x = add(h, L->down_proj->forward(silu_mul(L->gate_proj->forward(u), L->up_proj->forward(u))));
  }
  const Tensor logits = linear(rms_norm(x, m.norm, eps), m.lm_head ? m.lm_head->weight : m.embed_tokens->weight);
  const auto cap = static_cast<float>(c.final_logit_softcapping);
  return cap > 0 ? mul(tanh(mul(logits, 1.f / cap)), cap) : logits;
}

// The model gives the unfused formula's bits: its logits, and every parameter's gradient.
TEST(Llama, ResidualStreamGivesTheBitsOfAddThenNorm) {
  for (const std::string form : {"plain", "qk_norm", "gemma", "gemma2"}) {
    SCOPED_TRACE(form);
    Generator g(11);
    nn::Llama m(form == "gemma" ? gemma_like(0) : form == "gemma2" ? gemma2_like(0) : tiny(0, form == "qk_norm"), &g);
    if (form != "plain") randomize_qk_norms(m, g);
    Tensor idx = Tensor::from_ints({1, 4, 9, 16, 25, 36, 49, 0, 7, 3, 2, 8}, {2, 6});
    Tensor tgt = Tensor::from_ints({4, 9, 16, 25, 36, 49, 0, 1, 3, 2, 8, 5}, {2, 6});
    std::map<std::string, std::vector<float>> grads[2];
    std::vector<float> logits[2];
    for (int fused = 0; fused < 2; ++fused) {
      for (auto& [name, p] : m.named_parameters()) p.zero_grad();
      Tensor out = fused ? m.forward(idx) : unfused_llama(m, idx);
      logits[fused] = out.to_vector();
      cross_entropy(out.reshape({-1, m.config.vocab_size}), tgt.reshape({-1})).backward();
      for (auto& [name, p] : m.named_parameters()) grads[fused][name] = p.grad().to_vector();
    }
    EXPECT_EQ(logits[0], logits[1]);
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (const auto& [name, gr] : grads[0]) EXPECT_EQ(gr, grads[1][name]) << name;
  }
}

// Decoding in pieces through the KV cache gives the full forward's logits at every position —
// with grouped-query attention, llama3 rope, a window shorter than the sequence, qk_norm, Gemma 3's
// form (every second layer global, the windowed ones on their own RoPE base) and Gemma 2's (soft caps).
TEST(Llama, CachedStepsMatchTheFullForward) {
  for (const auto& [window, form] : std::vector<std::pair<int64_t, std::string>>{
           {0, "plain"}, {3, "plain"}, {0, "qk_norm"}, {3, "gemma"}, {3, "gemma2"}}) {
    SCOPED_TRACE(window);
    SCOPED_TRACE(form);
    Generator g(5);
    nn::Llama m(form == "gemma"    ? gemma_like(window)
                : form == "gemma2" ? gemma2_like(window)
                                   : tiny(window, form == "qk_norm"),
                &g);
    if (form != "plain") randomize_qk_norms(m, g);
    m.eval();
    std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    Tensor full = m.forward(Tensor::from_ints(ids, {1, 10}));  // [1, 10, V]
    auto state = m.start_decoding();
    // a prefill of 4, then one token at a time
    Tensor last = m.step(Tensor::from_ints({ids.begin(), ids.begin() + 4}, {1, 4}), state);
    EXPECT_TENSOR_NEAR(last, full.select(1, 3), 1e-5);
    for (int64_t t = 4; t < 10; ++t) {
      last = m.step(Tensor::from_ints({ids[static_cast<size_t>(t)]}, {1, 1}), state);
      EXPECT_TENSOR_NEAR(last, full.select(1, t), 1e-5);
    }
    EXPECT_EQ(state.length(), 10);
  }
}

// longrope (Phi-3.5, Phi-4-mini): a sequence of at most the original 6 tokens takes the short factors,
// a longer one the long factors at every position (and cos, sin × the attention factor) — so a cache
// made short refuses positions past 6, and generation feeds the sequence again there: with the cache,
// the tokens of recomputing every step from scratch.
TEST(Llama, LongropeTakesItsFactorsByTheSequencesLength) {
  nn::LlamaConfig c = tiny(0);
  c.rope_scaling = nn::RopeScaling::longrope, c.rope_original_max_position_embeddings = 6;
  c.rope_short_factor = {1.0, 1.7}, c.rope_long_factor = {4.0, 11.0}, c.rope_attention_factor = 1.3;
  Generator g(9);
  nn::Llama m(c, &g);
  m.eval();
  EXPECT_EQ(m.refeed_at(), 6);
  const std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  auto prefix = [&](int64_t n) { return Tensor::from_ints({ids.begin(), ids.begin() + n}, {1, n}); };
  // within 6: step by step = the full forward, both short
  auto state = m.start_decoding();
  Tensor last = m.step(prefix(4), state);
  EXPECT_TENSOR_NEAR(last, m.forward(prefix(4)).select(1, 3), 1e-5);
  last = m.step(Tensor::from_ints({ids[4], ids[5]}, {1, 2}), state);
  EXPECT_TENSOR_NEAR(last, m.forward(prefix(6)).select(1, 5), 1e-5);
  // past 6 the short cache is refused; fed again from 0, every position long = the full forward
  EXPECT_NE(testing::error_of([&] {
              m.step(Tensor::from_ints({ids[6]}, {1, 1}), state);
            }).find("feed it again"),
            std::string::npos);
  auto fresh = m.start_decoding();
  last = m.step(prefix(8), fresh);
  EXPECT_TENSOR_NEAR(last, m.forward(prefix(8)).select(1, 7), 1e-5);
  last = m.step(Tensor::from_ints({ids[8]}, {1, 1}), fresh);
  EXPECT_TENSOR_NEAR(last, m.forward(prefix(9)).select(1, 8), 1e-5);
  // the tables: cos(0) = the attention factor; position 3's angles 3·θᵢ / fᵢ, short or long by length
  const auto [cs, ss] = m.rotary(-1, 6).tables(0, 6, Device::cpu());
  const auto [cl, sl] = m.rotary(-1, 7).tables(0, 7, Device::cpu());
  EXPECT_FLOAT_EQ(cs.to_vector()[0], 1.3f);
  EXPECT_FLOAT_EQ(cl.to_vector()[0], 1.3f);
  const int64_t rot = c.rotary_dim();  // 4: θ = 1, 10000^(−1/2)
  for (int64_t i = 0; i < rot / 2; ++i) {
    const double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
    EXPECT_NEAR(cs.to_vector()[static_cast<size_t>(3 * rot + i)], 1.3 * std::cos(3 * theta / c.rope_short_factor[i]),
                1e-6);
    EXPECT_NEAR(cl.to_vector()[static_cast<size_t>(3 * rot + i)], 1.3 * std::cos(3 * theta / c.rope_long_factor[i]),
                1e-6);
  }
  // generation across the switch: cached (fed again at 7 tokens) = recomputed every step
  auto lm = models::build_language_model("llama", c.to_json(), &g);
  lm->module().eval();
  decode::GenerateOptions o;
  o.max_new_tokens = 12, o.sampling.temperature = 0;
  const std::vector<int32_t> cached = decode::generate(*lm, {1, 2, 3}, o);
  o.use_cache = false;
  EXPECT_EQ(cached, decode::generate(*lm, {1, 2, 3}, o));
  EXPECT_EQ(cached.size(), 12u);
  // factors of another length than the rotary half: refused by name
  c.rope_long_factor = {4.0};
  EXPECT_NE(
      testing::error_of([&] { nn::Llama bad(c, &g); }).find("rope_long_factor must hold one factor for each of the 2"),
      std::string::npos);
}

// Generation ends at a stop token (a converted model's eos_token_id), which is not returned.
TEST(Llama, GenerationStopsAtAStopToken) {
  Generator g(7);
  auto m = models::build_language_model("llama", tiny().to_json(), &g);
  m->module().eval();
  decode::GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 0;
  const std::vector<int32_t> all = decode::generate(*m, {1, 2, 3}, o);
  ASSERT_EQ(all.size(), 12u);
  o.stop_ids = {7, all[5]};
  const auto first = static_cast<size_t>(std::find(all.begin(), all.end(), all[5]) - all.begin());
  const std::vector<int32_t> cut = decode::generate(*m, {1, 2, 3}, o);
  EXPECT_LE(cut.size(), first);
  EXPECT_EQ(cut, std::vector<int32_t>(all.begin(), all.begin() + static_cast<int64_t>(cut.size())));
}

}  // namespace
}  // namespace qkv
