// The tile backwards' pre-pass (kernels/cuda/attention_tiles.cuh) on the host through
// tests/kernels/cuda_emulation.h: in one launch, q, dO, k and v rounded to dense 16-bit copies and
// FlashAttention-2's preprocess on dO's rows — D_i = dO_i · O_i (f32, from dO as given) and dq's rows
// zeroed where they lie — for head dims 64, 128 and 256 (a row's 8, 16 or 32 lanes summed by shuffles),
// operands strided as heads split off [B, L, H, D], rows on 16 bytes (float4) and off them (a float at a
// time), GQA; and the preprocess alone (the 3xTF32 backward's: no copies). Each copy is the CPU's rounding
// bit for bit, each D_i within f32's rounding of a double sum, dq zero in its rows and untouched between
// them. The attention kernels' own tests run it as part of the backward; this one sees each piece. Needs
// the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/attention_tiles.cuh"

namespace {

namespace kc = qkv::kernels::cuda;
namespace em = qkv::emulation;
using qkv::kernels::AttnProblem;
using qkv::kernels::HeadLayout;

constexpr float kUntouched = 7.f;

// A [B, heads, L, D] operand as heads split off a [B, L, heads, D] tensor whose rows are `pad` floats
// longer than heads·D (pad 0 or 4: every row on 16 bytes; 1: none but the first)
struct Operand {
  std::vector<float> data;
  HeadLayout l;
  int64_t B, heads, L, D;
  Operand(int64_t B_, int64_t heads_, int64_t L_, int64_t D_, int64_t pad, std::mt19937& rng, bool random = true)
      : B(B_), heads(heads_), L(L_), D(D_) {
    const int64_t sl = heads * D + pad;
    l = {L * sl, D, sl};
    data.assign(static_cast<size_t>(B * L * sl + 4), kUntouched);
    std::normal_distribution<float> normal(0.f, 1.f);
    if (random)
      for (float& x : data) x = normal(rng);
  }
  float* row(int64_t b, int64_t h, int64_t i) { return data.data() + b * l.sb + h * l.sh + i * l.sl; }
  const float* row(int64_t b, int64_t h, int64_t i) const { return data.data() + b * l.sb + h * l.sh + i * l.sl; }
};

uint16_t bits(__nv_bfloat16 x) {
  uint16_t u;
  std::memcpy(&u, &x, 2);
  return u;
}

// dst (dense [B, heads, L, D] bf16) holds src's elements rounded to nearest even, bit for bit
void expect_rounded(const Operand& src, const std::vector<__nv_bfloat16>& dst, const char* name) {
  int64_t at = 0, wrong = 0;
  for (int64_t b = 0; b < src.B; ++b)
    for (int64_t h = 0; h < src.heads; ++h)
      for (int64_t i = 0; i < src.L; ++i)
        for (int64_t c = 0; c < src.D; ++c, ++at)
          wrong += bits(dst[at]) != bits(__float2bfloat16_rn(src.row(b, h, i)[c]));
  EXPECT_EQ(wrong, 0) << name << ": elements not rounded as the CPU rounds them";
}

// dsum [B, H, Lq] = Σ_c dO·O within f32's rounding of the double sum; dq zero in its rows, untouched elsewhere
void expect_preprocess(const Operand& dout, const Operand& out, const Operand& dq, const std::vector<float>& dsum) {
  int64_t r = 0, bad_sum = 0, not_zero = 0;
  for (int64_t b = 0; b < dout.B; ++b)
    for (int64_t h = 0; h < dout.heads; ++h)
      for (int64_t i = 0; i < dout.L; ++i, ++r) {
        double s = 0, mag = 0;
        for (int64_t c = 0; c < dout.D; ++c) {
          const double t = double{dout.row(b, h, i)[c]} * out.row(b, h, i)[c];
          s += t, mag += std::fabs(t);
          not_zero += dq.row(b, h, i)[c] != 0.f;
        }
        bad_sum += !(std::fabs(dsum[r] - s) <= 1e-6 * mag + 1e-30);
      }
  EXPECT_EQ(bad_sum, 0) << "D_i off the double sum";
  EXPECT_EQ(not_zero, 0) << "dq's rows not zeroed";
  int64_t zeros = 0;
  for (float x : dq.data) zeros += x == 0.f;
  EXPECT_EQ(zeros, dq.B * dq.heads * dq.L * dq.D) << "dq zeroed past its rows";
}

AttnProblem problem(const Operand& q, const Operand& k, const Operand& v, const Operand& out, const Operand& dout,
                    const Operand& dq) {
  AttnProblem p;
  p.B = q.B, p.H = q.heads, p.Hkv = k.heads, p.Lq = q.L, p.Lk = k.L, p.D = p.Dv = q.D;
  p.q = q.data.data(), p.q_sb = q.l.sb, p.q_sh = q.l.sh, p.q_sl = q.l.sl;
  p.k = k.data.data(), p.k_sb = k.l.sb, p.k_sh = k.l.sh, p.k_sl = k.l.sl;
  p.v = v.data.data(), p.v_sb = v.l.sb, p.v_sh = v.l.sh, p.v_sl = v.l.sl;
  p.out_l = out.l, p.dout_l = dout.l, p.dq_l = dq.l;
  return p;
}

void check_backward_pre_pass(int64_t D, int64_t pad, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "head dim " << D << ", rows padded by " << pad);
  std::mt19937 rng(seed);
  const int64_t B = 2, H = 4, Hkv = 2, Lq = 9, Lk = 6;
  const Operand q(B, H, Lq, D, pad, rng), k(B, Hkv, Lk, D, pad, rng), v(B, Hkv, Lk, D, 0, rng),
      out(B, H, Lq, D, pad, rng), dout(B, H, Lq, D, pad, rng);
  Operand dq(B, H, Lq, D, pad + 8, rng, false);  // rows 8 floats apart, each gap untouched
  const AttnProblem p = problem(q, k, v, out, dout, dq);
  std::vector<__nv_bfloat16> qh(B * H * Lq * D), gh(qh.size()), kh(B * Hkv * Lk * D), vh(kh.size());
  std::vector<float> dsum(B * H * Lq, kUntouched);
  em::device().launched.clear();
  kc::tiles::round_backward_operands<__nv_bfloat16>(p, out.data.data(), dout.data.data(), D, qh.data(), gh.data(),
                                                    kh.data(), vh.data(), dsum.data(), dq.data.data(), cudaStream_t{});
  EXPECT_EQ(em::device().launched.size(), 1u) << "not one launch";
  expect_rounded(q, qh, "q");
  expect_rounded(dout, gh, "dO");
  expect_rounded(k, kh, "k");
  expect_rounded(v, vh, "v");
  expect_preprocess(dout, out, dq, dsum);
}

