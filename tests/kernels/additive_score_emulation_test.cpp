// Bahdanau's fused additive scores on the GPU (kernels/cuda/additive_score.cu, compiled here with its
// kernels) run on the host through tests/kernels/cuda_emulation.h — e_tj = Σ_a v_a tanh(q_ta + k_ja)
// and its gradients for q, k and v, recomputing the tanh — against the CPU's kernels of the same
// declarations (kernels/additive_score.inc). Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/cpu/additive_score.h"
#include "kernels/cuda/additive_score.cu"  // the launchers, on the emulated GPU
#include "kernels/cuda/elementwise.cu"     // (fill_f32)
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel

TEST(AdditiveScoreLaunchersEmulated, ScoresAndTheirGradientsMatchTheCpu) {
  for (const auto& [B, T, S, A] : {std::array<int64_t, 4>{2, 5, 7, 40}, std::array<int64_t, 4>{1, 3, 300, 33}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " S " << S << " A " << A);
    const std::vector<float> q = random_floats(B * T * A, 101, 1.f), k = random_floats(B * S * A, 102, 1.f),
                             v = random_floats(A, 103, 1.f), de = random_floats(B * T * S, 104, 1.f);
    std::vector<float> e[2], dq[2], dk[2], dv[2];
    for (int d = 0; d < 2; ++d) {
      e[d].assign(B * T * S, -1.f), dq[d].assign(B * T * A, -1.f), dk[d].assign(B * S * A, -1.f), dv[d].assign(A, -1.f);
      (d ? kc::additive_score_forward : cpu::additive_score_forward)(q.data(), k.data(), v.data(), e[d].data(), B, T,
                                                                     S, A);
      (d ? kc::additive_score_backward : cpu::additive_score_backward)(q.data(), k.data(), v.data(), de.data(),
                                                                       dq[d].data(), dk[d].data(), dv[d].data(), B, T,
                                                                       S, A);
    }
    EXPECT_LT(rel(e[1], e[0]), 1e-5);
    EXPECT_LT(rel(dq[1], dq[0]), 1e-5);
    EXPECT_LT(rel(dk[1], dk[0]), 1e-5);
    EXPECT_LT(rel(dv[1], dv[0]), 1e-5);
  }
  EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "scratch not freed";
}

}  // namespace

#else
TEST(AdditiveScoreLaunchersEmulated, ScoresAndTheirGradientsMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
