// The activations' and dropout's GPU kernels (kernels/cuda/activation_kernels.cuh) run on the host,
// unchanged, through tests/kernels/cuda_emulation.h, with the grids activation.cu gives them: an
// activation with its output dropped in its own pass gives the bits of the activation's kernel and
// dropout's one after the other, forward and backward; dropout's mask is the CPU's bit for bit; the
// activations agree with the CPU's (whose erf is a polynomial of its own); the bf16 copies of their
// outputs written in the same pass are the outputs rounded. Needs the CUDA toolkit's
// headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/column_order.h"
#include "kernels/cpu/activation.h"
#include "kernels/cuda/activation.cu"  // the launchers, on the emulated GPU
#include "kernels/cuda/activation_kernels.cuh"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel
using qkv::kernels::DropoutMask;

enum class Act { relu, gelu, gelu_tanh };

// the kernel's launch as activation.cu makes it: blocks_for(n) blocks of 256, a grid-stride loop
template <class F>
void grid(int64_t n, F f) {
  launch(dim3(kc::blocks_for(n)), 256, 0, f);
}

// (bias: a linear layer's bias of `bias.size()` columns added to x in the activation's pass; cdf: the exact
// GELU's Φ kept by the forward for the backward)
std::vector<float> forward_gpu(Act a, const std::vector<float>& x, const DropoutMask& drop,
                               const std::vector<float>& bias = {}, float* cdf = nullptr) {
  const auto n = static_cast<int64_t>(x.size()), cols = static_cast<int64_t>(bias.size());
  const float* b = bias.empty() ? nullptr : bias.data();
  std::vector<float> y(x.size());
  grid(n, [&] {
    if (a == Act::relu)
      kc::relu_forward_kernel(x.data(), y.data(), n, drop, nullptr, b, cols);
    else
      kc::gelu_forward_kernel(x.data(), y.data(), n, a == Act::gelu_tanh, cdf, drop, nullptr, b, cols);
  });
  return y;
}
std::vector<float> backward_gpu(Act a, const std::vector<float>& x, const std::vector<float>& dy,
                                const DropoutMask& drop, const std::vector<float>& bias = {},
                                const float* cdf = nullptr) {
  const auto n = static_cast<int64_t>(x.size()), cols = static_cast<int64_t>(bias.size());
  const float* b = bias.empty() ? nullptr : bias.data();
  std::vector<float> dx(x.size());
  grid(n, [&] {
    if (a == Act::relu)
      kc::relu_backward_kernel(x.data(), dy.data(), dx.data(), n, drop, nullptr, b, cols);
    else
      kc::gelu_backward_kernel(x.data(), dy.data(), dx.data(), n, a == Act::gelu_tanh, cdf, drop, nullptr, b, cols);
  });
  return dx;
}
std::vector<float> dropout_gpu(const std::vector<float>& x, const DropoutMask& drop) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size());
  grid(n, [&] { kc::dropout_kernel(x.data(), y.data(), n, drop); });
  return y;
}

// A step graph's offset (kernels/dropout_mask.h): a mask recorded at counter 5 with a word holding 1000
// draws what the mask at counter 1005 draws, on both devices — in dropout's kernel and in the fused
// activations' — and an offset of 0 changes nothing.
TEST(ActivationKernelsEmulated, AMaskAddsTheStepGraphsOffsetWhenItRuns) {
  const int64_t n = 3001;
  const std::vector<float> x = random_floats(n, 43, 4.f);
  const DropoutMask at_1005 = qkv::kernels::dropout_mask(0.3f, 7, 1005);
  uint64_t word = 1000;
  DropoutMask recorded = qkv::kernels::dropout_mask(0.3f, 7, 5);
  recorded.offset = &word;
  std::vector<float> want(n), got_c(n);
  cpu::dropout_apply(x.data(), want.data(), n, at_1005);
  cpu::dropout_apply(x.data(), got_c.data(), n, recorded);
  EXPECT_EQ(got_c, want);
  EXPECT_EQ(dropout_gpu(x, recorded), want);
  EXPECT_EQ(forward_gpu(Act::relu, x, recorded), forward_gpu(Act::relu, x, at_1005));
  std::vector<float> relu_c(n), relu_want(n);
  cpu::relu_forward(x.data(), relu_c.data(), n, recorded);
  cpu::relu_forward(x.data(), relu_want.data(), n, at_1005);
  EXPECT_EQ(relu_c, relu_want);
  EXPECT_NE(dropout_gpu(x, qkv::kernels::dropout_mask(0.3f, 7, 5)), want) << "the offset moves the mask";
  word = 0;
  EXPECT_EQ(dropout_gpu(x, recorded), dropout_gpu(x, qkv::kernels::dropout_mask(0.3f, 7, 5)));
}

TEST(ActivationKernelsEmulated, ADroppedActivationIsTheActivationThenDropout) {
  const int64_t n = 3001;
  const std::vector<float> x = random_floats(n, 41, 4.f), dy = random_floats(n, 42, 1.f);
  const DropoutMask drop = qkv::kernels::dropout_mask(0.3f, 7, 5);
  // dropout's kernel draws the CPU's mask
  std::vector<float> dropped_c(n);
  cpu::dropout_apply(x.data(), dropped_c.data(), n, drop);
  EXPECT_EQ(dropout_gpu(x, drop), dropped_c);
  for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh}) {
    SCOPED_TRACE(a == Act::relu ? "relu" : a == Act::gelu ? "gelu" : "gelu_tanh");
    // forward: drop(act(x)) against act, then dropout
    const std::vector<float> y = forward_gpu(a, x, drop);
    EXPECT_EQ(y, dropout_gpu(forward_gpu(a, x, {}), drop));
    // backward: act'(x) · drop(dy) against dropout of dy, then act's backward
    const std::vector<float> dx = backward_gpu(a, x, dy, drop);
    EXPECT_EQ(dx, backward_gpu(a, x, dropout_gpu(dy, drop), {}));
    // and the CPU's fused kernels
    std::vector<float> y_c(n), dx_c(n);
    if (a == Act::relu) {
      cpu::relu_forward(x.data(), y_c.data(), n, drop);
      cpu::relu_backward(x.data(), dy.data(), dx_c.data(), n, drop);
    } else {
      cpu::gelu_forward(x.data(), y_c.data(), n, a == Act::gelu_tanh, nullptr, drop);
      cpu::gelu_backward(x.data(), dy.data(), dx_c.data(), n, a == Act::gelu_tanh, nullptr, drop);
    }
    EXPECT_LT(rel(y, y_c), 2e-6);
    EXPECT_LT(rel(dx, dx_c), 2e-6);
    if (a == Act::relu) {
      EXPECT_EQ(y, y_c);
      EXPECT_EQ(dx, dx_c);
    }
    // the bf16 copies written in the same pass (ops/autocast.h): y's and dx's, on both devices
    std::vector<bf16> y16_g(n), dx16_g(n), y16_c(n), dx16_c(n);
    std::vector<float> y2(n), dx2(n);
    grid(n, [&] {
      if (a == Act::relu) {
        kc::relu_forward_kernel(x.data(), y2.data(), n, drop, y16_g.data(), nullptr, 0);
        kc::relu_backward_kernel(x.data(), dy.data(), dx2.data(), n, drop, dx16_g.data(), nullptr, 0);
      } else {
        kc::gelu_forward_kernel(x.data(), y2.data(), n, a == Act::gelu_tanh, nullptr, drop, y16_g.data(), nullptr, 0);
        kc::gelu_backward_kernel(x.data(), dy.data(), dx2.data(), n, a == Act::gelu_tanh, nullptr, drop, dx16_g.data(),
                                 nullptr, 0);
      }
    });
    EXPECT_EQ(y2, y);
    EXPECT_EQ(dx2, dx);
    EXPECT_EQ(bits_of(y16_g), rounded_bits(y));
    EXPECT_EQ(bits_of(dx16_g), rounded_bits(dx));
    if (a == Act::relu) {
      cpu::relu_forward(x.data(), y2.data(), n, drop, y16_c.data());
      cpu::relu_backward(x.data(), dy.data(), dx2.data(), n, drop, dx16_c.data());
    } else {
      cpu::gelu_forward(x.data(), y2.data(), n, a == Act::gelu_tanh, nullptr, drop, y16_c.data());
      cpu::gelu_backward(x.data(), dy.data(), dx2.data(), n, a == Act::gelu_tanh, nullptr, drop, dx16_c.data());
    }
    EXPECT_EQ(y2, y_c);
    EXPECT_EQ(dx2, dx_c);
    EXPECT_EQ(bits_of(y16_c), converted_bits(y_c));
    EXPECT_EQ(bits_of(dx16_c), converted_bits(dx_c));
  }
}

