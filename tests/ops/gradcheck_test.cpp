// Finite-difference checks of every op's backward rule (the PyTorch comparisons are in
// golden_test.cpp; these catch a wrong rule independently of any reference).
#include "testing.h"

namespace qkv {
namespace {

using testing::param;
using V = std::vector<Tensor>;

TEST(GradcheckOps, Arithmetic) {
  Tensor a = param({2, 3, 4}, 1), b = param({3, 1}, 2), pos = param({3, 4}, 3);
  EXPECT_GRADCHECK([](const V& x) { return x[0] + x[1]; }, (V{a, b}));
  EXPECT_GRADCHECK([](const V& x) { return x[0] - x[1]; }, (V{a, b}));
  EXPECT_GRADCHECK([](const V& x) { return x[0] * x[1]; }, (V{a, b}));
  Tensor den = Tensor::rand({3, 1}, default_generator(), 1.f, 2.f).requires_grad_();
  EXPECT_GRADCHECK([](const V& x) { return x[0] / x[1]; }, (V{a, den}));
  EXPECT_GRADCHECK([](const V& x) { return x[0] * 3.f + 1.f; }, (V{a}));
  Tensor p = Tensor::rand({3, 4}, default_generator(), 0.5f, 2.f).requires_grad_();
  EXPECT_GRADCHECK([](const V& x) { return log(x[0]); }, (V{p}));
  EXPECT_GRADCHECK([](const V& x) { return sqrt(x[0]); }, (V{p}));
  EXPECT_GRADCHECK([](const V& x) { return exp(x[0]); }, (V{pos}));
  EXPECT_GRADCHECK([](const V& x) { return tanh(x[0]); }, (V{pos}));
  EXPECT_GRADCHECK([](const V& x) { return sigmoid(x[0]); }, (V{pos}));
}

TEST(GradcheckOps, Reductions) {
  Tensor a = param({2, 3, 4}, 4);
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0]); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0], {1}, true); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return mean(x[0], {0, 2}); }, (V{a}));
  // an empty extent: the sum is 0 and its gradient (a broadcast of the seed, made dense) empty
  Tensor e = param({2, 0, 3}, 16);
  Tensor s = sum(e);
  EXPECT_EQ(s.item(), 0.f);
  s.backward();
  EXPECT_EQ(e.grad().shape(), (Shape{2, 0, 3}));
}

TEST(GradcheckOps, ViewsAndCopies) {
  Tensor a = param({2, 3, 4}, 5), b = param({2, 2, 4}, 6);
  EXPECT_GRADCHECK([](const V& x) { return x[0].transpose(0, 2).contiguous(); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].permute({1, 2, 0}).reshape({3, 8}); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].slice(1, 1, 3) * 2.f; }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].select(2, -1); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return x[0].slice(1, 0, 1).expand({2, 5, 4}); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return cat({x[0], x[1]}, 1); }, (V{a, b}));
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
  Tensor a = param({2, 3, 4}, 7), b = param({4, 5}, 8), c = param({2, 4, 5}, 9), v = param({4}, 10);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, (V{a, b}));
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, (V{a, c}));
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, (V{a, v}));
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[1], x[0].transpose(-1, -2)); }, (V{a, v}));
  // Transposed operands go to GEMM without a copy.
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0].transpose(-1, -2), x[0]); }, (V{a}));
  Tensor w = param({6, 4}, 11), bias = param({6}, 12);
  EXPECT_GRADCHECK([](const V& x) { return linear(x[0], x[1], x[2]); }, (V{a, w, bias}));
  EXPECT_GRADCHECK([](const V& x) { return linear(x[0].transpose(0, 1), x[1]); }, (V{a, w}));
  // no input features: y = b on every row (as torch's), and db sums the rows' gradients
  Tensor none = param({5, 0}, 13), w0 = param({3, 0}, 14), b3 = param({3}, 15);
  Tensor y = linear(none, w0, b3);
  EXPECT_EQ(y.shape(), (Shape{5, 3}));
  for (int64_t r = 0; r < 5; ++r) EXPECT_EQ(y.select(0, r).to_vector(), b3.to_vector());
  EXPECT_EQ(linear(none, w0).to_vector(), std::vector<float>(15, 0.f));
  EXPECT_GRADCHECK([](const V& x) { return linear(x[0], x[1], x[2]); }, (V{none, w0, b3}));
  // an empty inner dimension in matmul: zeros (torch.matmul's empty sum), batched or not
  for (const Shape& sa : {Shape{3, 0}, Shape{2, 3, 0}}) {
    Tensor z = matmul(Tensor::zeros(sa), Tensor::zeros({0, 4}));
    Shape expect = sa;
    expect.back() = 4;
    EXPECT_EQ(z.shape(), expect);
    EXPECT_EQ(z.to_vector(), std::vector<float>(static_cast<size_t>(z.numel()), 0.f));
  }
}

