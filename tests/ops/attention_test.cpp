// scaled_dot_product_attention: the notes' worked examples with their true numbers, and the
// properties attention must have (the PyTorch comparisons are in golden_test.cpp).
#include <cmath>

#include "testing.h"

namespace qkv {
namespace {

using testing::param;

// Attention computed naively in double: the independent check of the examples.
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t L, int64_t S, int64_t d, int64_t dv,
                                    double scale, std::vector<double>* weights = nullptr) {
  std::vector<double> out(L * dv, 0.0);
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> s(S);
    double m = -1e300, z = 0;
    for (int64_t j = 0; j < S; ++j) {
      s[j] = 0;
      for (int64_t c = 0; c < d; ++c) s[j] += static_cast<double>(q[i * d + c]) * k[j * d + c];
      s[j] *= scale;
      m = std::max(m, s[j]);
    }
    for (int64_t j = 0; j < S; ++j) z += (s[j] = std::exp(s[j] - m));
    for (int64_t j = 0; j < S; ++j) {
      s[j] /= z;
      if (weights) weights->push_back(s[j]);
      for (int64_t c = 0; c < dv; ++c) out[i * dv + c] += s[j] * v[j * dv + c];
    }
  }
  return out;
}

TEST(AttentionSeeds, Seed000ScoreVector) {
  // [4.2, 0.1, 0.5, 2.5, −1.5] / √4 = [2.1, 0.05, 0.25, 1.25, −0.75] → softmax
  Tensor s = Tensor::from_vector({4.2f, 0.1f, 0.5f, 2.5f, -1.5f}, {1, 5});
  std::vector<float> w = softmax(s * 0.5f).to_vector();
  const double scaled[] = {2.1, 0.05, 0.25, 1.25, -0.75};
  double z = 0;
  for (double x : scaled) z += std::exp(x);
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(w[j], std::exp(scaled[j]) / z, 1e-6);
  // The true values (the notes' 45/10/15/20/10 % are illustrative).
  EXPECT_NEAR(w[0], 0.5646, 1e-4);
  EXPECT_NEAR(w[1], 0.0727, 1e-4);
  EXPECT_NEAR(w[2], 0.0888, 1e-4);
  EXPECT_NEAR(w[3], 0.2413, 1e-4);
  EXPECT_NEAR(w[4], 0.0327, 1e-4);
  // The same numbers through the attention op: one query whose dot products with 5 keys are the
  // raw scores (q = 1, k = score, d = 4 → scale 1/2 by default... d must be 4: pad with zeros).
  Tensor q = Tensor::from_vector({1, 0, 0, 0}, {1, 4});
  Tensor k = Tensor::from_vector({4.2f, 0, 0, 0, 0.1f, 0, 0, 0, 0.5f, 0, 0, 0, 2.5f, 0, 0, 0, -1.5f, 0, 0, 0}, {5, 4});
  AttentionResult r = scaled_dot_product_attention_with_weights(q, k, k);
  EXPECT_TENSOR_NEAR(r.weights.reshape({1, 5}), Tensor::from_vector(w, {1, 5}), 1e-6);
}

TEST(AttentionSeeds, Seed002TheQuickBrownFox) {
  std::vector<float> Q = {0.1f, 0.2f, 0.5f, 0.6f, 0.9f, 1.0f, 1.3f, 1.4f, 1.7f, 1.8f};
  std::vector<float> K = {0.2f, 0.1f, 0.6f, 0.5f, 1.0f, 0.9f, 1.4f, 1.3f, 1.8f, 1.7f};
  std::vector<float> V = {0.3f, 0.4f, 0.7f, 0.8f, 1.1f, 1.2f, 1.5f, 1.6f, 1.9f, 2.0f};
  std::vector<double> w_ref;
  std::vector<double> o_ref = naive_attention(Q, K, V, 5, 5, 2, 2, 1.0 / std::sqrt(2.0), &w_ref);
  AttentionResult r = scaled_dot_product_attention_with_weights(Tensor::from_vector(Q, {5, 2}), Tensor::from_vector(K, {5, 2}),
                                                                Tensor::from_vector(V, {5, 2}));
  std::vector<float> o = r.output.to_vector(), w = r.weights.to_vector();
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(o[i], o_ref[i], 1e-6);
  for (int i = 0; i < 25; ++i) EXPECT_NEAR(w[i], w_ref[i], 1e-6);
  // "quick" (row 1): scores q·k/√2 = [0.1273, 0.4667, 0.8061, 1.1455, 1.4849] → output ≈ [1.3390, 1.4390]
  EXPECT_NEAR(o[2], 1.339029, 2e-6);
  EXPECT_NEAR(o[3], 1.439029, 2e-6);
  EXPECT_NEAR(w[5], 0.0976, 1e-4);
  EXPECT_NEAR(w[9], 0.3389, 1e-4);
}

