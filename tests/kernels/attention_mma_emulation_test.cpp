// bf16/f16 attention on the GPU run on the host through tests/kernels/cuda_emulation.h, by the same
// entry points the ops call (attention_forward_flash_bf16 and its kin: attention_16bit.cu's choice of
// kernels, compiled here with the launchers it chooses among), against qkv's CPU attention at the
// same precision:
// - the mma.sync pair (attention_mma_kernels.cuh) — ldmatrix, mma.sync m16n8k16 and the shuffles from
//   the PTX ISA's tables — by attention_mma.cu's launchers: the pre-pass's dense T copies, one and two
//   m-tiles of query rows a warp (QKV_CUDA_ATTENTION=mma1 / mma2), with and without the mask code, dq
//   zeroed and D_i made by the dispatch. The kernels also round P and dS to the 16-bit type, which the
//   CPU does not: within bf16's 2e-2 (f16's 2.5e-3), as Cuda.Bf16AttentionTrainsOnTheTensorCoresAsOnTheCpu
//   on a GPU.
// - which kernels each GPU takes (emulation::device().launched): on an H200 the wgmma forward and the
//   backward measured fastest there (the warp-specialized wgmma one at head dim 128, at 64 mma.sync's
//   below 2,048 keys and the two-warpgroup wgmma one from there) or the one QKV_CUDA_ATTENTION_BACKWARD
//   names, and at head dim 256 the Hopper kernels; on an A100 (compute capability 8.0) the mma.sync pair
//   whatever QKV_CUDA_ATTENTION and QKV_CUDA_ATTENTION_BACKWARD ask, since the Hopper kernels'
//   instructions do not exist there; head dim 256 there, other head dims and decoding steps the f32
//   kernels over rounded copies.
// - QKV_CUDA_ATTENTION=wmma: the WMMA pair (attention_bf16.cu, through wmma_emulation.h; its own cases
//   are attention_wmma_emulation_test.cpp's).
// Needs the CUDA toolkit's headers (a QKV_CUDA build).
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host
#include "kernels/wmma_emulation.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_emulation.h"
#include "kernels/cuda/attention_16bit.cu"        // the launchers, on the emulated GPU: which kernels serve
#include "kernels/cuda/attention_mma.cu"          // the mma.sync pair
#include "kernels/cuda/sm90a/attention_wgmma.cu"  // the Hopper pair, which attention_mma.cu asks first
#include "kernels/cuda/attention.cu"              // the f32 pair, for the shapes off the tiles
#include "kernels/cuda/attention_tf32.cu"
#include "kernels/cuda/paged_attention.cu"  // the decoding steps over a dense cache (attention_decode_tiled)
#include "kernels/cuda/attention_zero_rows.cu"
#include "kernels/cuda/elementwise.cu"  // the rounded copies' strided copy and rounding
#include "kernels/cuda/attention_bf16.cu"  // the WMMA pair (QKV_CUDA_ATTENTION=wmma)

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;
namespace em = qkv::emulation;

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

// out and lse by attention_forward_flash_{bf16,f16}, then — where `backward` — dq, dk, dv by
// attention_backward_flash_{bf16,f16} into buffers of NaN (the dispatch zeroes dq for the tiles'
// atomics), as the ops call them; every scratch block freed after each
template <typename T>
Result run(const qt::EmulatedAttention& e, bool backward = true) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const kernels::AttnProblem& p = e.p;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Result r{std::vector<float>(e.nq(), nan), std::vector<float>(p.B * p.H * p.Lq, nan), {}, {}, {}};
  (bf16 ? kc::attention_forward_flash_bf16 : kc::attention_forward_flash_f16)(p, r.out.data(), r.lse.data());
  EXPECT_TRUE(em::device().blocks.empty()) << "the forward's scratch not freed";
  if (!backward) return r;
  r.dq.assign(e.nq(), nan), r.dk.assign(e.nk(), nan), r.dv.assign(e.nk(), nan);
  (bf16 ? kc::attention_backward_flash_bf16 : kc::attention_backward_flash_f16)(
      p, r.out.data(), r.lse.data(), e.dout.data(), r.dq.data(), r.dk.data(), r.dv.data());
  EXPECT_TRUE(em::device().blocks.empty()) << "the backward's scratch not freed";
  return r;
}

