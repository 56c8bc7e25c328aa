#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing.h"

namespace qkv {
namespace {

TEST(Storage, ReleasedMemoryKeepsTheShapeAndAReadSaysWhy) {
  Tensor w = Tensor::full({64, 32}, 2.f);
  Tensor view = w.slice(0, 8, 16);
  const int64_t before = allocated_bytes();
  w.impl().storage->release("weights gone: loaded for int8 decoding");
  EXPECT_EQ(allocated_bytes(), before - 64 * 32 * 4);
  EXPECT_EQ(w.shape(), (Shape{64, 32}));
  EXPECT_EQ(view.shape(), (Shape{8, 32}));
  Tensor again = w.slice(0, 0, 4);  // views can still be made (no value is read)
  EXPECT_EQ(again.shape(), (Shape{4, 32}));
  for (const Tensor& t : {w, view, again}) {
    try {
      (void)t.to_vector();
      ADD_FAILURE() << "read a released tensor";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "weights gone: loaded for int8 decoding");
    }
  }
  try {
    (void)(w + 1.f);
    ADD_FAILURE() << "an op read a released tensor";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "weights gone: loaded for int8 decoding");
  }
  w.impl().storage->release("twice: a no-op");  // (the first reason stays)
  EXPECT_EQ(allocated_bytes(), before - 64 * 32 * 4);
}


TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_THROW(t.size(3), Error);
  Tensor o = Tensor::full({2}, 2.5f);
  EXPECT_EQ(o.to_vector(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(Tensor::arange(4).to_vector(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_THROW(Tensor::from_vector({1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(Tensor::empty({-1}), Error);
}

TEST(Tensor, ViewsShareStorageWithoutCopying) {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tr = t.transpose(0, 1);
  EXPECT_EQ(tr.shape(), (Shape{3, 2}));
  EXPECT_EQ(tr.strides(), (Shape{1, 3}));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.data(), t.data());
  EXPECT_EQ(tr.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor r = t.reshape({3, 2});
  EXPECT_EQ(r.data(), t.data());
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.data(), t.data() + 1);
  EXPECT_EQ(s.to_vector(), (std::vector<float>{1, 2, 4, 5}));
  // Writing through a view is visible in the base.
  s.detach().fill_(9.f);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{0, 9, 9, 3, 9, 9}));
  // contiguous() of a dense tensor is itself; of a view, a copy.
  EXPECT_TRUE(t.contiguous().same(t));
  Tensor c = tr.contiguous();
  EXPECT_NE(c.data(), t.data());
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector(), tr.to_vector());
}

TEST(Tensor, SplitHeadsIsAView) {
  // [B, L, H·D] → [B, H, L, D] as attention needs, with no copy.
  Tensor x = Tensor::arange(2 * 3 * 4).reshape({2, 3, 4});
  Tensor h = x.view({2, 3, 2, 2}).transpose(1, 2);
  EXPECT_EQ(h.shape(), (Shape{2, 2, 3, 2}));
  EXPECT_EQ(h.data(), x.data());
  // element [b=1, h=1, l=2, d=0] = x[1, 2, 1·2 + 0]
  std::vector<float> v = h.contiguous().to_vector();
  EXPECT_EQ(v[((1 * 2 + 1) * 3 + 2) * 2 + 0], x.to_vector()[(1 * 3 + 2) * 4 + 2]);
}

TEST(Tensor, ReshapeCopiesOnlyWhenItMust) {
  Tensor t = Tensor::arange(6).reshape({2, 3});
  Tensor tr = t.transpose(0, 1);  // [3, 2] non-contiguous
  EXPECT_THROW(tr.view({6}), Error);
  Tensor flat = tr.reshape({6});  // copies
  EXPECT_EQ(flat.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.reshape({-1}).shape(), (Shape{6}));
  EXPECT_THROW(t.reshape({4, -1}), Error);
  EXPECT_THROW(t.reshape({-1, -1}), Error);
}

TEST(Tensor, UnsqueezeSqueezeSelectExpand) {
  Tensor t = Tensor::arange(6).reshape({2, 3});
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(t.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(t.select(0, 1).to_vector(), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(t.select(1, -1).to_vector(), (std::vector<float>{2, 5}));
  Tensor row = Tensor::from_vector({1, 2, 3}, {1, 3});
  Tensor e = row.expand({4, 3});
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.contiguous().to_vector().size(), 12u);
  EXPECT_THROW(row.expand({4, 2}), Error);
}

TEST(Tensor, PermuteRejectsRepeatedDims) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.permute({2, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_THROW(t.permute({0, 0, 1}), Error);
  EXPECT_THROW(t.permute({0, 1}), Error);
}

TEST(Tensor, BroadcastShapesAndMessages) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}, "add"), (Shape{2, 3, 4}));
  try {
    broadcast_shapes({2, 3}, {4}, "add");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2,3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
}

TEST(Tensor, AsStridedChecksBounds) {
  Tensor t = Tensor::zeros({4});
  EXPECT_NO_THROW(t.as_strided({2, 2}, {2, 1}, 0));
  EXPECT_THROW(t.as_strided({2, 2}, {2, 1}, 1), Error);
}

TEST(Tensor, DTypes) {
  Tensor f = Tensor::from_vector({1.0f, -2.5f, 3.1415926f, 1e-3f}, {4});
  Tensor h = f.to(DType::bf16);
  EXPECT_EQ(h.dtype(), DType::bf16);
  std::vector<float> back = h.to_vector();
  for (size_t i = 0; i < back.size(); ++i) EXPECT_NEAR(back[i], f.to_vector()[i], std::fabs(f.to_vector()[i]) / 128);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  // round to nearest even: 1 + 2⁻⁸ is halfway between bf16 1 and 1 + 2⁻⁷ → 1
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  Tensor ids = Tensor::from_ints({3, 1, 2}, {3});
  EXPECT_EQ(ids.to_ints(), (std::vector<int32_t>{3, 1, 2}));
  Tensor m = Tensor::from_bools({true, false}, {2});
  EXPECT_TRUE(m.is_bool());
  EXPECT_EQ(m.to_vector(), (std::vector<float>{1, 0}));
  EXPECT_THROW(ids.requires_grad_(), Error);
}

// IEEE f16 rounding (attention's f16 compute): nearest, ties to even, inf past 65504, the
// subnormal step 2⁻²⁴ (checked against the compiler's _Float16 over all 2³² floats when written)
TEST(Dtype, RoundToF16IsIeeeHalfsNearestValue) {
  const float ulp = std::ldexp(1.f, -10), tiny = std::ldexp(1.f, -24);
  EXPECT_EQ(round_to_f16(1.f + ulp / 2), 1.f);                     // tie → even
  EXPECT_EQ(round_to_f16(1.f + 3 * ulp / 2), 1.f + 2 * ulp);       // tie → even, upwards
  EXPECT_EQ(round_to_f16(1.f + ulp / 2 + ulp / 64), 1.f + ulp);    // past the tie
  EXPECT_EQ(round_to_f16(-3.14159265f), -3.140625f);
  EXPECT_EQ(round_to_f16(65504.f), 65504.f);
  EXPECT_EQ(round_to_f16(65519.f), 65504.f);
  EXPECT_EQ(round_to_f16(65520.f), INFINITY);                      // halfway to 2¹⁶: even is inf
  EXPECT_EQ(round_to_f16(-1e6f), -INFINITY);
  EXPECT_EQ(round_to_f16(tiny), tiny);                             // the least subnormal
  EXPECT_EQ(round_to_f16(tiny / 2), 0.f);                          // tie → even (0)
  EXPECT_EQ(round_to_f16(tiny * 1.5f), 2 * tiny);                  // tie → even (2 steps)
  EXPECT_EQ(round_to_f16(tiny * 0.51f), tiny);
  EXPECT_EQ(round_to_f16(std::ldexp(1.f, -14) * 0.9999f), std::ldexp(1.f, -14));  // up to the least normal
  EXPECT_EQ(round_to_f16(std::ldexp(1.f, -14) * 0.999f), std::ldexp(1.f, -14) - tiny);  // the largest subnormal
  EXPECT_TRUE(std::signbit(round_to_f16(-1e-30f)) && round_to_f16(-1e-30f) == 0.f);
  EXPECT_TRUE(std::isnan(round_to_f16(NAN)));
  EXPECT_EQ(round_to_f16(INFINITY), INFINITY);
}

// float8 e4m3fn (core/dtype.h) against PyTorch's torch.float8_e4m3fn (tests/golden/make_fp8_golden.py,
// PyTorch 2.15): each of the 256 codes' f32 value, and the code of 10,458 f32 values — every f32
// exponent of both signs at e4m3's rounding points, the midpoints between neighbours and one step
// either side, the saturation to ±448, infinities and NaNs. (When written, all 2³² f32 bit patterns
// were compared with that PyTorch's cast, and agreed.) And every code but NaN comes back from its
// value.
TEST(Dtype, Float8E4m3IsPyTorchsFloat8E4m3fn) {
  std::ifstream f(std::string(QKV_GOLDEN_DIR) + "/fp8_e4m3.json");
  ASSERT_TRUE(f) << "tests/golden/fp8_e4m3.json";
  const nlohmann::json g = nlohmann::json::parse(f);
  auto hex = [](const std::string& s, size_t at, size_t n) {
    return static_cast<uint32_t>(std::stoul(s.substr(at, n), nullptr, 16));
  };
  ASSERT_EQ(g["decode"].size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float want = f32_from_bits(hex(g["decode"][c].get<std::string>(), 0, 8));
    const float got = f8e4m3_to_f32(f8e4m3{static_cast<uint8_t>(c)});
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(f32_bits(got), f32_bits(want)) << "code " << c << ": " << got << ", PyTorch " << want;
      EXPECT_EQ(f32_to_f8e4m3(got).bits, c) << "code " << c << " does not come back from " << got;
    }
  }
  const std::string in = g["inputs"], codes = g["codes"];
  ASSERT_EQ(in.size(), 8 * (codes.size() / 2));
  ASSERT_GT(codes.size(), 20000u);
  int wrong = 0;
  for (size_t i = 0; i < codes.size() / 2; ++i) {
    const uint32_t x = hex(in, 8 * i, 8);
    const uint32_t want = hex(codes, 2 * i, 2), got = f32_to_f8e4m3(f32_from_bits(x)).bits;
    if (got != want && ++wrong <= 10)
      ADD_FAILURE() << "f32 bits " << std::hex << x << " (" << f32_from_bits(x) << "): code " << got << ", PyTorch " << want;
  }
  EXPECT_EQ(wrong, 0);
  // the figures the saturation and the subnormals come to
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1e9f)), 448.f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-INFINITY)), -448.f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(1.f, -9))), std::ldexp(1.f, -9));  // the least subnormal
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(std::ldexp(1.f, -10))), 0.f);                 // tie → even (0)
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(NAN))));
}

