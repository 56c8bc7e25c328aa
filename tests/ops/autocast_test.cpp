// bf16 mixed precision: the GEMM kernel against a double-precision product of the bf16-rounded
// operands, the vectorised rounding against the scalar one, and `linear` under Autocast against
// the f32 linear of rounded operands (forward and every gradient). The whole-training check (loss
// curve of bf16 against f32) is in tests/train/trainer_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/gemm_bf16.h"
#include "qkv/qkv.h"
#include "testing.h"

namespace qkv {
namespace {

namespace k = kernels::cpu;

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

std::vector<float> randn(size_t n, uint64_t seed) {
  Tensor t = testing::param({static_cast<int64_t>(n)}, seed);
  return t.to_vector();
}

// Both paths: oneDNN's bf16 matmul (where the CPU has it; gemm_bf16 falls back to the second
// elsewhere) and the widened-operand sgemm.
TEST(GemmBf16, EqualsTheProductOfRoundedOperands) {
  const int64_t M = 37, N = 45, K = 300, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.f, 1.f})
        for (auto* gemm : {&k::gemm_bf16, &k::gemm_bf16_widened}) {
          // op(A) is M×K: stored [M, K] (lda ≥ K) or, transposed, [K, M] (lda ≥ M); same for B.
          const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          std::vector<float> a = randn(static_cast<size_t>((ta ? K : M) * lda), 1 + ta);
          std::vector<float> b = randn(static_cast<size_t>((tb ? N : K) * ldb), 3 + tb);
          std::vector<float> c0 = randn(static_cast<size_t>(M * ldc), 5);
          std::vector<bf16> ab(a.size()), bb(b.size());
          k::convert_to_bf16(a.data(), ab.data(), static_cast<int64_t>(a.size()));
          k::convert_to_bf16(b.data(), bb.data(), static_cast<int64_t>(b.size()));
          std::vector<float> c = c0;
          gemm(ta, tb, M, N, K, ab.data(), lda, bb.data(), ldb, beta, c.data(), ldc);
          double worst = 0, scale = 0;
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = beta * c0[i * ldc + j];
              for (int64_t p = 0; p < K; ++p) {
                const float av = ta ? a[p * lda + i] : a[i * lda + p];
                const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += static_cast<double>(round_bf16(av)) * round_bf16(bv);
              }
              worst = std::max(worst, std::abs(s - c[i * ldc + j]));
              scale = std::max(scale, std::abs(s));
            }
          EXPECT_LE(worst / scale, 2e-6) << "ta=" << ta << " tb=" << tb << " beta=" << beta
                                         << (gemm == &k::gemm_bf16 ? " gemm_bf16" : " gemm_bf16_widened");
          // the padding columns of C are left alone
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);
        }
}

TEST(GemmBf16, RejectsOtherBetas) {
  bf16 one = f32_to_bf16(1.f);
  float c = 0.f;
  EXPECT_THROW(k::gemm_bf16(false, false, 1, 1, 1, &one, 1, &one, 1, 0.5f, &c, 1), Error);
}

TEST(ConvertToBf16, MatchesTheScalarRounding) {
  std::vector<float> v = randn(1000 + 7, 11);  // a tail the vector loop does not cover
  const float tie_even = 1.f + std::ldexp(1.f, -8), tie_odd = 1.f + 3 * std::ldexp(1.f, -8);  // halfway cases
  for (float x : {0.f, -0.f, 1.f, -2.5f, tie_even, tie_odd, 3.4e38f, 1e-30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()})
    v.push_back(x);
  std::vector<bf16> got(v.size());
  k::convert_to_bf16(v.data(), got.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i].bits, f32_to_bf16(v[i]).bits) << "value " << v[i];
  EXPECT_EQ(bf16_to_f32(got[v.size() - 6]), 1.f) << "ties round to even (down)";
  EXPECT_EQ(bf16_to_f32(got[v.size() - 5]), 1.f + 4 * std::ldexp(1.f, -8)) << "ties round to even (up)";
  float nan = std::nanf("");
  bf16 h;
  k::convert_to_bf16(&nan, &h, 1);
  EXPECT_TRUE(std::isnan(bf16_to_f32(h)));
  // round_to_bf16 is the same rounding kept in f32, in place too
  std::vector<float> rounded(v.size()), in_place = v;
  k::round_to_bf16(v.data(), rounded.data(), static_cast<int64_t>(v.size()));
  k::round_to_bf16(in_place.data(), in_place.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(rounded[i], bf16_to_f32(got[i])) << "value " << v[i];
    EXPECT_EQ(in_place[i], rounded[i]) << "value " << v[i];
  }
  float nan_rounded = 0.f;
  k::round_to_bf16(&nan, &nan_rounded, 1);
  EXPECT_TRUE(std::isnan(nan_rounded));
}

