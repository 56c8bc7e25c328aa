// qkv's one attention-mask convention (ops/mask.h) and the ops that build masks and regroup rows:
// conversions from padding, lengths and nn.MultiheadAttention's masks, the causal mask with an
// offset, merging, and index_select (forward on any dtype, backward by finite differences).
#include <gtest/gtest.h>

#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

using testing::error_of;

std::vector<float> bools(const Tensor& t) { return t.to_vector(); }

TEST(Masks, FromPaddingLengthsAndMhaAgree) {
  Tensor kpm = Tensor::from_bools({false, false, true, false, true, true}, {2, 3});  // true = padding
  Tensor m = attention_mask_from_padding(kpm);
  EXPECT_EQ(m.shape(), (Shape{2, 1, 1, 3}));
  EXPECT_EQ(m.dtype(), DType::boolean);
  EXPECT_EQ(bools(m), (std::vector<float>{1, 1, 0, 1, 0, 0}));
  // lengths [2, 1] give the same mask as padding after them
  Tensor kpm2 = Tensor::from_bools({false, false, true, false, true, true}, {2, 3});
  EXPECT_EQ(bools(attention_mask_from_lengths({2, 1}, 3)), bools(attention_mask_from_padding(kpm2)));
  EXPECT_NE(error_of([] { attention_mask_from_lengths({4}, 3); }).find("length 4"), std::string::npos);
  // MHA's boolean attn_mask is inverted, a float one kept
  EXPECT_EQ(bools(attention_mask_from_mha(Tensor::from_bools({true, false}, {1, 2}))), (std::vector<float>{0, 1}));
  Tensor f = Tensor::from_vector({0.f, -1.f}, {1, 2});
  EXPECT_TRUE(attention_mask_from_mha(f).same(f));
  EXPECT_NE(error_of([] { attention_mask_from_padding(Tensor::zeros({2, 3})); }).find("boolean"), std::string::npos);
}

// Query i (a new position after `offset` cached ones) sees keys j ≤ i + offset: the loop the cached
// decoder used to build on the host.
TEST(Masks, CausalWithAnOffset) {
  for (auto [Lq, Lk, off] : {std::tuple{4, 4, 0}, {3, 7, 4}, {5, 3, -1}, {1, 6, 5}}) {
    std::vector<float> want;
    for (int i = 0; i < Lq; ++i)
      for (int j = 0; j < Lk; ++j) want.push_back(j <= i + off ? 1.f : 0.f);
    EXPECT_EQ(bools(causal_mask(Lq, Lk, off)), want) << Lq << "x" << Lk << " offset " << off;
  }
}

// Mistral's sliding window: query i (position i + offset) sees key j when j ≤ i + offset and
// i + offset − j < W — the loop Llama used to build on the host.
TEST(Masks, SlidingWindow) {
  for (auto [Lq, Lk, W, off] : {std::tuple{6, 6, 3, 0}, {1, 12, 8, 11}, {4, 10, 2, 6}, {5, 5, 9, 0}, {3, 7, 1, 4}}) {
    std::vector<float> want;
    for (int i = 0; i < Lq; ++i)
      for (int j = 0; j < Lk; ++j) want.push_back(j <= i + off && i + off - j < W ? 1.f : 0.f);
    EXPECT_EQ(bools(sliding_window_mask(Lq, Lk, W, off)), want) << Lq << "x" << Lk << " W " << W << " offset " << off;
  }
  EXPECT_NE(error_of([] { sliding_window_mask(2, 2, 0); }).find("window"), std::string::npos);
}

TEST(Masks, MergeKeepsBooleansBooleanAndAddsFloats) {
  Tensor a = Tensor::from_bools({true, false, true, true}, {2, 2});
  Tensor b = attention_mask_from_padding(Tensor::from_bools({false, true, false, false}, {2, 2}));  // [2,1,1,2]
  Tensor m = merge_attention_masks(a, b);
  EXPECT_EQ(m.dtype(), DType::boolean);
  EXPECT_EQ(m.shape(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(bools(m), (std::vector<float>{1, 0, 1, 0, 1, 0, 1, 1}));
  Tensor f = Tensor::from_vector({0.5f, -1.f, 2.f, 0.f}, {2, 2});
  Tensor mf = merge_attention_masks(f, b);
  EXPECT_EQ(mf.dtype(), DType::f32);
  const std::vector<float> v = mf.to_vector();
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], -INFINITY);  // row 0's second key is padding
  EXPECT_TRUE(merge_attention_masks(Tensor(), b).same(b));
}

// nn.MultiheadAttention's masks (true = masked out) give the same attention as the same masks in
// qkv's convention handed to forward_masked.
TEST(Masks, MultiheadAttentionConvertsAtItsBoundary) {
  Generator g(3);
  nn::MultiheadAttention mha(8, 2, 0.f, true, 0, 0, /*batch_first=*/true, &g);
  Tensor x = Tensor::randn({2, 3, 8}, g);
  Tensor kpm = Tensor::from_bools({false, false, true, false, false, false}, {2, 3});
  Tensor am = Tensor::from_bools({false, true, false, false, false, true, false, false, false}, {3, 3});
  auto a = mha.forward(x, x, x, kpm, true, am);
  auto b = mha.forward_masked(x, x, x, merge_attention_masks(logical_not(am), attention_mask_from_padding(kpm)), true);
  EXPECT_TENSOR_NEAR(a.output, b.output, 0.0);
  EXPECT_TENSOR_NEAR(a.weights, b.weights, 0.0);
  EXPECT_NE(error_of([&] { mha.forward(x, x, x, Tensor::zeros({2, 4}, DType::boolean)); }).find("key_padding_mask"),
            std::string::npos);
}

