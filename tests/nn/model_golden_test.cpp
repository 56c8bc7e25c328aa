// GPT and the Transformer layers against PyTorch: the cases of tests/golden/models.json (written by
// tests/golden/make_model_golden.py). GPT: nanoGPT's model (../shared/pytorch-reference/gpt_model.py)
// with its parameters renamed to qkv's; layers: torch.nn.TransformerEncoderLayer/DecoderLayer, whose
// names qkv shares. Outputs, the loss, and the gradient of every parameter and input are compared.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "golden_util.h"
#include "testing.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/transformer_layer.h"
#include "qkv/ops.h"

namespace qkv::golden {
namespace {

void expect_same_names(const nn::Module& m, const json& c) {
  std::set<std::string> ours, theirs;
  for (const auto& [name, t] : m.named_parameters()) ours.insert(name);
  for (const auto& [name, t] : c.at("parameters").items()) theirs.insert(name);
  EXPECT_EQ(ours, theirs) << "parameter names differ from PyTorch's (mapped)";
}

void expect_param_grads(const nn::Module& m, const json& c) {
  for (const auto& [name, t] : m.named_parameters()) {
    ASSERT_TRUE(c.at("grads").contains(name)) << "no golden gradient for " << name;
    EXPECT_TRUE(grad_close("grad " + name, t.grad(), c.at("grads").at(name)));
  }
}

TEST(ModelGolden, GptForwardBackwardMatchesNanoGPT) {
  auto cases = golden_cases("models.json", {"gpt"});
  ASSERT_FALSE(cases.empty());
  for (const json& c : cases) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    nn::GPTConfig cfg = nn::GPTConfig::from_json(c.at("params"));
    nn::GPT gpt(cfg);
    expect_same_names(gpt, c);
    gpt.load_state_dict(state_of(c));
    Tensor idx = json_tensor(c.at("inputs").at("idx")), targets = json_tensor(c.at("inputs").at("targets"));
    Tensor logits = gpt.forward(idx);
    EXPECT_TRUE(all_close("logits", logits, c.at("outputs").at("logits")));
    Tensor loss = gpt.loss(idx, targets);
    EXPECT_TRUE(all_close("loss", loss.reshape({1}), c.at("outputs").at("loss")));
    loss.backward();
    expect_param_grads(gpt, c);
  }
}

// The residual stream (nn/residual_stream.h: each block's last sum made in the next block's first
// LayerNorm, and in LN_f) gives the bits of the blocks run one by one, each summing its own output:
// the logits and every parameter's gradient.
TEST(ModelGolden, GptResidualStreamGivesTheBitsOfBlockByBlock) {
  for (const json& c : golden_cases("models.json", {"gpt"})) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    nn::GPT gpt(nn::GPTConfig::from_json(c.at("params")));
    gpt.load_state_dict(state_of(c));
    gpt.eval();  // no dropout: the two runs draw no masks
    Tensor idx = json_tensor(c.at("inputs").at("idx")), targets = json_tensor(c.at("inputs").at("targets"));
    std::vector<float> logits[2];
    std::map<std::string, std::vector<float>> grads[2];
    for (int stream = 0; stream < 2; ++stream) {
      for (auto& [name, p] : gpt.named_parameters()) p.zero_grad();
      Tensor out;
      if (stream) {
        out = gpt.forward(idx);
      } else {
        Tensor x = add(gpt.wte->forward(idx), gpt.wpe->weight.slice(0, 0, idx.size(1)));
        for (const auto& block : gpt.h) x = block->forward(x, Tensor(), Tensor(), /*is_causal=*/true);
        out = linear(gpt.ln_f->forward(x), gpt.wte->weight);
      }
      logits[stream] = out.to_vector();
      cross_entropy(out.reshape({-1, gpt.config.vocab_size}), targets.reshape({-1})).backward();
      for (auto& [name, p] : gpt.named_parameters()) grads[stream][name] = p.grad().to_vector();
    }
    EXPECT_EQ(logits[0], logits[1]);
    for (const auto& [name, g] : grads[0]) EXPECT_EQ(g, grads[1][name]) << name;
  }
}

