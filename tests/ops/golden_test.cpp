// Every op, forward and backward, against PyTorch: the golden cases of tests/golden/ops.json, one
// test per entry of the op table (tests/ops/op_table.h), and the scaled_dot_product_attention cases
// of tests/golden/attention.json (written by tests/golden/make_golden.py). Each case runs under
// SCOPED_TRACE(its name).
#include <gtest/gtest.h>

#include "golden_util.h"
#include "ops/op_table.h"
#include "qkv/ops.h"

namespace qkv::golden {
namespace {

const Tensor& in_at(const TensorMap& in, const std::string& name) {
  auto it = in.find(name);
  if (it == in.end()) throw std::runtime_error("golden case has no input \"" + name + "\"");
  return it->second;
}
Tensor in_opt(const TensorMap& in, const std::string& name) {
  auto it = in.find(name);
  return it == in.end() ? Tensor() : it->second;
}
TensorMap one(Tensor t) { return {{"out", std::move(t)}}; }

// ---- the op table's golden cases (ops.json) ------------------------------------------------------
// Each entry of tests/ops/op_table.cpp with golden cases is one test, GoldenOps/OpGolden.MatchesPyTorch/<op>,
// running every case of that op under SCOPED_TRACE(its name).

class OpGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(OpGolden, MatchesPyTorch) {
  const optable::OpInfo& op = *optable::find_op(GetParam());
  const std::vector<json> cases = golden_cases("ops.json", {op.name});
  ASSERT_FALSE(cases.empty()) << "ops.json has no cases for op " << op.name
                              << " (add them to tests/golden/make_golden.py, or mark the entry golden = false)";
  for (const json& c : cases) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    run_golden_case(
        c, [&](const TensorMap& in, const json& p) { return op.run(in, p, Device::cpu()); }, "out", op.golden_tol);
  }
}

INSTANTIATE_TEST_SUITE_P(GoldenOps, OpGolden,
                         ::testing::ValuesIn(optable::op_names([](const optable::OpInfo& o) { return o.golden; })),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Every op of ops.json has an entry with golden = true (so its cases run above).
TEST(GoldenOps, EveryOpIsTested) {
  for (const json& c : golden_file("ops.json").at("cases")) {
    const std::string op = c.at("op").get<std::string>();
    const optable::OpInfo* entry = optable::find_op(op);
    EXPECT_TRUE(entry && entry->golden) << "op " << op << " (case " << c.at("name")
                                        << ") has no golden entry in tests/ops/op_table.cpp";
  }
}

// ---- scaled_dot_product_attention (attention.json, op "sdpa") ----------------------------------

AttentionOptions sdpa_options(const TensorMap& in, const json& p) {
  AttentionOptions opt;
  opt.attn_mask = in_opt(in, "attn_mask");
  opt.is_causal = p.at("is_causal").get<bool>();
  if (!p.at("scale").is_null()) opt.scale = p.at("scale").get<float>();
  opt.enable_gqa = p.at("enable_gqa").get<bool>();
  opt.softcap = p.value("softcap", 0.f);
  return opt;
}

std::vector<json> sdpa_cases() {
  std::vector<json> cases = golden_cases("attention.json", {"sdpa"});
  EXPECT_FALSE(cases.empty()) << "attention.json has no sdpa cases";
  return cases;
}

TEST(GoldenAttention, EveryOpIsTested) {
  for (const json& c : golden_file("attention.json").at("cases")) {
    const std::string op = c.at("op").get<std::string>();
    EXPECT_TRUE(op == "sdpa" || op == "mha") << "op " << op << " (case " << c.at("name") << ") has no test";
  }
}

// The positional-argument overload: output and gradients (q, k, v, and a float mask that requires grad);
// PyTorch's arguments, no soft cap.
TEST(GoldenAttention, ScaledDotProductAttention) {
  for (json c : sdpa_cases()) {
    if (c.at("params").value("softcap", 0.0) > 0) continue;
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    c.at("outputs").erase("weights");
    run_golden_case(c, [](const TensorMap& in, const json& p) {
      AttentionOptions o = sdpa_options(in, p);
      return one(scaled_dot_product_attention(in_at(in, "q"), in_at(in, "k"), in_at(in, "v"), o.attn_mask, 0.f,
                                              o.is_causal, o.scale, o.enable_gqa));
    });
  }
}

// The options overload.
TEST(GoldenAttention, ScaledDotProductAttentionOptions) {
  for (json c : sdpa_cases()) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    c.at("outputs").erase("weights");
    run_golden_case(c, [](const TensorMap& in, const json& p) {
      return one(scaled_dot_product_attention(in_at(in, "q"), in_at(in, "k"), in_at(in, "v"), sdpa_options(in, p)));
    });
  }
}

// With the attention weights (softmax probabilities, zeros on rows with no allowed key).
TEST(GoldenAttention, ScaledDotProductAttentionWithWeights) {
  for (const json& c : sdpa_cases()) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    run_golden_case(c, [](const TensorMap& in, const json& p) {
      AttentionResult r = scaled_dot_product_attention_with_weights(in_at(in, "q"), in_at(in, "k"), in_at(in, "v"),
                                                                    sdpa_options(in, p));
      return TensorMap{{"out", r.output}, {"weights", r.weights}};
    });
  }
}

// Forward only, without autograd (the inference path that keeps no probabilities).
TEST(GoldenAttention, ScaledDotProductAttentionNoGrad) {
  for (json c : sdpa_cases()) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    c["grads"] = json::object();
    NoGradGuard guard;
    run_golden_case(c, [](const TensorMap& in, const json& p) {
      AttentionResult r = scaled_dot_product_attention_with_weights(in_at(in, "q"), in_at(in, "k"), in_at(in, "v"),
                                                                    sdpa_options(in, p));
      return TensorMap{{"out", r.output}, {"weights", r.weights}};
    });
  }
}

}  // namespace
}  // namespace qkv::golden
