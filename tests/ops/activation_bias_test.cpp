// The activations with a linear layer's bias added in their own pass (relu and gelu with `bias`: the
// FFN's first linear then runs its GEMM without it — Megatron's bias_gelu) give the bits of the ops they
// replace — the addition, then the activation (and its dropout) — forward and backward, the bias's
// gradient included, on the CPU; their gradients by finite differences and the GPU's against the CPU
// are the op table's samples ("bias"), the GPU kernels on the host tests/kernels/
// activation_emulation_test.cpp; the FFN that uses them: FeedForward.TheBiasInTheActivationsPass.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>

#include "qkv/nn/linear.h"
#include "qkv/nn/transformer_layer.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

Tensor act_dropped(const std::string& name, const Tensor& x, float p, Generator* g, const Tensor& bias = Tensor()) {
  return name == "relu" ? relu(x, p, g, bias) : gelu(x, name == "gelu" ? "none" : "tanh", p, g, bias);
}

void expect_same_bits(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> a = got.to_vector(), b = want.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << " " << i;
}

// Rows of 7 (scalar code, rows that start mid-vector), 257 (a vector tail each row) and 3001 over
// 30 rows (several of the kernel's blocks of 8192 and, with two threads, chunks — each starting
// mid-row); p = 0, 0.25; the generator one counter ahead.
TEST(ActivationBias, GivesTheBitsOfTheAdditionThenTheActivationForwardAndBackward) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{3, 7}, {11, 257}, {30, 3001}}) {
    Generator g(cols);
    const Tensor x0 = Tensor::randn({rows, cols}, g), b0 = Tensor::randn({cols}, g),
                 gy = Tensor::randn({rows, cols}, g);
    for (const std::string name : {"relu", "gelu", "gelu_tanh"}) {
      for (float p : {0.f, 0.25f}) {
        SCOPED_TRACE(::testing::Message() << name << ", [" << rows << ", " << cols << "], p " << p);
        Tensor out[2], dx[2], db[2];
        for (int fused = 0; fused < 2; ++fused) {
          Generator drop_gen(91);
          drop_gen.reserve(1);
          Tensor x = x0.clone().requires_grad_(), b = b0.clone().requires_grad_();
          const Tensor y = fused ? act_dropped(name, x, p, &drop_gen, b) : act_dropped(name, add(x, b), p, &drop_gen);
          sum(mul(y, gy)).backward();
          out[fused] = y, dx[fused] = x.grad(), db[fused] = b.grad();
        }
        expect_same_bits(out[1], out[0], "output");
        expect_same_bits(dx[1], dx[0], "dx");
        expect_same_bits(db[1], db[0], "db");
      }
    }
  }
  // over a leading shape of its own ([2, 3, 5]: the bias broadcast over 6 rows), without a gradient
  Generator g(5);
  const Tensor x = Tensor::randn({2, 3, 5}, g), b = Tensor::randn({5}, g);
  expect_same_bits(gelu(x, "none", 0.f, nullptr, b), gelu(add(x, b), "none"), "3-d output");
}

TEST(ActivationBias, RefusesABiasThatIsNotTheLastDimension) {
  const Tensor x = Tensor::ones({4, 6});
  EXPECT_NE(testing::error_of([&] { relu(x, 0.f, nullptr, Tensor::ones({4})); }).find("bias [4]"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { gelu(x, "none", 0.f, nullptr, Tensor::ones({1, 6})); }).find("bias [1,6]"),
            std::string::npos);
  EXPECT_THROW(gelu(x, "tanh", 0.f, nullptr, Tensor::ones({6}, DType::bf16)), Error);
}

// The FFN puts its first linear's bias into the activation's pass: the same output and gradients as
// the unfused form (linear with its bias, then the activation), with dropout.
TEST(FeedForward, TheBiasInTheActivationsPass) {
  Generator g(3);
  nn::Linear l1(16, 40, true, &g), l2(40, 16, true, &g);
  const Tensor x0 = Tensor::randn({2, 5, 16}, g);
  for (nn::Activation act : {nn::Activation::relu, nn::Activation::gelu, nn::Activation::gelu_tanh}) {
    SCOPED_TRACE(enum_name(act));
    Tensor out[2], dx[2], db1[2], dw1[2];
    for (int fused = 0; fused < 2; ++fused) {
      Generator drop_gen(7);
      Tensor x = x0.clone().requires_grad_();
      for (Tensor* p : {&l1.weight, &l1.bias, &l2.weight, &l2.bias}) p->zero_grad();
      const Tensor y = fused ? nn::feed_forward(x, l1, l2, act, 0.2f, true, &drop_gen)
                             : l2.forward(nn::activate(l1.forward(x), act, 0.2f, &drop_gen));
      sum(mul(y, y)).backward();
      out[fused] = y, dx[fused] = x.grad(), db1[fused] = l1.bias.grad(), dw1[fused] = l1.weight.grad();
    }
    // (the GEMMs' sums: the bias added after the product rather than accumulated into: a rounding apart)
    EXPECT_TENSOR_NEAR(out[1], out[0], 1e-5);
    EXPECT_TENSOR_NEAR(dx[1], dx[0], 1e-5);
    EXPECT_TENSOR_NEAR(db1[1], db1[0], 1e-5);
    EXPECT_TENSOR_NEAR(dw1[1], dw1[0], 1e-5);
  }
}

}  // namespace
}  // namespace qkv
