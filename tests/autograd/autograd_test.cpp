#include "qkv/autograd/node.h"
#include "qkv/core/parallel.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(Autograd, ChainRuleAndAccumulation) {
  // y = Σ (a·b + a)  →  dy/da = b + 1, dy/db = a
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor b = Tensor::from_vector({4, 5, 6}, {3}).requires_grad_();
  Tensor y = sum(a * b + a);
  EXPECT_FLOAT_EQ(y.item(), 4 + 10 + 18 + 6);
  y.backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{1, 2, 3}));
  // A second backward accumulates, as PyTorch does.
  sum(a * 2.f).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{7, 8, 9}));
  a.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// add's backward hands one gradient tensor to both inputs: each leaf's .grad must be its own, so that
// a second backward accumulating into one leaves the other's as it was (they share g's storage only
// until then; dense() hands a tensor outside autograd on as itself, so .grad takes a fresh TensorImpl).
TEST(Autograd, LeavesGivenOneGradientAccumulateApart) {
  Tensor a = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  Tensor b = Tensor::from_vector({3, 4}, {2}).requires_grad_();
  sum(a + b).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{1, 1}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{1, 1}));
  sum(a + b).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 2}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2}));
  sum(a * 3.f).backward();  // a alone
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{5, 5}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2}));
}

// dense(): t's values, detached and dense. Outside autograd a dense t is handed on as it is (no new
// TensorImpl: decoding calls it ~55 times a token); a tensor that asks for grad, or that an op
// produced on the tape, comes back detached over the same storage; a strided one as a dense copy.
TEST(Autograd, DenseIsDetachedAndDense) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(dense(x).impl_ptr(), x.impl_ptr());
  Tensor w = x.detach().requires_grad_();
  const Tensor dw = dense(w);
  EXPECT_NE(dw.impl_ptr(), w.impl_ptr());
  EXPECT_FALSE(dw.requires_grad());
  EXPECT_EQ(dw.data(), w.data());
  const Tensor y = w * 2.f;  // on the tape
  const Tensor dy = dense(y);
  EXPECT_TRUE(dy.is_leaf());
  EXPECT_FALSE(dy.requires_grad());
  EXPECT_EQ(dy.data(), y.data());
  const Tensor xt = x.transpose(0, 1), dxt = dense(xt);
  EXPECT_TRUE(dxt.is_contiguous());
  EXPECT_NE(dxt.data(), xt.data());
  EXPECT_EQ(dxt.to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = Tensor::from_vector({2}, {1}).requires_grad_();
  Tensor h = x * x;          // 4
  Tensor y = sum(h * h + h);  // x⁴ + x² → 4x³ + 2x = 36
  y.backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 36.f);
}

// split's pieces share one node: the pieces' gradients land side by side, a piece used twice sums,
// a piece that got none is exactly zero, and the node runs once however many pieces flowed.
TEST(Autograd, SplitGathersEveryPieceIntoOneGradient) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7}, {7}).requires_grad_();
  std::vector<Tensor> p = split(a, 3, 0);  // [1 2 3] [4 5 6] [7]
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].shape(), (Shape{1}));
  EXPECT_EQ(p[0].grad_fn(), p[2].grad_fn());
  sum(p[0] * p[0]).backward(Tensor(), true);  // only piece 0
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 4, 6, 0, 0, 0, 0}));
  a.zero_grad();
  sum(p[2] * 3.f + p[0] * 2.f + p[0]).backward();  // pieces 0 (twice) and 2 (broadcast to 3); piece 1 none
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3, 3, 3, 0, 0, 0, 9}));
  EXPECT_THROW(sum(p[1]).backward(), Error);  // the shared node was freed
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor w = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  {
    NoGradGuard g;
    Tensor y = w * 3.f;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_THROW(sum(y).backward(), Error);
  }
  EXPECT_TRUE((w * 3.f).requires_grad());
}

TEST(Autograd, BackwardTwiceNeedsRetainGraph) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(x.grad().to_vector()[0], 2 * std::exp(1.f), 1e-5);
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, NonScalarNeedsExplicitGradient) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.f;
  EXPECT_THROW(y.backward(), Error);
  y.backward(Tensor::from_vector({1, 10}, {2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2, 20}));
  EXPECT_THROW((x * 2.f).backward(Tensor::ones({3})), Error);
}

TEST(Autograd, GradThroughViews) {
  Tensor x = Tensor::arange(6).reshape({2, 3}).contiguous_copy().requires_grad_();
  Tensor y = sum(x.transpose(0, 1).slice(0, 1, 3) * 2.f);
  y.backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 2, 2, 0, 2, 2}));
}

TEST(Autograd, RetainGradOnIntermediate) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  Tensor h = x * 3.f;
  h.retain_grad();
  sum(h * h).backward();
  EXPECT_EQ(h.grad().to_vector(), (std::vector<float>{6, 12}));
}

TEST(Autograd, FunctionalGradLeavesDotGradAlone) {
  Tensor x = Tensor::from_vector({1, 2}, {2}).requires_grad_();
  Tensor y = x * x;
  auto g = autograd::grad({y}, {Tensor::ones({2})}, {x});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{2, 4}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Gradcheck, PassesForCorrectRules) {
  Tensor a = testing::param({3, 4}, 1), b = testing::param({4}, 2);
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return tanh(in[0] * in[1] + in[0]); },
                   (std::vector<Tensor>{a, b}));
}

TEST(Gradcheck, CatchesAWrongBackwardRule) {
  // y = x² with a deliberately wrong backward (x instead of 2x): gradcheck must say so.
  auto wrong_square = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    Tensor out = Tensor::empty(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) out.data()[i] = x.data()[i] * x.data()[i];
    Tensor saved = x.detach();
    return autograd::record(out, "wrong_square", std::vector<Tensor>{x},
                            [saved](const Tensor& g) { return std::vector<Tensor>{g * saved}; });
  };
  Tensor x = testing::param({5}, 3);
  auto r = autograd::gradcheck(wrong_square, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("element"), std::string::npos) << r.message;
}

// Freeing a deep graph: each op's node owned its input, which owned the node before it, and the
// default destructors freed them as one nested call per op — a chain of 10^5 thin layers
// (`qkv train --set model.n_layer=100000`) overflowed the stack. ~Node frees iteratively.
TEST(Autograd, ADeepGraphIsFreedWithoutRecursion) {
  Tensor x = Tensor::from_vector({1}, {1}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 300000; ++i) y = y * 1.f;  // 300k nodes: far past an 8 MiB stack when nested
  EXPECT_TRUE(y.requires_grad());
  y = Tensor();  // frees the chain here
  SUCCEED();
}

// An exception inside an OpenMP region is thrown after it (libgomp would call std::terminate).
TEST(Autograd, AnErrorInsideAParallelRegionIsThrownAfterIt) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(1000, 1, [](int64_t b, int64_t) { QKV_CHECK(b != 0, "the first chunk fails"); }), Error);
}

}  // namespace
}  // namespace qkv