TEST(Comparisons, AgainstAScalarAndLogic) {
  Tensor x = Tensor::from_vector({-1, 0, 1, 2}, {4});
  EXPECT_EQ(bools(eq(x, 1)), (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(bools(ne(x, 1)), (std::vector<float>{1, 1, 0, 1}));
  EXPECT_EQ(bools(lt(x, 1)), (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(bools(le(x, 1)), (std::vector<float>{1, 1, 1, 0}));
  EXPECT_EQ(bools(gt(x, 0)), (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(bools(ge(x, 0)), (std::vector<float>{0, 1, 1, 1}));
  Tensor ids = Tensor::from_ints({0, 3, 0, 7}, {2, 2});
  EXPECT_EQ(bools(eq(ids, 0)), (std::vector<float>{1, 0, 1, 0}));
  EXPECT_NE(error_of([&] { eq(ids, 0.5f); }).find("not an integer"), std::string::npos);
  Tensor p = Tensor::from_bools({true, false}, {2, 1}), q = Tensor::from_bools({true, false, true}, {3});
  EXPECT_EQ(bools(logical_and(p, q)), (std::vector<float>{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(bools(logical_or(p, q)), (std::vector<float>{1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(bools(logical_not(q)), (std::vector<float>{0, 1, 0}));
  EXPECT_NE(error_of([&] { logical_not(x); }).find("boolean"), std::string::npos);
  // a strided (transposed) operand
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  EXPECT_EQ(bools(gt(t, 2.5f)), (std::vector<float>{0, 1, 0, 1, 1, 1}));
}

TEST(IndexSelect, PicksRepeatsAndDropsRowsOfAnyDtype) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 2, 2});
  EXPECT_EQ(index_select(t, 0, {2, 0, 0}).to_vector(), (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(index_select(t, 1, {1}).to_vector(), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  EXPECT_EQ(index_select(t, -1, {1, 1}).shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(index_select(t.transpose(0, 2), 0, {1}).to_vector(), t.transpose(0, 2).select(0, 1).contiguous().to_vector());
  Tensor ids = Tensor::from_ints({4, 5, 6, 7}, {2, 2});
  EXPECT_EQ(index_select(ids, 0, {1}).to_ints(), (std::vector<int32_t>{6, 7}));
  Tensor mask = Tensor::from_bools({true, false, false, true}, {2, 1, 1, 2});
  EXPECT_EQ(bools(index_select(mask, 0, {1, 1, 0})), (std::vector<float>{0, 1, 0, 1, 1, 0}));
  EXPECT_EQ(index_select(t, 0, {}).shape(), (Shape{0, 2, 2}));
  EXPECT_NE(error_of([&] { index_select(t, 0, {3}); }).find("index 3 is out of range"), std::string::npos);
}

TEST(IndexSelect, GradientAddsUpRepeats) {
  Tensor a = testing::param({4, 3, 2}, 31);
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return index_select(in[0], 1, {2, 0, 2, 2}); },
                   (std::vector<Tensor>{a}));
  EXPECT_GRADCHECK([](const std::vector<Tensor>& in) { return index_select(in[0], 0, {3, 3, 1}); },
                   (std::vector<Tensor>{a}));
}

TEST(InPlaceOps, AccumulateScaleAndNorm) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  add_(a, Tensor::from_vector({10, 20}, {2}));  // broadcast along rows
  EXPECT_EQ(a.to_vector(), (std::vector<float>{11, 22, 13, 24}));
  mul_(a, 0.5f);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{5.5f, 11, 6.5f, 12}));
  EXPECT_DOUBLE_EQ(sum_of_squares(Tensor::from_vector({3, 4}, {2})), 25.0);
  Tensor v = a.transpose(0, 1);
  EXPECT_NE(error_of([&] { add_(v, a); }).find("dense"), std::string::npos);
}

// log((1/n) Σ exp(x_i)): one tensor passes through; several give an ensemble's mean probability.
TEST(LogMeanExp, IsTheLogOfTheMeanProbability) {
  Tensor a = log_softmax(Tensor::from_vector({1, 2, 3}, {1, 3}), -1), b = log_softmax(Tensor::from_vector({3, 1, 0}, {1, 3}), -1);
  EXPECT_TRUE(log_mean_exp({a}).same(a));
  const std::vector<float> pa = exp(a).to_vector(), pb = exp(b).to_vector(), m = exp(log_mean_exp({a, b})).to_vector();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(m[i], (pa[i] + pb[i]) / 2, 1e-6);
  EXPECT_NE(error_of([&] { log_mean_exp({a, Tensor::zeros({1, 4})}); }).find("differ"), std::string::npos);
}

}  // namespace
}  // namespace qkv
