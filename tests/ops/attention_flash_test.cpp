// The tiled flash kernel against the reference kernel (which golden_test.cpp ties to PyTorch):
// forward and every gradient, over a grid of shapes, masks, causal, GQA and dropout.
#include <algorithm>
#include <tuple>

#include "testing.h"

namespace qkv {
namespace {

struct Case {
  int64_t B, H, Hkv, Lq, Lk, D, Dv;
  bool causal;
  // 0 none, 1 boolean [Lq, Lk], 2 additive [B, 1, Lq, Lk], 3 key padding [B, 1, 1, Lk], 4 fully masked rows;
  // masks that hide whole blocks of 64 queries × 256 keys, or most of one (which the flash kernel skips or
  // trims to the keys some query sees, visible_span): 5 a band of 40
  // keys either side of the diagonal (ModernBERT's local layers), 6 the same band additive (0 / −∞,
  // [B, 1, Lq, Lk]), 7 one key a query (7i + 300 mod Lk: blocks hidden but for a score or a few, in any
  // row), 8 key padding to 10 + 300·b keys
  int mask;
  float dropout = 0.f;
  int inner = 0;  // bit 0: q, bit 1: k and v, bit 2: dout given as [B, L, H, d] and viewed as [B, H, L, d]
  float softcap = 0.f;
};

std::string name(const Case& c) {
  return detail::concat("B", c.B, " H", c.H, "/", c.Hkv, " Lq", c.Lq, " Lk", c.Lk, " d", c.D, "/", c.Dv,
                        c.causal ? " causal" : "", " mask", c.mask, " p", c.dropout, " inner", c.inner, " cap",
                        c.softcap);
}

Tensor make_mask(const Case& c, Generator& g) {
  switch (c.mask) {
    case 1: {
      Tensor u = Tensor::rand({c.Lq, c.Lk}, g);
      std::vector<bool> keep(c.Lq * c.Lk);
      std::vector<float> uv = u.to_vector();
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = uv[i] > 0.3f;
      return Tensor::from_bools(keep, {c.Lq, c.Lk});
    }
    case 2: return Tensor::randn({c.B, 1, c.Lq, c.Lk}, g, 0.f, 2.f);
    case 3: {
      std::vector<bool> keep(c.B * c.Lk);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t j = 0; j < c.Lk; ++j) keep[b * c.Lk + j] = j < std::max<int64_t>(1, c.Lk - 3 * (b + 1));
      return Tensor::from_bools(keep, {c.B, 1, 1, c.Lk});
    }
    case 4: {
      std::vector<bool> keep(c.Lq * c.Lk, true);
      for (int64_t i = 0; i < c.Lq; i += 3)
        for (int64_t j = 0; j < c.Lk; ++j) keep[i * c.Lk + j] = false;  // every third query sees nothing
      return Tensor::from_bools(keep, {c.Lq, c.Lk});
    }
    case 5:
    case 6: {
      std::vector<float> band(c.B * c.Lq * c.Lk);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t i = 0; i < c.Lq; ++i)
          for (int64_t j = 0; j < c.Lk; ++j) band[(b * c.Lq + i) * c.Lk + j] = std::abs(i - j) <= 40 ? 0.f : -INFINITY;
      if (c.mask == 6) return Tensor::from_vector(band, {c.B, 1, c.Lq, c.Lk});
      std::vector<bool> keep(c.Lq * c.Lk);
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = band[i] == 0.f;
      return Tensor::from_bools(keep, {c.Lq, c.Lk});
    }
    case 7: {
      std::vector<bool> keep(c.Lq * c.Lk, false);
      for (int64_t i = 0; i < c.Lq; ++i) keep[i * c.Lk + (7 * i + 300) % c.Lk] = true;
      return Tensor::from_bools(keep, {c.Lq, c.Lk});
    }
    case 8: {
      std::vector<bool> keep(c.B * c.Lk);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t j = 0; j < c.Lk; ++j) keep[b * c.Lk + j] = j < 10 + 300 * b;
      return Tensor::from_bools(keep, {c.B, 1, 1, c.Lk});
    }
    default: return Tensor();
  }
}

