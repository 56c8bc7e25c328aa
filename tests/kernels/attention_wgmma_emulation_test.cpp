// The bf16/f16 attention pair on Hopper's wgmma (kernels/cuda/sm90a/attention_wgmma_kernels.cuh) run on
// the host, unchanged, through tests/kernels/cuda_emulation.h, by their own launchers (sm90a/attention_wgmma.cu
// compiled here: the variant each name and problem picks, the pre-passes — rows rounded to dense T copies,
// in their scratch, the shared memory each kernel is allowed, the grids, the TMA maps),
// the shared-memory descriptors and 128-byte swizzle, K-major and MN-major, wgmma from shared memory and
// from registers — against qkv's CPU attention in bf16 (and f16): every forward variant
// attention_wgmma.cu launches (one key tile at a time with tiles of 64 or 128 keys, the overlapped
// kernel, the warp-specialized one), and both backwards (two warpgroups; warp-specialized), with and
// without the mask code, dropout, head dims 64 and 128, and head dim 256 (the warp-specialized forward;
// the backward of attention_wgmma_backward256.cuh, whose operands are read MN-major too); the
// warp-specialized kernels in every order of their warps the emulation can run (emulation::Schedule).
//
// The forward kernels passed every GPU test on an H200 before this test existed (docs/BENCHMARKS.md,
// 2026-11-27), so they check the emulation as much as it checks them: its wgmma layouts are the ones a
// GPU-proven kernel computes correctly with. The backward was written against it, and has not yet run
// on a GPU. Needs the CUDA toolkit's headers.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include "kernels/attention_emulation.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cuda/sm90a/attention_wgmma.cu"  // the launchers, on the emulated H200 (cuda_emulation.h)

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;

enum class Variant { tile64, tile128, overlap, ws };

// The name QKV_CUDA_ATTENTION gives each forward variant
const char* name(Variant v) {
  return v == Variant::tile64    ? "wgmma64"
         : v == Variant::tile128 ? "wgmma128"
         : v == Variant::ws      ? "wgmma-ws"
                                 : "wgmma-overlap";
}

struct Forward {
  std::vector<float> out, lse;
};

// The forward as a GPU runs it — attention_wgmma.cu's launcher, on the emulated H200: its pre-pass (q, k
// and v rounded to dense T rows), the kernel QKV_CUDA_ATTENTION and the problem pick (a mask or dropout
// takes the general code of the one-tile kernel at head dim 64, of the overlapped one at 128; head dim
// 256 the warp-specialized kernel alone), its shared memory allowed, its grid; the scratch freed
template <typename T>
Forward forward(const qt::EmulatedAttention& e, Variant v) {
  const qt::ScopedEnv env("QKV_CUDA_ATTENTION", name(v));
  Forward f{std::vector<float>(e.nq(), 0.f), std::vector<float>(e.p.B * e.p.H * e.p.Lq, 0.f)};
  const bool served = std::is_same_v<T, __nv_bfloat16>
                          ? kc::attention_forward_wgmma_bf16(e.p, f.out.data(), f.lse.data())
                          : kc::attention_forward_wgmma_f16(e.p, f.out.data(), f.lse.data());
  EXPECT_TRUE(served) << "the wgmma forward declined the problem";
  EXPECT_TRUE(emulation::device().blocks.empty()) << "the forward's scratch not freed";
  return f;
}

enum class Backward { two_warpgroups, ws, none };  // none: the forward alone

