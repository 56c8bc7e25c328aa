// The f32 attention pair on the tensor cores (kernels/cuda/attention_tf32_kernels.cuh) run on the
// host, unchanged, through tests/kernels/cuda_emulation.h — every warp's fragments, shuffles and
// barriers as on a GPU — against qkv's CPU attention: forward (out) and backward (dq, dk, dv), causal
// or not, boolean and additive masks, rows that see no key, GQA, Lq ≠ Lk, ragged and whole tiles,
// heads split off a [B, L, H, D] projection, head dims 64 and 128. Within f32's noise (2e-5), which
// one TF32 product a term (~1e-3) is not. Needs the CUDA toolkit's headers (a QKV_CUDA build).
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include "kernels/attention_emulation.h"
#include "kernels/cuda/attention_tf32_kernels.cuh"

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;
using qt::AttentionCase;
using qt::max_rel_error;

// out, lse by the forward kernel, then dq, dk, dv by the backward (as attention_tf32.cu launches them)
template <int D, bool General>
void run(const qt::EmulatedAttention& e, std::vector<float>& out, std::vector<float>& dq, std::vector<float>& dk,
         std::vector<float>& dv) {
  constexpr int KN = D == 64 ? 64 : 32;
  const kernels::AttnProblem& p = e.p;
  std::vector<float> lse(p.B * p.H * p.Lq);
  out.assign(e.nq(), 0.f), dq.assign(e.nq(), 0.f), dk.assign(e.nk(), 0.f), dv.assign(e.nk(), 0.f);
  emulation::launch(dim3(static_cast<unsigned>((p.Lq + kc::kRows - 1) / kc::kRows), static_cast<unsigned>(p.B * p.H)),
                    kc::kThreads, kc::forward_smem_bytes<D, KN>(),
                    [&] { kc::flash_tf32_forward_kernel<D, KN, General>(p, out.data(), lse.data()); });
  const std::vector<float> Dsum = e.row_dot(out);
  emulation::launch(dim3(static_cast<unsigned>((p.Lk + kc::kKeys - 1) / kc::kKeys), static_cast<unsigned>(p.B * p.Hkv)),
                    kc::kThreads, kc::backward_smem_bytes<D>(), [&] {
                      kc::flash_tf32_backward_kernel<D, General>(p, lse.data(), Dsum.data(), e.dout.data(), dq.data(),
                                                                 dk.data(), dv.data());
                    });
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
  };
  uint64_t seed = 1000;
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(qt::describe(c));
    const qt::EmulatedAttention e = qt::emulated_attention(c, seed += 10);
    std::vector<float> out, dq, dk, dv;
    if (c.D == 64) (e.general() ? run<64, true> : run<64, false>)(e, out, dq, dk, dv);
    else (e.general() ? run<128, true> : run<128, false>)(e, out, dq, dk, dv);
    EXPECT_LT(max_rel_error(out, e.out), 2e-5) << "out";
    EXPECT_LT(max_rel_error(dq, e.dq), 2e-5) << "dq";
    EXPECT_LT(max_rel_error(dk, e.dk), 2e-5) << "dk";
    EXPECT_LT(max_rel_error(dv, e.dv), 2e-5) << "dv";
  }
}

}  // namespace

#else
TEST(AttentionTf32Emulated, TheTensorCorePairMatchesTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