void check(const Case& c) {
  SCOPED_TRACE(name(c));
  Generator g(c.Lq * 131 + c.Lk * 7 + c.D);
  // Leaves drawn as [B, L, H, d] (so both layouts see the same numbers); the op gets them as
  // [B, H, L, d] views when `inner`, else as dense copies.
  auto leaf = [&](Shape s, bool inner) {
    std::swap(s[1], s[2]);
    Tensor t = Tensor::randn(s, g);
    return (inner ? t : t.transpose(1, 2).contiguous()).requires_grad_();
  };
  const bool qi = c.inner & 1, kvi = c.inner & 2;
  Tensor q = leaf({c.B, c.H, c.Lq, c.D}, qi), k = leaf({c.B, c.Hkv, c.Lk, c.D}, kvi),
         v = leaf({c.B, c.Hkv, c.Lk, c.Dv}, kvi);
  auto input = [](const Tensor& t, bool inner) { return inner ? t.transpose(1, 2) : t; };
  auto grad_of = [](const Tensor& t, bool inner) {  // in [B, H, L, d] order
    return (inner ? t.grad().transpose(1, 2).contiguous() : t.grad()).to_vector();
  };
  Tensor dout = Tensor::randn({c.B, c.H, c.Lq, c.Dv}, g);
  AttentionOptions opt;
  opt.attn_mask = make_mask(c, g);
  opt.is_causal = c.causal;
  opt.enable_gqa = c.H != c.Hkv;
  opt.dropout_p = c.dropout;
  opt.softcap = c.softcap;
  std::vector<std::vector<float>> results[2];
  for (int backend = 0; backend < 2; ++backend) {
    opt.backend = backend == 0 ? AttentionBackend::reference : AttentionBackend::flash;
    Generator dg(77);  // the same dropout draws for both kernels
    opt.generator = &dg;
    for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    Tensor out = scaled_dot_product_attention(input(q, qi), input(k, kvi), input(v, kvi), opt);
    if (c.inner & 4)
      out.transpose(1, 2).backward(dout.transpose(1, 2).contiguous());  // dO reaches the op as a strided view
    else
      out.backward(dout);
    results[backend] = {out.to_vector(), grad_of(q, qi), grad_of(k, kvi), grad_of(v, kvi)};
  }
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) {
    for (float x : results[1][i]) ASSERT_FALSE(std::isnan(x)) << what[i];
    // Inputs are N(0, 1), so outputs and gradients are O(1): relative to max(max|ref|, 1). (With a
    // single visible key dQ and dK are exactly 0 in theory and rounding noise in both kernels.)
    EXPECT_LE(testing::rel_error(results[1][i], results[0][i], 1.0), 1e-5) << what[i];
  }
}

TEST(FlashAttention, MatchesReferenceOverShapes) {
  // Sizes around the block edges (64 query rows, 256 keys) and far from them.
  const int64_t lens[] = {1, 7, 63, 64, 65, 200, 256, 257, 520, 1000};
  for (int64_t lq : lens)
    for (int64_t lk : {int64_t{1}, int64_t{65}, int64_t{300}, int64_t{1000}}) {
      if (lq * lk > 300000) continue;
      check({1, 2, 2, lq, lk, 32, 32, false, 0});
      check({1, 2, 2, lq, lk, 32, 32, true, 0});
    }
}

TEST(FlashAttention, MatchesReferenceOverHeadDims) {
  for (int64_t d : {16, 32, 64, 80, 128}) {
    check({2, 2, 2, 97, 130, d, d, true, 0});
    check({1, 3, 3, 70, 300, d, 48, false, 1});
  }
}

TEST(FlashAttention, MatchesReferenceWithMasks) {
  for (int mask : {1, 2, 3, 4})
    for (bool causal : {false, true}) {
      check({2, 2, 2, 90, 270, 64, 64, causal, mask});
      check({1, 2, 2, 300, 70, 16, 16, causal, mask});
    }
}

// Masks that hide whole blocks or most of one, which the kernel skips or trims to the keys some query of
// the block sees, forward and backward (visible_span): a key left out that held a visible score would
// lose it from the output and every gradient.
TEST(FlashAttention, MatchesReferenceWithMasksHidingWholeBlocks) {
  for (int mask : {5, 6, 7, 8})
    for (bool causal : {false, true}) {
      check({2, 2, 2, 600, 700, 32, 32, causal, mask});
      check({2, 4, 2, 130, 1100, 16, 24, causal, mask, 0.f, 3});  // GQA, heads split off a projection
    }
  check({1, 1, 1, 1, 1500, 64, 64, false, 7});                // decode-shaped: the keys split across threads
  check({2, 2, 2, 600, 600, 32, 32, false, 5, 0.3f});         // dropout: each score's draw by its place
  check({2, 2, 2, 300, 600, 32, 32, false, 6, 0.f, 0, 2.f});  // soft-capped
}

TEST(FlashAttention, MatchesReferenceWithGroupedQueries) {
  check({2, 4, 2, 100, 280, 32, 32, true, 0});
  check({1, 8, 1, 65, 513, 64, 64, false, 3});  // multi-query
  check({1, 6, 3, 1, 700, 64, 64, false, 0});   // decode-shaped
}

TEST(FlashAttention, MatchesReferenceWithDropout) {
  check({1, 2, 2, 130, 300, 32, 32, false, 0, 0.2f});
  check({2, 2, 1, 70, 70, 64, 64, true, 3, 0.5f});
}

// Soft-capped scores (Gemma 2's): a cap of 2 on scores of spread ~6 (N(0, 1) inputs, d 32 → 1/√32 ·
// a sum of 32 unit products) bends nearly every one; across block edges, with masks, dropout, GQA and
// a decode-shaped key split.
TEST(FlashAttention, MatchesReferenceWithSoftcap) {
  check({1, 2, 2, 65, 300, 32, 32, true, 0, 0.f, 0, 2.f});
  check({2, 4, 2, 70, 257, 32, 24, false, 2, 0.f, 1, 2.f});
  check({1, 2, 2, 100, 130, 16, 16, true, 4, 0.2f, 0, 0.5f});
  check({1, 1, 1, 1, 1500, 64, 64, false, 3, 0.f, 0, 2.f});
}

TEST(FlashAttention, DecodeShapedSplitsKeys) {
  // Lq = 1 against a long cache, one head: the keys are split across threads and merged.
  check({1, 1, 1, 1, 4000, 64, 64, false, 0});
  check({1, 1, 1, 3, 1500, 64, 64, false, 3});
  check({1, 1, 1, 70, 2000, 64, 64, true, 2});
}

// Heads split off a projection ([B, L, H, d] viewed as [B, H, L, d], as MultiheadAttention does):
// the flash kernel writes the output and the gradients in that layout too.
TEST(FlashAttention, MatchesReferenceWithHeadsInnerLayouts) {
  for (int inner : {1, 2, 3, 4, 7}) {
    check({2, 3, 3, 70, 70, 32, 32, true, 0, 0.f, inner});
    check({2, 4, 2, 65, 300, 16, 24, false, 3, 0.f, inner});  // GQA, key padding, d ≠ dv
    check({1, 1, 1, 3, 1500, 64, 64, false, 0, 0.f, inner});  // one head: keys split across threads
  }
  check({2, 2, 2, 130, 130, 32, 32, true, 1, 0.3f, 7});
}

TEST(FlashAttention, IsTheDefaultWithoutWeights) {
  // The flash path never allocates the Lq×Lk probabilities.
  Generator g(1);
  Tensor q = Tensor::randn({1, 1, 2048, 32}, g), k = Tensor::randn({1, 1, 2048, 32}, g);
  const int64_t before = allocated_bytes();
  reset_peak_bytes();
  {
    NoGradGuard ng;
    scaled_dot_product_attention(q, k, k, Tensor(), 0.f, true);
  }
  EXPECT_LT(peak_allocated_bytes() - before, 2048 * 2048 * 4 / 8);
  AttentionOptions opt;
  opt.backend = AttentionBackend::flash;
  EXPECT_THROW(scaled_dot_product_attention_with_weights(q, k, k, opt), Error);
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// bf16 products keep ~8 bits of mantissa: outputs agree with f32 to a few parts in a thousand.
constexpr double kBf16Tolerance = 1e-2;

void check_bf16(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, bool causal,
                bool padding) {
  SCOPED_TRACE(detail::concat("bf16 B", B, " H", H, "/", Hkv, " Lq", Lq, " Lk", Lk, " d", D, "/", Dv,
                              causal ? " causal" : "", padding ? " padded" : ""));
  Generator g(Lq * 17 + Lk + D);
  Tensor q = Tensor::randn({B, H, Lq, D}, g), k = Tensor::randn({B, Hkv, Lk, D}, g), v = Tensor::randn({B, Hkv, Lk, Dv}, g);
  AttentionOptions opt;
  opt.is_causal = causal;
  opt.enable_gqa = H != Hkv;
  if (padding) {
    std::vector<bool> keep(B * Lk);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < Lk; ++j) keep[b * Lk + j] = j < Lk - 5 * b;
    opt.attn_mask = Tensor::from_bools(keep, {B, 1, 1, Lk});
  }
  NoGradGuard ng;
  Tensor ref = scaled_dot_product_attention(q, k, v, opt);
  opt.compute_dtype = AttentionCompute::bf16;
  Tensor half = scaled_dot_product_attention(q, k, v, opt);
  EXPECT_LE(testing::rel_error(half.to_vector(), ref.to_vector(), 1.0), kBf16Tolerance);
  // ...and it is not secretly the f32 kernel: bf16 rounding shows.
  EXPECT_GT(testing::rel_error(half.to_vector(), ref.to_vector(), 1.0), 1e-5);
}

TEST(FlashAttentionBf16, CloseToF32) {
  check_bf16(1, 2, 2, 100, 300, 64, 64, false, false);
  check_bf16(1, 2, 2, 300, 300, 64, 64, true, false);
  check_bf16(2, 4, 2, 65, 129, 32, 32, true, true);
  check_bf16(1, 2, 2, 7, 1000, 80, 48, false, true);
  check_bf16(1, 1, 1, 1, 513, 128, 128, false, false);
  check_bf16(1, 2, 1, 33, 61, 17, 5, false, false);  // odd head dims
}

// A band and a one-key-a-query mask (which hide most blocks: skipped) in bf16, the AVX512_BF16 kernel's
// own loop where the CPU has it: close to f32's.
TEST(FlashAttentionBf16, SkipsTheBlocksAMaskHides) {
  for (int mask : {5, 7}) {
    const Case c{1, 2, 2, 300, 900, 64, 64, false, mask};
    SCOPED_TRACE(name(c));
    Generator g(5);
    Tensor q = Tensor::randn({c.B, c.H, c.Lq, c.D}, g), k = Tensor::randn({c.B, c.H, c.Lk, c.D}, g),
           v = Tensor::randn({c.B, c.H, c.Lk, c.D}, g);
    AttentionOptions opt;
    opt.attn_mask = make_mask(c, g);
    NoGradGuard ng;
    opt.backend = AttentionBackend::reference;  // every block computed
    Tensor ref = scaled_dot_product_attention(q, k, v, opt);
    opt.backend = AttentionBackend::automatic;
    opt.compute_dtype = AttentionCompute::bf16;
    Tensor half = scaled_dot_product_attention(q, k, v, opt);
    EXPECT_LE(testing::rel_error(half.to_vector(), ref.to_vector(), 1.0), kBf16Tolerance);
  }
}

// With q's heads split off a projection ([B, L, H, d] storage), every precision writes the output in
// that layout — merging the heads back is then a view, not a copy — with the bits of a dense q's
// output (the bf16 inference kernel, on AVX512_BF16, included).
TEST(FlashAttentionBf16, WritesTheOutputInTheLayoutOfQ) {
  Generator g(17);
  const int64_t B = 2, H = 4, L = 37, D = 32;
  Tensor q_inner = Tensor::randn({B, L, H, D}, g).transpose(1, 2), k = Tensor::randn({B, H, L, D}, g),
         v = Tensor::randn({B, H, L, D}, g);
  Tensor q_dense = q_inner.contiguous();
  for (AttentionCompute dt : {AttentionCompute::f32, AttentionCompute::bf16, AttentionCompute::f16}) {
    SCOPED_TRACE(enum_name(dt));
    AttentionOptions opt;
    opt.is_causal = true;
    opt.compute_dtype = dt;
    NoGradGuard ng;
    Tensor inner = scaled_dot_product_attention(q_inner, k, v, opt), dense = scaled_dot_product_attention(q_dense, k, v, opt);
    EXPECT_LT(inner.stride(1), inner.stride(2)) << "the output is not in q's [B, L, H, d] layout";
    EXPECT_TRUE(inner.transpose(1, 2).is_contiguous());
    EXPECT_EQ(inner.to_vector(), dense.to_vector());
  }
}

// t's values in bf16 or IEEE f16 (nearest, ties to even), as f32
Tensor rounded(const Tensor& t, AttentionCompute dt) {
  if (dt == AttentionCompute::bf16) return t.detach().to(DType::bf16).to(DType::f32);
  std::vector<float> v = t.detach().contiguous().to_vector();
  for (float& x : v) x = round_to_f16(x);
  return Tensor::from_vector(v, t.shape());
}

// bf16 and f16 training on the CPU is the f32 flash pair at q, k, v and dout rounded to the 16-bit
// format (bit for bit), with the gradients reaching the unrounded leaves: within its rounding of
// f32's (bf16: 8 significant bits, f16: 11), and not f32's.
TEST(FlashAttentionBf16, TrainsOnTheRoundedOperands) {
  for (AttentionCompute dt : {AttentionCompute::bf16, AttentionCompute::f16}) {
    SCOPED_TRACE(enum_name(dt));
    const double tolerance = dt == AttentionCompute::bf16 ? kBf16Tolerance : kBf16Tolerance / 8;
    const std::vector<Case> cases = {{1, 2, 2, 70, 90, 64, 64, false, 0},       {2, 4, 2, 65, 65, 32, 32, true, 3},
                                     {1, 2, 2, 40, 50, 24, 16, false, 1, 0.2f}, {1, 2, 1, 33, 33, 16, 16, true, 4},
                                     {2, 2, 2, 20, 30, 8, 8, false, 0, 0.f, 7}};
    for (const Case& c : cases) {
      SCOPED_TRACE(name(c));
      Generator g(c.Lq * 31 + c.D);
      auto make = [&](int64_t heads, int64_t L, int64_t d, bool inner) {
        if (!inner) return Tensor::randn({c.B, heads, L, d}, g);
        return Tensor::randn({c.B, L, heads, d}, g).transpose(1, 2);  // heads split off a projection
      };
      Tensor q = make(c.H, c.Lq, c.D, c.inner & 1), k = make(c.Hkv, c.Lk, c.D, c.inner & 2),
             v = make(c.Hkv, c.Lk, c.Dv, c.inner & 2), dout = make(c.H, c.Lq, c.Dv, c.inner & 4);
      AttentionOptions opt;
      opt.is_causal = c.causal;
      opt.enable_gqa = c.H != c.Hkv;
      opt.dropout_p = c.dropout;
      opt.attn_mask = make_mask(c, g);
      auto run = [&](const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& g0, AttentionCompute compute) {
        Tensor lq = q0.detach().requires_grad_(), lk = k0.detach().requires_grad_(), lv = v0.detach().requires_grad_();
        AttentionOptions o = opt;
        o.compute_dtype = compute;
        Generator drop(99);
        o.generator = &drop;
        Tensor out = scaled_dot_product_attention(lq, lk, lv, o);
        out.backward(g0);
        return std::vector<Tensor>{out.detach(), lq.grad(), lk.grad(), lv.grad()};
      };
      const auto half = run(q, k, v, dout, dt);
      const auto at_rounded = run(rounded(q, dt), rounded(k, dt), rounded(v, dt), rounded(dout, dt), AttentionCompute::f32);
      const auto f32 = run(q, k, v, dout, AttentionCompute::f32);
      const char* what[] = {"out", "dq", "dk", "dv"};
      for (int t = 0; t < 4; ++t) {
        SCOPED_TRACE(what[t]);
        EXPECT_EQ(half[t].to_vector(), at_rounded[t].to_vector());
        const double err = testing::rel_error(half[t].to_vector(), f32[t].to_vector(), 1.0);
        EXPECT_LE(err, tolerance);
        EXPECT_GT(err, 1e-6);
      }
    }
  }
}

