// The pooling launchers of the CUDA backend (kernels/cuda/pool.cu, compiled here with its kernels) run
// on the host through tests/kernels/cuda_emulation.h — max pooling with its argmax and the gradient
// through it, average pooling (padding counted or not, a divisor override, ceil mode), adaptive
// average pooling, forward and backward — against the CPU's kernels of the same declarations
// (kernels/pool.inc). Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <vector>

#include "kernels/cpu/pool.h"
#include "kernels/cuda/pool.cu"  // the launchers, on the emulated GPU
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel
using qkv::kernels::Pool2dProblem;

Pool2dProblem problem(int64_t K, int64_t stride, int64_t pad, bool ceil_mode) {
  Pool2dProblem p;
  p.planes = 6, p.H = 13, p.W = 11, p.KH = p.KW = K, p.stride_h = p.stride_w = stride, p.pad_h = p.pad_w = pad;
  p.ceil_mode = ceil_mode;
  return p;
}

TEST(PoolLaunchersEmulated, MaxAverageAndAdaptivePoolingForwardAndBackwardMatchTheCpu) {
  for (const Pool2dProblem& base : {problem(3, 2, 1, false), problem(2, 2, 0, true), problem(3, 1, 1, false)}) {
    SCOPED_TRACE(::testing::Message() << "k " << base.KH << " stride " << base.stride_h << " pad " << base.pad_h
                                      << (base.ceil_mode ? " ceil" : ""));
    const int64_t in = base.planes * base.H * base.W, out = base.planes * base.out_h() * base.out_w();
    const std::vector<float> x = random_floats(in, 61, 1.f), dy = random_floats(out, 62, 1.f);
    {
      std::vector<float> y[2], dx[2];
      std::vector<int32_t> argmax[2];
      for (int d = 0; d < 2; ++d) {
        y[d].assign(out, -1.f), dx[d].assign(in, -1.f), argmax[d].assign(out, -1);
        (d ? kc::max_pool2d_forward : cpu::max_pool2d_forward)(base, x.data(), y[d].data(), argmax[d].data());
        (d ? kc::max_pool2d_backward : cpu::max_pool2d_backward)(base, dy.data(), argmax[0].data(), dx[d].data());
      }
      EXPECT_EQ(y[1], y[0]);
      EXPECT_EQ(argmax[1], argmax[0]);
      EXPECT_LT(rel(dx[1], dx[0]), 1e-6);
    }
    for (const int variant : {0, 1, 2}) {  // padding counted, not counted, a divisor of 5
      SCOPED_TRACE(variant);
      Pool2dProblem p = base;
      p.count_include_pad = variant != 1;
      p.divisor = variant == 2 ? 5 : 0;
      std::vector<float> y[2], dx[2];
      for (int d = 0; d < 2; ++d) {
        y[d].assign(out, -1.f), dx[d].assign(in, -1.f);
        (d ? kc::avg_pool2d_forward : cpu::avg_pool2d_forward)(p, x.data(), y[d].data());
        (d ? kc::avg_pool2d_backward : cpu::avg_pool2d_backward)(p, dy.data(), dx[d].data());
      }
      EXPECT_LT(rel(y[1], y[0]), 1e-6);
      EXPECT_LT(rel(dx[1], dx[0]), 1e-6);
    }
  }
  // adaptive: 13 × 11 onto 4 × 3 (uneven windows) and onto 13 × 11 itself
  for (const auto& [OH, OW] : {std::pair<int64_t, int64_t>{4, 3}, {13, 11}}) {
    const int64_t planes = 5, H = 13, W = 11;
    const std::vector<float> x = random_floats(planes * H * W, 63, 1.f), dy = random_floats(planes * OH * OW, 64, 1.f);
    std::vector<float> y[2], dx[2];
    for (int d = 0; d < 2; ++d) {
      y[d].assign(planes * OH * OW, -1.f), dx[d].assign(planes * H * W, -1.f);
      (d ? kc::adaptive_avg_pool2d_forward : cpu::adaptive_avg_pool2d_forward)(x.data(), y[d].data(), planes, H, W, OH,
                                                                               OW);
      (d ? kc::adaptive_avg_pool2d_backward : cpu::adaptive_avg_pool2d_backward)(dy.data(), dx[d].data(), planes, H, W,
                                                                                 OH, OW);
    }
    EXPECT_LT(rel(y[1], y[0]), 1e-6);
    EXPECT_LT(rel(dx[1], dx[0]), 1e-6);
  }
}

}  // namespace

#else
TEST(PoolLaunchersEmulated, MaxAverageAndAdaptivePoolingForwardAndBackwardMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
