// The bf16/f16 attention pair on mma.sync (kernels/cuda/attention_mma_kernels.cuh) run on the host,
// unchanged, through tests/kernels/cuda_emulation.h — ldmatrix, mma.sync m16n8k16 and the shuffles
// from the PTX ISA's tables — against qkv's CPU attention at the same precision (the f32 kernels at
// rounded q, k, v and dO): forward (out) and backward (dq, dk, dv), one and two m-tiles of query rows a
// warp, with and without the mask code. The kernels also round P and dS to the 16-bit type, which the
// CPU does not: within bf16's 2e-2 (f16's 2.5e-3), as Cuda.Bf16AttentionTrainsOnTheTensorCoresAsOnTheCpu
// on a GPU. Needs the CUDA toolkit's headers (a QKV_CUDA build).
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include "kernels/attention_emulation.h"
#include "kernels/cuda/attention_mma_kernels.cuh"

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;

// The pre-pass's dense T copy of [B, heads, L, D] rows at x with strides sb, sh, sl
template <typename T>
std::vector<T> dense_copy(const float* x, int64_t sb, int64_t sh, int64_t sl, int64_t B, int64_t heads, int64_t L,
                          int64_t D) {
  std::vector<T> out;
  out.reserve(B * heads * L * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t c = 0; c < D; ++c) {
          const float v = x[b * sb + h * sh + i * sl + c];
          if constexpr (std::is_same_v<T, __nv_bfloat16>) out.push_back(__float2bfloat16_rn(v));
          else out.push_back(__float2half_rn(v));
        }
  return out;
}

// out by the forward kernel (MT m-tiles a warp, key tiles of KN), then dq, dk, dv by the backward
template <typename T, int D, int MT, int KN, bool General>
void run(const qt::EmulatedAttention& e, std::vector<float>& out, std::vector<float>& dq, std::vector<float>& dk,
         std::vector<float>& dv) {
  const kernels::AttnProblem& p = e.p;
  const std::vector<T> qh = dense_copy<T>(p.q, p.q_sb, p.q_sh, p.q_sl, p.B, p.H, p.Lq, D),
                       kh = dense_copy<T>(p.k, p.k_sb, p.k_sh, p.k_sl, p.B, p.Hkv, p.Lk, D),
                       vh = dense_copy<T>(p.v, p.v_sb, p.v_sh, p.v_sl, p.B, p.Hkv, p.Lk, D),
                       gh = dense_copy<T>(e.dout.data(), p.H * p.Lq * D, p.Lq * D, D, p.B, p.H, p.Lq, D);
  std::vector<float> lse(p.B * p.H * p.Lq);
  out.assign(e.nq(), 0.f), dq.assign(e.nq(), 0.f), dk.assign(e.nk(), 0.f), dv.assign(e.nk(), 0.f);
  const unsigned rows = kc::kFwdRows<MT>;
  emulation::launch(dim3(static_cast<unsigned>((p.Lq + rows - 1) / rows), static_cast<unsigned>(p.B * p.H)),
                    kc::kThreads, kc::forward_smem_bytes<D, MT, KN>(), [&] {
                      kc::flash_mma_forward_kernel<T, D, MT, KN, General>(p, qh.data(), kh.data(), vh.data(),
                                                                          out.data(), lse.data());
                    });
  const std::vector<float> Dsum = e.row_dot(out);
  emulation::launch(dim3(static_cast<unsigned>((p.Lk + kc::kKeys - 1) / kc::kKeys), static_cast<unsigned>(p.B * p.Hkv)),
                    kc::kThreads, kc::backward_smem_bytes<D>(), [&] {
                      kc::flash_mma_backward_kernel<T, D, General>(p, qh.data(), kh.data(), vh.data(), gh.data(),
                                                                   lse.data(), Dsum.data(), dq.data(), dk.data(),
                                                                   dv.data());
                    });
}

template <typename T, int MT64, int MT128>
void check(const qt::AttentionCase& c, uint64_t seed) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  SCOPED_TRACE(qt::describe(c) << (bf16 ? " bf16" : " f16") << " MT " << (c.D == 64 ? MT64 : MT128));
  const qt::EmulatedAttention e =
      qt::emulated_attention(c, seed, bf16 ? AttentionCompute::bf16 : AttentionCompute::f16);
  std::vector<float> out, dq, dk, dv;
  // key tiles as attention_mma.cu launches them: 32 at head dim 128 with two m-tiles, else 64
  if (c.D == 64) (e.general() ? run<T, 64, MT64, 64, true> : run<T, 64, MT64, 64, false>)(e, out, dq, dk, dv);
  else if (MT128 == 2) (e.general() ? run<T, 128, 2, 32, true> : run<T, 128, 2, 32, false>)(e, out, dq, dk, dv);
  else (e.general() ? run<T, 128, 1, 64, true> : run<T, 128, 1, 64, false>)(e, out, dq, dk, dv);
  const double tol = bf16 ? 2e-2 : 2.5e-3;
  EXPECT_LT(qt::max_rel_error(out, e.out), tol) << "out";
  EXPECT_LT(qt::max_rel_error(dq, e.dq), tol) << "dq";
  EXPECT_LT(qt::max_rel_error(dk, e.dk), tol) << "dk";
  EXPECT_LT(qt::max_rel_error(dv, e.dv), tol) << "dv";
}

TEST(AttentionMmaEmulated, TheTensorCorePairMatchesTheCpu) {
  const qt::AttentionCase cases[] = {
      {1, 2, 2, 70, 90, 64, false, 0, false},   // ragged tiles both ways, no mask: the maskless kernels
      {1, 2, 1, 130, 70, 64, true, 1, false},   // causal, boolean mask, GQA, Lq > Lk
      {1, 2, 2, 65, 129, 128, false, 2, true},  // head dim 128, additive mask, heads split off [B, L, H, D]
      {1, 2, 2, 140, 140, 128, true, 3, false}, // causal, rows that see no key, two m-tiles' blocks
  };
  uint64_t seed = 2000;
  for (const qt::AttentionCase& c : cases) check<__nv_bfloat16, 1, 2>(c, seed += 10);  // the defaults
  // f16, and the other m-tile counts (QKV_CUDA_ATTENTION=mma2 at 64, mma1 at 128)
  check<__half, 1, 2>(cases[1], seed += 10);
  check<__nv_bfloat16, 2, 1>(cases[1], seed += 10);
  check<__nv_bfloat16, 2, 1>(cases[2], seed += 10);
  check<__nv_bfloat16, 1, 2>({1, 2, 1, 100, 140, 128, true, 0, false, 0.2f}, seed += 10);  // dropout
  // Lk odd: a row's pairs of keys start on either half of a hash's pair of draws (every other row)
  check<__nv_bfloat16, 1, 2>({1, 2, 2, 90, 101, 64, false, 2, false, 0.1f}, seed += 10);
}

}  // namespace

#else
TEST(AttentionMmaEmulated, TheTensorCorePairMatchesTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
