// qkv::nn::MultiheadAttention against torch.nn.MultiheadAttention: the "mha" cases of
// tests/golden/attention.json (written by tests/golden/make_golden.py). Parameters are loaded by
// PyTorch's names through load_state_dict; output, attention weights, and the gradients of the
// inputs and of every parameter are compared.
#include <gtest/gtest.h>

#include <set>

#include "golden_util.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/ops.h"

namespace qkv::golden {
namespace {

std::vector<json> mha_cases() {
  std::vector<json> cases = golden_cases("attention.json", {"mha"});
  EXPECT_FALSE(cases.empty()) << "attention.json has no mha cases";
  return cases;
}

nn::MultiheadAttention make_mha(const json& p) {
  return nn::MultiheadAttention(p.at("embed_dim").get<int64_t>(), p.at("num_heads").get<int64_t>(), 0.f,
                                p.at("bias").get<bool>(), p.at("kdim").get<int64_t>(), p.at("vdim").get<int64_t>(),
                                p.at("batch_first").get<bool>());
}

void run_mha_case(const json& c) {
  const json& p = c.at("params");
  const json& in = c.at("inputs");
  nn::MultiheadAttention mha = make_mha(p);

  // Parameter names must be PyTorch's, one to one.
  std::set<std::string> ours, theirs;
  for (const auto& [name, t] : mha.named_parameters()) ours.insert(name);
  for (const auto& [name, t] : c.at("parameters").items()) theirs.insert(name);
  EXPECT_EQ(ours, theirs) << "parameter names differ from torch.nn.MultiheadAttention's";
  ASSERT_NO_THROW(mha.load_state_dict(state_of(c)));
  for (const auto& [name, t] : mha.named_parameters()) {
    EXPECT_TRUE(t.requires_grad()) << name;
    EXPECT_TRUE(all_close("loaded parameter " + name, t, c.at("parameters").at(name), 0.0));
  }

  Tensor query = json_tensor(in.at("query")).requires_grad_();
  Tensor key, value;
  if (p.at("self_attention").get<bool>()) {
    key = value = query;  // the same tensor: the fused-projection path
  } else {
    key = json_tensor(in.at("key")).requires_grad_();
    value = p.at("kv_same").get<bool>() ? key : json_tensor(in.at("value")).requires_grad_();
  }
  Tensor kpm = in.contains("key_padding_mask") ? json_tensor(in.at("key_padding_mask")) : Tensor();
  Tensor attn_mask = in.contains("attn_mask") ? json_tensor(in.at("attn_mask")) : Tensor();
  const bool need_weights = p.at("need_weights").get<bool>();

  nn::MultiheadAttention::Output r;
  try {
    r = mha.forward(query, key, value, kpm, need_weights, attn_mask, p.at("average_attn_weights").get<bool>());
  } catch (const std::exception& e) {
    FAIL() << "forward threw: " << e.what();
  }
  const json& outs = c.at("outputs");
  EXPECT_TRUE(all_close("output", r.output, outs.at("output")));
  if (need_weights)
    EXPECT_TRUE(all_close("weights", r.weights, outs.at("weights")));
  else
    EXPECT_FALSE(r.weights.defined()) << "weights returned although need_weights=false";

  try {
    r.output.backward(json_tensor(c.at("grad_output")));
  } catch (const std::exception& e) {
    FAIL() << "backward threw: " << e.what();
  }
  const json& grads = c.at("grads");
  std::map<std::string, Tensor> inputs = {{"query", query}, {"key", key}, {"value", value}};
  std::set<std::string> checked;
  for (const auto& [name, t] : mha.named_parameters()) {
    ASSERT_TRUE(grads.contains(name)) << "no golden gradient for parameter " << name;
    EXPECT_TRUE(grad_close("grad " + name, t.grad(), grads.at(name)));
    checked.insert(name);
  }
  for (const auto& [name, g] : grads.items()) {
    if (checked.count(name)) continue;
    ASSERT_TRUE(inputs.count(name)) << "golden gradient for unknown tensor " << name;
    EXPECT_TRUE(grad_close("grad " + name, inputs.at(name).grad(), g));
    checked.insert(name);
  }
}

TEST(MhaGolden, MatchesPyTorch) {
  for (const json& c : mha_cases()) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    run_mha_case(c);
  }
}

// The same cases in eval mode without autograd (dropout is 0, so the results must not change).
TEST(MhaGolden, EvalNoGradForward) {
  for (const json& c : mha_cases()) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    const json& p = c.at("params");
    const json& in = c.at("inputs");
    nn::MultiheadAttention mha = make_mha(p);
    mha.load_state_dict(state_of(c));
    mha.eval();
    NoGradGuard guard;
    Tensor query = json_tensor(in.at("query")), key, value;
    if (p.at("self_attention").get<bool>()) {
      key = value = query;
    } else {
      key = json_tensor(in.at("key"));
      value = p.at("kv_same").get<bool>() ? key : json_tensor(in.at("value"));
    }
    Tensor kpm = in.contains("key_padding_mask") ? json_tensor(in.at("key_padding_mask")) : Tensor();
    Tensor attn_mask = in.contains("attn_mask") ? json_tensor(in.at("attn_mask")) : Tensor();
    const bool need_weights = p.at("need_weights").get<bool>();
    auto r = mha.forward(query, key, value, kpm, need_weights, attn_mask, p.at("average_attn_weights").get<bool>());
    EXPECT_TRUE(all_close("output", r.output, c.at("outputs").at("output")));
    if (need_weights) {
      EXPECT_TRUE(all_close("weights", r.weights, c.at("outputs").at("weights")));
    }
  }
}