// A tensor of the bf16-rounded values of t (as an f32 leaf that requires grad).
Tensor rounded(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float& x : v) x = round_bf16(x);
  return Tensor::from_vector(v, t.shape()).requires_grad_(true);
}

TEST(Autocast, LinearUsesRoundedOperandsForwardAndBackward) {
  Tensor x = testing::param({2, 5, 24}, 21), w = testing::param({40, 24}, 22), b = testing::param({40}, 23);
  // The upstream gradient G is bf16-exact, so rounding dy changes nothing and the reference below
  // (f32 linear of rounded x and W) has the same gradients.
  Tensor g = rounded(testing::param({2, 5, 40}, 24)).detach();
  Tensor y;
  {
    Autocast autocast(AutocastDType::bf16);
    EXPECT_EQ(autocast_dtype(), AutocastDType::bf16);
    y = linear(x, w, b);
    sum(mul(y, g)).backward();
  }
  EXPECT_EQ(autocast_dtype(), AutocastDType::f32) << "the guard restores f32";
  EXPECT_EQ(y.dtype(), DType::f32);

  Tensor xr = rounded(x), wr = rounded(w), br = b.detach().clone().requires_grad_(true);
  Tensor ref = linear(xr, wr, br);
  sum(mul(ref, g)).backward();
  EXPECT_TENSOR_NEAR(y, ref, 1e-6);
  EXPECT_TENSOR_NEAR(x.grad(), xr.grad(), 1e-6);
  EXPECT_TENSOR_NEAR(w.grad(), wr.grad(), 1e-6);
  EXPECT_TENSOR_NEAR(b.grad(), br.grad(), 1e-6);

  // ...and it is not the f32 product: rounding shows, at bf16's ≈ 3 significant digits.
  Tensor f32 = linear(x.detach(), w.detach(), b.detach());
  const double err = testing::rel_error(y.to_vector(), f32.to_vector());
  EXPECT_GT(err, 1e-5);
  EXPECT_LT(err, 2e-2);
}

// The list kernel is the single one over each tensor: sizes around the vector width and the threads'
// split (empty tensors too), each tensor's bits exactly convert_to_bf16's.
TEST(ConvertToBf16, TheListConvertsEachTensorAsTheSingleKernel) {
  const std::vector<int64_t> sizes{0, 1, 31, 33, 1 << 14, (1 << 14) + 5, 0, 70001, 64};
  std::vector<std::vector<float>> src;
  std::vector<std::vector<bf16>> got, want;
  for (size_t t = 0; t < sizes.size(); ++t) {
    src.push_back(randn(static_cast<size_t>(sizes[t]), 40 + t));
    got.emplace_back(sizes[t], bf16{0xdead});
    want.emplace_back(sizes[t]);
    k::convert_to_bf16(src[t].data(), want[t].data(), sizes[t]);
  }
  std::vector<const float*> sp;
  std::vector<bf16*> dp;
  for (size_t t = 0; t < sizes.size(); ++t) sp.push_back(src[t].data()), dp.push_back(got[t].data());
  k::convert_to_bf16_list(sp.data(), dp.data(), sizes.data(), static_cast<int64_t>(sizes.size()));
  for (size_t t = 0; t < sizes.size(); ++t)
    for (int64_t i = 0; i < sizes[t]; ++i) ASSERT_EQ(got[t][i].bits, want[t][i].bits) << "tensor " << t << ", element " << i;
}

