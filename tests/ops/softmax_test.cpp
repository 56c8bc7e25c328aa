// log_softmax_ (ops/softmax.h): in place, no tape — decoding's next-token scores. The same floats
// as log_softmax bit for bit (the kernel's exponentials go to a buffer of the thread's own instead of
// the output), and the tensors it cannot take refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/ops/arith.h"
#include "qkv/ops/softmax.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(LogSoftmaxInPlace, EqualsLogSoftmaxBitForBit) {
  Generator g(21);
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {128, 6500}, {5, 33}}) {
    Tensor x = Tensor::randn({rows, n}, g) * 8.f;
    if (n > 2) {  // masked entries, as a banned token's −inf
      x.data<float>()[1] = -std::numeric_limits<float>::infinity();
      x.data<float>()[n + 2] = -std::numeric_limits<float>::infinity();
    }
    const Tensor expected = log_softmax(x, -1);
    Tensor y = x.clone();
    Tensor& same = log_softmax_(y);
    EXPECT_EQ(&same, &y);
    EXPECT_EQ(y.to_vector(), expected.to_vector()) << rows << "x" << n;
  }
}

TEST(LogSoftmaxInPlace, RefusesWhatItCannotOverwrite) {
  Generator g(22);
  Tensor t = Tensor::randn({4, 6}, g).transpose(0, 1);
  EXPECT_THROW(log_softmax_(t), Error);  // not dense
  Tensor w = Tensor::randn({2, 3}, g);
  w.requires_grad_();
  EXPECT_THROW(log_softmax_(w), Error);  // on the tape's side
  Tensor i = Tensor::from_ints({1, 2, 3}, {1, 3});
  EXPECT_THROW(log_softmax_(i), Error);
}

}  // namespace
}  // namespace qkv
