// The projected LSTM's GPU kernels (kernels/cuda/rnn_kernels.cuh) run on the host, unchanged, through
// tests/kernels/cuda_emulation.h, in the time loops kernels/cuda/rnn.cu runs them in — its cuBLAS
// GEMMs here the CPU's sgemm, its device copies and fills the host's — against the CPU's
// lstm_proj_forward / lstm_proj_backward: rows of their own lengths (one empty, one the whole T),
// both directions, with and without b_hh, every output and gradient. (On a GPU, with cuBLAS:
// Cuda.RecurrentScansMatchTheCpu.) Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rnn.h"
#include "kernels/cuda/rnn_kernels.cuh"
#include "kernels/cuda/sum_kernels.cuh"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel
using qkv::kernels::RnnProblem;

// rnn.cu's launches: blocks_for(n) blocks of 256 threads, a grid-stride loop
template <class F>
void grid(int64_t n, F f) {
  launch(dim3(kc::blocks_for(n, 256)), 256, 0, f);
}

struct Saved {
  std::vector<float> gates, h, c, tanh_c;
};

// kernels/cuda/rnn.cu's lstm_proj_forward, step for step
void gpu_forward(const RnnProblem& p, int64_t P, const float* w_hr, const float* h0, const float* c0, float* y,
                 float* h_n, float* c_n, Saved& sv) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  std::fill(y, y + B * T * P, 0.f);
  std::copy(h0, h0 + B * P, h_n), std::copy(c0, c0 + B * H, c_n);
  int64_t steps = 0;
  for (int64_t b = 0; b < B; ++b) steps = std::max(steps, p.lengths[b]);
  std::vector<float> hh(B * G), m(B * H, 0.f), hp(B * P);
  for (int64_t s = 0; s < steps; ++s) {
    const kc::Step st{B, T, H, s, p.lengths, p.reverse};
    cpu::sgemm(false, true, B, G, P, 1.f, h_n, P, p.w_hh, P, 0.f, hh.data(), G);
    std::copy(h_n, h_n + B * P, sv.h.data() + s * B * P);
    std::copy(c_n, c_n + B * H, sv.c.data() + s * B * H);
    grid(B * H, [&] {
      kc::lstm_step_kernel(st, p.x_proj, hh.data(), p.b_hh, m.data(), c_n, nullptr, sv.gates.data(), sv.tanh_c.data());
    });
    cpu::sgemm(false, true, B, P, H, 1.f, m.data(), H, w_hr, H, 0.f, hp.data(), P);
    grid(B * P, [&] { kc::lstm_proj_step_kernel(st, P, hp.data(), h_n, y); });
  }
}

// kernels/cuda/rnn.cu's lstm_proj_backward, step for step
void gpu_backward(const RnnProblem& p, int64_t P, const float* w_hr, const Saved& sv, const float* dy,
                  const float* dh_n, const float* dc_n, float* dx_proj, float* dh0, float* dc0, float* dw_hh,
                  float* db_hh, float* dw_hr) {
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  int64_t steps = 0;
  for (int64_t b = 0; b < B; ++b) steps = std::max(steps, p.lengths[b]);
  const int64_t S = std::max<int64_t>(steps, 1);
  std::fill(dx_proj, dx_proj + B * T * G, 0.f);
  std::vector<float> dh(dh_n, dh_n + B * P), dc(dc_n, dc_n + B * H), dm(B * H), dhh(S * B * G, 0.f), dhr(S * B * P),
      ms(S * B * H);
  for (int64_t s = steps - 1; s >= 0; --s) {
    const kc::Step st{B, T, H, s, p.lengths, p.reverse};
    float *dhh_s = dhh.data() + s * B * G, *dhr_s = dhr.data() + s * B * P;
    grid(B * P, [&] { kc::lstm_proj_step_backward_kernel(st, P, dy, dh.data(), dhr_s); });
    cpu::sgemm(false, false, B, H, P, 1.f, dhr_s, P, w_hr, H, 0.f, dm.data(), H);
    grid(B * H, [&] {
      kc::lstm_step_backward_kernel(st, sv.gates.data(), sv.c.data(), sv.tanh_c.data(), nullptr, dm.data(), dc.data(),
                                    dx_proj, dhh_s);
    });
    cpu::sgemm(false, false, B, P, G, 1.f, dhh_s, G, p.w_hh, P, 1.f, dh.data(), P);
  }
  std::copy(dh.begin(), dh.end(), dh0), std::copy(dc.begin(), dc.end(), dc0);
  // weight_grads (its dW_hh GEMM; db_hh's column sums: launch_column_sums's two kernels)
  cpu::sgemm(true, false, G, P, steps * B, 1.f, dhh.data(), G, sv.h.data(), P, 0.f, dw_hh, P);
  const qkv::kernels::ColumnStrips cs = qkv::kernels::column_strips(steps * B);
  std::vector<double> partial(static_cast<size_t>(cs.strips * G));
  launch(dim3(static_cast<unsigned>((G + 255) / 256), static_cast<unsigned>(cs.strips)), 256, 0, [&] {
    kc::column_strip_sums(kc::DenseColumns{dhh.data()}, steps * B, G, cs.rows_each, partial.data());
  });
  launch(dim3(kc::blocks_for(G)), 256, 0, [&] { kc::column_partials_sum(partial.data(), cs.strips, G, db_hh); });
  grid(steps * B * H, [&] { kc::lstm_cell_output_kernel(sv.gates.data(), sv.tanh_c.data(), steps * B, H, ms.data()); });
  cpu::sgemm(true, false, P, H, steps * B, 1.f, dhr.data(), P, ms.data(), H, 0.f, dw_hr, H);
}