TEST(AttentionPreprocessEmulated, TheBackwardPrePassRoundsMakesDiAndZeroesDqInOneLaunch) {
  uint32_t seed = 1;
  for (int64_t D : {64, 128, 256})
    for (int64_t pad : {0, 1, 4}) check_backward_pre_pass(D, pad, seed++);
}

TEST(AttentionPreprocessEmulated, ThePreprocessAloneWritesNoCopies) {
  uint32_t seed = 20;
  for (int64_t D : {64, 128})
    for (int64_t pad : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "head dim " << D << ", rows padded by " << pad);
      std::mt19937 rng(seed++);
      const int64_t B = 3, H = 2, Lq = 7;
      const Operand q(B, H, Lq, D, pad, rng), out(B, H, Lq, D, pad, rng), dout(B, H, Lq, D, pad, rng);
      Operand dq(B, H, Lq, D, pad + 4, rng, false);
      const AttnProblem p = problem(q, q, q, out, dout, dq);
      std::vector<float> dsum(B * H * Lq, kUntouched);
      em::device().launched.clear();
      kc::tiles::backward_preprocess(p, out.data.data(), dout.data.data(), dsum.data(), dq.data.data(), cudaStream_t{});
      EXPECT_EQ(em::device().launched.size(), 1u) << "not one launch";
      expect_preprocess(dout, out, dq, dsum);
    }
}

// A head dim whose row is not a power of two of 8-element pieces: refused, nothing written
TEST(AttentionPreprocessEmulated, RefusesAHeadDimItCannotSum) {
  std::mt19937 rng(30);
  const Operand q(1, 1, 3, 48, 0, rng), out(1, 1, 3, 48, 0, rng), dout(1, 1, 3, 48, 0, rng);
  Operand dq(1, 1, 3, 48, 0, rng, false);
  const AttnProblem p = problem(q, q, q, out, dout, dq);
  std::vector<float> dsum(3, kUntouched);
  EXPECT_THROW(
      kc::tiles::backward_preprocess(p, out.data.data(), dout.data.data(), dsum.data(), dq.data.data(), cudaStream_t{}),
      qkv::Error);
  for (float x : dq.data) ASSERT_EQ(x, kUntouched);
}

}  // namespace

#else
TEST(AttentionPreprocessEmulated, TheBackwardPrePassRoundsMakesDiAndZeroesDqInOneLaunch) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionPreprocessEmulated, ThePreprocessAloneWritesNoCopies) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionPreprocessEmulated, RefusesAHeadDimItCannotSum) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
