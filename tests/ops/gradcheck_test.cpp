// Finite-difference checks of every op's backward rule (the PyTorch comparisons are in
// golden_test.cpp; these catch a wrong rule independently of any reference): every sample of every
// entry of the op table (tests/ops/op_table.h) in its differentiable inputs, then the checks of
// compositions (views of views, transposed GEMM operands, one split used many ways) written here.
#include "ops/op_table.h"
#include "testing.h"

namespace qkv {
namespace {

using testing::param;
using V = std::vector<Tensor>;

class OpGradcheck : public ::testing::TestWithParam<std::string> {};

// f(inputs that take a gradient) = the op's main output, the other inputs and the params fixed.
TEST_P(OpGradcheck, BackwardMatchesFiniteDifferences) {
  const optable::OpInfo& op = *optable::find_op(GetParam());
  int checked = 0;
  for (const optable::Sample& s : op.samples()) {
    if (!s.gradcheck) continue;
    SCOPED_TRACE("sample " + s.name);
    std::vector<std::string> names;
    V leaves;
    for (const std::string& n : op.differentiable) {
      auto it = s.inputs.find(n);
      if (it == s.inputs.end() || it->second.dtype() != DType::f32) continue;  // (a boolean mask: none)
      names.push_back(n);
      leaves.push_back(it->second.detach().contiguous_copy().requires_grad_());
    }
    ASSERT_FALSE(leaves.empty()) << "no differentiable input in this sample";
    auto f = [&](const V& x) {
      optable::TensorMap in = s.inputs;
      for (size_t i = 0; i < names.size(); ++i) in[names[i]] = x[i];
      return op.run(in, s.params, Device::cpu()).at("out");
    };
    auto r = autograd::gradcheck(f, leaves, op.gradcheck);
    EXPECT_TRUE(r.ok) << r.message;
    ++checked;
  }
  EXPECT_GT(checked, 0) << "an op with differentiable inputs and no sample to check them";
}

INSTANTIATE_TEST_SUITE_P(
    GradcheckOps, OpGradcheck,
    ::testing::ValuesIn(optable::op_names([](const optable::OpInfo& o) { return !o.differentiable.empty(); })),
    [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- compositions and special cases -------------------------------------------------------------

TEST(GradcheckOps, EmptyReduction) {
  // an empty extent: the sum is 0 and its gradient (a broadcast of the seed, made dense) empty
  Tensor e = param({2, 0, 3}, 16);
  Tensor s = sum(e);
  EXPECT_EQ(s.item(), 0.f);
  s.backward();
  EXPECT_EQ(e.grad().shape(), (Shape{2, 0, 3}));
}

TEST(GradcheckOps, ViewsAndCopies) {
  Tensor a = param({2, 3, 4}, 5);
  EXPECT_GRADCHECK([](const V& x) { return x[0].permute({1, 2, 0}).reshape({3, 8}); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].slice(1, 1, 3) * 2.f; }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].select(2, -1); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].slice(1, 0, 1).expand({2, 5, 4}); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return stack({x[0], x[0] * 2.f}, 0); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return chunk(x[0], 2, -1)[1] * chunk(x[0], 2, -1)[0]; }, (V{a}));
  // One split, pieces uneven, one piece unused, one used twice, the input also used directly.
  EXPECT_GRADCHECK(
      [](const V& x) {
        std::vector<Tensor> p = split(x[0], 3, -1);  // [2,3,3] and [2,3,1]
        return p[1] * p[1] + p[1] * 2.f + x[0].slice(2, 0, 1);
      },
      (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return chunk(x[0], 3, 1)[1] * 2.f; }, (V{a}));
}

