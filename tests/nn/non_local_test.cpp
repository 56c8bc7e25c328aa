// The non-local block's properties (its values and gradients against PyTorch are in
// GoldenVision.NonLocalBlock): it starts as the identity, its attention rows are distributions over
// the positions, it is equivariant to a permutation of the positions (attention has no notion of
// where a pixel is: only the 1×1 convolutions and the positions' contents matter), and its gradients
// pass finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "qkv/nn/non_local.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

// x [N, C, H, W] with its H·W positions reordered: out[..., p] = x[..., perm[p]] (row-major h·W + w).
Tensor permute_positions(const Tensor& x, const std::vector<int64_t>& perm) {
  const std::vector<float> v = x.to_vector();
  const int64_t P = x.size(2) * x.size(3), rows = x.numel() / P;
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < P; ++p) out[r * P + p] = v[r * P + perm[p]];
  return Tensor::from_vector(out, x.shape());
}

nn::NonLocalBlock2d trained_looking_block(int64_t C, int64_t heads) {
  Generator gen(7);
  nn::NonLocalBlock2d block({C, C / 2, heads, false}, &gen);
  // γ = 0 makes the block the identity; a non-zero γ makes the attention path visible.
  block.bn->weight = Tensor::full({C}, 0.8f);
  return block;
}

TEST(NonLocalBlock, StartsAsTheIdentity) {
  Generator gen(3);
  nn::NonLocalBlock2d block({8, 4, 2, true}, &gen);
  const Tensor x = testing::param({2, 8, 6, 5}, 11);
  EXPECT_TENSOR_NEAR(block.forward(x), x, 0.f);
}

TEST(NonLocalBlock, AttentionRowsAreDistributionsOverThePositions) {
  nn::NonLocalBlock2d block = trained_looking_block(8, 2);
  Tensor weights;
  block.forward(testing::param({2, 8, 4, 5}, 12), &weights);
  ASSERT_EQ(weights.shape(), (Shape{2, 2, 20, 20}));
  const std::vector<float> w = weights.to_vector();
  for (size_t row = 0; row < w.size() / 20; ++row) {
    double s = 0;
    for (int j = 0; j < 20; ++j) s += w[row * 20 + j];
    EXPECT_NEAR(s, 1.0, 1e-5) << "row " << row;
  }
}

TEST(NonLocalBlock, EquivariantToAPermutationOfThePositions) {
  nn::NonLocalBlock2d block = trained_looking_block(6, 1);
  const Tensor x = testing::param({2, 6, 4, 5}, 13);
  std::vector<int64_t> perm(20);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
  const Tensor a = permute_positions(block.forward(x), perm);
  const Tensor b = block.forward(permute_positions(x, perm));
  EXPECT_TENSOR_NEAR(a, b, 1e-5f);
  // A 3×3 convolution is not: the same permutation changes its answer.
  const Tensor w = testing::param({6, 6, 3, 3}, 14);
  const Tensor ca = permute_positions(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), perm);
  const Tensor cb = conv2d(permute_positions(x, perm), w, Tensor(), {1, 1}, {1, 1});
  const std::vector<float> va = ca.to_vector(), vb = cb.to_vector();
  float diff = 0;
  for (size_t i = 0; i < va.size(); ++i) diff = std::max(diff, std::abs(va[i] - vb[i]));
  EXPECT_GT(diff, 0.1f);
}

TEST(NonLocalBlock, GradientsByFiniteDifferences) {
  for (bool sub : {false, true}) {
    SCOPED_TRACE(sub ? "sub_sample" : "all positions");
    Generator gen(9);
    nn::NonLocalBlock2d block({4, 4, 2, sub}, &gen);
    Tensor x = testing::param({2, 4, 4, 3}, 15), t = testing::param({4, 4, 1, 1}, 16, 0.5f),
           gam = testing::param({4}, 17);
    const Tensor r = testing::param({2, 4, 4, 3}, 18).detach();
    EXPECT_GRADCHECK(
        [&](const std::vector<Tensor>& in) {
          block.theta->weight = in[1];
          block.bn->weight = in[2];
          return sum(block.forward(in[0]) * r);
        },
        (std::vector<Tensor>{x, t, gam}));
  }
}

}  // namespace
}  // namespace qkv