void expect_near(const qt::EmulatedAttention& e, const Result& r, double tol) {
  EXPECT_LT(qt::max_rel_error(r.out, e.out), tol) << "out";
  if (r.dq.empty()) return;
  EXPECT_LT(qt::max_rel_error(r.dq, e.dq), tol) << "dq";
  EXPECT_LT(qt::max_rel_error(r.dk, e.dk), tol) << "dk";
  EXPECT_LT(qt::max_rel_error(r.dv, e.dv), tol) << "dv";
}

// Whether the f32 CUDA-core forward ran, reading its operands as they are (0), rounded to bf16 (1) or
// to f16 (2)
// (a decoding step over a dense cache: the paged decoding kernel, rounding alike: paged_attention.cu)
template <int Round>
bool f32_forward_launched_rounding() {
  return em::launched(kc::flash_forward_kernel<Round>) || em::launched(kc::split_kv_partial_kernel<Round>) ||
         em::launched(kc::paged_attention_tiled_kernel<float, Round>);
}
bool f32_forward_launched(int round) {
  switch (round) {
    case 0: return f32_forward_launched_rounding<0>();
    case 1: return f32_forward_launched_rounding<1>();
    default: return f32_forward_launched_rounding<2>();
  }
}
bool f32_forward_launched() { return f32_forward_launched(0) || f32_forward_launched(1) || f32_forward_launched(2); }

// The mma.sync pair with MT m-tiles a warp at head dim D (keys in tiles of 32 at 128 with two m-tiles,
// else 64, as attention_mma.cu launches them): those kernels launched, and no other attention kernel
template <typename T, int D, int MT>
void check(const qt::AttentionCase& c, uint64_t seed) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int KN = D == 128 && MT == 2 ? 32 : 64;
  SCOPED_TRACE(qt::describe(c) << (bf16 ? " bf16" : " f16") << " MT " << MT);
  ASSERT_EQ(c.D, D);
  const qt::ScopedEnv tiles("QKV_CUDA_ATTENTION", MT == 1 ? "mma1" : "mma2"), backward("QKV_CUDA_ATTENTION_BACKWARD", "mma");
  const qt::EmulatedAttention e =
      qt::emulated_attention(c, seed, bf16 ? AttentionCompute::bf16 : AttentionCompute::f16);
  em::device().launched.clear();
  const Result r = run<T>(e);
  expect_near(e, r, bf16 ? 2e-2 : 2.5e-3);
  namespace mp = kc::mma_pair;
  const bool general = e.general();
  EXPECT_TRUE(general ? em::launched(mp::flash_mma_forward_kernel<T, D, MT, KN, true>)
                      : em::launched(mp::flash_mma_forward_kernel<T, D, MT, KN, false>))
      << "not the mma.sync forward with " << MT << " m-tiles a warp and " << (general ? "" : "without ")
      << "the mask code";
  EXPECT_TRUE(general ? em::launched(mp::flash_mma_backward_kernel<T, D, true>)
                      : em::launched(mp::flash_mma_backward_kernel<T, D, false>))
      << "not the mma.sync backward";
  EXPECT_FALSE(f32_forward_launched() || em::launched(kc::flash_dq_kernel)) << "an f32 kernel ran";
}