// dq, dk, dv by attention_wgmma.cu's backward launcher (QKV_CUDA_ATTENTION_BACKWARD=wgmma or wgmma-ws)
// from the forward's out and lse, as the ops call it: its pre-pass — q, dO, k, v rounded to dense rows,
// read K-major and MN-major alike; D_i = rowsum(dO ∘ out); dq zeroed (here over NaN) —, then the
// two-warpgroup kernel or the warp-specialized one (its TMA tensor maps over the same copies), or at head
// dim 256 its own
template <typename T>
void backward(const qt::EmulatedAttention& e, const Forward& f, Backward kernel, std::vector<float>& dq,
              std::vector<float>& dk, std::vector<float>& dv) {
  const qt::ScopedEnv env("QKV_CUDA_ATTENTION_BACKWARD", kernel == Backward::ws ? "wgmma-ws" : "wgmma");
  dq.assign(e.nq(), std::numeric_limits<float>::quiet_NaN()), dk.assign(e.nk(), 0.f), dv.assign(e.nk(), 0.f);
  const bool served = std::is_same_v<T, __nv_bfloat16>
                          ? kc::attention_backward_wgmma_bf16(e.p, f.out.data(), f.lse.data(), e.dout.data(), dq.data(),
                                                              dk.data(), dv.data())
                          : kc::attention_backward_wgmma_f16(e.p, f.out.data(), f.lse.data(), e.dout.data(), dq.data(),
                                                             dk.data(), dv.data());
  EXPECT_TRUE(served) << "the wgmma backward declined the problem";
  EXPECT_TRUE(emulation::device().blocks.empty()) << "the backward's scratch not freed";
}

template <typename T, int D>
void check(const qt::AttentionCase& c, Variant v, uint64_t seed, Backward bwd = Backward::two_warpgroups) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  SCOPED_TRACE(qt::describe(c) << (v == Variant::tile64    ? " tile64"
                                   : v == Variant::tile128 ? " tile128"
                                   : v == Variant::ws      ? " ws"
                                                           : " overlap")
                               << (bf16 ? " bf16" : " f16") << (bwd == Backward::ws ? " ws backward" : ""));
  ASSERT_EQ(c.D, D);
  const qt::EmulatedAttention e =
      qt::emulated_attention(c, seed, bf16 ? AttentionCompute::bf16 : AttentionCompute::f16);
  const Forward f = forward<T>(e, v);
  // P (and dS') are rounded to the 16-bit type for their products, which the CPU does not: bf16's 2e-2
  // (f16's 2.5e-3), as the mma.sync kernels' emulation test and
  // Cuda.Bf16AttentionTrainsOnTheTensorCoresAsOnTheCpu on a GPU
  const double tol = bf16 ? 2e-2 : 2.5e-3;
  EXPECT_LT(qt::max_rel_error(f.out, e.out), tol) << "out";
  if constexpr (D == 256) {  // lse, which the backward reads
    std::vector<float> out(e.nq()), lse(f.lse.size());
    (bf16 ? kernels::cpu::attention_forward_flash_bf16 : kernels::cpu::attention_forward_flash_f16)(e.p, out.data(),
                                                                                                   lse.data());
    EXPECT_LT(qt::max_rel_error(f.lse, lse), 1e-3) << "lse";
  }
  if (bwd == Backward::none) return;
  std::vector<float> dq, dk, dv;
  backward<T>(e, f, bwd, dq, dk, dv);
  EXPECT_LT(qt::max_rel_error(dq, e.dq), tol) << "dq";
  EXPECT_LT(qt::max_rel_error(dk, e.dk), tol) << "dk";
  EXPECT_LT(qt::max_rel_error(dv, e.dv), tol) << "dv";
}

