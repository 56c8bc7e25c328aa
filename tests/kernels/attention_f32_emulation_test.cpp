// The f32 attention launchers of the CUDA backend run on the host through tests/kernels/cuda_emulation.h
// (kernels/cuda/attention.cu compiled here, with attention_tf32.cu, to which it hands a problem wherever
// the tensor cores serve): the CUDA-core pair (a warp a row: head dims the
// tensor cores do not take, D ≠ Dv, and every problem under QKV_CUDA_ATTENTION_F32=simt), its split over
// the keys for a few rows against many (flash-decoding: the partial runs and their combination; fewer
// rows than four warps a multiprocessor, on an emulated H200's 132 and an sm_86 GPU's 82), and
// the reference pair that keeps P, and a decoding step's hand-over to the paged decoding kernel
// (paged_attention.cu) — against qkv's CPU attention: out, lse's use by the backward, dq,
// dk, dv; causal or not, masks, rows that see no key, GQA, dropout, heads split off a [B, L, H, D]
// projection. Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <vector>

#include "kernels/attention_emulation.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cuda/attention.cu"  // the launchers, on the emulated H200
#include "kernels/cuda/attention_tf32.cu"
#include "kernels/cuda/paged_attention.cu"  // the decoding steps over a dense cache (attention_decode_tiled)

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;
using qt::AttentionCase;
using qt::max_rel_error;

// out and lse by the flash forward, then dq (over NaNs), dk, dv by its backward, as ops' attention
// calls them for an f32 problem on a GPU
void expect_flash_matches_the_cpu(const qt::EmulatedAttention& e) {
  const kernels::AttnProblem& p = e.p;
  std::vector<float> out(e.nq(), NAN), lse(p.B * p.H * p.Lq, NAN), dq(e.nq(), NAN), dk(e.nk(), NAN), dv(e.nk(), NAN);
  kc::attention_forward_flash_f32(p, out.data(), lse.data());
  EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
  kc::attention_backward_flash_f32(p, out.data(), lse.data(), e.dout.data(), dq.data(), dk.data(), dv.data());
  EXPECT_LT(max_rel_error(dq, e.dq), 2e-5) << "dq";
  EXPECT_LT(max_rel_error(dk, e.dk), 2e-5) << "dk";
  EXPECT_LT(max_rel_error(dv, e.dv), 2e-5) << "dv";
  EXPECT_TRUE(emulation::device().blocks.empty()) << "scratch not freed";
}

TEST(AttentionF32Emulated, TheCudaCorePairAndItsSplitOverTheKeysMatchTheCpu) {
  const AttentionCase cases[] = {
      {1, 2, 2, 40, 50, 32, false, 0, false},       // a head dim the tensor cores do not take
      {1, 2, 1, 30, 70, 80, true, 1, false},        // causal, boolean mask, GQA
      {1, 3, 3, 21, 33, 40, false, 2, true},        // additive mask, heads split off [B, L, H, D]
      {2, 2, 2, 25, 25, 64, false, 3, false},       // every fifth row sees no key
      {1, 2, 2, 20, 31, 48, true, 0, false, 0.2f},  // dropout: the CPU's draws
      {1, 2, 1, 3, 600, 64, false, 0, false},       // 6 rows, 600 keys: split over the keys
      {1, 1, 1, 2, 700, 40, false, 2, false},       // … with a mask, 3 runs of 256 keys
      // soft-capped scores (Gemma 2's): at head dims 64 and 128 by default the 3xTF32 pair (the cap in
      // its General form), with an additive mask under causality and GQA, dropout, and the split over the
      // keys
      {1, 2, 1, 30, 70, 64, true, 2, false, 0.f, 0.f, 0.6f},
      {1, 2, 2, 64, 128, 64, false, 0, false, 0.f, 0.f, 0.7f},  // no mask, whole tiles: plain but for the cap
      {1, 2, 2, 20, 31, 128, false, 1, true, 0.2f, 0.f, 1.f},
      {1, 2, 1, 3, 600, 64, false, 0, false, 0.f, 0.f, 0.5f},
  };
  uint64_t seed = 5000;
  for (const char* kernels : {"simt", static_cast<const char*>(nullptr)}) {  // the CUDA cores; the default
    const qt::ScopedEnv env("QKV_CUDA_ATTENTION_F32", kernels);
    for (const AttentionCase& c : cases) {
      SCOPED_TRACE(qt::describe(c) << (kernels ? " simt" : " default"));
      expect_flash_matches_the_cpu(qt::emulated_attention(c, seed += 10));
    }
  }
}

// The split over the keys where one warp a row leaves multiprocessors idle: fewer rows than four warps
// a multiprocessor, so 400 rows split on an H200 (132 SMs: 528) and not on an sm_86 GPU (82: 328)
TEST(AttentionF32Emulated, TheSplitOverTheKeysFollowsTheGpusMultiprocessors) {
  namespace em = qkv::emulation;
  const qt::ScopedEnv env("QKV_CUDA_ATTENTION_F32", "simt");
  const qt::EmulatedAttention e = qt::emulated_attention({1, 4, 2, 100, 512, 32, false, 0, false}, 5100);
  for (const em::Architecture& arch : {em::kH200, em::kSm86}) {
    SCOPED_TRACE(::testing::Message() << arch.multiprocessors << " multiprocessors");
    const em::ScopedArchitecture gpu(arch);
    std::vector<float> out(e.nq(), NAN), lse(e.p.B * e.p.H * e.p.Lq, NAN);
    em::device().launched.clear();
    kc::attention_forward_flash_f32(e.p, out.data(), lse.data());
    EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
    const bool split = arch.multiprocessors == em::kH200.multiprocessors;
    EXPECT_EQ(em::launched(kc::split_kv_partial_kernel<0>), split);
    EXPECT_EQ(em::launched(kc::flash_forward_kernel<0>), !split);
  }
}