TEST(AttentionSeeds, Seed001ParameterFreeSelfAttention) {
  // softmax(X·Xᵀ)·X: scale 1, Q = K = V = X.
  Generator g(3);
  Tensor X = Tensor::randn({6, 4}, g, 0.f, 0.5f);
  std::vector<float> x = X.to_vector();
  std::vector<double> ref = naive_attention(x, x, x, 6, 6, 4, 4, 1.0);
  Tensor out = scaled_dot_product_attention(X, X, X, Tensor(), 0.f, false, 1.f);
  std::vector<float> o = out.to_vector();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(o[i], ref[i], 1e-6);
}

TEST(AttentionProperties, WeightsAreADistribution) {
  Tensor q = param({2, 3, 7, 8}, 1), k = param({2, 3, 9, 8}, 2), v = param({2, 3, 9, 5}, 3);
  NoGradGuard ng;
  AttentionResult r = scaled_dot_product_attention_with_weights(q, k, v);
  EXPECT_EQ(r.output.shape(), (Shape{2, 3, 7, 5}));
  EXPECT_EQ(r.weights.shape(), (Shape{2, 3, 7, 9}));
  Tensor rows = sum(r.weights, {-1});
  for (float s : rows.to_vector()) EXPECT_NEAR(s, 1.f, 1e-5);
  for (float w : r.weights.to_vector()) EXPECT_GE(w, 0.f);
}

TEST(AttentionProperties, PermutationEquivariantWithoutPositions) {
  // Seed 004: self-attention without positions treats the input as a set: permuting the tokens
  // permutes the outputs the same way.
  Generator g(4);
  Tensor x = Tensor::randn({6, 8}, g);
  nn::MultiheadAttention mha(8, 2, 0.f, true, 0, 0, true, &g);
  NoGradGuard ng;
  const std::vector<int> perm = {3, 0, 5, 1, 4, 2};
  Tensor xp = Tensor::empty({6, 8});
  for (int i = 0; i < 6; ++i) xp.detach().select(0, i).copy_(x.select(0, perm[i]));
  Tensor y = mha.forward(x, x, x).output, yp = mha.forward(xp, xp, xp).output;
  for (int i = 0; i < 6; ++i) EXPECT_TENSOR_NEAR(yp.select(0, i), y.select(0, perm[i]), 1e-5);
  // ...while a causal mask breaks the symmetry.
  Tensor yc = mha.forward(x, x, x, Tensor(), false, Tensor(), true, true).output;
  Tensor ycp = mha.forward(xp, xp, xp, Tensor(), false, Tensor(), true, true).output;
  EXPECT_GT(testing::rel_error(ycp.select(0, 0).to_vector(), yc.select(0, perm[0]).to_vector()), 1e-3);
}

TEST(AttentionProperties, MaskedKeysAndValuesChangeNothing) {
  Tensor q = param({1, 2, 4, 8}, 5), k = param({1, 2, 6, 8}, 6), v = param({1, 2, 6, 8}, 7);
  // Keys 4 and 5 are padding.
  Tensor keep = Tensor::from_bools({1, 1, 1, 1, 0, 0}, {1, 1, 1, 6});
  Tensor out = scaled_dot_product_attention(q, k, v, keep);
  Tensor k2 = k.detach().contiguous_copy(), v2 = v.detach().contiguous_copy();
  k2.slice(2, 4, 6).fill_(1e3f);
  v2.slice(2, 4, 6).fill_(-7e2f);
  Tensor out2 = scaled_dot_product_attention(q, k2, v2, keep);
  EXPECT_EQ(out.to_vector(), out2.to_vector());
  // Same as attending over the first four keys only.
  Tensor out3 = scaled_dot_product_attention(q, k.slice(2, 0, 4), v.slice(2, 0, 4));
  EXPECT_TENSOR_NEAR(out, out3, 1e-6);
  // Masked keys and values get exactly zero gradient.
  out.backward(Tensor::ones(out.shape()));
  for (float g : k.grad().slice(2, 4, 6).to_vector()) EXPECT_EQ(g, 0.f);
  for (float g : v.grad().slice(2, 4, 6).to_vector()) EXPECT_EQ(g, 0.f);
  // An additive −inf mask is the same as a boolean false.
  Tensor add = Tensor::from_vector({0, 0, 0, 0, -INFINITY, -INFINITY}, {6});
  EXPECT_TENSOR_NEAR(scaled_dot_product_attention(q, k, v, add), out, 1e-6);
}

