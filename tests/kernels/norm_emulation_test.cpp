// The GPU kernels of a training step's norms and optimizer and of the search's selection — LayerNorm
// and add_layer_norm (kernels/cuda/layer_norm_kernels.cuh), the list AdamW and clipping by the global
// norm (adam_kernels.cuh, clip_kernels.cuh), topk (topk_kernels.cuh) — run on the host, unchanged,
// through tests/kernels/cuda_emulation.h, each with the grid and block its launcher gives it, against
// the CPU's kernels. (RMSNorm's: rms_norm_emulation_test.cpp, its kernels sharing these names.) Needs
// the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/topk.h"
#include "kernels/cuda/adam_kernels.cuh"
#include "kernels/cuda/clip_kernels.cuh"
#include "kernels/cuda/layer_norm.cu"  // the launchers, on the emulated GPU
#include "kernels/cuda/layer_norm_kernels.cuh"
#include "kernels/cuda/topk_kernels.cuh"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel

// LayerNorm's forward (with and without the residual) and backward, as layer_norm.cu launches them
TEST(NormKernelsEmulated, LayerNormAndAddLayerNormMatchTheCpu) {
  const int64_t rows = 70, n = 300;  // strips of 64 rows: one whole, one ragged
  const float eps = 1e-5f;
  const std::vector<float> x = random_floats(rows * n, 81, 2.f), res = random_floats(rows * n, 82, 1.f),
                           gamma = random_floats(n, 83, 1.f), beta = random_floats(n, 84, 1.f),
                           dy = random_floats(rows * n, 85, 1.f);
  for (int mode : {0, 1, 2}) {  // layer_norm, add_layer_norm, add_layer_norm with the residual dropped
    SCOPED_TRACE(mode == 0 ? "layer_norm" : mode == 1 ? "add_layer_norm" : "add_layer_norm, dropout");
    const bool add = mode > 0;
    const qkv::kernels::DropoutMask drop = mode == 2 ? qkv::kernels::dropout_mask(0.3f, 7, 5) : qkv::kernels::DropoutMask{};
    std::vector<float> y_c(rows * n), mean_c(rows), rstd_c(rows), s_c(rows * n);
    std::vector<float> y_g(rows * n), mean_g(rows), rstd_g(rows), s_g(rows * n);
    std::vector<bf16> y16_c(rows * n), y16_g(rows * n);  // the outputs' bf16 copies (ops/autocast.h)
    if (add)
      cpu::add_layer_norm_forward(x.data(), res.data(), drop, gamma.data(), beta.data(), s_c.data(), y_c.data(),
                                  mean_c.data(), rstd_c.data(), rows, n, eps, y16_c.data());
    else
      cpu::layer_norm_forward(x.data(), gamma.data(), beta.data(), y_c.data(), mean_c.data(), rstd_c.data(), rows, n,
                              eps, y16_c.data());
    launch(dim3(rows), kc::kThreads, 0, [&] {
      if (add)
        kc::layer_norm_forward_kernel<true>(x.data(), res.data(), drop, s_g.data(), gamma.data(), beta.data(),
                                            y_g.data(), mean_g.data(), rstd_g.data(), n, eps, y16_g.data());
      else
        kc::layer_norm_forward_kernel<false>(x.data(), nullptr, drop, nullptr, gamma.data(), beta.data(), y_g.data(),
                                             mean_g.data(), rstd_g.data(), n, eps, y16_g.data());
    });
    EXPECT_EQ(bits_of(y16_c), converted_bits(y_c)) << "the CPU's copy: convert_to_bf16's of its y";
    EXPECT_EQ(bits_of(y16_g), rounded_bits(y_g)) << "the GPU's copy: its y rounded";
    if (add) {
      EXPECT_EQ(s_g, s_c) << "the sum rounded as an addition";
      EXPECT_EQ(s_c, added_after_dropout(x, res, drop)) << "the CPU's sum: add(x, dropout(res))";
    }
    EXPECT_LT(rel(y_g, y_c), 2e-6);
    EXPECT_LT(rel(mean_g, mean_c), 2e-6);
    EXPECT_LT(rel(rstd_g, rstd_c), 2e-6);
    // backward at the normalized input (the sum under add)
    const std::vector<float>& in = add ? s_c : x;
    std::vector<float> dx_c(rows * n), dg_c(n), db_c(n), dx_g(rows * n), dg_g(n), db_g(n);
    cpu::layer_norm_backward(in.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), dx_c.data(), dg_c.data(),
                             db_c.data(), rows, n);
    launch(dim3(rows), kc::kThreads, 0, [&] {
      kc::layer_norm_dx_kernel(in.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), dx_g.data(), n, {});
    });
    if (mode == 2) {  // the residual's part in the same pass: dx + dsum, and the residual's gradient through the mask
      const std::vector<float> dsum = random_floats(rows * n, 86, 1.f);
      std::vector<float> ds_g(rows * n), dres_g(rows * n), ds_c(rows * n), dres_c(rows * n);
      // the residual's gradient's bf16 copy: of dres, and without dres (no dropout) of ds
      std::vector<bf16> g16_g(rows * n), g16_c(rows * n), ds16_g(rows * n), ds16_c(rows * n);
      launch(dim3(rows), kc::kThreads, 0, [&] {
        kc::layer_norm_dx_kernel(in.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), ds_g.data(), n,
                                 {dsum.data(), dres_g.data(), drop, g16_g.data()});
      });
      const auto want = residual_gradients_of(dx_g, dsum, drop);
      EXPECT_EQ(ds_g, want.ds) << "ds = dx + dsum, rounded as an addition";
      EXPECT_EQ(dres_g, want.dres) << "dres = dropout(ds), dropout_apply's bits";
      EXPECT_EQ(bits_of(g16_g), rounded_bits(dres_g));
      cpu::layer_norm_backward(in.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), ds_c.data(), nullptr,
                               nullptr, rows, n, {dsum.data(), dres_c.data(), drop, g16_c.data()});
      EXPECT_LT(rel(ds_g, ds_c), 2e-6);
      EXPECT_LT(rel(dres_g, dres_c), 2e-6);
      EXPECT_EQ(bits_of(g16_c), converted_bits(dres_c));
      std::vector<float> ds2_g(rows * n), ds2_c(rows * n);
      launch(dim3(rows), kc::kThreads, 0, [&] {
        kc::layer_norm_dx_kernel(in.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), ds2_g.data(), n,
                                 {dsum.data(), nullptr, {}, ds16_g.data()});
      });
      cpu::layer_norm_backward(in.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), ds2_c.data(), nullptr,
                               nullptr, rows, n, {dsum.data(), nullptr, {}, ds16_c.data()});
      EXPECT_EQ(ds2_g, ds_g);
      EXPECT_EQ(bits_of(ds16_g), rounded_bits(ds2_g));
      EXPECT_EQ(bits_of(ds16_c), converted_bits(ds2_c));
    }
    const int64_t strips = (rows + kc::kStrip - 1) / kc::kStrip;
    std::vector<float> partial(2 * strips * n);
    launch(dim3(kc::blocks_for(n), static_cast<unsigned>(strips)), 256, 0, [&] {
      kc::layer_norm_dparams_partial(in.data(), mean_c.data(), rstd_c.data(), dy.data(), partial.data(),
                                     partial.data() + strips * n, rows, n);
    });
    launch(dim3(kc::blocks_for(n)), 256, 0, [&] { kc::column_sums(partial.data(), strips, n, dg_g.data()); });
    launch(dim3(kc::blocks_for(n)), 256, 0, [&] { kc::column_sums(partial.data() + strips * n, strips, n, db_g.data()); });
    EXPECT_LT(rel(dx_g, dx_c), 2e-6);
    EXPECT_LT(rel(dg_g, dg_c), 2e-6);
    EXPECT_LT(rel(db_g, db_c), 2e-6);
  }
}