// AutocastWeights: the first scope learns which weights linear casts, each later one casts those at
// its start and lends them — the same bits forward and backward, pieces of a weight included; the
// copy is the scope's (a weight changed inside the scope, against the contract, shows it), and the
// copies go with the scope.
TEST(Autocast, WeightsCastOnceAScopeGiveTheSameBits) {
  Tensor x = testing::param({3, 4, 24}, 31), w = testing::param({40, 24}, 32), b = testing::param({40}, 33),
         unused = testing::param({7, 5}, 34);
  // y = linear(x, W) or, a piece, linear(x, W[8:24]); the output and the gradients of x and W
  auto run = [&](bool piece) {
    x.zero_grad(), w.zero_grad();
    Autocast autocast(AutocastDType::bf16);
    Tensor y = piece ? linear(x, w.slice(0, 8, 24), Tensor()) : linear(x, w, b);
    sum(mul(y, y)).backward();
    return std::vector<std::vector<float>>{y.to_vector(), x.grad().to_vector(), w.grad().to_vector()};
  };
  for (bool piece : {false, true}) {
    SCOPED_TRACE(piece ? "rows 8..24 of the weight" : "the whole weight");
    const std::vector<std::vector<float>> plain = run(piece);
    AutocastWeights casts({w, unused});
    EXPECT_EQ(casts.cast_count(), 0);
    for (int scope = 0; scope < 3; ++scope) {
      SCOPED_TRACE(scope);
      const AutocastWeights::Scope s = casts.scope(AutocastDType::bf16);
      const std::vector<std::vector<float>> got = run(piece);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], plain[i]) << "output " << i;
      EXPECT_EQ(casts.cast_count(), 1) << "the weight linear asked for, not the unused one";
    }
    // The second scope's linear reads the scope's copy: W changed inside it (which the contract
    // forbids) does not show, while the same change outside a scope does.
    Tensor saved = w.detach().clone();
    {
      const AutocastWeights::Scope s = casts.scope(AutocastDType::bf16);
      w.detach().copy_(add(saved, saved));
      EXPECT_EQ(run(piece)[0], plain[0]);
    }
    w.detach().copy_(add(saved, saved));
    EXPECT_NE(run(piece)[0], plain[0]);
    w.detach().copy_(saved);
    // f32 scopes make nothing; scopes do not nest
    {
      const AutocastWeights::Scope f32 = casts.scope(AutocastDType::f32);
      EXPECT_EQ(run(piece), plain);
    }
    const AutocastWeights::Scope outer = casts.scope(AutocastDType::bf16);
    EXPECT_NE(testing::error_of([&] { casts.scope(AutocastDType::bf16); }).find("do not nest"), std::string::npos);
  }
}