// The kernels four elements a thread (kernel<4>: 16-byte loads and stores, as activation.cu launches them
// where every pointer allows it, over n / 4 groups and the tail) give kernel<1>'s bits: every activation
// forward and backward, with and without a bias whose columns wrap inside a group, dropped or not, the
// exact GELU's Φ kept, the bf16 copies; silu_mul; dropout — at lengths with a tail of 0–3 and below 4.
struct Outputs {
  std::vector<float> y, cdf, dx;
  std::vector<bf16> y16, dx16;
};
TEST(ActivationKernelsEmulated, FourElementsAThreadGiveTheBitsOfOne) {
  for (const int64_t n : {int64_t{3001}, int64_t{3004}, int64_t{3003}, int64_t{2}}) {
    const int64_t cols = n == 2 ? 2 : 431 + n % 4;  // (the bias's rows: n need not be a multiple)
    const std::vector<float> x = random_floats(n, 71, 3.f), bias = random_floats(cols, 72, 1.f),
                             dy = random_floats(n, 73, 1.f), u = random_floats(n, 74, 2.f);
    for (const DropoutMask& drop : {DropoutMask{}, qkv::kernels::dropout_mask(0.3f, 7, 5)})
      for (const bool biased : {false, true})
        for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh}) {
          SCOPED_TRACE(::testing::Message() << "n " << n
                                            << (a == Act::relu   ? " relu"
                                                : a == Act::gelu ? " gelu"
                                                                 : " gelu_tanh")
                                            << (drop.active() ? ", dropped" : "") << (biased ? ", biased" : ""));
          const float* b = biased ? bias.data() : nullptr;
          const int64_t c = biased ? cols : 0;
          // the forward and backward kernel<W> over the launcher's grid, their outputs
          auto run = [&](auto width) {
            constexpr int W = decltype(width)::value;
            Outputs o{std::vector<float>(n), std::vector<float>(n, -1.f), std::vector<float>(n), std::vector<bf16>(n),
                      std::vector<bf16>(n)};
            float* k = a == Act::gelu ? o.cdf.data() : nullptr;
            launch(dim3(kc::blocks_for(std::max<int64_t>(n / W, 1))), 256, 0, [&] {
              if (a == Act::relu) {
                kc::relu_forward_kernel<W>(x.data(), o.y.data(), n, drop, o.y16.data(), b, c);
                kc::relu_backward_kernel<W>(x.data(), dy.data(), o.dx.data(), n, drop, o.dx16.data(), b, c);
              } else {
                kc::gelu_forward_kernel<W>(x.data(), o.y.data(), n, a == Act::gelu_tanh, k, drop, o.y16.data(), b, c);
                kc::gelu_backward_kernel<W>(x.data(), dy.data(), o.dx.data(), n, a == Act::gelu_tanh, k, drop,
                                            o.dx16.data(), b, c);
              }
            });
            return o;
          };
          const Outputs one = run(std::integral_constant<int, 1>{}), four = run(std::integral_constant<int, 4>{});
          EXPECT_EQ(four.y, one.y);
          EXPECT_EQ(four.dx, one.dx);
          EXPECT_EQ(four.cdf, one.cdf);
          EXPECT_EQ(bits_of(four.y16), bits_of(one.y16));
          EXPECT_EQ(bits_of(four.dx16), bits_of(one.dx16));
        }
    // silu_mul forward (y, y16) and backward (dx and dx16: dg's; du below) and dropout (cdf: its output)
    const DropoutMask drop = qkv::kernels::dropout_mask(0.3f, 7, 5);
    std::vector<float> du[2];  // du and its bf16 copy, one-wide [0] and four-wide [1]
    std::vector<bf16> du16[2];
    auto run = [&](auto width) {
      constexpr int W = decltype(width)::value;
      Outputs o{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<bf16>(n),
                std::vector<bf16>(n)};
      du[W == 4].assign(n, 0.f), du16[W == 4].assign(n, bf16{});
      launch(dim3(kc::blocks_for(std::max<int64_t>(n / W, 1))), 256, 0, [&] {
        kc::silu_mul_forward_kernel<W>(x.data(), u.data(), o.y.data(), n, o.y16.data());
        kc::silu_mul_backward_kernel<W>(x.data(), u.data(), dy.data(), o.dx.data(), du[W == 4].data(), n, o.dx16.data(),
                                        du16[W == 4].data());
        kc::dropout_kernel<W>(x.data(), o.cdf.data(), n, drop);
      });
      return o;
    };
    const Outputs one = run(std::integral_constant<int, 1>{}), four = run(std::integral_constant<int, 4>{});
    EXPECT_EQ(four.y, one.y) << n;
    EXPECT_EQ(four.dx, one.dx) << n;
    EXPECT_EQ(du[1], du[0]) << n;
    EXPECT_EQ(bits_of(du16[1]), bits_of(du16[0])) << n;
    EXPECT_EQ(four.cdf, one.cdf) << n;
    EXPECT_EQ(bits_of(four.y16), bits_of(one.y16)) << n;
    EXPECT_EQ(bits_of(four.dx16), bits_of(one.dx16)) << n;
  }
  // the launchers take the four-wide kernels where every pointer allows, the one-wide ones where not
  const std::vector<float> x = random_floats(4001, 75, 3.f);
  std::vector<float> y(4001), y_off(4001);
  qkv::emulation::device().launched.clear();
  kc::gelu_forward(x.data(), y.data(), 4000, false, nullptr, DropoutMask{}, nullptr, nullptr, 0);
  EXPECT_TRUE(qkv::emulation::launched(kc::gelu_forward_kernel<4>));
  qkv::emulation::device().launched.clear();
  kc::gelu_forward(x.data() + 1, y_off.data() + 1, 4000, false, nullptr, DropoutMask{}, nullptr, nullptr, 0);
  EXPECT_TRUE(qkv::emulation::launched(kc::gelu_forward_kernel<1>));
}