TEST(AttentionMmaEmulated, TheTensorCorePairMatchesTheCpu) {
  const qt::AttentionCase cases[] = {
      {1, 2, 2, 70, 90, 64, false, 0, false},   // ragged tiles both ways, no mask: the maskless kernels
      {1, 2, 1, 130, 70, 64, true, 1, false},   // causal, boolean mask, GQA, Lq > Lk
      {1, 2, 2, 65, 129, 128, false, 2, true},  // head dim 128, additive mask, heads split off [B, L, H, D]
      {1, 2, 2, 140, 140, 128, true, 3, false}, // causal, rows that see no key, two m-tiles' blocks
  };
  uint64_t seed = 2000;
  check<__nv_bfloat16, 64, 1>(cases[0], seed += 10);  // each head dim's default m-tiles
  check<__nv_bfloat16, 64, 1>(cases[1], seed += 10);
  check<__nv_bfloat16, 128, 2>(cases[2], seed += 10);
  check<__nv_bfloat16, 128, 2>(cases[3], seed += 10);
  // f16, and the other m-tile counts (QKV_CUDA_ATTENTION=mma2 at 64, mma1 at 128)
  check<__half, 64, 1>(cases[1], seed += 10);
  check<__nv_bfloat16, 64, 2>(cases[1], seed += 10);
  check<__nv_bfloat16, 128, 1>(cases[2], seed += 10);
  check<__nv_bfloat16, 128, 2>({1, 2, 1, 100, 140, 128, true, 0, false, 0.2f}, seed += 10);  // dropout
  // Lk odd: a row's pairs of keys start on either half of a hash's pair of draws (every other row)
  check<__nv_bfloat16, 64, 1>({1, 2, 2, 90, 101, 64, false, 2, false, 0.1f}, seed += 10);
  // a scale of the caller's, large enough (scores of a few hundred) that e^(x − m') overflows unless m' is
  // the rows' largest score: positive, on whole tiles (plain: the scale in the softmax's exponent), and
  // negative (every tile formed element by element: the max of S is not the max of scale·S)
  check<__nv_bfloat16, 64, 1>({1, 2, 2, 64, 128, 64, false, 0, false, 0.f, 12.f}, seed += 10);
  check<__nv_bfloat16, 64, 1>({1, 2, 2, 64, 128, 64, false, 0, false, 0.f, -12.f}, seed += 10);
}

// Which kernels the dispatch launched: the wgmma forward, the mma.sync one, or the f32 one; the backward
// likewise, and the two wgmma backwards at steps of R query rows (by default the head dim's)
struct Taken {
  bool wgmma_forward, mma_forward, mma_backward, f32_forward, f32_backward, wgmma_backward = false, ws_backward = false;
};
template <typename T, int D, int R = kc::kBwdRows<D>>
Taken taken(bool general) {
  namespace mp = kc::mma_pair;
  const bool g = general;
  return {em::launched(g ? kc::flash_wgmma_overlap_kernel<T, D, 64, true>
                         : kc::flash_wgmma_overlap_kernel<T, D, 64, false>) ||
              em::launched(g ? kc::flash_wgmma_forward_kernel<T, D, 64, true>
                             : kc::flash_wgmma_forward_kernel<T, D, 64, false>),
          em::launched(g      ? mp::flash_mma_forward_kernel < T, D, 2, D == 128 ? 32 : 64,
                       true > : mp::flash_mma_forward_kernel < T, D, 2, D == 128 ? 32 : 64, false >) ||
              em::launched(g ? mp::flash_mma_forward_kernel<T, D, 1, 64, true>
                             : mp::flash_mma_forward_kernel<T, D, 1, 64, false>),
          em::launched(g ? mp::flash_mma_backward_kernel<T, D, true> : mp::flash_mma_backward_kernel<T, D, false>),
          f32_forward_launched() ||
              em::launched(kc::tf32_pair::flash_tf32_forward_kernel < D, D == 128 ? 32 : 64, false >) ||
              em::launched(kc::tf32_pair::flash_tf32_forward_kernel < D, D == 128 ? 32 : 64, true >),
          em::launched(kc::flash_dq_kernel) ||
              em::launched(kc::tf32_pair::flash_tf32_backward_kernel<D, kc::tf32_pair::kStepRows<D>, false>) ||
              em::launched(kc::tf32_pair::flash_tf32_backward_kernel<D, kc::tf32_pair::kStepRows<D>, true>),
          em::launched(g ? kc::flash_wgmma_backward_kernel<T, D, R, true>
                         : kc::flash_wgmma_backward_kernel<T, D, R, false>),
          em::launched(g ? kc::flash_wgmma_ws_backward_kernel<T, D, R, true>
                         : kc::flash_wgmma_ws_backward_kernel<T, D, R, false>)};
}

TEST(AttentionMmaEmulated, EachGpuTakesItsKernels) {
  const qt::AttentionCase c128{1, 2, 1, 80, 100, 128, true, 0, false}, c64{1, 2, 2, 70, 90, 64, false, 2, false};
  const qt::EmulatedAttention e128 = qt::emulated_attention(c128, 4001, AttentionCompute::bf16),
                              e64 = qt::emulated_attention(c64, 4002, AttentionCompute::bf16);
  const qt::ScopedEnv unset("QKV_CUDA_ATTENTION", nullptr), unset_backward("QKV_CUDA_ATTENTION_BACKWARD", nullptr);
  // an H200: the wgmma forward; the backward the fastest measured there (attention_wgmma.cu's
  // backward_kernel) — at head dim 128 the warp-specialized one, at 64 mma.sync's below 2,048 keys and the
  // two-warpgroup one from there — or the one QKV_CUDA_ATTENTION_BACKWARD names
  {
    SCOPED_TRACE("H200, head dim 128");
    em::device().launched.clear();
    expect_near(e128, run<__nv_bfloat16>(e128), 2e-2);
    const Taken t = taken<__nv_bfloat16, 128>(false);
    EXPECT_TRUE(t.wgmma_forward && !t.mma_forward && t.ws_backward && !t.wgmma_backward && !t.mma_backward &&
                !t.f32_forward && !t.f32_backward);
  }
  for (const char* backward : {"mma", "wgmma", "wgmma-ws"}) {
    SCOPED_TRACE(::testing::Message() << "H200, head dim 128, QKV_CUDA_ATTENTION_BACKWARD=" << backward);
    const qt::ScopedEnv b("QKV_CUDA_ATTENTION_BACKWARD", backward);
    em::device().launched.clear();
    expect_near(e128, run<__nv_bfloat16>(e128), 2e-2);
    const Taken t = taken<__nv_bfloat16, 128>(false);
    EXPECT_TRUE(t.wgmma_forward && !t.mma_forward && !t.f32_backward);
    EXPECT_EQ(t.mma_backward, backward[0] == 'm');
    EXPECT_EQ(t.wgmma_backward, std::strcmp(backward, "wgmma") == 0);
    EXPECT_EQ(t.ws_backward, std::strcmp(backward, "wgmma-ws") == 0);
  }
  {
    SCOPED_TRACE("H200, head dim 64, 90 keys");
    em::device().launched.clear();
    expect_near(e64, run<__nv_bfloat16>(e64), 2e-2);
    const Taken t = taken<__nv_bfloat16, 64>(true);
    EXPECT_TRUE(t.wgmma_forward && t.mma_backward && !t.wgmma_backward && !t.ws_backward && !t.f32_backward);
  }
  {
    SCOPED_TRACE("H200, head dim 64, 2,048 keys");
    const qt::EmulatedAttention e =
        qt::emulated_attention({1, 1, 1, 20, 2048, 64, false, 0, false}, 4003, AttentionCompute::bf16);
    em::device().launched.clear();
    expect_near(e, run<__nv_bfloat16>(e), 2e-2);
    const Taken t = taken<__nv_bfloat16, 64>(false);
    EXPECT_TRUE(t.wgmma_forward && t.wgmma_backward && !t.mma_backward && !t.ws_backward && !t.f32_backward);
    EXPECT_FALSE((taken<__nv_bfloat16, 64, 64>(false).wgmma_backward)) << "steps of 128 rows at head dim 64";
    // QKV_CUDA_ATTENTION_BACKWARD_ROWS=64: steps of 64 rows, in either wgmma backward
    const qt::ScopedEnv rows("QKV_CUDA_ATTENTION_BACKWARD_ROWS", "64");
    for (const char* backward : {"wgmma", "wgmma-ws"}) {
      SCOPED_TRACE(::testing::Message() << "QKV_CUDA_ATTENTION_BACKWARD_ROWS=64, " << backward);
      const qt::ScopedEnv b("QKV_CUDA_ATTENTION_BACKWARD", backward);
      em::device().launched.clear();
      expect_near(e, run<__nv_bfloat16>(e), 2e-2);
      const Taken t64 = taken<__nv_bfloat16, 64, 64>(false), t128 = taken<__nv_bfloat16, 64, 128>(false);
      EXPECT_EQ(t64.wgmma_backward, backward[5] == 0);
      EXPECT_EQ(t64.ws_backward, backward[5] != 0);
      EXPECT_FALSE(t128.wgmma_backward || t128.ws_backward);
    }
  }
  // QKV_CUDA_ATTENTION=wmma: the WMMA pair on either GPU (dq zeroed and D_i made by the dispatch)
  for (bool a100 : {false, true}) {
    SCOPED_TRACE(a100 ? "A100, wmma" : "H200, wmma");
    const em::ScopedArchitecture gpu(a100 ? em::kA100 : em::device().arch);
    const qt::ScopedEnv wmma("QKV_CUDA_ATTENTION", "wmma");
    em::device().launched.clear();
    expect_near(e64, run<__nv_bfloat16>(e64), 2e-2);
    EXPECT_TRUE(em::launched(kc::flash_bf16_forward_kernel<__nv_bfloat16, 64>));
    EXPECT_TRUE(em::launched(kc::flash_bf16_backward_kernel<__nv_bfloat16, 64>));
    const Taken t = taken<__nv_bfloat16, 64>(true);
    EXPECT_TRUE(!t.wgmma_forward && !t.mma_forward && !t.mma_backward && !t.f32_forward && !t.f32_backward);
  }
  {  // an A100: the mma.sync pair at its default m-tiles, whatever asks for the Hopper kernels
    const em::ScopedArchitecture a100(em::kA100);
    for (const char* forward : {"", "wgmma"})
      for (const char* backward : {"", "wgmma", "wgmma-ws"}) {
        SCOPED_TRACE(::testing::Message()
                     << "A100, QKV_CUDA_ATTENTION=" << forward << " QKV_CUDA_ATTENTION_BACKWARD=" << backward);
        const qt::ScopedEnv f("QKV_CUDA_ATTENTION", *forward ? forward : nullptr),
            b("QKV_CUDA_ATTENTION_BACKWARD", *backward ? backward : nullptr);
        em::device().launched.clear();
        expect_near(e128, run<__nv_bfloat16>(e128), 2e-2);
        EXPECT_TRUE(em::launched(kc::mma_pair::flash_mma_forward_kernel<__nv_bfloat16, 128, 2, 32, false>));
        const Taken t = taken<__nv_bfloat16, 128>(false);
        EXPECT_TRUE(!t.wgmma_forward && t.mma_forward && t.mma_backward && !t.f32_forward && !t.f32_backward);
      }
    SCOPED_TRACE("A100, head dim 64, a mask");
    em::device().launched.clear();
    expect_near(e64, run<__nv_bfloat16>(e64), 2e-2);
    EXPECT_TRUE(em::launched(kc::mma_pair::flash_mma_forward_kernel<__nv_bfloat16, 64, 1, 64, true>));
    EXPECT_TRUE(em::launched(kc::mma_pair::flash_mma_backward_kernel<__nv_bfloat16, 64, true>));
  }
}

// Off the tiles — head dim 80, D ≠ Dv's kin; head dim 256 but on Hopper; a decoding step (a few rows,
// no lse) — the f32 kernels over copies of q, k, v (and dO) rounded to T: the CPU's bf16 and f16
// attention to f32's last bits (the same rounding, f32 products, no P rounded). Head dim 256 on an H200:
// the warp-specialized wgmma forward and head dim 256's wgmma backward.
TEST(AttentionMmaEmulated, OtherShapesTakeTheF32KernelsOverRoundedCopies) {
  const qt::ScopedEnv unset("QKV_CUDA_ATTENTION", nullptr), unset_backward("QKV_CUDA_ATTENTION_BACKWARD", nullptr);
  uint64_t seed = 5000;
  const qt::AttentionCase d256{1, 2, 2, 33, 47, 256, false, 2, true};
  {
    SCOPED_TRACE(qt::describe(d256) << " on an H200");
    const qt::EmulatedAttention e = qt::emulated_attention(d256, seed += 10, AttentionCompute::bf16);
    em::device().launched.clear();
    expect_near(e, run<__nv_bfloat16>(e), 2e-2);
    using Ws = kc::WsShape<256>;
    EXPECT_TRUE(em::launched(kc::flash_wgmma_ws_kernel<__nv_bfloat16, 256, Ws::KN, Ws::Stages, true>));
    EXPECT_TRUE(em::launched(kc::flash_wgmma_backward256_kernel<__nv_bfloat16, true>));
    EXPECT_FALSE(f32_forward_launched() || em::launched(kc::flash_dq_kernel));
  }
  for (const em::Architecture& arch : {em::kH200, em::kA100}) {
    const em::ScopedArchitecture gpu(arch);
    for (const qt::AttentionCase& c : {qt::AttentionCase{1, 2, 1, 40, 50, 80, true, 1, false}, d256}) {
      if (c.D == 256 && arch.major == 9) continue;  // above
      SCOPED_TRACE(qt::describe(c) << " compute capability " << arch.major << "." << arch.minor);
      for (const AttentionCompute compute : {AttentionCompute::bf16, AttentionCompute::f16}) {
        const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10, compute);
        em::device().launched.clear();
        const Result r = compute == AttentionCompute::bf16 ? run<__nv_bfloat16>(e) : run<__half>(e);
        expect_near(e, r, 1e-4);
        EXPECT_TRUE(f32_forward_launched(compute == AttentionCompute::bf16 ? 1 : 2)) << "not the f32 forward, rounding";
        EXPECT_TRUE(em::launched(kc::flash_dq_kernel) && em::launched(kc::flash_dkv_kernel)) << "not the f32 backward";
      }
    }
  }
  // a decoding step on the tiles' head dim: 3 query rows against 300 keys (a warp a row) and 1 against
  // 2,000 (the paged decoding kernel over the dense cache; QKV_CUDA_PAGED_KERNEL=warps: split over the
  // keys), no lse: the f32 kernels rounding q, k and v as they read them, bit for bit the same f32
  // kernels over copies rounded first (what served until 2026-12-04), and no scratch left
  for (const qt::AttentionCase& c : {qt::AttentionCase{1, 2, 1, 3, 300, 128, false, 0, false},
                                     qt::AttentionCase{1, 4, 2, 1, 2000, 64, false, 0, false}})
    for (const AttentionCompute compute : {AttentionCompute::bf16, AttentionCompute::f16}) {
      const bool is_bf16 = compute == AttentionCompute::bf16;
      SCOPED_TRACE(qt::describe(c) << (is_bf16 ? " bf16" : " f16"));
      const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10, compute);
      std::vector<float> out(e.nq());
      em::device().launched.clear();
      (is_bf16 ? kc::attention_forward_flash_bf16 : kc::attention_forward_flash_f16)(e.p, out.data(), nullptr);
      EXPECT_LT(qt::max_rel_error(out, e.out), 1e-4);
      EXPECT_TRUE(f32_forward_launched(is_bf16 ? 1 : 2));
      EXPECT_EQ(em::launched(kc::paged_attention_tiled_kernel<float, 1>) ||
                    em::launched(kc::paged_attention_tiled_kernel<float, 2>),
                c.Lk == 2000);
      const Taken t = taken<__nv_bfloat16, 128>(false);
      EXPECT_FALSE(t.wgmma_forward || t.mma_forward);
      EXPECT_TRUE(em::device().blocks.empty());
      auto rounded = [&](const float* x, size_t n) {
        std::vector<float> r(x, x + n);
        for (float& v : r) v = is_bf16 ? bf16_to_f32(f32_to_bf16(v)) : round_to_f16(v);
        return r;
      };
      const std::vector<float> q = rounded(e.p.q, e.nq()), k = rounded(e.p.k, e.nk()), v = rounded(e.p.v, e.nk());
      kernels::AttnProblem f32 = e.p;
      f32.q = q.data(), f32.k = k.data(), f32.v = v.data(), f32.compute = kernels::AttnCompute::f32;
      std::vector<float> want(e.nq());
      kc::attention_forward_flash_f32(f32, want.data(), nullptr);
      EXPECT_EQ(out, want) << "not the f32 kernels' numbers over rounded copies";
      {  // the split-KV pair (QKV_CUDA_PAGED_KERNEL=warps), whose sums run in another order: its own numbers
        const qt::ScopedEnv pair("QKV_CUDA_PAGED_KERNEL", "warps");
        std::vector<float> split(e.nq()), split_want(e.nq());
        em::device().launched.clear();
        (is_bf16 ? kc::attention_forward_flash_bf16 : kc::attention_forward_flash_f16)(e.p, split.data(), nullptr);
        EXPECT_EQ(em::launched(kc::split_kv_partial_kernel<1>) || em::launched(kc::split_kv_partial_kernel<2>),
                  c.Lk == 2000);
        kc::attention_forward_flash_f32(f32, split_want.data(), nullptr);
        EXPECT_EQ(split, split_want) << "not the split-KV pair's numbers over rounded copies";
        EXPECT_LT(qt::max_rel_error(split, want), 1e-5) << "the split-KV pair against the paged decoding kernel";
      }
    }
}