// Rows of at most 1,024 a warp each (layer_norm.cu's launchers: the row in registers, sums by shuffles):
// forward, add_layer_norm (dropped residual too) and dx with the residual's part, against the CPU; the
// fused add_layer_norm's y is layer_norm's of its sum bit for bit (one kernel, one order); at row lengths
// of each register count (P = 1 … 32) and row counts that leave a block's last warps idle. Past 1,024 the
// block kernels above serve.
TEST(NormKernelsEmulated, RowsUpTo1024AWarpEach) {
  const float eps = 1e-5f;
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{70, 384}, {9, 1}, {13, 33}, {5, 1024}, {3, 1025}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows of " << n);
    const std::vector<float> x = random_floats(rows * n, 91, 2.f), res = random_floats(rows * n, 92, 1.f),
                             gamma = random_floats(n, 93, 1.f), beta = random_floats(n, 94, 1.f),
                             dy = random_floats(rows * n, 95, 1.f), dsum = random_floats(rows * n, 96, 1.f);
    const qkv::kernels::DropoutMask drop = qkv::kernels::dropout_mask(0.3f, 7, 5);
    std::vector<float> s_g(rows * n), y_g(rows * n), mean_g(rows), rstd_g(rows), y2_g(rows * n), mean2_g(rows),
        rstd2_g(rows);
    std::vector<float> s_c(rows * n), y_c(rows * n), mean_c(rows), rstd_c(rows);
    std::vector<bf16> y16_g(rows * n);
    qkv::emulation::device().launched.clear();
    kc::add_layer_norm_forward(x.data(), res.data(), drop, gamma.data(), beta.data(), s_g.data(), y_g.data(),
                               mean_g.data(), rstd_g.data(), rows, n, eps, y16_g.data());
    const bool warp = n <= 1024;
    const int slots = warp ? kc::warp_row_slots(n) : 0;  // P: 16 at 384, 1 at 1, 2 at 33, 32 at 1,024
    const bool took = slots == 1   ? qkv::emulation::launched(kc::layer_norm_forward_warp_kernel<true, 1>)
                      : slots == 2 ? qkv::emulation::launched(kc::layer_norm_forward_warp_kernel<true, 2>)
                      : slots == 16
                          ? qkv::emulation::launched(kc::layer_norm_forward_warp_kernel<true, 16>)
                          : slots == 32 && qkv::emulation::launched(kc::layer_norm_forward_warp_kernel<true, 32>);
    EXPECT_EQ(took, warp) << "the warp kernel of " << slots << " slots";
    EXPECT_EQ(qkv::emulation::launched(kc::layer_norm_forward_kernel<true>), !warp);
    cpu::add_layer_norm_forward(x.data(), res.data(), drop, gamma.data(), beta.data(), s_c.data(), y_c.data(),
                                mean_c.data(), rstd_c.data(), rows, n, eps, nullptr);
    EXPECT_EQ(s_g, s_c) << "the sum rounded as an addition";
    EXPECT_LT(rel(y_g, y_c), 2e-6);
    EXPECT_LT(rel(mean_g, mean_c), 2e-6);
    EXPECT_LT(rel(rstd_g, rstd_c), 2e-6);
    EXPECT_EQ(bits_of(y16_g), rounded_bits(y_g));
    kc::layer_norm_forward(s_g.data(), gamma.data(), beta.data(), y2_g.data(), mean2_g.data(), rstd2_g.data(), rows, n,
                           eps, nullptr);
    EXPECT_EQ(y2_g, y_g) << "add_layer_norm's y is layer_norm's of its sum";
    EXPECT_EQ(mean2_g, mean_g);
    EXPECT_EQ(rstd2_g, rstd_g);
    // dx, plain and with the residual's part (ds = dx + dsum, dres = dropout(ds))
    std::vector<float> dx_g(rows * n), dx_c(rows * n), ds_g(rows * n), dres_g(rows * n), ds_c(rows * n),
        dres_c(rows * n);
    kc::layer_norm_backward(s_c.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), dx_g.data(), nullptr,
                            nullptr, rows, n, {});
    cpu::layer_norm_backward(s_c.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), dx_c.data(), nullptr,
                             nullptr, rows, n);
    EXPECT_LT(rel(dx_g, dx_c), 2e-6);
    kc::layer_norm_backward(s_c.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), ds_g.data(), nullptr,
                            nullptr, rows, n, {dsum.data(), dres_g.data(), drop, nullptr});
    const auto want = residual_gradients_of(dx_g, dsum, drop);
    EXPECT_EQ(ds_g, want.ds) << "ds = dx + dsum, rounded as an addition";
    EXPECT_EQ(dres_g, want.dres) << "dres = dropout(ds)";
    cpu::layer_norm_backward(s_c.data(), gamma.data(), mean_c.data(), rstd_c.data(), dy.data(), ds_c.data(), nullptr,
                             nullptr, rows, n, {dsum.data(), dres_c.data(), drop, nullptr});
    EXPECT_LT(rel(ds_g, ds_c), 2e-6);
    EXPECT_LT(rel(dres_g, dres_c), 2e-6);
  }
}