// SwiGLU's product (kernels/activation.inc's silu_mul) forward and backward, the GPU's kernels against
// the CPU's, and the bf16 copies they write in the same pass
TEST(ActivationKernelsEmulated, SiluMulMatchesTheCpu) {
  const int64_t n = 3001;
  const std::vector<float> g = random_floats(n, 51, 6.f), u = random_floats(n, 52, 2.f), dy = random_floats(n, 53, 1.f);
  std::vector<float> y_g(n), dg_g(n), du_g(n), y_c(n), dg_c(n), du_c(n);
  std::vector<bf16> y16_g(n), dg16_g(n), du16_g(n), y16_c(n), dg16_c(n), du16_c(n);
  grid(n, [&] {
    kc::silu_mul_forward_kernel(g.data(), u.data(), y_g.data(), n, y16_g.data());
    kc::silu_mul_backward_kernel(g.data(), u.data(), dy.data(), dg_g.data(), du_g.data(), n, dg16_g.data(),
                                 du16_g.data());
  });
  cpu::silu_mul_forward(g.data(), u.data(), y_c.data(), n, y16_c.data());
  cpu::silu_mul_backward(g.data(), u.data(), dy.data(), dg_c.data(), du_c.data(), n, dg16_c.data(), du16_c.data());
  EXPECT_LT(rel(y_g, y_c), 2e-6);
  EXPECT_LT(rel(dg_g, dg_c), 2e-6);
  EXPECT_LT(rel(du_g, du_c), 2e-6);
  EXPECT_EQ(bits_of(y16_g), rounded_bits(y_g));
  EXPECT_EQ(bits_of(dg16_g), rounded_bits(dg_g));
  EXPECT_EQ(bits_of(du16_g), rounded_bits(du_g));
  EXPECT_EQ(bits_of(y16_c), converted_bits(y_c));
  EXPECT_EQ(bits_of(dg16_c), converted_bits(dg_c));
  EXPECT_EQ(bits_of(du16_c), converted_bits(du_c));
}