TEST(AttentionWgmmaEmulated, EveryForwardVariantAndTheBackwardMatchTheCpu) {
  uint64_t seed = 3000;
  // head dim 64: one tile at a time (its default), ragged rows and keys, GQA and causality across tiles
  check<__nv_bfloat16, 64>({1, 2, 2, 70, 90, 64, false, 0, false}, Variant::tile64, seed += 10);
  check<__nv_bfloat16, 64>({1, 2, 1, 200, 150, 64, true, 0, false}, Variant::tile64, seed += 10);
  check<__nv_bfloat16, 64>({1, 2, 2, 130, 260, 64, false, 0, true}, Variant::tile128, seed += 10);
  // head dim 64 with a mask: one tile at a time (its default), or overlapped (wgmma-overlap)
  check<__nv_bfloat16, 64>({1, 2, 1, 150, 200, 64, false, 2, true}, Variant::tile64, seed += 10);
  check<__nv_bfloat16, 64>({1, 2, 2, 140, 140, 64, true, 1, false}, Variant::overlap, seed += 10);
  // head dim 128: the overlapped kernel (its default) through several key tiles, and a mask's code
  check<__nv_bfloat16, 128>({1, 2, 2, 200, 300, 128, true, 0, false}, Variant::overlap, seed += 10);
  check<__nv_bfloat16, 128>({1, 2, 1, 65, 129, 128, false, 2, true}, Variant::overlap, seed += 10);
  check<__nv_bfloat16, 128>({1, 2, 2, 140, 140, 128, true, 3, false}, Variant::overlap, seed += 10);
  check<__nv_bfloat16, 128>({1, 1, 1, 100, 200, 128, false, 0, false}, Variant::tile64, seed += 10);
  // dropout (the general code, the backward drawing Z again): the same draws as the CPU's
  check<__nv_bfloat16, 64>({1, 2, 2, 100, 140, 64, true, 0, false, 0.2f}, Variant::tile64, seed += 10);
  check<__nv_bfloat16, 128>({1, 2, 1, 70, 130, 128, false, 1, false, 0.3f}, Variant::overlap, seed += 10);
  // f16: the same kernels on __half
  check<__half, 64>({1, 2, 1, 130, 90, 64, true, 0, false}, Variant::tile64, seed += 10);
  check<__half, 64>({1, 2, 2, 100, 121, 64, true, 3, false, 0.1f}, Variant::tile64, seed += 10);
  check<__half, 128>({1, 2, 2, 100, 150, 128, false, 2, true}, Variant::overlap, seed += 10);
  // head dim 256's backward (its forward the warp-specialized kernel): GQA, causal, ragged rows and keys
  // (a block with no step), masks, dropout, f16 — every MN-major read of the transpose bits
  check<__nv_bfloat16, 256>({1, 4, 2, 100, 230, 256, true, 0, false}, Variant::ws, seed += 10);
  check<__nv_bfloat16, 256>({1, 2, 1, 100, 130, 256, false, 2, true, 0.2f}, Variant::ws, seed += 10);
  check<__half, 256>({1, 1, 1, 90, 70, 256, false, 3, false}, Variant::ws, seed += 10);
  // a scale of the caller's, large enough (scores of a few hundred) that e^(x − m') overflows unless m' is
  // the rows' largest score: positive on whole tiles (plain: the scale in the softmax's exponent), and
  // negative (every tile formed element by element: the max of S is not the max of scale·S)
  check<__nv_bfloat16, 64>({1, 2, 2, 128, 128, 64, false, 0, false, 0.f, 12.f}, Variant::tile64, seed += 10);
  check<__nv_bfloat16, 128>({1, 2, 2, 128, 256, 128, false, 0, false, 0.f, -12.f}, Variant::overlap, seed += 10);
  check<__nv_bfloat16, 64>({1, 2, 2, 128, 256, 64, false, 0, false, 0.f, -12.f}, Variant::ws, seed += 10);
}