TEST(GradcheckOps, Matmul) {
  Tensor a = param({2, 3, 4}, 7), v = param({4}, 10);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[1], x[0].transpose(-1, -2)); }, (V{a, v}));
  // Transposed operands go to GEMM without a copy.
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0].transpose(-1, -2), x[0]); }, (V{a}));
  Tensor w = param({6, 4}, 11);
  EXPECT_GRADCHECK([](const V& x) { return linear(x[0].transpose(0, 1), x[1]); }, (V{a, w}));
  // no input features: y = b on every row (as torch's)
  Tensor none = param({5, 0}, 13), w0 = param({3, 0}, 14), b3 = param({3}, 15);
  Tensor y = linear(none, w0, b3);
  EXPECT_EQ(y.shape(), (Shape{5, 3}));
  for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(y.select(0, r).to_vector(), b3.to_vector());
  EXPECT_EQ(linear(none, w0).to_vector(), std::vector<float>(15, 0.f));
  // an empty inner dimension in matmul: zeros (torch.matmul's empty sum), batched or not
  for (const Shape& sa : {Shape{3, 0}, Shape{2, 3, 0}}) {
    Tensor z = matmul(Tensor::zeros(sa), Tensor::zeros({0, 4}));
    Shape expect = sa;
    expect.back() = 4;
    EXPECT_EQ(z.shape(), expect);
    EXPECT_EQ(z.to_vector(), std::vector<float>(static_cast<size_t>(z.numel()), 0.f));
  }
}

TEST(GradcheckOps, EmbeddingPaddingIdx) {
  Tensor w = param({7, 3}, 17);
  Tensor ids = Tensor::from_ints({1, 4, 1, 0, 6}, {5});
  // padding_idx: that row is looked up but, as in PyTorch, never receives a gradient.
  Tensor out = embedding(ids, w, 1);
  sum(out).backward();
  std::vector<float> g = w.grad().to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(g[1 * 3 + c], 0.f);
    EXPECT_EQ(g[4 * 3 + c], 1.f);
  }
  EXPECT_THROW(embedding(Tensor::from_ints({7}, {1}), w), Error);
}

TEST(Dropout2d, DropsWholeChannelsAndScalesTheRest) {
  Generator gen(3);
  const Tensor x = Tensor::ones({8, 16, 3, 3});
  const std::vector<float> y = dropout2d(x, 0.25f, true, &gen).to_vector();
  int64_t dropped = 0;
  for (int64_t c = 0; c < 8 * 16; ++c) {
    const float first = y[static_cast<size_t>(c * 9)];
    for (int64_t i = 0; i < 9; ++i) ASSERT_EQ(y[static_cast<size_t>(c * 9 + i)], first) << "channel " << c;
    EXPECT_TRUE(first == 0.f || std::abs(first - 1.f / 0.75f) < 1e-6f) << first;
    dropped += first == 0.f;
  }
  EXPECT_GT(dropped, 16);  // 32 expected of 128
  EXPECT_LT(dropped, 52);
  EXPECT_EQ(dropout2d(x, 0.5f, /*training=*/false).to_vector(), x.to_vector());
  Tensor p = param({2, 3, 2, 2}, 47);
  EXPECT_GRADCHECK(
      [](const V& t) {
        Generator g(9);
        return dropout2d(t[0], 0.5f, true, &g);
      },
      (V{p}));
}

TEST(AdditiveScore, EqualsTheUnfusedFormula) {
  // e = vᵀ tanh(q_t + k_j) as tanh of a broadcast sum, then a product with v — values and gradients
  for (int64_t A : {1, 8, 37, 64}) {
    Tensor q = param({2, 3, A}, 30), k = param({2, 5, A}, 31), v = param({A}, 32);
    Tensor g = Tensor::randn({2, 3, 5}, default_generator());
    Tensor fused = additive_score(q, k, v);
    auto grads = [&](const Tensor& e) {
      for (Tensor* t : {&q, &k, &v}) t->zero_grad();
      sum(e * g).backward();
      return V{q.grad().contiguous_copy(), k.grad().contiguous_copy(), v.grad().contiguous_copy()};
    };
    const V gf = grads(fused);
    Tensor plain = matmul(tanh(q.unsqueeze(2) + k.unsqueeze(1)), v);
    const V gp = grads(plain);
    SCOPED_TRACE("A = " + std::to_string(A));
    // Both are f32 sums of A terms in different orders (the fused kernel's vector lanes, the GEMM's):
    // they agree to a few units in the last place of the largest term — 1.06e-6 seen on an AVX-512
    // Xeon, where tanh and the lanes differ from Zen 3's; a wrong formula is off by far more.
    EXPECT_TENSOR_NEAR(fused, plain, 4e-6);
    for (size_t i = 0; i < 3; ++i) EXPECT_TENSOR_NEAR(gf[i], gp[i], 4e-6);
  }
}

}  // namespace
}  // namespace qkv