// The list AdamW over tensors of several sizes (an empty one among them), clipped by the global norm
// that clip_coefficient leaves on the device: both kernels as their launchers run them
TEST(NormKernelsEmulated, ClippingAndTheListAdamMatchTheCpu) {
  const std::vector<int64_t> n = {1000, 0, 37, 2048, 5};
  const auto count = static_cast<int64_t>(n.size());
  std::vector<std::vector<float>> p(count), g(count), m(count), v(count);
  for (int64_t i = 0; i < count; ++i) {
    const auto k = static_cast<size_t>(n[i]);
    p[i] = random_floats(k, 90 + i, 1.f), g[i] = random_floats(k, 100 + i, 3.f);
    m[i] = random_floats(k, 110 + i, 0.1f), v[i] = random_floats(k, 120 + i, 0.01f);
    for (float& x : v[i]) x = std::fabs(x);
  }
  auto ptrs = [&](std::vector<std::vector<float>>& t) {
    std::vector<float*> out;
    for (auto& x : t) out.push_back(x.data());
    return out;
  };
  // clipping: ‖g‖ and s = min(1, max_norm / (‖g‖ + 1e-6))
  std::vector<float*> gp = ptrs(g);
  std::vector<const float*> gc(gp.begin(), gp.end());
  float clip_c[2] = {}, clip_g[2] = {};
  cpu::clip_coefficient(gc.data(), n.data(), count, 1.0, clip_c);
  std::vector<double> partial(count * kc::kNormBlocks, 0.0);
  const float* const* gcp = gc.data();
  kc::for_each_chunk<1>({gcp}, n.data(), count, [&](const kc::TensorList<1>& list, int64_t first, int tensors, int64_t) {
    launch(dim3(kc::kNormBlocks, tensors), 256, 0, [&] { kc::squares_kernel(list, first, partial.data()); });
  });
  launch(dim3(1), 256, 0, [&] { kc::clip_finish_kernel(partial.data(), count * kc::kNormBlocks, 1.0, clip_g); });
  EXPECT_NEAR(clip_g[0], clip_c[0], 1e-6 * clip_c[0]);
  EXPECT_NEAR(clip_g[1], clip_c[1], 1e-6 * clip_c[1]);
  EXPECT_LT(clip_g[1], 1.f) << "the case clips";

  // AdamW, step 3 (bias corrections), weight decay: the CPU's list update and the kernel's, from the same state
  const qkv::kernels::AdamCoefficients c{0.9f, 0.99f, 1e-8f, 1e-3f / (1.f - 0.9f * 0.9f * 0.9f),
                                         1.f / std::sqrt(1.f - 0.99f * 0.99f * 0.99f), 1.f - 1e-3f * 0.1f, 0.f};
  // Both devices are given step 1's coefficients, as a step graph recorded them, and read step 3's
  // numbers from memory (AdamUpdate::step_numbers); the CPU with step 3's coefficients is the reference.
  const qkv::kernels::AdamCoefficients recorded{0.9f, 0.99f, 1e-8f, 1e-3f / (1.f - 0.9f), 1.f / std::sqrt(1.f - 0.99f),
                                                1.f - 2e-3f * 0.1f, 0.f};
  const float numbers[3] = {c.step_size, c.inv_sqrt_bc2, c.decay};
  auto pg = p, mg = m, vg = v, pr = p, mr = m, vr = v;
  // the updated weights' bf16 copies for tensors 0 and 3 (autocast's), none for the others
  std::vector<std::vector<bf16>> copy_c(count), copy_g(count);
  std::vector<bf16*> cc(count, nullptr);
  std::vector<float*> cg(count, nullptr);  // (the GPU list carries them as float pointers)
  for (int64_t i : {0, 3}) {
    copy_c[i].resize(n[i]), copy_g[i].resize(n[i]);
    cc[i] = copy_c[i].data(), cg[i] = reinterpret_cast<float*>(copy_g[i].data());
  }
  std::vector<float*> pc = ptrs(p), mc = ptrs(m), vc = ptrs(v);
  std::vector<float*> prp = ptrs(pr), mrp = ptrs(mr), vrp = ptrs(vr);
  cpu::adam_update_list(prp.data(), gc.data(), mrp.data(), vrp.data(), n.data(), count, c, nullptr, &clip_c[1], nullptr);
  cpu::adam_update_list(pc.data(), gc.data(), mc.data(), vc.data(), n.data(), count, recorded, numbers, &clip_c[1],
                        cc.data());
  for (int64_t i = 0; i < count; ++i) EXPECT_EQ(p[i], pr[i]) << "tensor " << i << ": the CPU reads the step's numbers";
  std::vector<float*> pgp = ptrs(pg), mgp = ptrs(mg), vgp = ptrs(vg);
  const float* const* lists[5] = {pgp.data(), gc.data(), mgp.data(), vgp.data(), cg.data()};
  kc::for_each_chunk<5>({lists[0], lists[1], lists[2], lists[3], lists[4]}, n.data(), count,
                        [&](const kc::TensorList<5>& list, int64_t, int tensors, int64_t most) {
                          const unsigned blocks = kc::blocks_for(most, 256, 4) > 1024 ? 1024 : kc::blocks_for(most, 256, 4);
                          launch(dim3(blocks, tensors), 256, 0, [&] { kc::adam_list_kernel(list, recorded, numbers, &clip_c[1]); });
                        });
  for (int64_t i = 0; i < count; ++i) {
    SCOPED_TRACE(i);
    EXPECT_LT(rel(pg[i], p[i]), 1e-6);
    EXPECT_LT(rel(mg[i], m[i]), 1e-6);
    EXPECT_LT(rel(vg[i], v[i]), 1e-6);
    if (!cc[i]) continue;
    // each device's copy is its own list cast's of the weights it updated
    EXPECT_EQ(bits_of(copy_c[i]), converted_bits(p[i]));
    EXPECT_EQ(bits_of(copy_g[i]), rounded_bits(pg[i]));
  }
}

// topk: the CPU's entries in the CPU's order — ties by the lower index, NaN above every number, −0
// equal to +0 — for k up to a whole row
TEST(NormKernelsEmulated, TopkPicksTheCpusEntries) {
  const int64_t rows = 3;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{700, 1}, {700, 9}, {700, 129}, {40, 40}}) {
    SCOPED_TRACE(testing::Message() << "n " << n << ", k " << k);
    std::vector<float> x = random_floats(rows * n, 130 + n, 1.f);
    for (int64_t j = 0; j < n; j += 5) x[j] = 0.5f;  // ties in row 0
    x[n + 17] = NAN, x[n + 3] = -0.f, x[n + 4] = 0.f;
    std::vector<float> vc(rows * k), vg(rows * k);
    std::vector<int32_t> ic(rows * k), ig(rows * k);
    cpu::topk(x.data(), rows, n, k, vc.data(), ic.data());
    launch(dim3(rows), 256, 0, [&] { kc::topk_kernel(x.data(), n, k, vg.data(), ig.data()); });
    EXPECT_EQ(ig, ic);
    for (size_t i = 0; i < vc.size(); ++i)
      if (!(std::isnan(vc[i]) && std::isnan(vg[i]))) {
        EXPECT_EQ(vg[i], vc[i]) << i;
      }
  }
}

}  // namespace
#endif
