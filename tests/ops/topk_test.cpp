// topk's order where PyTorch promises none (ties) and its edges; its values, indices and gradient
// against torch.topk are the op table's golden cases (tests/golden/ops.json, "topk_*").
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/ops/topk.h"
#include "testing.h"

namespace qkv {
namespace {

std::vector<int32_t> ints(const Tensor& t) {
  std::vector<int32_t> out;
  for (float f : t.to_vector()) out.push_back(static_cast<int32_t>(f));
  return out;
}

TEST(TopK, TiesTakeTheLowerIndexNaNIsLargestAndZerosAreEqual) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // 20 entries: past a vector's width, ties at 2.0 (indices 1, 4, 17), a NaN, ±0, ±∞
  Tensor x = Tensor::from_vector({-1.f, 2.f, 0.f, -0.f, 2.f, -inf, 1.f, -0.f, nan, 0.5f,
                                  -3.f, inf, 0.25f, -2.f, 1.5f, -0.5f, 0.f, 2.f, -inf, 0.75f},
                                 {1, 20});
  const TopK all = topk(x, 20);
  EXPECT_EQ(ints(all.indices), (std::vector<int32_t>{8, 11, 1, 4, 17, 14, 6, 19, 9, 12, 2, 3, 7, 16, 15, 0, 13, 10,
                                                     5, 18}));
  const std::vector<float> v = all.values.to_vector();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], inf);
  EXPECT_EQ(v[19], -inf);
  // a shorter k is the prefix: the same ties kept
  EXPECT_EQ(ints(topk(x, 4).indices), (std::vector<int32_t>{8, 11, 1, 4}));
  // rows are independent; a row of equal values gives 0, 1, 2, …
  Tensor rows = Tensor::from_vector({3.f, 3.f, 3.f, 3.f, 1.f, 2.f, 3.f, 4.f}, {2, 4});
  EXPECT_EQ(ints(topk(rows, 3).indices), (std::vector<int32_t>{0, 1, 2, 3, 2, 1}));
}

TEST(TopK, RefusesWhatItCannotTake) {
  Tensor x = Tensor::ones({2, 5});
  EXPECT_THROW(topk(x, 6), Error);
  EXPECT_THROW(topk(x, -1), Error);
  EXPECT_THROW(topk(Tensor::ones({}), 1), Error);
  EXPECT_THROW(topk(x.to(DType::bf16), 1), Error);
  EXPECT_EQ(topk(Tensor::ones({0, 5}), 2).values.shape(), Shape({0, 2}));  // no rows: empty, as torch
  EXPECT_EQ(topk(x, 0).indices.shape(), Shape({2, 0}));
}

}  // namespace
}  // namespace qkv