TEST(RnnKernelsEmulated, TheProjectedLstmIsTheCpus) {
  const int64_t B = 4, T = 6, H = 10, P = 3, G = 4 * H;
  const std::vector<int64_t> lengths = {6, 0, 4, 1};
  uint64_t seed = 300;
  for (bool reverse : {false, true})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << (reverse ? "reverse" : "forward") << (bias ? ", b_hh" : ", no b_hh"));
      const std::vector<float> x = random_floats(B * T * G, seed++, 1.f), w_hh = random_floats(G * P, seed++, 0.4f),
                               b_hh = random_floats(G, seed++, 0.3f), w_hr = random_floats(P * H, seed++, 0.4f),
                               h0 = random_floats(B * P, seed++, 1.f), c0 = random_floats(B * H, seed++, 1.f);
      RnnProblem p;
      p.B = B, p.T = T, p.H = H, p.gates = 4, p.lengths = lengths.data(), p.reverse = reverse;
      p.x_proj = x.data(), p.w_hh = w_hh.data(), p.b_hh = bias ? b_hh.data() : nullptr;

      // forward, with the saved tensors a training step keeps
      auto saved = [&] { return Saved{std::vector<float>(T * B * G), std::vector<float>(T * B * P),
                                      std::vector<float>(T * B * H), std::vector<float>(T * B * H)}; };
      Saved sc = saved(), sg = saved();
      std::vector<float> yc(B * T * P), hc(B * P), cc(B * H), yg(yc.size(), 7.f), hg(hc.size()), cg(cc.size());
      cpu::lstm_proj_forward(p, P, w_hr.data(), h0.data(), c0.data(), yc.data(), hc.data(), cc.data(), sc.gates.data(),
                             sc.h.data(), sc.c.data(), sc.tanh_c.data());
      gpu_forward(p, P, w_hr.data(), h0.data(), c0.data(), yg.data(), hg.data(), cg.data(), sg);
      EXPECT_LT(rel(yg, yc), 1e-5);
      EXPECT_LT(rel(hg, hc), 1e-5);
      EXPECT_LT(rel(cg, cc), 1e-5);
      EXPECT_EQ(hg[1 * P + 2], h0[1 * P + 2]);  // the empty row keeps its state, bit for bit
      EXPECT_EQ(yg[1 * T * P], 0.f);

      // backward from gradients at every output
      const std::vector<float> dy = random_floats(B * T * P, seed++, 1.f), dh_n = random_floats(B * P, seed++, 1.f),
                               dc_n = random_floats(B * H, seed++, 1.f);
      auto grads = [&] {
        return std::vector<std::vector<float>>{std::vector<float>(B * T * G), std::vector<float>(B * P),
                                               std::vector<float>(B * H),     std::vector<float>(G * P),
                                               std::vector<float>(G),         std::vector<float>(P * H)};
      };
      std::vector<std::vector<float>> c = grads(), g = grads();
      cpu::lstm_proj_backward(p, P, w_hr.data(), sc.gates.data(), sc.h.data(), sc.c.data(), sc.tanh_c.data(), dy.data(),
                              dh_n.data(), dc_n.data(), c[0].data(), c[1].data(), c[2].data(), c[3].data(),
                              c[4].data(), c[5].data());
      gpu_backward(p, P, w_hr.data(), sg, dy.data(), dh_n.data(), dc_n.data(), g[0].data(), g[1].data(), g[2].data(),
                   g[3].data(), g[4].data(), g[5].data());
      const char* names[] = {"dx_proj", "dh0", "dc0", "dw_hh", "db_hh", "dw_hr"};
      for (size_t i = 0; i < c.size(); ++i) EXPECT_LT(rel(g[i], c[i]), 1e-5) << names[i];
      EXPECT_EQ(g[1][1 * P + 2], dh_n[1 * P + 2]);  // the empty row's gradient passes through untouched
    }
}

}  // namespace

#endif  // __has_include(<cuda_runtime.h>)