// A state dict with a wrong-shaped, missing, extra or misnamed parameter is rejected (strict).
TEST(MhaGolden, LoadStateDictRejectsMismatches) {
  const std::vector<json> cases = mha_cases();
  ASSERT_FALSE(cases.empty());
  for (const json& c : cases) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    const json& p = c.at("params");
    nn::MultiheadAttention mha = make_mha(p);
    const std::map<std::string, Tensor> good = state_of(c);
    for (const auto& [name, t] : good) {
      SCOPED_TRACE("parameter " + name);
      Shape bad_shape = t.shape();
      bad_shape.back() += 1;
      std::map<std::string, Tensor> bad = good;
      bad[name] = Tensor::zeros(bad_shape);
      EXPECT_THROW(mha.load_state_dict(bad), Error);
      Shape transposed(t.shape().rbegin(), t.shape().rend());
      if (transposed != t.shape()) {
        bad[name] = Tensor::zeros(transposed);
        EXPECT_THROW(mha.load_state_dict(bad), Error);
      }
      bad = good;
      bad.erase(name);
      EXPECT_THROW(mha.load_state_dict(bad), Error);  // missing
      EXPECT_NO_THROW(mha.load_state_dict(bad, /*strict=*/false));
    }
    std::map<std::string, Tensor> extra = good;
    extra["out_proj.weight_typo"] = Tensor::zeros({1});
    EXPECT_THROW(mha.load_state_dict(extra), Error);
    // The fused and the separate projection layouts do not stand in for each other.
    std::map<std::string, Tensor> other = good;
    const int64_t E = p.at("embed_dim").get<int64_t>();
    if (good.count("in_proj_weight")) {
      other.erase("in_proj_weight");
      other["q_proj_weight"] = Tensor::zeros({E, E});
      other["k_proj_weight"] = Tensor::zeros({E, E});
      other["v_proj_weight"] = Tensor::zeros({E, E});
    } else {
      other.erase("q_proj_weight");
      other.erase("k_proj_weight");
      other.erase("v_proj_weight");
      other["in_proj_weight"] = Tensor::zeros({3 * E, E});
    }
    EXPECT_THROW(mha.load_state_dict(other), Error);
    // A rejected load must not have been needed to make the good one work afterwards.
    EXPECT_NO_THROW(mha.load_state_dict(good));
  }
}

}  // namespace
}  // namespace qkv::golden
