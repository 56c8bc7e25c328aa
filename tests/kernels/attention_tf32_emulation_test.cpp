// The f32 attention pair on the tensor cores (kernels/cuda/attention_tf32_kernels.cuh) run on the
// host, unchanged, through tests/kernels/cuda_emulation.h — every warp's fragments, shuffles and
// barriers as on a GPU — by attention_tf32.cu's own launchers (compiled here: whether they serve, the
// kernel each problem takes, the shared memory each is allowed past 48 KB, the grids, D_i made and dq
// zeroed in one launch by attention_tiles.cuh's backward_preprocess) against qkv's CPU attention: forward
// (out) and backward (dq, dk, dv), causal or not, boolean and additive masks, rows that see no key, GQA,
// Lq ≠ Lk, ragged and whole tiles, heads split off a [B, L, H, D] projection, head dims 64 and 128; and
// on an emulated A100 and sm_86 GPU, whose 99 KB a block head dim 128's backward does not fit. Within
// f32's noise (2e-5), which one TF32 product a term (~1e-3) is not. Needs the CUDA toolkit's headers (a
// QKV_CUDA build).
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <algorithm>

#include "kernels/attention_emulation.h"
#include "kernels/cuda/attention_tf32.cu"  // the launchers, on the emulated H200

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;
using qt::AttentionCase;
using qt::max_rel_error;

// out, lse by the forward, then dq (over a poisoned buffer: the launcher zeroes it), dk, dv by the
// backward, as the flash pair's f32 dispatch calls them on a GPU (attention.cu)
void run(const qt::EmulatedAttention& e, std::vector<float>& out, std::vector<float>& dq, std::vector<float>& dk,
         std::vector<float>& dv) {
  const kernels::AttnProblem& p = e.p;
  std::vector<float> lse(p.B * p.H * p.Lq);
  out.assign(e.nq(), 0.f), dq.assign(e.nq(), NAN), dk.assign(e.nk(), 0.f), dv.assign(e.nk(), 0.f);
  ASSERT_TRUE(kc::attention_forward_tf32(p, out.data(), lse.data())) << "the tensor-core forward declined";
  ASSERT_TRUE(kc::attention_backward_tf32(p, out.data(), lse.data(), e.dout.data(), dq.data(), dk.data(), dv.data()))
      << "the tensor-core backward declined";
}

TEST(AttentionTf32Emulated, TheTensorCorePairMatchesTheCpu) {
  const AttentionCase cases[] = {
      {1, 2, 2, 70, 90, 64, false, 0, false},    // ragged tiles both ways, no mask: the maskless kernels
      {1, 2, 1, 130, 70, 64, true, 1, false},    // causal, boolean mask, GQA, Lq > Lk, 3 row blocks
      {1, 2, 2, 65, 129, 128, false, 2, true},   // head dim 128, additive mask, heads split off [B, L, H, D]
      {1, 2, 2, 64, 64, 128, true, 0, false},    // whole tiles, causal
      {1, 2, 2, 70, 70, 64, false, 3, true},     // every fifth row sees no key: zeros, no NaN
      {2, 2, 2, 128, 128, 64, false, 0, false},  // whole tiles, two batches
      // dropout (the CPU's draws; Lk odd: a row's pairs of keys start on either half of a hash's pair)
      {1, 2, 2, 90, 101, 64, true, 0, false, 0.2f},
      // a scale of the caller's, large enough (scores of a few hundred) that e^(x − m') overflows unless
      // m' is the rows' largest score: positive on whole tiles (plain: the scale in the softmax's
      // exponent), negative (every tile formed element by element: the max of S is not the max of scale·S)
      {1, 2, 2, 64, 128, 64, false, 0, false, 0.f, 12.f},
      {1, 2, 2, 64, 128, 128, false, 0, false, 0.f, -12.f},
      // soft-capped scores (Gemma 2's), forward and backward: under causality with an additive mask and
      // GQA; whole tiles without a mask (plain but for the cap); with dropout and a boolean mask
      {1, 2, 1, 70, 90, 64, true, 2, false, 0.f, 0.f, 0.6f},
      {1, 2, 2, 64, 128, 128, false, 0, false, 0.f, 0.f, 0.7f},
      {1, 2, 2, 90, 101, 64, false, 1, true, 0.2f, 0.f, 1.f},
  };
  uint64_t seed = 1000;
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(qt::describe(c));
    const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10);
    std::vector<float> out, dq, dk, dv;
    run(e, out, dq, dk, dv);
    // (a scale of 12 — 96 times head dim 64's 1/√D — multiplies the scores' last-bit differences as
    // much: the sums' order, 3xTF32's dropped 2^-22; 2e-4 there)
    const double tol = c.scale != 0.f ? 2e-4 : 2e-5;
    EXPECT_LT(max_rel_error(out, e.out), tol) << "out";
    EXPECT_LT(max_rel_error(dq, e.dq), tol) << "dq";
    EXPECT_LT(max_rel_error(dk, e.dk), tol) << "dk";
    EXPECT_LT(max_rel_error(dv, e.dv), tol) << "dv";
  }
}