TEST(Tensor, CopyBroadcastsIntoAView) {
  Tensor t = Tensor::zeros({2, 3});
  t.transpose(0, 1).detach().copy_(Tensor::from_vector({1, 2}, {2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 1, 1, 2, 2, 2}));
}

// The element copies are kernels (kernels/copy.inc) the ops dispatch: every dtype pair converts as
// the value rules say, from a strided view; copy_ broadcasts and converts into a strided view;
// fill_ writes every element of a strided view of each dtype and nothing else; empty extents pass.
TEST(Tensor, CopiesConversionsAndFillsOverEveryDTypeAndLayout) {
  const DType all[] = {DType::f32, DType::bf16, DType::boolean, DType::i32, DType::f8e4m3};
  // the value rules: bf16 and f8e4m3 round to nearest even (f8e4m3 saturating at ±448), boolean is
  // x ≠ 0, i32 truncates
  auto as = [](DType t, float v) {
    switch (t) {
      case DType::bf16: return bf16_to_f32(f32_to_bf16(v));
      case DType::f8e4m3: return f8e4m3_to_f32(f32_to_f8e4m3(v));
      case DType::boolean: return v != 0.f ? 1.f : 0.f;
      case DType::i32: return static_cast<float>(static_cast<int32_t>(v));
      default: return v;
    }
  };
  const Tensor base = Tensor::from_vector({0.f, -2.75f, 3.1415926f, 1e-3f, 7.f, -0.f, 65537.f, 0.5f, -9.25f, 1.f,
                                           2.f, -1.f},
                                          {3, 4});
  for (DType from : all) {
    const Tensor src = base.to(from);
    const Tensor view = src.transpose(0, 1);  // strided [4, 3]
    std::vector<float> want = view.to_vector();
    EXPECT_FALSE(view.is_contiguous());
    const Tensor dense_copy = view.contiguous_copy();
    EXPECT_TRUE(dense_copy.is_contiguous());
    EXPECT_EQ(dense_copy.dtype(), from);
    EXPECT_EQ(dense_copy.to_vector(), want) << dtype_name(from);
    for (DType to : all) {
      const Tensor c = view.to(to);
      EXPECT_EQ(c.dtype(), to);
      EXPECT_EQ(c.shape(), (Shape{4, 3}));
      std::vector<float> expect(want.size());
      for (size_t i = 0; i < want.size(); ++i) expect[i] = as(to, want[i]);
      EXPECT_EQ(c.to_vector(), expect) << dtype_name(from) << " → " << dtype_name(to);
      // copy_ of a [3] row of `from`, broadcast and converted into columns 1…3 of a [4, 4] `to` view
      Tensor dst = Tensor::zeros({4, 4}, to);
      Tensor cols = dst.slice(1, 1, 4);
      cols.copy_(src.select(0, 0).slice(0, 0, 3));
      const std::vector<float> got = dst.to_vector(), row = src.select(0, 0).to_vector();
      for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(got[r * 4], 0.f) << "outside the view";
        for (int j = 0; j < 3; ++j) EXPECT_EQ(got[r * 4 + 1 + j], as(to, row[j])) << dtype_name(from) << " → " << dtype_name(to);
      }
    }
    Tensor f = Tensor::zeros({3, 4}, from);
    f.slice(1, 1, 3).fill_(-2.5f);  // a strided [3, 2] view
    const std::vector<float> got = f.to_vector();
    for (int i = 0; i < 12; ++i) EXPECT_EQ(got[i], i % 4 == 1 || i % 4 == 2 ? as(from, -2.5f) : 0.f) << dtype_name(from);
    EXPECT_EQ(Tensor::zeros({0, 3}, from).transpose(0, 1).contiguous_copy().numel(), 0);
    EXPECT_EQ(Tensor::zeros({0, 3}, from).fill_(1.f).numel(), 0);
  }
}