// The activations' copies: in a scope, the norms, the activations and the fused norms' backward write
// the bf16 copy of what a linear casts next (x forward, dy backward), and linear takes it — the same
// bits as its own casts: a pre-norm block's output and every gradient, with and without the residual's
// dropout, LayerNorm + GELU and RMSNorm + ReLU, over three scopes.
TEST(Autocast, ActivationCopiesGiveTheSameBits) {
  const int64_t C = 24;
  for (bool rms : {false, true})
    for (float p : {0.f, 0.2f}) {
      SCOPED_TRACE(std::string(rms ? "rms_norm, relu" : "layer_norm, gelu") + ", residual dropout " +
                   std::to_string(p));
      Tensor x = testing::param({3, 5, C}, 41), g1 = testing::param({C}, 42), b1 = testing::param({C}, 43),
             w1 = testing::param({4 * C, C}, 44), c1 = testing::param({4 * C}, 45), w2 = testing::param({C, 4 * C}, 46),
             g2 = testing::param({C}, 47), w3 = testing::param({11, C}, 48);
      const std::vector<Tensor> params = {x, g1, b1, w1, c1, w2, g2, w3};
      // a = norm(x); z = W₂ act(W₁a + c₁); (s, n) = (x + drop(z), norm(s)); loss = CE(W₃n, t) + Σ s
      auto run = [&] {
        for (Tensor t : params) t.zero_grad();
        Autocast autocast(AutocastDType::bf16);
        Generator gen(7);
        Tensor a = rms ? rms_norm(x, g1, 1e-5f) : layer_norm(x, {C}, g1, b1, 1e-5f);
        Tensor u = linear(a, w1, c1);
        Tensor z = linear(rms ? relu(u) : gelu(u, "none"), w2, Tensor());
        SumAndNorm r = rms ? add_rms_norm_with_sum(x, z, g2, 1e-5f, p, &gen)
                           : add_layer_norm_with_sum(x, z, {C}, g2, Tensor(), 1e-5f, p, &gen);
        Tensor logits = linear(r.normalized, w3, Tensor());
        const Tensor t = Tensor::from_ints({0, 3, 10, 7, 1, 2, 9, 4, 4, 5, 6, 8, 0, 1, 2}, {15});
        add(cross_entropy(logits.reshape({15, 11}), t), sum(r.sum)).backward();
        std::vector<std::vector<float>> out = {logits.to_vector(), r.sum.to_vector()};
        for (const Tensor& t : params) out.push_back(t.grad().defined() ? t.grad().to_vector() : std::vector<float>{});
        return out;
      };
      const std::vector<std::vector<float>> plain = run();
      AutocastWeights casts(params);
      for (int scope = 0; scope < 3; ++scope) {
        SCOPED_TRACE(scope);
        const int64_t taken = casts.copies_taken();
        const AutocastWeights::Scope s = casts.scope(AutocastDType::bf16);
        const std::vector<std::vector<float>> got = run();
        for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], plain[i]) << "output " << i;
        // forward: the three linears' x; backward: W₁'s dy (the activation's), W₂'s (the residual's) and
        // W₃'s (the loss's)
        EXPECT_EQ(casts.copies_taken() - taken, 6);
      }
    }
}

// A copy is its tensor's while the memory holds the values it was made from: written over in place
// (add_, as the backward sums gradients), the tensor is cast again; and a producer whose copies no
// linear took writes none in the next scope.
TEST(Autocast, ActivationCopiesFollowTheirTensor) {
  Tensor x = testing::param({4, 16}, 51), w = testing::param({8, 16}, 52);
  auto run = [&] {
    Autocast autocast(AutocastDType::bf16);
    NoGradGuard no_grad;
    Tensor a = layer_norm(x, {16}, Tensor(), Tensor(), 1e-5f);
    add_(a, Tensor::full({16}, 0.37f));  // after the norm wrote its copy
    return linear(a, w, Tensor()).to_vector();
  };
  const std::vector<float> plain = run();
  AutocastWeights casts({w});
  for (int scope = 0; scope < 2; ++scope) {
    const AutocastWeights::Scope s = casts.scope(AutocastDType::bf16);
    EXPECT_EQ(run(), plain);
  }
  EXPECT_EQ(casts.copies_taken(), 0);
  EXPECT_EQ(casts.copies_lent(), 1) << "layer_norm lent one in the first scope, none after nobody took it";
  {
    const AutocastWeights::Scope s = casts.scope(AutocastDType::bf16);
    Autocast autocast(AutocastDType::bf16);
    NoGradGuard no_grad;
    linear(gelu(x, "none"), w, Tensor());
    linear(gelu(x, "none"), w, Tensor());
  }
  EXPECT_EQ(casts.copies_lent(), 3);
  EXPECT_EQ(casts.copies_taken(), 2);
}

// Configs and the command line name the autocast dtype; only f32 and bf16 exist.
TEST(Autocast, OnlyF32AndBf16ByName) {
  EXPECT_EQ(parse_enum<AutocastDType>("bf16"), AutocastDType::bf16);
  EXPECT_EQ(parse_enum<AutocastDType>("f32"), AutocastDType::f32);
  EXPECT_NE(testing::error_of([] { parse_enum<AutocastDType>("i32", "train.dtype"); }).find("train.dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv
