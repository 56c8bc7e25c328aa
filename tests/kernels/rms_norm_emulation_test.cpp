// RMSNorm's GPU kernels (kernels/cuda/rms_norm_kernels.cuh) — rms_norm and add_rms_norm forward, dx (a
// warp a row up to 1,024 elements, a block a row past it), dγ by strips — run on the host, unchanged,
// through tests/kernels/cuda_emulation.h, by rms_norm.cu's own launchers (compiled here: their grids, the
// strips' scratch, freed), against the CPU's kernels. Needs the CUDA toolkit's headers (a QKV_CUDA
// build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/rms_norm.h"
#include "kernels/cuda/rms_norm.cu"  // the launchers, on the emulated GPU
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel

void check_rms_norm(int64_t rows, int64_t n) {
  SCOPED_TRACE(::testing::Message() << rows << " rows of " << n);
  qkv::emulation::device().launched.clear();
  const float eps = 1e-6f;
  const std::vector<float> x = random_floats(rows * n, 91, 2.f), res = random_floats(rows * n, 92, 1.f),
                           gamma = random_floats(n, 93, 1.f), dy = random_floats(rows * n, 94, 1.f);
  for (int mode : {0, 1, 2}) {  // rms_norm, add_rms_norm, add_rms_norm with the residual dropped
    SCOPED_TRACE(mode == 0 ? "rms_norm" : mode == 1 ? "add_rms_norm" : "add_rms_norm, dropout");
    const bool add = mode > 0;
    const qkv::kernels::DropoutMask drop = mode == 2 ? qkv::kernels::dropout_mask(0.3f, 7, 5) : qkv::kernels::DropoutMask{};
    std::vector<float> y_c(rows * n), rstd_c(rows), s_c(rows * n), y_g(rows * n), rstd_g(rows), s_g(rows * n);
    std::vector<bf16> y16_c(rows * n), y16_g(rows * n);  // the outputs' bf16 copies (ops/autocast.h)
    if (add)
      cpu::add_rms_norm_forward(x.data(), res.data(), drop, gamma.data(), s_c.data(), y_c.data(), rstd_c.data(), rows, n,
                                eps, y16_c.data());
    else
      cpu::rms_norm_forward(x.data(), gamma.data(), y_c.data(), rstd_c.data(), rows, n, eps, y16_c.data());
    if (add)
      kc::add_rms_norm_forward(x.data(), res.data(), drop, gamma.data(), s_g.data(), y_g.data(), rstd_g.data(), rows, n,
                               eps, y16_g.data());
    else
      kc::rms_norm_forward(x.data(), gamma.data(), y_g.data(), rstd_g.data(), rows, n, eps, y16_g.data());
    EXPECT_EQ(bits_of(y16_c), converted_bits(y_c)) << "the CPU's copy: convert_to_bf16's of its y";
    EXPECT_EQ(bits_of(y16_g), rounded_bits(y_g)) << "the GPU's copy: its y rounded";
    if (add) {
      EXPECT_EQ(s_g, s_c) << "the sum rounded as an addition";
      EXPECT_EQ(s_c, added_after_dropout(x, res, drop)) << "the CPU's sum: add(x, dropout(res))";
    }
    EXPECT_LT(rel(y_g, y_c), 2e-6);
    EXPECT_LT(rel(rstd_g, rstd_c), 2e-6);
    const std::vector<float>& in = add ? s_c : x;
    std::vector<float> dx_c(rows * n), dg_c(n), dx_g(rows * n), dg_g(n);
    cpu::rms_norm_backward(in.data(), gamma.data(), rstd_c.data(), dy.data(), dx_c.data(), dg_c.data(), rows, n);
    kc::rms_norm_backward(in.data(), gamma.data(), rstd_c.data(), dy.data(), dx_g.data(), dg_g.data(), rows, n, {});
    if (mode == 2) {  // the residual's part in the same pass: dx + dsum, and the residual's gradient through the mask
      const std::vector<float> dsum = random_floats(rows * n, 95, 1.f);
      std::vector<float> ds_g(rows * n), dres_g(rows * n), ds_c(rows * n), dres_c(rows * n);
      std::vector<bf16> g16_g(rows * n), g16_c(rows * n);  // the residual's gradient's bf16 copy
      kc::rms_norm_backward(in.data(), gamma.data(), rstd_c.data(), dy.data(), ds_g.data(), nullptr, rows, n,
                            {dsum.data(), dres_g.data(), drop, g16_g.data()});
      EXPECT_EQ(bits_of(g16_g), rounded_bits(dres_g));
      const auto want = residual_gradients_of(dx_g, dsum, drop);
      EXPECT_EQ(ds_g, want.ds) << "ds = dx + dsum, rounded as an addition";
      EXPECT_EQ(dres_g, want.dres) << "dres = dropout(ds), dropout_apply's bits";
      cpu::rms_norm_backward(in.data(), gamma.data(), rstd_c.data(), dy.data(), ds_c.data(), nullptr, rows, n,
                             {dsum.data(), dres_c.data(), drop, g16_c.data()});
      EXPECT_EQ(bits_of(g16_c), converted_bits(dres_c));
      EXPECT_LT(rel(ds_g, ds_c), 2e-6);
      EXPECT_LT(rel(dres_g, dres_c), 2e-6);
    }
    EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "the strips' scratch not freed";
    EXPECT_LT(rel(dx_g, dx_c), 2e-6);
    EXPECT_LT(rel(dg_g, dg_c), 2e-6);
    // add_rms_norm's y is rms_norm's of its sum, bit for bit (one kernel, one order)
    if (add) {
      std::vector<float> y2_g(rows * n), rstd2_g(rows);
      kc::rms_norm_forward(s_g.data(), gamma.data(), y2_g.data(), rstd2_g.data(), rows, n, eps, nullptr);
      EXPECT_EQ(y2_g, y_g);
      EXPECT_EQ(rstd2_g, rstd_g);
    }
  }
  const bool warp = n <= 1024;  // the kernels each length takes
  EXPECT_EQ(qkv::emulation::launched(kc::rms_norm_forward_warp_kernel<true, 16>), warp && n == 300);
  EXPECT_EQ(qkv::emulation::launched(kc::rms_norm_dx_warp_kernel<16>), warp && n == 300);
  EXPECT_EQ(qkv::emulation::launched(kc::rms_norm_forward_kernel<true>), !warp);
  EXPECT_EQ(qkv::emulation::launched(kc::rms_norm_dx_kernel), !warp);
}

// (70 rows of 300: the warp kernels, eight rows a block, the last block's warps partly idle; 11 of 1,500: the
// block kernels)
TEST(RmsNormKernelsEmulated, RmsNormAndAddRmsNormMatchTheCpu) {
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{70, 300}, {11, 1500}}) check_rms_norm(rows, n);
}

}  // namespace
#endif