TEST(GradcheckOps, SoftmaxFamily) {
  Tensor a = param({3, 4, 5}, 13);
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], -1); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], 1); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return log_softmax(x[0], -1); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return log_softmax(x[0], 0); }, (V{a}));
}

TEST(GradcheckOps, LayerNormActivations) {
  Tensor a = param({3, 8}, 14), w = param({8}, 15), b = param({8}, 16);
  EXPECT_GRADCHECK([](const V& x) { return layer_norm(x[0], {8}, x[1], x[2]); }, (V{a, w, b}));
  EXPECT_GRADCHECK([](const V& x) { return layer_norm(x[0], {8}); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return gelu(x[0]); }, (V{a}));
  EXPECT_GRADCHECK([](const V& x) { return gelu(x[0], "tanh"); }, (V{a}));
  // relu: keep inputs away from the kink at 0, where finite differences are undefined.
  Tensor r = Tensor::from_vector({-1.5f, -0.5f, 0.3f, 1.2f, 2.f, -2.f}, {6}).requires_grad_();
  EXPECT_GRADCHECK([](const V& x) { return relu(x[0]); }, (V{r}));
}

TEST(GradcheckOps, EmbeddingAndCrossEntropy) {
  Tensor w = param({7, 3}, 17);
  Tensor ids = Tensor::from_ints({1, 4, 1, 0, 6}, {5});
  EXPECT_GRADCHECK([ids](const V& x) { return embedding(ids, x[0]); }, (V{w}));
  // padding_idx: that row is looked up but, as in PyTorch, never receives a gradient.
  Tensor out = embedding(ids, w, 1);
  sum(out).backward();
  std::vector<float> g = w.grad().to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(g[1 * 3 + c], 0.f);
    EXPECT_EQ(g[4 * 3 + c], 1.f);
  }
  EXPECT_THROW(embedding(Tensor::from_ints({7}, {1}), w), Error);
  Tensor logits = param({4, 6}, 18);
  Tensor target = Tensor::from_ints({2, 5, -100, 0}, {4});
  EXPECT_GRADCHECK([target](const V& x) { return cross_entropy(x[0], target); }, (V{logits}));
  EXPECT_GRADCHECK([target](const V& x) { return cross_entropy(x[0], target, -100, 0.1f); }, (V{logits}));
  EXPECT_GRADCHECK([target](const V& x) { return cross_entropy(x[0], target, -100, 0.1f, "none"); }, (V{logits}));
  EXPECT_GRADCHECK([target](const V& x) { return cross_entropy(x[0], target, -100, 0.f, "sum"); }, (V{logits}));
}

TEST(GradcheckOps, Dropout) {
  // Same generator state for every evaluation → the same mask, so f is differentiable.
  Tensor a = param({4, 5}, 19);
  EXPECT_GRADCHECK(
      [](const V& x) {
        Generator g(42);
        return dropout(x[0], 0.3f, true, &g);
      },
      (V{a}));
}