TEST(AttentionProperties, FullyMaskedRowsGiveZerosNotNaN) {
  Tensor q = param({1, 1, 3, 4}, 8), k = param({1, 1, 3, 4}, 9), v = param({1, 1, 3, 4}, 10);
  Tensor keep = Tensor::from_bools({1, 1, 0, 0, 0, 0, 1, 0, 1}, {3, 3});  // query 1 sees nothing
  AttentionOptions opt;
  opt.attn_mask = keep;
  AttentionResult r = scaled_dot_product_attention_with_weights(q, k, v, opt);
  std::vector<float> o = r.output.to_vector();
  for (int c = 0; c < 4; ++c) EXPECT_EQ(o[4 + c], 0.f);
  for (float x : o) EXPECT_FALSE(std::isnan(x));
  for (int j = 0; j < 3; ++j) EXPECT_EQ(r.weights.to_vector()[3 + j], 0.f);
  Tensor g = Tensor::ones(r.output.shape());
  r.output.backward(g);
  std::vector<float> dq = q.grad().to_vector();
  for (int c = 0; c < 4; ++c) EXPECT_EQ(dq[4 + c], 0.f);
  for (float x : k.grad().to_vector()) EXPECT_FALSE(std::isnan(x));
  // The same with every key masked by −inf in a float mask, and with causal + a padding mask.
  Tensor neg = Tensor::full({3, 3}, -INFINITY);
  for (float x : scaled_dot_product_attention(q, k, v, neg).to_vector()) EXPECT_EQ(x, 0.f);
}

TEST(AttentionProperties, CausalMeansNoPeekingAtTheFuture) {
  // Output i must not change when keys/values after i change.
  Tensor q = param({1, 2, 5, 4}, 11), k = param({1, 2, 5, 4}, 12), v = param({1, 2, 5, 4}, 13);
  NoGradGuard ng;
  Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.f, true);
  Tensor k2 = k.detach().contiguous_copy(), v2 = v.detach().contiguous_copy();
  k2.slice(2, 3, 5).fill_(5.f);
  v2.slice(2, 3, 5).fill_(-5.f);
  Tensor out2 = scaled_dot_product_attention(q, k2, v2, Tensor(), 0.f, true);
  EXPECT_EQ(out.slice(2, 0, 3).to_vector(), out2.slice(2, 0, 3).to_vector());
  EXPECT_NE(out.slice(2, 3, 5).to_vector(), out2.slice(2, 3, 5).to_vector());
  // Causal equals an explicit lower-triangular boolean mask.
  std::vector<bool> tril(25);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) tril[i * 5 + j] = j <= i;
  EXPECT_TENSOR_NEAR(out, scaled_dot_product_attention(q, k, v, Tensor::from_bools(tril, {5, 5})), 1e-7);
}

