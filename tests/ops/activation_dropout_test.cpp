// The activations with their output dropped in the same pass (relu and gelu with dropout_p: a
// Transformer FFN's hidden layer in training) give the bits of the ops they replace — the activation,
// then dropout — forward and backward, on the CPU; their gradients by finite differences and the
// GPU's against the CPU are the op table's samples ("dropout"), the GPU kernels on the host
// tests/kernels/activation_emulation_test.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>

#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

Tensor act(const std::string& name, const Tensor& x) {
  return name == "relu" ? relu(x) : gelu(x, name == "gelu" ? "none" : "tanh");
}
Tensor act_then_dropout(const std::string& name, const Tensor& x, float p, Generator* g) {
  return name == "relu" ? relu(x, p, g) : gelu(x, name == "gelu" ? "none" : "tanh", p, g);
}

// 7 elements (scalar code), 5000 (vectors and a tail), 70000 (several blocks of the kernel and, with
// two threads, chunks that start on odd counters); p = 0 (the activation alone), 0.25 and 1 (all
// dropped); the generator one counter ahead, so that the mask starts on an odd counter.
TEST(ActivationDropout, GivesTheBitsOfTheActivationThenDropoutForwardAndBackward) {
  for (int64_t n : {7, 5000, 70000}) {
    Generator g(n);
    const Tensor x0 = Tensor::randn({n}, g), gy = Tensor::randn({n}, g);
    for (const std::string name : {"relu", "gelu", "gelu_tanh"}) {
      for (float p : {0.f, 0.25f, 1.f}) {
        SCOPED_TRACE(::testing::Message() << name << ", n " << n << ", p " << p);
        Tensor out[2], grad[2];
        uint64_t reserved[2];
        for (int fused = 0; fused < 2; ++fused) {
          Generator drop_gen(91);
          drop_gen.reserve(1);
          Tensor x = x0.clone().requires_grad_();
          const Tensor y = fused ? act_then_dropout(name, x, p, &drop_gen) : dropout(act(name, x), p, true, &drop_gen);
          sum(mul(y, gy)).backward();
          out[fused] = y, grad[fused] = x.grad(), reserved[fused] = drop_gen.reserve(0);
        }
        EXPECT_EQ(reserved[1], reserved[0]) << "the generator moves as dropout moves it";
        const std::vector<float> y0 = out[0].to_vector(), y1 = out[1].to_vector(), g0 = grad[0].to_vector(),
                                 g1 = grad[1].to_vector();
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(y0[i])) << "output " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(g1[i]), std::bit_cast<uint32_t>(g0[i])) << "gradient " << i;
        }
      }
    }
  }
}

TEST(ActivationDropout, RefusesAProbabilityOutsideZeroToOne) {
  const Tensor x = Tensor::ones({4});
  EXPECT_THROW(relu(x, 1.5f), Error);
  EXPECT_THROW(gelu(x, "none", -0.1f), Error);
  EXPECT_THROW(gelu(x, "tanh", NAN), Error);
}

}  // namespace
}  // namespace qkv