// The warp-specialized kernels — their warpgroups meet only at mbarriers and named barriers — in
// every order of their warps the emulation knows: together, the first (the last) warps as far ahead
// as they can run, and in orders drawn at random (QKV_EMULATION_SEED) — where a buffer released or
// overwritten while another warpgroup's product still reads it changes the results.
TEST(AttentionWgmmaEmulated, TheWarpSpecializedKernelsMatchTheCpuWhicheverWarpsRunAhead) {
  for (const emulation::Schedule order : {emulation::Schedule::round_robin, emulation::Schedule::first_ahead,
                                          emulation::Schedule::last_ahead, emulation::Schedule::random_ahead}) {
    const emulation::ScheduleScope scope(order);
    SCOPED_TRACE(emulation::name(order));
    uint64_t seed = 3100;
    // the forward (TMA, mbarriers, pingpong): ragged rows and keys (TMA's zero fill), several tiles
    // through the rings of 4 (d 64) and 2 (d 128) buffers, GQA, causal, masks, dropout
    check<__nv_bfloat16, 64>({1, 2, 2, 200, 700, 64, false, 0, false}, Variant::ws, seed += 10);
    check<__nv_bfloat16, 64>({2, 2, 1, 150, 330, 64, true, 0, false}, Variant::ws, seed += 10);
    check<__nv_bfloat16, 128>({1, 2, 2, 130, 500, 128, false, 0, false}, Variant::ws, seed += 10);
    check<__nv_bfloat16, 128>({1, 2, 1, 260, 260, 128, true, 2, true}, Variant::ws, seed += 10);
    check<__nv_bfloat16, 128>({1, 1, 1, 70, 300, 128, false, 1, false, 0.2f}, Variant::ws, seed += 10);
    check<__half, 64>({1, 2, 2, 100, 90, 64, false, 3, false}, Variant::ws, seed += 10);
    // head dim 256 (its lse against the CPU's too): tiles of 64 keys, O's 128 accumulators (its
    // backward, whose warpgroups meet only at __syncthreads, in the test above)
    check<__nv_bfloat16, 256>({1, 2, 1, 140, 200, 256, true, 1, false}, Variant::ws, seed += 10, Backward::none);
    check<__half, 256>({1, 1, 1, 70, 150, 256, false, 2, true}, Variant::ws, seed += 10, Backward::none);
    // the backward at head dim 64 (a ring of 4): several steps a block round the ring, ragged
    // rows and keys (TMA's zero fill, lse −∞ past Lq), GQA (a block walks its group's query heads), causal
    check<__nv_bfloat16, 64>({1, 2, 2, 300, 200, 64, false, 0, false}, Variant::ws, seed += 10, Backward::ws);
    check<__nv_bfloat16, 64>({2, 4, 2, 150, 260, 64, true, 0, false}, Variant::ws, seed += 10, Backward::ws);
    check<__nv_bfloat16, 64>({1, 2, 1, 130, 90, 64, false, 3, true, 0.2f}, Variant::ws, seed += 10, Backward::ws);
    // head dim 128 (a ring of 3): masks, rows that see no key, dropout
    check<__nv_bfloat16, 128>({1, 2, 2, 260, 140, 128, true, 2, false}, Variant::ws, seed += 10, Backward::ws);
    check<__nv_bfloat16, 128>({1, 3, 1, 200, 300, 128, false, 1, true}, Variant::ws, seed += 10, Backward::ws);
    check<__nv_bfloat16, 128>({1, 1, 1, 70, 130, 128, false, 0, false, 0.3f}, Variant::ws, seed += 10, Backward::ws);
    // f16
    check<__half, 64>({1, 2, 2, 100, 150, 64, true, 1, false}, Variant::ws, seed += 10, Backward::ws);
    check<__half, 128>({1, 2, 1, 140, 70, 128, false, 3, false}, Variant::ws, seed += 10, Backward::ws);
  }
}

