// The fused residual + norm ops (LayerNorm, RMSNorm) give the bits of the ops they replace — dropout of
// the residual, add, then layer_norm — forward and backward, on the CPU; their values and gradients against PyTorch are the op table's
// golden cases ("add_layer_norm_*", "add_rms_norm_*"), the GPU's against the CPU the op table's CUDA comparison.
#include <gtest/gtest.h>

#include <bit>

#include "qkv/ops.h"
#include "testing.h"

namespace qkv {
namespace {

void expect_bits(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(y[i])) << what << "[" << i << "]";
}

// A gradient as the unfused ops give it: the same bits, or undefined in both.
void expect_same_grad(const Tensor& unfused, const Tensor& fused, const char* what) {
  if (!unfused.defined()) {
    EXPECT_FALSE(fused.defined()) << what;
    return;
  }
  expect_bits(unfused, fused, what);
}

// What a loss reads of the fused op: the normalized output alone (a post-LN layer's; or the _with_sum
// form's), the sum alone, or both (a pre-LN layer's residual stream).
enum class Uses { norm, norm_of_with_sum, sum_of_with_sum, both };

// Rows of 300 (vector tails) and of 8; the sum taking gradients of its own (a pre-LN layer's
// residual stream), alone, or not at all (a post-LN layer's); the residual dropped (p = 0.3, and 1: all dropped) or
// not, the unfused dropout and the fused one drawing from generators in the same state (one reserved
// counter ahead, so that a row's mask starts on an odd counter); the inputs also used elsewhere, so
// that gradients meet in them.
TEST(AddLayerNorm, GivesTheBitsOfDropoutAddThenLayerNormForwardAndBackward) {
  for (int64_t n : {8, 300}) {
    Generator g(n);
    const Tensor x0 = Tensor::randn({5, 3, n}, g), r0 = Tensor::randn({5, 3, n}, g), w0 = Tensor::randn({n}, g),
                 b0 = Tensor::randn({n}, g), gy = Tensor::randn({5, 3, n}, g), gs = Tensor::randn({5, 3, n}, g);
    for (float p : {0.f, 0.3f, 1.f})
    for (Uses uses : {Uses::norm, Uses::norm_of_with_sum, Uses::sum_of_with_sum, Uses::both}) {
      const bool with_sum = uses != Uses::norm, loss_y = uses != Uses::sum_of_with_sum,
                 loss_s = uses == Uses::sum_of_with_sum || uses == Uses::both;
      SCOPED_TRACE(::testing::Message() << "n " << n << ", p " << p << ", uses " << static_cast<int>(uses));
      std::vector<Tensor> grads[2], outs[2];
      for (int fused = 0; fused < 2; ++fused) {
        Generator drop_gen(77);
        drop_gen.reserve(1);
        Tensor x = x0.clone().requires_grad_(), r = r0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
               b = b0.clone().requires_grad_();
        Tensor s, y;
        if (!fused) {
          s = add(x, dropout(r, p, true, &drop_gen));
          y = layer_norm(s, {n}, w, b);
        } else if (with_sum) {
          const SumAndNorm sn = add_layer_norm_with_sum(x, r, {n}, w, b, 1e-5f, p, &drop_gen);
          s = sn.sum, y = sn.normalized;
        } else {
          y = add_layer_norm(x, r, {n}, w, b, 1e-5f, p, &drop_gen);
        }
        EXPECT_EQ(drop_gen.reserve(0), p > 0.f ? 1 + static_cast<uint64_t>(x0.numel()) : 1) << "counters reserved";
        // the loss: y·gy and/or s·gs, plus x and r on paths of their own
        Tensor loss = sum(mul(mul(x, r), 0.5f));
        if (loss_y) loss = add(loss, sum(mul(y, gy)));
        if (loss_s) loss = add(loss, sum(mul(s, gs)));
        loss.backward();
        outs[fused] = {y};
        if (with_sum) outs[fused].push_back(s);
        grads[fused] = {x.grad(), r.grad(), w.grad(), b.grad()};
      }
      for (size_t i = 0; i < outs[0].size(); ++i) expect_bits(outs[0][i], outs[1][i], i ? "sum" : "normalized");
      const char* names[] = {"dx", "dresidual", "dweight", "dbias"};
      for (size_t i = 0; i < 4; ++i) expect_same_grad(grads[0][i], grads[1][i], names[i]);
    }
  }
}

TEST(AddLayerNorm, RefusesAResidualOfAnotherShape) {
  Tensor x = Tensor::ones({2, 8});
  EXPECT_THROW(add_layer_norm(x, Tensor::ones({1, 8}), {8}), Error);
  EXPECT_THROW(add_layer_norm(x, Tensor(), {8}), Error);
  EXPECT_THROW(add_layer_norm_with_sum(x, Tensor::ones({2, 8}).to(DType::bf16), {8}), Error);
  EXPECT_THROW(add_layer_norm(x, Tensor::ones({2, 8}), {4}), Error);
  EXPECT_THROW(add_layer_norm(x, Tensor::ones({2, 8}), {8}, Tensor(), Tensor(), 1e-5f, 1.5f), Error);
  EXPECT_THROW(add_layer_norm_with_sum(x, Tensor::ones({2, 8}), {8}, Tensor(), Tensor(), 1e-5f, -0.1f), Error);
  EXPECT_THROW(add_layer_norm(x, Tensor::ones({2, 8}), {8}, Tensor(), Tensor(), 1e-5f, NAN), Error);
}

// The same for RMSNorm (Llama's residual stream): add, then rms_norm, against add_rms_norm and
// add_rms_norm_with_sum, with and without a scale.
TEST(AddRmsNorm, GivesTheBitsOfDropoutAddThenRmsNormForwardAndBackward) {
  for (int64_t n : {8, 300}) {
    Generator g(100 + n);
    const Tensor x0 = Tensor::randn({5, 3, n}, g), r0 = Tensor::randn({5, 3, n}, g), w0 = Tensor::randn({n}, g),
                 gy = Tensor::randn({5, 3, n}, g), gs = Tensor::randn({5, 3, n}, g);
    for (float p : {0.f, 0.3f})
    for (Uses uses : {Uses::norm, Uses::norm_of_with_sum, Uses::sum_of_with_sum, Uses::both}) {
      const bool with_sum = uses != Uses::norm, loss_y = uses != Uses::sum_of_with_sum,
                 loss_s = uses == Uses::sum_of_with_sum || uses == Uses::both;
      for (bool scaled : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << ", p " << p << ", uses " << static_cast<int>(uses)
                                        << (scaled ? ", scaled" : ""));
        std::vector<Tensor> grads[2], outs[2];
        for (int fused = 0; fused < 2; ++fused) {
          Generator drop_gen(78);
          drop_gen.reserve(1);
          Tensor x = x0.clone().requires_grad_(), r = r0.clone().requires_grad_(), w = w0.clone().requires_grad_();
          const Tensor wt = scaled ? w : Tensor();
          Tensor s, y;
          if (!fused) {
            s = add(x, dropout(r, p, true, &drop_gen));
            y = rms_norm(s, wt, 1e-6f);
          } else if (with_sum) {
            const SumAndNorm sn = add_rms_norm_with_sum(x, r, wt, 1e-6f, p, &drop_gen);
            s = sn.sum, y = sn.normalized;
          } else {
            y = add_rms_norm(x, r, wt, 1e-6f, p, &drop_gen);
          }
          Tensor loss = sum(mul(mul(x, r), 0.5f));
          if (loss_y) loss = add(loss, sum(mul(y, gy)));
          if (loss_s) loss = add(loss, sum(mul(s, gs)));
          loss.backward();
          outs[fused] = {y};
          if (with_sum) outs[fused].push_back(s);
          grads[fused] = {x.grad(), r.grad()};
          if (scaled) grads[fused].push_back(w.grad());
        }
        for (size_t i = 0; i < outs[0].size(); ++i) expect_bits(outs[0][i], outs[1][i], i ? "sum" : "normalized");
        const char* names[] = {"dx", "dresidual", "dweight"};
        for (size_t i = 0; i < grads[0].size(); ++i) expect_same_grad(grads[0][i], grads[1][i], names[i]);
      }
    }
  }
}

TEST(AddRmsNorm, RefusesAResidualOfAnotherShape) {
  Tensor x = Tensor::ones({2, 8});
  EXPECT_THROW(add_rms_norm(x, Tensor::ones({1, 8}), Tensor(), 1e-6f), Error);
  EXPECT_THROW(add_rms_norm(x, Tensor(), Tensor(), 1e-6f), Error);
  EXPECT_THROW(add_rms_norm_with_sum(x, Tensor::ones({2, 8}).to(DType::bf16), Tensor(), 1e-6f), Error);
  EXPECT_THROW(add_rms_norm(x, Tensor::ones({2, 8}), Tensor::ones({4}), 1e-6f), Error);
  EXPECT_THROW(add_rms_norm_with_sum(x, Tensor::ones({2, 8}), Tensor(), 1e-6f, 2.f), Error);
}

}  // namespace
}  // namespace qkv