// A decoding step with no gradient (no lse) over a dense cache goes to the paged decoding kernel
// (paged_attention.cu's attention_decode_tiled: its keys in tiles through shared memory); with an lse,
// or keys not rows of a [B, Hkv, L, D] cache (heads split off a projection), the split-KV pair as before
TEST(AttentionF32Emulated, ADecodingStepOverADenseCacheTakesThePagedDecodingKernel) {
  namespace em = qkv::emulation;
  uint64_t seed = 5300;
  for (const AttentionCase& c :
       {AttentionCase{2, 8, 2, 1, 600, 64, false, 0, false}, AttentionCase{1, 4, 2, 1, 600, 64, false, 0, true},
        AttentionCase{1, 4, 2, 1, 600, 64, false, 0, false, 0.f, 0.f, 0.5f}}) {  // (soft-capped)
    SCOPED_TRACE(qt::describe(c));
    const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10);
    for (const bool with_lse : {false, true}) {
      SCOPED_TRACE(with_lse ? "lse" : "no lse");
      // (the CUDA cores' pair: by default a problem with an lse goes to the tensor cores, attention_tf32.cu;
      // without one the tensor cores decline a decoding step either way)
      const qt::ScopedEnv simt("QKV_CUDA_ATTENTION_F32", with_lse ? "simt" : nullptr);
      std::vector<float> out(e.nq(), NAN), lse(e.p.B * e.p.H * e.p.Lq, NAN);
      em::device().launched.clear();
      kc::attention_forward_flash_f32(e.p, out.data(), with_lse ? lse.data() : nullptr);
      EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
      const bool tiled = !with_lse && !c.heads_inner;
      EXPECT_EQ(em::launched(kc::paged_attention_tiled_kernel<float>), tiled);
      EXPECT_EQ(em::launched(kc::split_kv_partial_kernel<0>), !tiled);
      EXPECT_TRUE(em::device().blocks.empty()) << "scratch not freed";
    }
  }
}

TEST(AttentionF32Emulated, TheReferencePairKeepsTheCpusProbabilities) {
  uint64_t seed = 5200;
  for (const AttentionCase& c :
       {AttentionCase{1, 2, 1, 17, 23, 32, true, 1, false}, AttentionCase{1, 2, 2, 9, 40, 64, false, 2, true, 0.25f},
        AttentionCase{1, 2, 1, 9, 40, 64, true, 2, false, 0.25f, 0.f, 0.5f}}) {  // soft-capped
    SCOPED_TRACE(qt::describe(c));
    const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10);
    const kernels::AttnProblem& p = e.p;
    const size_t np = static_cast<size_t>(p.B * p.H * p.Lq * p.Lk);
    std::vector<float> out(e.nq(), NAN), probs(np, NAN), weights(np, NAN), cpu_out(e.nq()), cpu_probs(np),
        cpu_weights(np);
    kc::attention_forward_reference(p, out.data(), probs.data(), weights.data());
    kernels::cpu::attention_forward_reference(p, cpu_out.data(), cpu_probs.data(), cpu_weights.data());
    EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
    EXPECT_LT(max_rel_error(probs, cpu_probs), 2e-6) << "P";
    EXPECT_LT(max_rel_error(weights, cpu_weights), 2e-6) << "W";
    std::vector<float> dq(e.nq(), NAN), dk(e.nk(), NAN), dv(e.nk(), NAN), dscores(np, NAN), cpu_dscores(np);
    std::vector<float> cdq(e.nq()), cdk(e.nk()), cdv(e.nk());
    kc::attention_backward_reference(p, probs.data(), e.dout.data(), dq.data(), dk.data(), dv.data(), dscores.data());
    kernels::cpu::attention_backward_reference(p, cpu_probs.data(), e.dout.data(), cdq.data(), cdk.data(), cdv.data(),
                                               cpu_dscores.data());
    EXPECT_LT(max_rel_error(dq, e.dq), 2e-5) << "dq";
    EXPECT_LT(max_rel_error(dk, e.dk), 2e-5) << "dk";
    EXPECT_LT(max_rel_error(dv, e.dv), 2e-5) << "dv";
    EXPECT_LT(max_rel_error(dscores, cpu_dscores), 2e-5) << "dS";
  }
  EXPECT_TRUE(emulation::device().blocks.empty()) << "scratch not freed";
}

}  // namespace

#else
TEST(AttentionF32Emulated, TheCudaCorePairAndItsSplitOverTheKeysMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionF32Emulated, TheSplitOverTheKeysFollowsTheGpusMultiprocessors) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionF32Emulated, ADecodingStepOverADenseCacheTakesThePagedDecodingKernel) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionF32Emulated, TheReferencePairKeepsTheCpusProbabilities) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