// Under Autocast(bf16) attention computes in bf16, forward and backward, except where the weights
// are asked for (the reference kernel, f32); a float mask's gradient is refused in bf16.
TEST(FlashAttentionBf16, AutocastComputesInBf16) {
  Generator g(5);
  Tensor q = Tensor::randn({1, 2, 30, 16}, g), k = Tensor::randn({1, 2, 40, 16}, g), v = Tensor::randn({1, 2, 40, 16}, g);
  AttentionOptions bf16;
  bf16.compute_dtype = AttentionCompute::bf16;
  Tensor lq = q.detach().requires_grad_();
  Tensor want = scaled_dot_product_attention(lq, k, v, bf16);
  sum(want).backward();
  {
    Autocast autocast(AutocastDType::bf16);
    Tensor aq = q.detach().requires_grad_();
    Tensor got = scaled_dot_product_attention(aq, k, v);
    EXPECT_EQ(got.to_vector(), want.to_vector());
    sum(got).backward();
    EXPECT_EQ(aq.grad().to_vector(), lq.grad().to_vector());
    const auto w = scaled_dot_product_attention_with_weights(q, k, v);
    Autocast off(AutocastDType::f32);
    EXPECT_EQ(w.output.to_vector(), scaled_dot_product_attention_with_weights(q, k, v).output.to_vector());
  }
  Tensor mask = Tensor::zeros({30, 40}).requires_grad_();
  bf16.attn_mask = mask;
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, bf16), Error);
}

}  // namespace
// Empty extents (found by the GPU's test of the same, which runs the CPU beside it): a value dim of
// 0 gives an empty output whose backward still gives dq = dk = 0, an empty batch empty gradients,
// and no keys an output of zeros and zero gradients — in every compute dtype, without a division by
// the zero extent.
TEST(FlashAttention, EmptyExtentsGiveEmptyOrZeroGradients) {
  for (AttentionCompute dt : {AttentionCompute::f32, AttentionCompute::bf16, AttentionCompute::f16}) {
    SCOPED_TRACE(enum_name(dt));
    // (batch, keys, value dim): no value dims, an empty batch, no keys (out = 0)
    for (auto [B, Lk, Dv] : {std::tuple{1, 6, 0}, std::tuple{0, 6, 64}, std::tuple{1, 0, 64}}) {
      Generator g(90);
      // (one head: fewer key/value heads than threads, so the backward splits each head's keys)
      Tensor q = Tensor::randn({B, 1, 5, 64}, g).requires_grad_(), k = Tensor::randn({B, 1, Lk, 64}, g).requires_grad_(),
             v = Tensor::randn({B, 1, Lk, Dv}, g).requires_grad_();
      AttentionOptions o;
      o.compute_dtype = dt;
      Tensor out = scaled_dot_product_attention(q, k, v, o);
      EXPECT_EQ(out.shape(), (Shape{B, 1, 5, Dv}));
      const std::vector<float> ov = out.to_vector();
      EXPECT_TRUE(std::all_of(ov.begin(), ov.end(), [](float x) { return x == 0.f; }) || Lk > 0);
      { Tensor junk = Tensor::full(q.shape(), NAN); }  // freed memory of dq's size, for dq to be made in
      sum(out).backward();
      for (const Tensor* t : {&q, &k, &v}) {
        ASSERT_EQ(t->grad().shape(), t->shape());
        const std::vector<float> gr = t->grad().to_vector();
        EXPECT_TRUE(std::all_of(gr.begin(), gr.end(), [](float x) { return x == 0.f; }));
      }
    }
  }
}

}  // namespace qkv