// The warp-specialized forward is persistent: a block an SM, each taking every grid-th item (128 rows of
// one head). On an emulated GPU of 3 SMs a block takes several — their tiles through one ring of buffers
// round and on from item to item (a causal item's tiles fewer than the next's), Q's buffer refilled as
// the item before releases it, the two warpgroups' turns carried across —, in every order of the warps;
// and with QKV_CUDA_ATTENTION_PERSISTENT=0, a block an item.
TEST(AttentionWgmmaEmulated, ThePersistentForwardTakesSeveralItemsABlock) {
  const emulation::ScopedArchitecture three_sms({9, 0, 3, 227 * 1024});
  for (const emulation::Schedule order : {emulation::Schedule::round_robin, emulation::Schedule::first_ahead,
                                          emulation::Schedule::last_ahead, emulation::Schedule::random_ahead}) {
    const emulation::ScheduleScope scope(order);
    SCOPED_TRACE(emulation::name(order));
    uint64_t seed = 3400;
    check<__nv_bfloat16, 64>({2, 2, 1, 300, 300, 64, true, 0, false}, Variant::ws, seed += 10, Backward::none);
    check<__nv_bfloat16, 64>({1, 3, 3, 260, 700, 64, false, 0, false}, Variant::ws, seed += 10, Backward::none);
    check<__nv_bfloat16, 128>({1, 2, 2, 400, 200, 128, true, 2, true}, Variant::ws, seed += 10, Backward::none);
    check<__nv_bfloat16, 128>({2, 1, 1, 200, 330, 128, false, 1, false, 0.2f}, Variant::ws, seed += 10, Backward::none);
    check<__nv_bfloat16, 256>({1, 2, 1, 270, 150, 256, true, 0, false}, Variant::ws, seed += 10, Backward::none);
    check<__half, 64>({1, 4, 2, 140, 90, 64, false, 3, false}, Variant::ws, seed += 10, Backward::none);
  }
  const qt::ScopedEnv one_item("QKV_CUDA_ATTENTION_PERSISTENT", "0");
  check<__nv_bfloat16, 64>({2, 2, 1, 300, 300, 64, true, 0, false}, Variant::ws, 3500, Backward::none);
}

// The backwards at head dim 64 take steps of 128 query rows (kBwdRows: their warpgroups split dQ_i by
// its rows), or of 64 with QKV_CUDA_ATTENTION_BACKWARD_ROWS=64 (by its dims): both kernels at both,
// through ragged last steps (Lq 300: 128, 128, 44 rows; rows past Lq zero-filled, lse −∞), blocks that
// walk their group's query heads round the warp-specialized ring (2 buffers at 128 rows, 4 at 64),
// causal blocks whose steps start at their first key (Lq < Lk and >), masks, rows that see no key,
// dropout, f16.
TEST(AttentionWgmmaEmulated, TheBackwardAtHeadDim64TakesStepsOf128RowsOr64) {
  for (const char* rows : {"128", "64"})
    for (const Backward kernel : {Backward::two_warpgroups, Backward::ws}) {
      const qt::ScopedEnv env("QKV_CUDA_ATTENTION_BACKWARD_ROWS", rows);
      SCOPED_TRACE(::testing::Message() << "QKV_CUDA_ATTENTION_BACKWARD_ROWS=" << rows);
      uint64_t seed = 3600;
      check<__nv_bfloat16, 64>({1, 4, 2, 300, 150, 64, false, 0, false}, Variant::tile64, seed += 10, kernel);
      check<__nv_bfloat16, 64>({1, 2, 1, 100, 300, 64, true, 0, true}, Variant::tile64, seed += 10, kernel);
      check<__nv_bfloat16, 64>({2, 2, 2, 270, 200, 64, true, 3, false}, Variant::tile64, seed += 10, kernel);
      check<__nv_bfloat16, 64>({1, 2, 2, 140, 130, 64, false, 2, true, 0.2f}, Variant::tile64, seed += 10, kernel);
      check<__half, 64>({1, 3, 1, 200, 100, 64, false, 1, false}, Variant::tile64, seed += 10, kernel);
    }
}

}  // namespace

#else
TEST(AttentionWgmmaEmulated, EveryForwardVariantAndTheBackwardMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionWgmmaEmulated, TheWarpSpecializedKernelsMatchTheCpuWhicheverWarpsRunAhead) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionWgmmaEmulated, ThePersistentForwardTakesSeveralItemsABlock) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionWgmmaEmulated, TheBackwardAtHeadDim64TakesStepsOf128RowsOr64) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
