// The batch and group normalization launchers of the CUDA backend (kernels/cuda/batch_norm.cu,
// compiled here with its kernels) run on the host through tests/kernels/cuda_emulation.h — batch norm
// in training (the running statistics updated) and in evaluation, group norm, forward and backward —
// against the CPU's kernels of the same declarations (kernels/batch_norm.inc, group_norm.inc). Needs
// the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <vector>

#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/group_norm.h"
#include "kernels/cuda/batch_norm.cu"  // the launchers, on the emulated GPU
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel

TEST(BatchNormLaunchersEmulated, BatchNormInTrainingAndEvaluationAndGroupNormMatchTheCpu) {
  const int64_t N = 3, C = 6, S = 70;  // S: a plane's 70 positions, more than a warp
  const std::vector<float> x = random_floats(N * C * S, 71, 2.f), dy = random_floats(N * C * S, 72, 1.f),
                           weight = random_floats(C, 73, 1.f), bias = random_floats(C, 74, 1.f);
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "evaluation");
    std::vector<float> y[2], mean[2], rstd[2], rm[2], rv[2], dx[2], dw[2], db[2];
    for (int d = 0; d < 2; ++d) {
      y[d].assign(N * C * S, -1.f), mean[d].assign(C, -1.f), rstd[d].assign(C, -1.f);
      rm[d] = random_floats(C, 75, 0.5f), rv[d].assign(C, 1.5f);
      dx[d].assign(N * C * S, -1.f), dw[d].assign(C, -1.f), db[d].assign(C, -1.f);
      (d ? kc::batch_norm_forward : cpu::batch_norm_forward)(x.data(), weight.data(), bias.data(), rm[d].data(),
                                                             rv[d].data(), training, 0.1f, 1e-5f, N, C, S,
                                                             y[d].data(), mean[d].data(), rstd[d].data());
      (d ? kc::batch_norm_backward : cpu::batch_norm_backward)(x.data(), dy.data(), mean[0].data(), rstd[0].data(),
                                                               weight.data(), training, N, C, S, dx[d].data(),
                                                               dw[d].data(), db[d].data());
    }
    EXPECT_LT(rel(y[1], y[0]), 2e-6);
    EXPECT_LT(rel(mean[1], mean[0]), 2e-6);
    EXPECT_LT(rel(rstd[1], rstd[0]), 2e-6);
    EXPECT_LT(rel(rm[1], rm[0]), 2e-6) << "the running mean";
    EXPECT_LT(rel(rv[1], rv[0]), 2e-6) << "the running variance";
    EXPECT_LT(rel(dx[1], dx[0]), 2e-6);
    EXPECT_LT(rel(dw[1], dw[0]), 2e-6);
    EXPECT_LT(rel(db[1], db[0]), 2e-6);
  }
  const int64_t G = 3;  // group norm: 3 groups of 2 channels
  std::vector<float> y[2], mean[2], rstd[2], dx[2], dw[2], db[2];
  for (int d = 0; d < 2; ++d) {
    y[d].assign(N * C * S, -1.f), mean[d].assign(N * G, -1.f), rstd[d].assign(N * G, -1.f);
    dx[d].assign(N * C * S, -1.f), dw[d].assign(C, -1.f), db[d].assign(C, -1.f);
    (d ? kc::group_norm_forward : cpu::group_norm_forward)(x.data(), weight.data(), bias.data(), 1e-5f, N, C, S, G,
                                                           y[d].data(), mean[d].data(), rstd[d].data());
    (d ? kc::group_norm_backward : cpu::group_norm_backward)(x.data(), dy.data(), mean[0].data(), rstd[0].data(),
                                                             weight.data(), N, C, S, G, dx[d].data(), dw[d].data(),
                                                             db[d].data());
  }
  EXPECT_LT(rel(y[1], y[0]), 2e-6);
  EXPECT_LT(rel(mean[1], mean[0]), 2e-6);
  EXPECT_LT(rel(rstd[1], rstd[0]), 2e-6);
  EXPECT_LT(rel(dx[1], dx[0]), 2e-6);
  EXPECT_LT(rel(dw[1], dw[0]), 2e-6);
  EXPECT_LT(rel(db[1], db[0]), 2e-6);
}

}  // namespace

#else
TEST(BatchNormLaunchersEmulated, BatchNormInTrainingAndEvaluationAndGroupNormMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
