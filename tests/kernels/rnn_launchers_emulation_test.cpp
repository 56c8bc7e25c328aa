// The recurrent layers' launchers of the CUDA backend (kernels/cuda/rnn.cu: the time loop — a cuBLAS
// GEMM a step through gemm.cu, the gate kernels, the projected LSTM's second GEMM and copy, dW_hh over
// all steps, db_hh by the column strips) compiled here and run on the host through
// tests/kernels/cuda_emulation.h (its cuBLAS: TF32's operand rounding included) against the CPU's
// kernels of the same declarations (kernels/rnn.inc). Needs the CUDA toolkit's headers (a QKV_CUDA
// build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <vector>

#include "kernels/cpu/rnn.h"
#include "kernels/cuda/gemm.cu"  // the launchers, on the emulated GPU
#include "kernels/cuda/elementwise.cu"  // (fill_f32, sum_to)
#include "kernels/cuda/rnn.cu"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel
namespace qk = qkv::kernels;

constexpr double kTf32 = 3e-3;  // TF32 keeps 10 of f32's 23 mantissa bits

// The recurrent layers' time loop: rows of their own lengths (one empty), both directions, the GRU,
// the LSTM and the LSTM with a projection, forward and backward through time
TEST(RnnLaunchersEmulated, TheRecurrentTimeLoopsMatchTheCpu) {
  const int64_t B = 3, T = 5, H = 6, P = 4;
  const std::vector<int64_t> lengths = {5, 2, 0};
  for (const int kind : {0, 1, 2}) {  // GRU, LSTM, LSTM with a projection
    for (const bool reverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (kind == 0 ? "GRU" : kind == 1 ? "LSTM" : "LSTM, projected")
                                        << (reverse ? ", reverse" : ""));
      const int64_t G = kind == 0 ? 3 : 4, Hs = kind == 2 ? P : H;  // Hs: the state's width
      const std::vector<float> x_proj = random_floats(B * T * G * H, 91, 1.f), w_hh = random_floats(G * H * Hs, 92, 0.5f),
                               b_hh = random_floats(G * H, 93, 0.5f), w_hr = random_floats(P * H, 94, 0.5f),
                               h0 = random_floats(B * Hs, 95, 1.f), c0 = random_floats(B * H, 96, 1.f),
                               dy = random_floats(B * T * Hs, 97, 1.f), dh_n = random_floats(B * Hs, 98, 1.f),
                               dc_n = random_floats(B * H, 99, 1.f);
      qk::RnnProblem p;
      p.B = B, p.T = T, p.H = H, p.gates = G, p.lengths = lengths.data(), p.reverse = reverse;
      p.x_proj = x_proj.data(), p.w_hh = w_hh.data(), p.b_hh = b_hh.data();
      std::vector<float> y[2], h_n[2], c_n[2], sg[2], sh[2], sc[2], st[2], dx[2], dh0[2], dc0[2], dw[2], db[2], dwr[2];
      for (int d = 0; d < 2; ++d) {
        y[d].assign(B * T * Hs, -1.f), h_n[d].assign(B * Hs, -1.f), c_n[d].assign(B * H, -1.f);
        sg[d].assign(T * B * 4 * H, -1.f), sh[d].assign(T * B * Hs, -1.f), sc[d].assign(T * B * H, -1.f);
        st[d].assign(T * B * H, -1.f), dx[d].assign(B * T * G * H, -1.f), dh0[d].assign(B * Hs, -1.f);
        dc0[d].assign(B * H, -1.f), dw[d].assign(G * H * Hs, -1.f), db[d].assign(G * H, -1.f), dwr[d].assign(P * H, -1.f);
        if (kind == 0) {
          (d ? kc::gru_forward : cpu::gru_forward)(p, h0.data(), y[d].data(), h_n[d].data(), sg[d].data(), sh[d].data());
          (d ? kc::gru_backward : cpu::gru_backward)(p, sg[0].data(), sh[0].data(), dy.data(), dh_n.data(),
                                                     dx[d].data(), dh0[d].data(), dw[d].data(), db[d].data());
        } else if (kind == 1) {
          (d ? kc::lstm_forward : cpu::lstm_forward)(p, h0.data(), c0.data(), y[d].data(), h_n[d].data(),
                                                     c_n[d].data(), sg[d].data(), sh[d].data(), sc[d].data(),
                                                     st[d].data());
          (d ? kc::lstm_backward : cpu::lstm_backward)(p, sg[0].data(), sh[0].data(), sc[0].data(), st[0].data(),
                                                       dy.data(), dh_n.data(), dc_n.data(), dx[d].data(),
                                                       dh0[d].data(), dc0[d].data(), dw[d].data(), db[d].data());
        } else {
          (d ? kc::lstm_proj_forward : cpu::lstm_proj_forward)(p, P, w_hr.data(), h0.data(), c0.data(), y[d].data(),
                                                               h_n[d].data(), c_n[d].data(), sg[d].data(),
                                                               sh[d].data(), sc[d].data(), st[d].data());
          (d ? kc::lstm_proj_backward : cpu::lstm_proj_backward)(
              p, P, w_hr.data(), sg[0].data(), sh[0].data(), sc[0].data(), st[0].data(), dy.data(), dh_n.data(),
              dc_n.data(), dx[d].data(), dh0[d].data(), dc0[d].data(), dw[d].data(), db[d].data(), dwr[d].data());
        }
      }
      EXPECT_LT(rel(y[1], y[0]), kTf32) << "y";
      EXPECT_LT(rel(h_n[1], h_n[0]), kTf32) << "h_n";
      EXPECT_LT(rel(dx[1], dx[0]), kTf32) << "dx";
      EXPECT_LT(rel(dh0[1], dh0[0]), kTf32) << "dh0";
      EXPECT_LT(rel(dw[1], dw[0]), kTf32) << "dW_hh";
      EXPECT_LT(rel(db[1], db[0]), kTf32) << "db_hh";
      if (kind > 0) {
        EXPECT_LT(rel(c_n[1], c_n[0]), kTf32) << "c_n";
        EXPECT_LT(rel(dc0[1], dc0[0]), kTf32) << "dc0";
      }
      if (kind == 2) {
        EXPECT_LT(rel(dwr[1], dwr[0]), kTf32) << "dW_hr";
      }
    }
  }
  EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "scratch not freed";
}

}  // namespace

#else
TEST(RnnLaunchersEmulated, TheRecurrentTimeLoopsMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