// The backward in steps of 32 or 64 query rows at either head dim — by default 64 at head dim 64 and 32
// at 128 (tf32_pair::kStepRows: two blocks an SM there), QKV_CUDA_ATTENTION_TF32_ROWS=32 or 64 otherwise —:
// the kernel each launches, ragged last steps (Lq 70: 32, 32, 6 rows), causal blocks whose steps start at
// their first key, GQA, masks, rows that see no key, dropout, the caller's scale; each warp's part of dQ_i
// (16 rows × D at 64 rows a step, 16 × D/2 at 32, added 64 dims at a time or 32 at head dim 64); and a
// soft cap's kernel, at the default rows whatever the knob says
TEST(AttentionTf32Emulated, TheBackwardTakesStepsOf32Or64QueryRows) {
  const AttentionCase cases[] = {
      {1, 2, 2, 70, 90, 128, false, 0, false},
      {1, 4, 2, 100, 150, 128, true, 0, false},
      {2, 2, 1, 130, 70, 128, true, 1, true},
      {1, 2, 2, 90, 101, 128, false, 3, false, 0.2f},
      {1, 2, 2, 96, 64, 128, false, 2, false, 0.f, 3.f},
      {1, 4, 2, 70, 130, 64, true, 2, false},
      {1, 2, 2, 100, 90, 64, false, 3, true, 0.1f},
      {1, 2, 2, 70, 90, 128, true, 2, false, 0.f, 0.f, 0.6f},  // soft-capped
      {1, 2, 1, 100, 64, 64, false, 0, false, 0.1f, 0.f, 0.8f},
  };
  for (const char* rows : {"", "32", "64"}) {
    const qt::ScopedEnv env("QKV_CUDA_ATTENTION_TF32_ROWS", *rows ? rows : nullptr);
    uint64_t seed = 1700;
    for (const AttentionCase& c : cases) {
      SCOPED_TRACE(qt::describe(c) << " QKV_CUDA_ATTENTION_TF32_ROWS=" << rows);
      namespace em = qkv::emulation;
      em::device().launched.clear();
      const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10);
      std::vector<float> out, dq, dk, dv;
      run(e, out, dq, dk, dv);
      EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
      EXPECT_LT(max_rel_error(dq, e.dq), 2e-5) << "dq";
      EXPECT_LT(max_rel_error(dk, e.dk), 2e-5) << "dk";
      EXPECT_LT(max_rel_error(dv, e.dv), 2e-5) << "dv";
      namespace tp = kc::tf32_pair;
      if (c.softcap > 0.f) {  // the capped kernel, at its head dim's default rows whatever the knob
        EXPECT_TRUE(c.D == 64 ? em::launched(tp::flash_tf32_backward_kernel<64, 64, true, true>)
                              : em::launched(tp::flash_tf32_backward_kernel<128, 32, true, true>))
            << "not the capped backward";
        continue;
      }
      const int want = *rows ? std::atoi(rows) : c.D == 64 ? 64 : 32;
      const bool r32 = c.D == 64 ? em::launched(tp::flash_tf32_backward_kernel<64, 32, false>) ||
                                       em::launched(tp::flash_tf32_backward_kernel<64, 32, true>)
                                 : em::launched(tp::flash_tf32_backward_kernel<128, 32, false>) ||
                                       em::launched(tp::flash_tf32_backward_kernel<128, 32, true>);
      const bool r64 = c.D == 64 ? em::launched(tp::flash_tf32_backward_kernel<64, 64, false>) ||
                                       em::launched(tp::flash_tf32_backward_kernel<64, 64, true>)
                                 : em::launched(tp::flash_tf32_backward_kernel<128, 64, false>) ||
                                       em::launched(tp::flash_tf32_backward_kernel<128, 64, true>);
      EXPECT_EQ(r32, want == 32);
      EXPECT_EQ(r64, want == 64);
    }
  }
}

