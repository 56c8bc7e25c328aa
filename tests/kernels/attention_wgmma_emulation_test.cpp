// The bf16/f16 attention pair on Hopper's wgmma (kernels/cuda/sm90a/attention_wgmma_kernels.cuh) run on
// the host, unchanged, through tests/kernels/cuda_emulation.h — the pre-passes (rows rounded to dense T
// copies, the forward's vᵀ), the shared-memory descriptors and 128-byte swizzle, K-major and MN-major,
// wgmma from shared memory and from registers — against qkv's CPU attention in bf16 (and f16): every forward variant
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
#include "kernels/cuda/sm90a/attention_wgmma_backward256.cuh"
#include "kernels/cuda/sm90a/attention_wgmma_kernels.cuh"

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;

// The pre-pass as attention_wgmma.cu runs it: dense T copies of q [B, H, Lq, D] and k [B, Hkv, Lk, D],
// and vᵀ [B, Hkv, D, Lp] with zeros past Lk
template <typename T>
struct Rounded {
  std::vector<T> q, k, vt;
  int64_t Lp;
};
template <typename T>
Rounded<T> prepass(const kernels::AttnProblem& p) {
  Rounded<T> r;
  r.Lp = (p.Lk + 127) / 128 * 128;
  r.q.resize(p.B * p.H * p.Lq * p.D), r.k.resize(p.B * p.Hkv * p.Lk * p.D), r.vt.resize(p.B * p.Hkv * p.D * r.Lp);
  const dim3 grid(3);  // the kernels stride over the grid: a few blocks cover any size
  emulation::launch(grid, 256, 0, [&] {
    kc::tiles::round_rows_kernel<T, false>(p.q, p.q_sb, p.q_sh, p.q_sl, p.H, p.Lq, p.D, p.B * p.H * p.Lq * p.D / 8,
                                           r.q.data());
  });
  emulation::launch(grid, 256, 0, [&] {
    kc::tiles::round_rows_kernel<T, false>(p.k, p.k_sb, p.k_sh, p.k_sl, p.Hkv, p.Lk, p.D,
                                           p.B * p.Hkv * p.Lk * p.D / 8, r.k.data());
  });
  emulation::launch(grid, 256, 0, [&] {
    kc::transpose_rows_kernel<T>(p.v, p.v_sb, p.v_sh, p.v_sl, p.Hkv, p.Lk, p.D, r.Lp,
                                 p.B * p.Hkv * p.D * r.Lp / 8, r.vt.data());
  });
  return r;
}

enum class Variant { tile64, tile128, overlap, ws };

struct Forward {
  std::vector<float> out, lse;
};

template <typename T, int D, int KN, bool General, bool Overlap>
Forward forward(const qt::EmulatedAttention& e, const Rounded<T>& r) {
  const kernels::AttnProblem& p = e.p;
  std::vector<float> out(e.nq(), 0.f), lse(p.B * p.H * p.Lq, 0.f);
  const dim3 grid(static_cast<unsigned>((p.Lq + kc::kRows - 1) / kc::kRows), static_cast<unsigned>(p.B * p.H));
  emulation::launch(grid, kc::kThreads, kc::smem_bytes<D, KN, Overlap ? 4 : 2>(), [&] {
    if constexpr (Overlap)
      kc::flash_wgmma_overlap_kernel<T, D, KN, General>(p, r.q.data(), r.k.data(), r.vt.data(), r.Lp, out.data(),
                                                         lse.data());
    else
      kc::flash_wgmma_forward_kernel<T, D, KN, General>(p, r.q.data(), r.k.data(), r.vt.data(), r.Lp, out.data(),
                                                         lse.data());
  });
  return {out, lse};
}

// The warp-specialized kernel as attention_wgmma.cu launches it: the TMA tensor maps over the same
// dense copies (encoded by the emulation, which refuses what the driver would), three warpgroups.
template <typename T, int D, bool General>
Forward forward_ws(const qt::EmulatedAttention& e, const Rounded<T>& r) {
  const kernels::AttnProblem& p = e.p;
  constexpr int KN = kc::WsShape<D>::KN, Stages = kc::WsShape<D>::Stages;
  std::vector<float> out(e.nq(), 0.f), lse(p.B * p.H * p.Lq, 0.f);
  kc::ForwardMaps maps;
  kc::encode_forward_maps<T, D, KN>(maps, p, r.q.data(), r.k.data(), r.vt.data(), r.Lp);
  const dim3 grid(static_cast<unsigned>((p.Lq + kc::kRows - 1) / kc::kRows), static_cast<unsigned>(p.B * p.H));
  emulation::launch(grid, kc::kWsThreads, kc::ws_smem_bytes<D, KN, Stages>(), [&] {
    kc::flash_wgmma_ws_kernel<T, D, KN, Stages, General>(p, maps.q, maps.k, maps.vt, r.q.data(), r.k.data(),
                                                         r.vt.data(), r.Lp, out.data(), lse.data());
  });
  return {out, lse};
}

enum class Backward { two_warpgroups, ws, none };  // none: the forward alone

