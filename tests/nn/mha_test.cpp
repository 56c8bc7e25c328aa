// MultiheadAttention: parameter names and shapes as PyTorch, self/cross-attention shapes, mask
// conventions, and gradients (the numeric comparison with PyTorch is in mha_golden_test.cpp).
#include "testing.h"

namespace qkv {
namespace {

using testing::param;

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(MultiheadAttention, ParameterNamesMatchPyTorch) {
  nn::MultiheadAttention a(16, 4);
  EXPECT_EQ(names(a), (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(a.in_proj_weight.shape(), (Shape{48, 16}));
  nn::MultiheadAttention b(16, 4, 0.f, false, 10, 12);
  EXPECT_EQ(names(b), (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"}));
  EXPECT_EQ(b.k_proj_weight.shape(), (Shape{16, 10}));
  EXPECT_EQ(b.v_proj_weight.shape(), (Shape{16, 12}));
  EXPECT_EQ(a.num_parameters(), 48 * 16 + 48 + 16 * 16 + 16);
  EXPECT_THROW(nn::MultiheadAttention(10, 3), Error);
}

TEST(MultiheadAttention, SelfAndCrossAttentionShapes) {
  Generator g(1);
  nn::MultiheadAttention mha(16, 4, 0.f, true, 0, 0, /*batch_first=*/true, &g);
  Tensor x = param({2, 5, 16}, 2), mem = param({2, 9, 16}, 3);
  auto self = mha.forward(x, x, x);
  EXPECT_EQ(self.output.shape(), (Shape{2, 5, 16}));
  EXPECT_EQ(self.weights.shape(), (Shape{2, 5, 5}));
  auto cross = mha.forward(x, mem, mem, Tensor(), true, Tensor(), /*average=*/false);
  EXPECT_EQ(cross.output.shape(), (Shape{2, 5, 16}));
  EXPECT_EQ(cross.weights.shape(), (Shape{2, 4, 5, 9}));
  auto no_w = mha.forward(x, mem, mem, Tensor(), false);
  EXPECT_FALSE(no_w.weights.defined());
  EXPECT_TENSOR_NEAR(no_w.output, cross.output, 1e-6);
  // The fused self-attention path equals the three separate projections.
  Tensor x2 = x.detach().contiguous_copy();
  auto separate = mha.forward(x, x2, x2);
  EXPECT_TENSOR_NEAR(separate.output, self.output, 1e-6);
  // Sequence-first layout [L, B, E] (PyTorch's default) gives the transposed result.
  nn::MultiheadAttention seq_first(16, 4, 0.f, true, 0, 0, false, &g);
  seq_first.load_state_dict(mha.state_dict());
  Tensor xt = x.transpose(0, 1);
  EXPECT_TENSOR_NEAR(seq_first.forward(xt, xt, xt).output.transpose(0, 1), self.output, 1e-6);
}

TEST(MultiheadAttention, KeyPaddingMaskFollowsPyTorchConvention) {
  Generator g(4);
  nn::MultiheadAttention mha(8, 2, 0.f, true, 0, 0, true, &g);
  Tensor x = param({1, 3, 8}, 5), mem = param({1, 6, 8}, 6);
  // true = padding (PyTorch MHA): keys 4, 5 ignored → same as cutting them off.
  Tensor pad = Tensor::from_bools({0, 0, 0, 0, 1, 1}, {1, 6});
  auto masked = mha.forward(x, mem, mem, pad);
  auto cut = mha.forward(x, mem.slice(1, 0, 4), mem.slice(1, 0, 4));
  EXPECT_TENSOR_NEAR(masked.output, cut.output, 1e-6);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(masked.weights.to_vector()[i * 6 + 4], 0.f);
    EXPECT_EQ(masked.weights.to_vector()[i * 6 + 5], 0.f);
  }
  // A float key-padding mask is added; −inf behaves as true.
  Tensor fpad = Tensor::from_vector({0, 0, 0, 0, -INFINITY, -INFINITY}, {1, 6});
  EXPECT_TENSOR_NEAR(mha.forward(x, mem, mem, fpad).output, cut.output, 1e-6);
  // A boolean attn_mask [L, S] (true = not allowed) combined with the padding mask.
  std::vector<bool> am(18, false);
  am[0 * 6 + 0] = true;
  Tensor both = mha.forward(x, mem, mem, pad, true, Tensor::from_bools(am, {3, 6})).weights;
  EXPECT_EQ(both.to_vector()[0], 0.f);
  EXPECT_GT(both.to_vector()[1], 0.f);
  EXPECT_THROW(mha.forward(x, mem, mem, Tensor::from_bools({0, 0}, {1, 2})), Error);
}

TEST(MultiheadAttention, GradientsReachEveryParameter) {
  Generator g(7);
  nn::MultiheadAttention mha(8, 2, 0.f, true, 0, 0, true, &g);
  Tensor x = param({2, 4, 8}, 8);
  auto r = mha.forward(x, x, x, Tensor(), false, Tensor(), true, true);
  sum(r.output * r.output).backward();
  for (auto& [n, p] : mha.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    double norm = 0;
    for (float v : p.grad().to_vector()) norm += v * v;
    EXPECT_GT(norm, 0) << n;
  }
  EXPECT_TRUE(x.grad().defined());
}

TEST(MultiheadAttention, GradcheckSelfAndCross) {
  Generator g(9);
  nn::MultiheadAttention mha(6, 2, 0.f, true, 4, 5, true, &g);
  Tensor q = param({1, 3, 6}, 10), k = param({1, 4, 4}, 11), v = param({1, 4, 5}, 12);
  std::vector<Tensor> inputs = {q, k, v};
  for (auto& p : mha.parameters()) inputs.push_back(p);
  EXPECT_GRADCHECK([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[2]).output; }, inputs);
}

TEST(Module, LoadStateDictChecksNamesAndShapes) {
  nn::MultiheadAttention a(8, 2), b(8, 2);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a.in_proj_weight.to_vector(), b.in_proj_weight.to_vector());
  auto sd = a.state_dict();
  sd["in_proj_weight"] = Tensor::zeros({3, 3});
  EXPECT_THROW(b.load_state_dict(sd), Error);
  sd = a.state_dict();
  sd.erase("out_proj.bias");
  EXPECT_THROW(b.load_state_dict(sd), Error);
  EXPECT_NO_THROW(b.load_state_dict(sd, /*strict=*/false));
  sd = a.state_dict();
  sd["extra"] = Tensor::zeros({1});
  EXPECT_THROW(b.load_state_dict(sd), Error);
}

TEST(Linear, MatchesTheFormula) {
  Generator g(13);
  nn::Linear lin(3, 2, true, &g);
  Tensor x = Tensor::from_vector({1, 2, 3}, {1, 3});
  std::vector<float> W = lin.weight.to_vector(), b = lin.bias.to_vector();
  std::vector<float> y = lin(x).to_vector();
  for (int o = 0; o < 2; ++o) EXPECT_NEAR(y[o], W[o * 3] * 1 + W[o * 3 + 1] * 2 + W[o * 3 + 2] * 3 + b[o], 1e-6);
  for (float w : W) EXPECT_LE(std::fabs(w), 1 / std::sqrt(3.f));
}

// Beam search's cache reorder: row i becomes old row index[i] (repeats, swaps, cycles), in place
// when the batch does not grow, with new storage when it does; the filled part is what counts.
TEST(KVCacheReorder, RowsFollowTheIndexInPlaceOrNot) {
  Generator g(21);
  for (const std::vector<int64_t>& index : std::vector<std::vector<int64_t>>{
           {5, 0, 0, 3, 2, 2}, {1, 2, 3, 4, 5, 0}, {0, 1, 2, 3, 4, 5}, {4, 1, 1}, {3}, {0, 0, 1, 1, 2, 2, 5, 5, 4, 4}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      nn::KVCache c;
      c.k = Tensor::randn({6, 2, 8, 3}, g).to(dt), c.v = Tensor::randn({6, 2, 8, 3}, g).to(dt);
      c.length = 5;
      const std::vector<float> k0 = c.keys().to_vector(), v0 = c.values().to_vector();
      c.reorder(index);
      ASSERT_EQ(c.batch(), static_cast<int64_t>(index.size()));
      const std::vector<float> k1 = c.keys().to_vector(), v1 = c.values().to_vector();
      const size_t row = 2 * 5 * 3;  // H · length · D
      for (size_t i = 0; i < index.size(); ++i)
        for (size_t e = 0; e < row; ++e) {
          ASSERT_EQ(k1[i * row + e], k0[static_cast<size_t>(index[i]) * row + e]) << "row " << i;
          ASSERT_EQ(v1[i * row + e], v0[static_cast<size_t>(index[i]) * row + e]) << "row " << i;
        }
    }
  }
}

}  // namespace
}  // namespace qkv