// Whether the pair serves where a GPU gives a block less shared memory than an H200's 227 KB: an A100's
// 163 KB holds all four kernels (85–108 KB); an sm_86 GPU's 99 KB (RTX 3090, A10, A40) all but head dim
// 128's backward (108 KB), which then declines — nothing written, not even dq's zeros — for attention.cu's
// CUDA-core pair to serve, rather than fail at its launch
TEST(AttentionTf32Emulated, ThePairDeclinesWhereTheGpuHasTooLittleSharedMemory) {
  namespace em = qkv::emulation;
  uint64_t seed = 1500;
  for (const em::Architecture& arch : {em::kA100, em::kSm86}) {
    const em::ScopedArchitecture gpu(arch);
    for (const AttentionCase& c : {AttentionCase{1, 2, 1, 70, 90, 64, true, 0, false},
                                   AttentionCase{1, 2, 2, 65, 80, 128, false, 2, false}}) {
      SCOPED_TRACE(qt::describe(c) << " compute capability " << arch.major << "." << arch.minor);
      const size_t forward_bytes = c.D == 64 ? kc::tf32_pair::forward_smem_bytes<64, 64>()
                                             : kc::tf32_pair::forward_smem_bytes<128, 32>(),
                   backward_bytes = c.D == 64 ? kc::tf32_pair::backward_smem_bytes<64>()
                                              : kc::tf32_pair::backward_smem_bytes<128>();
      const bool declines = arch.shared_optin_bytes == em::kSm86.shared_optin_bytes && c.D == 128;
      EXPECT_LE(forward_bytes, static_cast<size_t>(arch.shared_optin_bytes));
      EXPECT_EQ(backward_bytes > static_cast<size_t>(arch.shared_optin_bytes), declines) << backward_bytes << " bytes";
      const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10);
      const kernels::AttnProblem& p = e.p;
      std::vector<float> out(e.nq(), 0.f), lse(p.B * p.H * p.Lq), dq(e.nq(), 7.f), dk(e.nk(), 7.f), dv(e.nk(), 7.f);
      ASSERT_TRUE(kc::attention_forward_tf32(p, out.data(), lse.data()));
      EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
      const bool served =
          kc::attention_backward_tf32(p, out.data(), lse.data(), e.dout.data(), dq.data(), dk.data(), dv.data());
      EXPECT_EQ(served, !declines);
      if (served) {
        EXPECT_LT(max_rel_error(dq, e.dq), 2e-5) << "dq";
        EXPECT_LT(max_rel_error(dk, e.dk), 2e-5) << "dk";
      } else {
        const auto untouched = [](const std::vector<float>& x) {
          return std::all_of(x.begin(), x.end(), [](float v) { return v == 7.f; });
        };
        EXPECT_TRUE(untouched(dq) && untouched(dk) && untouched(dv)) << "a declining backward wrote";
      }
      EXPECT_TRUE(em::device().blocks.empty());
    }
  }
}

}  // namespace

#else
TEST(AttentionTf32Emulated, TheTensorCorePairMatchesTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionTf32Emulated, TheBackwardTakesStepsOf32Or64QueryRows) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
