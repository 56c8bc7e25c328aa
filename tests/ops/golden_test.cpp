// Every op, forward and backward, against PyTorch: the golden cases of tests/golden/ops.json and the
// scaled_dot_product_attention cases of tests/golden/attention.json (written by
// tests/golden/make_golden.py). One TEST per op family; each case runs under SCOPED_TRACE(its name).
#include <gtest/gtest.h>

#include <set>

#include "golden_util.h"
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

// The qkv call for each op name of ops.json.
TensorMap run_op(const std::string& op, const TensorMap& in, const json& p) {
  auto a = [&] { return in_at(in, "a"); };
  auto b = [&] { return in_at(in, "b"); };
  if (op == "add") return one(add(a(), b()));
  if (op == "sub") return one(sub(a(), b()));
  if (op == "mul") return one(mul(a(), b()));
  if (op == "div") return one(div(a(), b()));
  if (op == "mul_scalar") return one(mul(a(), p.at("scalar").get<float>()));
  if (op == "add_scalar") return one(add(a(), p.at("scalar").get<float>()));
  if (op == "neg") return one(neg(a()));
  if (op == "exp") return one(exp(a()));
  if (op == "log") return one(log(a()));
  if (op == "tanh") return one(tanh(a()));
  if (op == "sigmoid") return one(sigmoid(a()));
  if (op == "sqrt") return one(sqrt(a()));
  if (op == "relu") return one(relu(a()));
  if (op == "gelu") return one(gelu(a(), p.at("approximate").get<std::string>()));
  if (op == "sum") return one(sum(a(), p.at("dims").get<std::vector<int64_t>>(), p.at("keepdim").get<bool>()));
  if (op == "mean") return one(mean(a(), p.at("dims").get<std::vector<int64_t>>(), p.at("keepdim").get<bool>()));
  if (op == "matmul") return one(matmul(a(), b()));
  if (op == "linear") return one(linear(in_at(in, "x"), in_at(in, "weight"), in_opt(in, "bias")));
  if (op == "softmax") return one(softmax(a(), p.at("dim").get<int64_t>()));
  if (op == "log_softmax") return one(log_softmax(a(), p.at("dim").get<int64_t>()));
  if (op == "layer_norm")
    return one(layer_norm(in_at(in, "x"), p.at("normalized_shape").get<Shape>(), in_opt(in, "weight"),
                          in_opt(in, "bias"), p.at("eps").get<float>()));
  if (op == "embedding")
    return one(embedding(in_at(in, "ids"), in_at(in, "weight"), p.at("padding_idx").get<int64_t>()));
  if (op == "cross_entropy")
    return one(cross_entropy(in_at(in, "logits"), in_at(in, "target"), p.at("ignore_index").get<int64_t>(),
                             p.at("label_smoothing").get<float>(), p.at("reduction").get<std::string>()));
  if (op == "cat") {
    std::vector<Tensor> xs;
    for (int64_t i = 0; i < p.at("n").get<int64_t>(); ++i) {
      std::string name = "x";
      name += std::to_string(i);
      xs.push_back(in_at(in, name));
    }
    return one(cat(xs, p.at("dim").get<int64_t>()));
  }
  if (op == "transpose") return one(a().transpose(p.at("d0").get<int64_t>(), p.at("d1").get<int64_t>()).contiguous());
  if (op == "permute") return one(a().permute(p.at("dims").get<Shape>()).contiguous());
  if (op == "transpose_reshape")
    return one(a().transpose(p.at("d0").get<int64_t>(), p.at("d1").get<int64_t>()).reshape(p.at("shape").get<Shape>()));
  if (op == "slice")
    return one(a().slice(p.at("dim").get<int64_t>(), p.at("start").get<int64_t>(), p.at("end").get<int64_t>()));
  if (op == "masked_fill") return one(masked_fill(a(), in_at(in, "mask"), p.at("value").get<float>()));
  if (op == "index_select")
    return one(index_select(a(), p.at("dim").get<int64_t>(), p.at("index").get<std::vector<int64_t>>()));
  if (op == "eq") return one(eq(a(), p.at("scalar").get<float>()));
  if (op == "ne") return one(ne(a(), p.at("scalar").get<float>()));
  if (op == "lt") return one(lt(a(), p.at("scalar").get<float>()));
  if (op == "le") return one(le(a(), p.at("scalar").get<float>()));
  if (op == "gt") return one(gt(a(), p.at("scalar").get<float>()));
  if (op == "ge") return one(ge(a(), p.at("scalar").get<float>()));
  if (op == "logical_and") return one(logical_and(a(), b()));
  if (op == "logical_or") return one(logical_or(a(), b()));
  if (op == "logical_not") return one(logical_not(a()));
  if (op == "causal_mask")
    return one(causal_mask(p.at("Lq").get<int64_t>(), p.at("Lk").get<int64_t>(), p.at("offset").get<int64_t>()));
  if (op == "attention_mask_from_padding") return one(attention_mask_from_padding(in_at(in, "key_padding_mask")));
  if (op == "log_mean_exp") {
    std::vector<Tensor> xs;
    for (int64_t i = 0; i < p.at("n").get<int64_t>(); ++i) {
      std::string name = "x";  // (not "x" + to_string: GCC 12's -Wrestrict misfires on it)
      name += std::to_string(i);
      xs.push_back(in_at(in, name));
    }
    return one(log_mean_exp(xs));
  }
  throw std::runtime_error("golden_test: no qkv call for op \"" + op + "\"");
}