// A linear layer's bias added in the activation's pass (7 rows of 431: rows that start mid-warp): the
// bits of the addition then the activation, forward and backward, with dropout, the exact GELU's Φ
// kept; and the CPU's kernels (relu bit for bit, GELU to its polynomial erf).
TEST(ActivationKernelsEmulated, ABiasedActivationIsTheAdditionThenTheActivation) {
  const int64_t rows = 7, cols = 431, n = rows * cols;
  const std::vector<float> x = random_floats(n, 51, 3.f), bias = random_floats(cols, 52, 1.f),
                           dy = random_floats(n, 53, 1.f);
  std::vector<float> xb(n);
  for (int64_t i = 0; i < n; ++i) xb[i] = x[i] + bias[i % cols];
  for (const DropoutMask& drop : {DropoutMask{}, qkv::kernels::dropout_mask(0.3f, 7, 5)})
    for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh}) {
      SCOPED_TRACE(::testing::Message() << (a == Act::relu ? "relu" : a == Act::gelu ? "gelu" : "gelu_tanh")
                                        << (drop.active() ? ", dropped" : ""));
      std::vector<float> cdf(n, -1.f), cdf_want(n, -1.f);
      const bool keep_cdf = a == Act::gelu;
      const std::vector<float> y = forward_gpu(a, x, drop, bias, keep_cdf ? cdf.data() : nullptr);
      EXPECT_EQ(y, forward_gpu(a, xb, drop, {}, keep_cdf ? cdf_want.data() : nullptr));
      EXPECT_EQ(cdf, cdf_want);
      const std::vector<float> dx = backward_gpu(a, x, dy, drop, bias, keep_cdf ? cdf.data() : nullptr);
      EXPECT_EQ(dx, backward_gpu(a, xb, dy, drop, {}, keep_cdf ? cdf.data() : nullptr));
      // the GPU's gelu keeps no Φ (ops/activation.cpp): computed again, the kept one's bits
      if (keep_cdf) {
        EXPECT_EQ(dx, backward_gpu(a, x, dy, drop, bias, nullptr)) << "Φ computed in the backward";
      }
      std::vector<float> y_c(n), dx_c(n);
      if (a == Act::relu) {
        cpu::relu_forward(x.data(), y_c.data(), n, drop, nullptr, bias.data(), cols);
        cpu::relu_backward(x.data(), dy.data(), dx_c.data(), n, drop, nullptr, bias.data(), cols);
        EXPECT_EQ(y, y_c);
        EXPECT_EQ(dx, dx_c);
      } else {
        cpu::gelu_forward(x.data(), y_c.data(), n, a == Act::gelu_tanh, nullptr, drop, nullptr, bias.data(), cols);
        cpu::gelu_backward(x.data(), dy.data(), dx_c.data(), n, a == Act::gelu_tanh, nullptr, drop, nullptr,
                           bias.data(), cols);
        EXPECT_LT(rel(y, y_c), 2e-6);
        EXPECT_LT(rel(dx, dx_c), 2e-6);
      }
    }
}