TEST(GradcheckOps, AdditiveScore) {
  // A = 19: the vector loops and the scalar tail; B = 3 sentences over the threads' chunks
  Tensor q = param({3, 2, 19}, 26), k = param({3, 4, 19}, 27), v = param({19}, 28);
  EXPECT_GRADCHECK([](const V& x) { return additive_score(x[0], x[1], x[2]); }, (V{q, k, v}));
}

TEST(GradcheckOps, Conv2dAndPooling) {
  Tensor x = param({2, 4, 5, 4}, 40), w = param({4, 2, 3, 2}, 41), b = param({4}, 42);
  EXPECT_GRADCHECK([](const V& t) { return conv2d(t[0], t[1], t[2], {2, 1}, {1, 2}, 1, 2); }, (V{x, w, b}));
  Tensor w1 = param({2, 4, 2, 2}, 43);
  EXPECT_GRADCHECK([](const V& t) { return conv2d(t[0], t[1], Tensor(), 1, 2, {2, 1}); }, (V{x, w1}));
  // max pooling: values at least 0.05 apart, so that no finite-difference step changes a window's winner
  std::vector<float> spread(160);
  for (size_t i = 0; i < spread.size(); ++i) spread[i] = 0.05f * static_cast<float>((i * 37) % 160) - 4.f;
  Tensor xs = Tensor::from_vector(spread, {2, 4, 5, 4}).requires_grad_();
  EXPECT_GRADCHECK([](const V& t) { return max_pool2d(t[0], 3, 2, 1); }, (V{xs}));
  EXPECT_GRADCHECK([](const V& t) { return max_pool2d(t[0], 2, std::nullopt, 0, 1, true); }, (V{xs}));
  EXPECT_GRADCHECK([](const V& t) { return avg_pool2d(t[0], 3, 2, 1, true, false); }, (V{x}));
  EXPECT_GRADCHECK([](const V& t) { return adaptive_avg_pool2d(t[0], {3, 4}); }, (V{x}));
}

TEST(GradcheckOps, BatchAndGroupNorm) {
  Tensor x = param({3, 4, 3, 2}, 44), g = param({4}, 45), b = param({4}, 46);
  EXPECT_GRADCHECK(
      [](const V& t) {
        return batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], /*training=*/true);
      },
      (V{x, g, b}));
  const Tensor rm = Tensor::from_vector({0.1f, -0.2f, 0.3f, 0.f}, {4}), rv = Tensor::from_vector({1.f, 0.5f, 2.f, 1.5f}, {4});
  EXPECT_GRADCHECK([&](const V& t) { return batch_norm(t[0], rm, rv, t[1], t[2], /*training=*/false); }, (V{x, g, b}));
  EXPECT_GRADCHECK([](const V& t) { return group_norm(t[0], 2, t[1], t[2]); }, (V{x, g, b}));
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

TEST(GradcheckOps, ScaledDotProductAttention) {
  Tensor q = param({2, 2, 3, 4}, 20), k = param({2, 2, 5, 4}, 21), v = param({2, 2, 5, 3}, 22);
  EXPECT_GRADCHECK([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, (V{q, k, v}));
  EXPECT_GRADCHECK([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.f, true); },
                   (V{q, k, v}));
  Tensor m = param({3, 5}, 23);  // float mask that takes a gradient
  EXPECT_GRADCHECK([](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); }, (V{q, k, v, m}));
  Tensor keep = Tensor::from_bools({1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, {3, 5});  // row 1 all masked
  EXPECT_GRADCHECK([keep](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], keep); }, (V{q, k, v}));
  Tensor kg = param({2, 1, 5, 4}, 24), vg = param({2, 1, 5, 3}, 25);  // grouped-query: 2 q heads share 1 kv head
  EXPECT_GRADCHECK(
      [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.f, false, std::nullopt, true); },
      (V{q, kg, vg}));
  EXPECT_GRADCHECK(
      [](const V& x) {
        AttentionOptions o;
        o.dropout_p = 0.25f;
        Generator g(5);
        o.generator = &g;
        return scaled_dot_product_attention(x[0], x[1], x[2], o);
      },
      (V{q, k, v}));
}

}  // namespace
}  // namespace qkv