// The op families: one TEST each. Every op of ops.json must be in one (GoldenOps.EveryOpIsTested).
const std::map<std::string, std::vector<std::string>>& families() {
  static const std::map<std::string, std::vector<std::string>> f = {
      {"binary", {"add", "sub", "mul", "div"}},
      {"scalar", {"mul_scalar", "add_scalar"}},
      {"unary", {"neg", "exp", "log", "tanh", "sigmoid", "sqrt"}},
      {"activation", {"relu", "gelu"}},
      {"reduction", {"sum", "mean"}},
      {"matmul", {"matmul"}},
      {"linear", {"linear"}},
      {"softmax", {"softmax", "log_softmax"}},
      {"layer_norm", {"layer_norm"}},
      {"embedding", {"embedding"}},
      {"cross_entropy", {"cross_entropy"}},
      {"cat", {"cat"}},
      {"view", {"transpose", "permute", "transpose_reshape", "slice"}},
      {"masked_fill", {"masked_fill"}},
      {"index_select", {"index_select"}},
      {"compare", {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not"}},
      {"mask", {"causal_mask", "attention_mask_from_padding"}},
      {"log_mean_exp", {"log_mean_exp"}},
  };
  return f;
}

void run_family(const std::string& family) {
  const std::vector<json> cases = golden_cases("ops.json", families().at(family));
  ASSERT_FALSE(cases.empty()) << "ops.json has no cases for family " << family;
  for (const json& c : cases) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>() + " (op " + c.at("op").get<std::string>() + ")");
    const std::string op = c.at("op").get<std::string>();
    run_golden_case(c, [&](const TensorMap& in, const json& p) { return run_op(op, in, p); });
  }
}

TEST(GoldenOps, EveryOpIsTested) {
  std::set<std::string> known;
  for (const auto& [fam, ops] : families()) known.insert(ops.begin(), ops.end());
  std::set<std::string> seen;
  for (const json& c : golden_file("ops.json").at("cases")) {
    const std::string op = c.at("op").get<std::string>();
    EXPECT_TRUE(known.count(op)) << "op " << op << " (case " << c.at("name") << ") belongs to no test family";
    seen.insert(op);
  }
  for (const std::string& op : known) EXPECT_TRUE(seen.count(op)) << "no golden case for op " << op;
}

TEST(GoldenOps, Binary) { run_family("binary"); }
TEST(GoldenOps, Scalar) { run_family("scalar"); }
TEST(GoldenOps, Unary) { run_family("unary"); }
TEST(GoldenOps, Activation) { run_family("activation"); }
TEST(GoldenOps, Reduction) { run_family("reduction"); }
TEST(GoldenOps, Matmul) { run_family("matmul"); }
TEST(GoldenOps, Linear) { run_family("linear"); }
TEST(GoldenOps, Softmax) { run_family("softmax"); }
TEST(GoldenOps, LayerNorm) { run_family("layer_norm"); }
TEST(GoldenOps, Embedding) { run_family("embedding"); }
TEST(GoldenOps, CrossEntropy) { run_family("cross_entropy"); }
TEST(GoldenOps, Cat) { run_family("cat"); }
TEST(GoldenOps, View) { run_family("view"); }
TEST(GoldenOps, MaskedFill) { run_family("masked_fill"); }
TEST(GoldenOps, IndexSelect) { run_family("index_select"); }
TEST(GoldenOps, Compare) { run_family("compare"); }
TEST(GoldenOps, Mask) { run_family("mask"); }
TEST(GoldenOps, LogMeanExp) { run_family("log_mean_exp"); }

// ---- scaled_dot_product_attention (attention.json, op "sdpa") ----------------------------------

AttentionOptions sdpa_options(const TensorMap& in, const json& p) {
  AttentionOptions opt;
  opt.attn_mask = in_opt(in, "attn_mask");
  opt.is_causal = p.at("is_causal").get<bool>();
  if (!p.at("scale").is_null()) opt.scale = p.at("scale").get<float>();
  opt.enable_gqa = p.at("enable_gqa").get<bool>();
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

// The positional-argument overload: output and gradients (q, k, v, and a float mask that requires grad).
TEST(GoldenAttention, ScaledDotProductAttention) {
  for (json c : sdpa_cases()) {
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