TEST(Tensor, AllocationCounters) {
  const int64_t before = allocated_bytes();
  {
    Tensor t = Tensor::empty({1024});
    EXPECT_EQ(allocated_bytes() - before, 4096);
    EXPECT_GE(peak_allocated_bytes() - before, 4096);
  }
  EXPECT_EQ(allocated_bytes(), before);
}

TEST(Generator, DeterministicAndWellDistributed) {
  Generator a(7), b(7), c(8);
  Tensor x = Tensor::randn({10000}, a), y = Tensor::randn({10000}, b), z = Tensor::randn({10000}, c);
  EXPECT_EQ(x.to_vector(), y.to_vector());
  EXPECT_NE(x.to_vector(), z.to_vector());
  double s = 0, s2 = 0;
  for (float v : x.to_vector()) s += v, s2 += v * v;
  EXPECT_NEAR(s / 10000, 0.0, 0.05);
  EXPECT_NEAR(s2 / 10000, 1.0, 0.05);
  Tensor u = Tensor::rand({10000}, a, 2.f, 4.f);
  for (float v : u.to_vector()) ASSERT_TRUE(v >= 2.f && v < 4.f);
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// Shapes from files and configs: a product past int64 (or past the address space in bytes) is an
// error, never a wrapped, small allocation; an allocation budget bounds what may be allocated.
TEST(Tensor, ShapeArithmeticIsChecked) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_NE(testing::error_of([&] { Tensor::empty({big, big}); }).find("more than 2^63 elements"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { Tensor::empty({(int64_t{1} << 62) + 1}); }).find("more bytes"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { Tensor::empty({3, -2}); }).find("negative"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { Tensor::empty({4}).reshape({big, big, -1}); }).find("2^63"), std::string::npos);
  {
    AllocationBudget budget(3000, "the test's budget");  // each tensor is charged its bytes + 1 KiB
    Tensor ok = Tensor::empty({200});                      // 800 + 1024 bytes
    EXPECT_NE(testing::error_of([] { Tensor::empty({100}); }).find("the test's budget"), std::string::npos);
  }
  EXPECT_EQ(Tensor::empty({1000}).numel(), 1000);  // the budget ended with its scope
}

}  // namespace
}  // namespace qkv