// The KV-cache path gives the same last-position logits as the full forward, feeding the prompt in
// one piece, token by token, and in uneven chunks.
TEST(ModelGolden, GptCachedForwardEqualsFullForward) {
  for (const json& c : golden_cases("models.json", {"gpt"})) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    nn::GPT gpt(nn::GPTConfig::from_json(c.at("params")));
    gpt.load_state_dict(state_of(c));
    gpt.eval();
    Tensor idx = json_tensor(c.at("inputs").at("idx"));
    const int64_t T = idx.size(1);
    NoGradGuard no_grad;
    Tensor full = gpt.forward(idx);
    for (std::vector<int64_t> chunks : {std::vector<int64_t>{T}, std::vector<int64_t>(T, 1), std::vector<int64_t>{2, T - 2}}) {
      std::vector<nn::KVCache> caches;
      int64_t pos = 0;
      for (int64_t n : chunks) {
        Tensor last = gpt.forward_cached(idx.slice(1, pos, pos + n).contiguous(), caches);
        pos += n;
        EXPECT_TENSOR_NEAR(last, full.select(1, pos - 1), 2e-5);
      }
      EXPECT_EQ(caches[0].length, T);
    }
  }
}

TEST(ModelGolden, TransformerLayersMatchPyTorch) {
  auto cases = golden_cases("models.json", {"encoder_layer", "decoder_layer"});
  ASSERT_EQ(cases.size(), 5u);
  for (const json& c : cases) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    const json& p = c.at("params");
    nn::TransformerLayerOptions o;
    o.d_model = p.at("d_model"), o.nhead = p.at("nhead"), o.dim_feedforward = p.at("dim_feedforward");
    o.activation = parse_enum<nn::Activation>(p.at("activation").get<std::string>());
    o.norm_first = p.at("norm_first"), o.dropout = 0.f;
    const json& in = c.at("inputs");
    Tensor x = json_tensor(in.at("x")).requires_grad_();
    Tensor kpm = in.contains("key_padding_mask") ? json_tensor(in.at("key_padding_mask")) : Tensor();
    const int64_t T = x.size(1);
    // PyTorch's generate_square_subsequent_mask: −inf above the diagonal
    Tensor causal;
    if (p.at("causal").get<bool>()) {
      std::vector<float> m(static_cast<size_t>(T * T), 0.f);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = i + 1; j < T; ++j) m[static_cast<size_t>(i * T + j)] = -INFINITY;
      causal = Tensor::from_vector(m, {T, T});
    }
    Tensor out, memory;
    std::unique_ptr<nn::Module> keep;
    if (c.at("op") == "encoder_layer") {
      auto layer = std::make_unique<nn::TransformerEncoderLayer>(o);
      expect_same_names(*layer, c);
      layer->load_state_dict(state_of(c));
      out = layer->forward(x, causal, kpm);
      keep = std::move(layer);
    } else {
      auto layer = std::make_unique<nn::TransformerDecoderLayer>(o);
      expect_same_names(*layer, c);
      layer->load_state_dict(state_of(c));
      memory = json_tensor(in.at("memory")).requires_grad_();
      out = layer->forward(x, memory, causal, Tensor(), Tensor(), kpm);
      keep = std::move(layer);
    }
    EXPECT_TRUE(all_close("out", out, c.at("outputs").at("out")));
    out.backward(json_tensor(c.at("grad_output")));
    expect_param_grads(*keep, c);
    EXPECT_TRUE(grad_close("grad x", x.grad(), c.at("grads").at("x")));
    if (memory.defined()) {
      EXPECT_TRUE(grad_close("grad memory", memory.grad(), c.at("grads").at("memory")));
    }
  }
}

}  // namespace
}  // namespace qkv::golden