// dq, dk, dv by the backward, from the forward's lse, as attention_wgmma.cu runs it: its pre-pass — q,
// dO, k, v rounded to dense rows, read K-major and MN-major alike —, D_i = rowsum(dO ∘ out), dq zeroed;
// then the two-warpgroup kernel or the warp-specialized one (its TMA tensor maps over the same
// copies), or at head dim 256 its own
template <typename T, int D, bool General>
void backward(const qt::EmulatedAttention& e, const Forward& f, Backward kernel, std::vector<float>& dq,
              std::vector<float>& dk, std::vector<float>& dv) {
  const kernels::AttnProblem& p = e.p;
  const int64_t nq = p.B * p.H * p.Lq * D, nk = p.B * p.Hkv * p.Lk * D;
  std::vector<T> qh(nq), gh(nq), kh(nk), vh(nk);
  const float* g = e.dout.data();
  const int64_t g_sb = p.H * p.Lq * D, g_sh = p.Lq * D;
  auto rows = [&](const float* x, int64_t sb, int64_t sh, int64_t sl, int64_t heads, int64_t L, std::vector<T>& out) {
    emulation::launch(dim3(3), 256, 0, [&] {
      kc::tiles::round_rows_kernel<T, false>(x, sb, sh, sl, heads, L, D, static_cast<int64_t>(out.size()) / 8,
                                             out.data());
    });
  };
  rows(p.q, p.q_sb, p.q_sh, p.q_sl, p.H, p.Lq, qh);
  rows(g, g_sb, g_sh, D, p.H, p.Lq, gh);
  rows(p.k, p.k_sb, p.k_sh, p.k_sl, p.Hkv, p.Lk, kh);
  rows(p.v, p.v_sb, p.v_sh, p.v_sl, p.Hkv, p.Lk, vh);
  const std::vector<float> Dsum = e.row_dot(f.out);
  dq.assign(e.nq(), 0.f), dk.assign(e.nk(), 0.f), dv.assign(e.nk(), 0.f);
  if constexpr (D == 256) {  // its own kernel: 64 keys a block
    const dim3 grid(static_cast<unsigned>((p.Lk + kc::kBwd256Keys - 1) / kc::kBwd256Keys),
                    static_cast<unsigned>(p.B * p.Hkv));
    emulation::launch(grid, kc::kBwd256Threads, kc::backward256_smem_bytes(), [&] {
      kc::flash_wgmma_backward256_kernel<T, General>(p, qh.data(), gh.data(), kh.data(), vh.data(), f.lse.data(),
                                                     Dsum.data(), dq.data(), dk.data(), dv.data());
    });
  } else {
    const dim3 grid(static_cast<unsigned>((p.Lk + kc::kBwdKeys - 1) / kc::kBwdKeys), static_cast<unsigned>(p.B * p.Hkv));
    if (kernel == Backward::ws) {
      kc::BackwardMaps maps;
      kc::encode_backward_maps<T, D>(maps, p, qh.data(), gh.data(), kh.data(), vh.data());
      emulation::launch(grid, kc::kBwdWsThreads, kc::ws_backward_smem_bytes<D>(), [&] {
        kc::flash_wgmma_ws_backward_kernel<T, D, General>(p, maps, f.lse.data(), Dsum.data(), dq.data(), dk.data(),
                                                          dv.data());
      });
      return;
    }
    emulation::launch(grid, kc::kBwdThreads, kc::backward_smem_bytes<D>(), [&] {
      kc::flash_wgmma_backward_kernel<T, D, General>(p, qh.data(), gh.data(), kh.data(), vh.data(), f.lse.data(),
                                                     Dsum.data(), dq.data(), dk.data(), dv.data());
    });
  }
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
  const Rounded<T> r = prepass<T>(e.p);
  // the kernel attention_wgmma.cu's launch picks: a mask or dropout takes the general code of the
  // one-tile kernel at head dim 64 (of the overlapped one when asked for), of the overlapped one at 128
  // (head dim 256: the warp-specialized forward alone, and its own backward)
  Forward f;
  if (v == Variant::ws) f = e.general() ? forward_ws<T, D, true>(e, r) : forward_ws<T, D, false>(e, r);
  else if constexpr (D != 256) {
    if (e.general() && D == 64 && v != Variant::overlap) f = forward<T, D, 64, true, false>(e, r);
    else if (e.general()) f = forward<T, D, 64, true, true>(e, r);
    else if (v == Variant::tile64) f = forward<T, D, 64, false, false>(e, r);
    else if (v == Variant::tile128) f = forward<T, D, 128, false, false>(e, r);
    else f = forward<T, D, 64, false, true>(e, r);
  }
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
  (e.general() ? backward<T, D, true> : backward<T, D, false>)(e, f, bwd, dq, dk, dv);
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

}  // namespace

#else
TEST(AttentionWgmmaEmulated, EveryForwardVariantAndTheBackwardMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionWgmmaEmulated, TheWarpSpecializedKernelsMatchTheCpuWhicheverWarpsRunAhead) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