// Soft-capped scores (Gemma 2's): the forward at head dims 64 and 128 on mma.sync's tiles in their
// General form — on Hopper too, in place of wgmma's, whose kernels take no cap — and the backward on the
// f32 kernels over rounded copies (the tile backwards keep P in S's place: no room for the cap's slope);
// head dim 256 both on the f32 kernels: the CPU's bf16 and f16 attention, cap and slope included; a
// decoding step (no lse) through the paged decoding kernel, capped too.
TEST(AttentionMmaEmulated, SoftCappedScoresTakeMmaSyncsForwardAndBackward) {
  const qt::ScopedEnv unset("QKV_CUDA_ATTENTION", nullptr), unset_backward("QKV_CUDA_ATTENTION_BACKWARD", nullptr);
  uint64_t seed = 5400;
  for (const em::Architecture& arch : {em::kH200, em::kA100}) {
    const em::ScopedArchitecture gpu(arch);
    for (const qt::AttentionCase& c : {qt::AttentionCase{1, 2, 1, 40, 50, 64, true, 2, false, 0.f, 0.f, 0.6f},
                                       qt::AttentionCase{1, 2, 2, 70, 47, 128, false, 1, true, 0.f, 0.f, 1.f},
                                       // no mask, whole tiles of keys: plain tiles but for the cap
                                       qt::AttentionCase{1, 2, 2, 64, 128, 64, false, 0, false, 0.f, 0.f, 0.7f},
                                       qt::AttentionCase{1, 2, 2, 20, 30, 256, false, 0, false, 0.f, 0.f, 0.5f}}) {
      SCOPED_TRACE(qt::describe(c) << " compute capability " << arch.major << "." << arch.minor);
      for (const AttentionCompute compute : {AttentionCompute::bf16, AttentionCompute::f16}) {
        const bool is_bf16 = compute == AttentionCompute::bf16;
        const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10, compute);
        em::device().launched.clear();
        const Result r = is_bf16 ? run<__nv_bfloat16>(e) : run<__half>(e);
        if (c.D == 256 && arch.major == 9) {  // Hopper: the Capped forms of wgmma's head-dim-256 kernels
          expect_near(e, r, is_bf16 ? 2e-2 : 2.5e-3);
          using Ws = kc::WsShape<256>;
          EXPECT_TRUE(is_bf16
                          ? em::launched(kc::flash_wgmma_ws_kernel<__nv_bfloat16, 256, Ws::KN, Ws::Stages, true, true>)
                          : em::launched(kc::flash_wgmma_ws_kernel<__half, 256, Ws::KN, Ws::Stages, true, true>))
              << "not the capped warp-specialized forward";
          EXPECT_TRUE(is_bf16 ? em::launched(kc::flash_wgmma_backward256_kernel<__nv_bfloat16, true, true>)
                              : em::launched(kc::flash_wgmma_backward256_kernel<__half, true, true>))
              << "not the capped head-dim-256 backward";
        } else if (c.D == 256) {
          expect_near(e, r, 1e-4);
          EXPECT_TRUE(f32_forward_launched(is_bf16 ? 1 : 2)) << "not the f32 forward, rounding";
        } else {
          expect_near(e, r, is_bf16 ? 2e-2 : 2.5e-3);  // (P rounded to the 16-bit type for P V)
          const Taken t = c.D == 64 ? (is_bf16 ? taken<__nv_bfloat16, 64>(true) : taken<__half, 64>(true))
                                    : (is_bf16 ? taken<__nv_bfloat16, 128>(true) : taken<__half, 128>(true));
          EXPECT_TRUE(t.mma_forward && !t.wgmma_forward) << "not mma.sync's forward";
          EXPECT_FALSE(t.mma_backward || t.wgmma_backward || t.ws_backward) << "an uncapped tile backward ran";
          namespace mp = kc::mma_pair;
          EXPECT_TRUE(c.D == 64 ? (is_bf16 ? em::launched(mp::flash_mma_backward_kernel<__nv_bfloat16, 64, true, true>)
                                           : em::launched(mp::flash_mma_backward_kernel<__half, 64, true, true>))
                                : (is_bf16 ? em::launched(mp::flash_mma_backward_kernel<__nv_bfloat16, 128, true, true>)
                                           : em::launched(mp::flash_mma_backward_kernel<__half, 128, true, true>)))
              << "not mma.sync's capped backward";
        }
        EXPECT_EQ(c.D == 256 && arch.major != 9,
                  em::launched(kc::flash_dq_kernel) && em::launched(kc::flash_dkv_kernel))
            << "the f32 backward at head dim 256 off Hopper alone";
      }
    }
  }
  const qt::AttentionCase step{1, 4, 2, 1, 2000, 128, false, 0, false, 0.f, 0.f, 0.5f};
  const qt::EmulatedAttention e = qt::emulated_attention(step, seed += 10, AttentionCompute::bf16);
  std::vector<float> out(e.nq());
  em::device().launched.clear();
  kc::attention_forward_flash_bf16(e.p, out.data(), nullptr);
  EXPECT_LT(qt::max_rel_error(out, e.out), 1e-4) << "a decoding step";
  EXPECT_TRUE(em::launched(kc::paged_attention_tiled_kernel<float, 1>)) << "not the paged decoding kernel";
}

}  // namespace

#else
TEST(AttentionMmaEmulated, SoftCappedScoresTakeMmaSyncsForwardAndBackward) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionMmaEmulated, TheTensorCorePairMatchesTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
