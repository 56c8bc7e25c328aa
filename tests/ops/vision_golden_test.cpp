// The image ops, forward and backward, against PyTorch: the golden cases of tests/golden/vision.json
// (written by tests/golden/make_vision_golden.py). One TEST per op; each case runs under
// SCOPED_TRACE(its name).
#include <gtest/gtest.h>

#include <set>

#include "golden_util.h"
#include "qkv/nn/non_local.h"
#include "qkv/ops.h"

namespace qkv::golden {
namespace {

Tensor in_opt(const TensorMap& in, const std::string& name) {
  auto it = in.find(name);
  return it == in.end() ? Tensor() : it->second;
}
Size2 size2(const json& v) { return {v.at(0).get<int64_t>(), v.at(1).get<int64_t>()}; }
std::optional<Size2> opt_size2(const json& v) { return v.is_null() ? std::nullopt : std::optional<Size2>(size2(v)); }

// The qkv call for each op name of vision.json.
TensorMap run_op(const std::string& op, const TensorMap& in, const json& p) {
  const Tensor& x = in.at("x");
  if (op == "conv2d")
    return {{"out", conv2d(x, in.at("weight"), in_opt(in, "bias"), size2(p.at("stride")), size2(p.at("padding")),
                           size2(p.at("dilation")), p.at("groups").get<int64_t>())}};
  if (op == "max_pool2d")
    return {{"out", max_pool2d(x, size2(p.at("kernel_size")), opt_size2(p.at("stride")), size2(p.at("padding")),
                               size2(p.at("dilation")), p.at("ceil_mode").get<bool>())}};
  if (op == "avg_pool2d") {
    std::optional<int64_t> div;
    if (!p.at("divisor_override").is_null()) div = p.at("divisor_override").get<int64_t>();
    return {{"out", avg_pool2d(x, size2(p.at("kernel_size")), opt_size2(p.at("stride")), size2(p.at("padding")),
                               p.at("ceil_mode").get<bool>(), p.at("count_include_pad").get<bool>(), div)}};
  }
  if (op == "adaptive_avg_pool2d") return {{"out", adaptive_avg_pool2d(x, size2(p.at("output_size")))}};
  if (op == "batch_norm") {
    Tensor rm = in.at("running_mean").contiguous_copy(), rv = in.at("running_var").contiguous_copy();
    Tensor y = batch_norm(x, rm, rv, in_opt(in, "weight"), in_opt(in, "bias"), p.at("training").get<bool>(),
                          p.at("momentum").get<float>(), p.at("eps").get<float>());
    return {{"out", y}, {"running_mean", rm}, {"running_var", rv}};
  }
  if (op == "group_norm")
    return {{"out", group_norm(x, p.at("num_groups").get<int64_t>(), in_opt(in, "weight"), in_opt(in, "bias"),
                               p.at("eps").get<float>())}};
  if (op == "non_local") {
    // The block's own tensors replaced by the case's, so that their gradients land in `in`.
    nn::NonLocalBlock2d block({x.size(1), p.at("inter_channels").get<int64_t>(), p.at("heads").get<int64_t>(),
                               p.at("sub_sample").get<bool>()});
    for (auto [conv, name] : {std::pair{block.theta.get(), "theta"}, {block.phi.get(), "phi"}, {block.g.get(), "g"},
                              {block.W.get(), "W"}}) {
      conv->weight = in.at(std::string(name) + ".weight");
      conv->bias = in.at(std::string(name) + ".bias");
    }
    block.bn->weight = in.at("bn.weight"), block.bn->bias = in.at("bn.bias");
    Tensor weights;
    Tensor out = block.forward(x, &weights);
    return {{"out", out}, {"weights", weights}};
  }
  throw std::runtime_error("vision_golden_test: no qkv call for op \"" + op + "\"");
}

const std::vector<std::string> kOps = {"conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm",
                                       "group_norm", "non_local"};

void run(const std::string& op) {
  const std::vector<json> cases = golden_cases("vision.json", {op});
  ASSERT_FALSE(cases.empty()) << "vision.json has no cases for " << op;
  for (const json& c : cases) {
    SCOPED_TRACE("case " + c.at("name").get<std::string>());
    run_golden_case(c, [&](const TensorMap& in, const json& p) { return run_op(op, in, p); });
  }
}

TEST(GoldenVision, EveryOpIsTested) {
  std::set<std::string> seen;
  for (const json& c : golden_file("vision.json").at("cases")) seen.insert(c.at("op").get<std::string>());
  EXPECT_EQ(seen, std::set<std::string>(kOps.begin(), kOps.end()));
}

TEST(GoldenVision, Conv2d) { run("conv2d"); }
TEST(GoldenVision, MaxPool2d) { run("max_pool2d"); }
TEST(GoldenVision, AvgPool2d) { run("avg_pool2d"); }
TEST(GoldenVision, AdaptiveAvgPool2d) { run("adaptive_avg_pool2d"); }
TEST(GoldenVision, BatchNorm) { run("batch_norm"); }
TEST(GoldenVision, GroupNorm) { run("group_norm"); }
// The non-local block of nn/non_local.h (training mode: batch norm over the batch) against its
// formula written out in PyTorch — every parameter's gradient included.
TEST(GoldenVision, NonLocalBlock) { run("non_local"); }

}  // namespace
}  // namespace qkv::golden