// The backwards with the bias's gradient in their pass (activation.cu with dbias: column_strip_sums
// making each element through BiasedBackward<ReluGrad / GeluGrad>, then column_partials_sum): dx the
// plain backward kernel's bit for bit, dbias kernels/column_strips.h's sum of that dx — on inputs
// whose sums show their order — and so, for relu (whose dx the devices share), the CPU's dbias bit for
// bit; the GELU's within the two devices' dx.
TEST(ActivationKernelsEmulated, TheBiasGradientInTheBackwardsPass) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{5, 37}, {300, 37}, {1000, 70}}) {
    const int64_t n = rows * cols;
    const std::vector<float> x = random_floats(n, 61, 3.f), bias = random_floats(cols, 62, 1.f);
    const std::vector<float> dy = qkv::testing::order_revealing(static_cast<size_t>(n), 63);
    const qkv::kernels::ColumnStrips S = qkv::kernels::column_strips(rows);
    for (const DropoutMask& drop : {DropoutMask{}, qkv::kernels::dropout_mask(0.3f, 7, 5)})
      for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh}) {
        SCOPED_TRACE(::testing::Message() << rows << " x " << cols << ", "
                                          << (a == Act::relu ? "relu" : a == Act::gelu ? "gelu" : "gelu_tanh")
                                          << (drop.active() ? ", dropped" : ""));
        std::vector<float> cdf(n);
        const bool keep_cdf = a == Act::gelu;
        forward_gpu(a, x, drop, bias, keep_cdf ? cdf.data() : nullptr);
        const float* c = keep_cdf ? cdf.data() : nullptr;
        std::vector<float> dx(n, -1.f), db(cols, -1.f);
        std::vector<double> partial(static_cast<size_t>(S.strips * cols), -1.0);
        launch(dim3(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(S.strips)), 256, 0, [&] {
          if (a == Act::relu)
            kc::column_strip_sums(kc::BiasedBackward<kc::ReluGrad>{x.data(), bias.data(), dx.data(), nullptr,
                                                                  {dy.data(), drop}},
                                  rows, cols, S.rows_each, partial.data());
          else
            kc::column_strip_sums(kc::BiasedBackward<kc::GeluGrad>{x.data(), bias.data(), dx.data(), nullptr,
                                                                  {dy.data(), drop, a == Act::gelu_tanh, c}},
                                  rows, cols, S.rows_each, partial.data());
        });
        launch(dim3(kc::blocks_for(cols)), 256, 0,
               [&] { kc::column_partials_sum(partial.data(), S.strips, cols, db.data()); });
        EXPECT_EQ(dx, backward_gpu(a, x, dy, drop, bias, c));
        EXPECT_EQ(db, qkv::testing::strip_order_sums(dx, rows, cols));
        std::vector<float> dx_c(n), db_c(cols);
        if (a == Act::relu) {
          cpu::relu_backward(x.data(), dy.data(), dx_c.data(), n, drop, nullptr, bias.data(), cols, db_c.data());
          EXPECT_EQ(dx, dx_c);
          EXPECT_EQ(db, db_c);
        } else {
          cpu::gelu_backward(x.data(), dy.data(), dx_c.data(), n, a == Act::gelu_tanh, nullptr, drop, nullptr,
                             bias.data(), cols, db_c.data());
          EXPECT_LT(rel(dx, dx_c), 2e-6);
          EXPECT_LT(rel(db, db_c), 2e-6);
        }
      }
  }
}

}  // namespace
#endif