TEST(AttentionProperties, StridedInputsNeedNoCopy) {
  // q/k/v as head-split views of a fused projection [B, L, 3·H·D] give the same answer as dense.
  Tensor qkv = param({2, 5, 3 * 2 * 4}, 14);
  NoGradGuard ng;
  auto heads = [&](int i) { return qkv.slice(2, i * 8, (i + 1) * 8).view({2, 5, 2, 4}).transpose(1, 2); };
  Tensor a = scaled_dot_product_attention(heads(0), heads(1), heads(2), Tensor(), 0.f, true);
  Tensor b = scaled_dot_product_attention(heads(0).contiguous(), heads(1).contiguous(), heads(2).contiguous(), Tensor(),
                                          0.f, true);
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

TEST(AttentionProperties, GroupedQueryEqualsRepeatedHeads) {
  Tensor q = param({2, 4, 3, 8}, 15), k = param({2, 2, 6, 8}, 16), v = param({2, 2, 6, 8}, 17);
  NoGradGuard ng;
  Tensor gqa = scaled_dot_product_attention(q, k, v, Tensor(), 0.f, false, std::nullopt, true);
  // repeat_interleave along heads: q head h reads kv head h / 2
  auto rep = [](const Tensor& t) { return t.unsqueeze(2).expand({2, 2, 2, 6, 8}).reshape({2, 4, 6, 8}); };
  Tensor full = scaled_dot_product_attention(q, rep(k), rep(v));
  EXPECT_TENSOR_NEAR(gqa, full, 1e-6);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v), Error);  // without enable_gqa
}

TEST(AttentionProperties, DropoutIsSeededAndUnbiased) {
  Tensor q = param({1, 1, 64, 16}, 18), k = param({1, 1, 64, 16}, 19), v = param({1, 1, 64, 16}, 20);
  NoGradGuard ng;
  AttentionOptions opt;
  opt.dropout_p = 0.5f;
  Generator g1(9), g2(9);
  opt.generator = &g1;
  AttentionResult a = scaled_dot_product_attention_with_weights(q, k, v, opt);
  opt.generator = &g2;
  AttentionResult b = scaled_dot_product_attention_with_weights(q, k, v, opt);
  EXPECT_EQ(a.output.to_vector(), b.output.to_vector());
  // About half the weights dropped, the rest scaled by 2: rows still sum to ≈ 1 on average.
  std::vector<float> w = a.weights.to_vector();
  int zeros = 0;
  for (float x : w) zeros += x == 0.f;
  EXPECT_NEAR(zeros / static_cast<double>(w.size()), 0.5, 0.03);
  double total = 0;
  for (float x : w) total += x;
  EXPECT_NEAR(total / 64, 1.0, 0.1);
}

TEST(AttentionErrors, ClearMessages) {
  Tensor q = Tensor::zeros({1, 2, 3, 4}), k = Tensor::zeros({1, 2, 5, 4}), v = Tensor::zeros({1, 2, 5, 6});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([&] { scaled_dot_product_attention(q, Tensor::zeros({1, 2, 5, 3}), v); });
  EXPECT_NE(m.find("head dimension"), std::string::npos) << m;
  m = message([&] { scaled_dot_product_attention(q, k, Tensor::zeros({1, 2, 4, 6})); });
  EXPECT_NE(m.find("sequence length"), std::string::npos) << m;
  m = message([&] { scaled_dot_product_attention(q, k, v, Tensor::zeros({4, 5})); });
  EXPECT_NE(m.find("attn_mask [4,5]"), std::string::npos) << m;
  m = message([&] { scaled_dot_product_attention(q, k, v, Tensor::from_ints({0}, {1})); });
  EXPECT_NE(m.find("boolean"), std::string::npos) << m;
  m = message([&] { scaled_dot_product_attention(q, k, v, Tensor(), 1.5f); });
  EXPECT_NE(m.find("dropout_p"), std::string::npos) << m;
  // a soft cap that is no positive normal float (1e-40: 1/softcap would be ∞, and 0 · ∞ a NaN score)
  for (const float cap : {-1.f, std::nanf(""), INFINITY, 1e-40f}) {
    AttentionOptions o;
    o.softcap = cap;
    m = message([&] { scaled_dot_product_attention(q, k, v, o); });
    EXPECT_NE(m.find("softcap must be 0 (none) or a positive normal float"), std::string::npos) << m;
  }
  const Tensor table = Tensor::from_ints({0}, {1, 1}), one = Tensor::from_ints({1}, {1});
  m = message([&] {
    paged_attention(Tensor::zeros({1, 2, 4}), Tensor::zeros({1, 2, 4, 4}), Tensor::zeros({1, 2, 4, 4}), table,
                    Tensor::from_ints({0}, {1}), one, std::nullopt, 0, nullptr, 1e-40);
  });
  EXPECT_NE(m.find("paged_attention: softcap"), std::string::npos) << m;
}

}  // namespace
}  // namespace qkv
