// The launchers of the CUDA backend's row and element kernels — layer_norm.cu, activation.cu,
// softmax.cu, embedding.cu (embedding, cross-entropy, index_select / index_add, the causal mask),
// topk.cu, clip.cu, adam.cu, compiled here with their kernels — run on the host through
// tests/kernels/cuda_emulation.h: the grids they pick, their scratch (freed), the index lists they copy
// to the device, the multi-tensor lists they pack, the column sums of a bias's gradient. Each against
// the CPU's kernel of the same declaration (kernels/*.inc: one signature for every device), called
// with the same arguments. (rms_norm.cu: rms_norm_emulation_test.cpp; elementwise.cu:
// elementwise_emulation_test.cpp; the attention launchers: attention_wgmma_emulation_test.cpp.) Needs
// the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/clip.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/topk.h"
#include "kernels/cuda/activation.cu"  // the launchers, on the emulated GPU
#include "kernels/cuda/adam.cu"
#include "kernels/cuda/clip.cu"
#include "kernels/cuda/embedding.cu"
#include "kernels/cuda/layer_norm.cu"
#include "kernels/cuda/softmax.cu"
#include "kernels/cuda/topk.cu"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel, bits_of
namespace qk = qkv::kernels;

void expect_all_freed() { EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "scratch not freed"; }

TEST(LaunchersEmulated, LayerNormForwardAndBackwardWithTheStripsOfItsWeightGradients) {
  const int64_t rows = 150, n = 96;  // three strips of the weight gradients
  const std::vector<float> x = random_floats(rows * n, 1, 2.f), res = random_floats(rows * n, 2, 1.f),
                           gamma = random_floats(n, 3, 1.f), beta = random_floats(n, 4, 1.f),
                           dy = random_floats(rows * n, 5, 1.f);
  const qk::DropoutMask drop = qk::dropout_mask(0.25f, 9, 3);
  for (const bool add : {false, true}) {
    SCOPED_TRACE(add ? "add_layer_norm, residual dropped" : "layer_norm");
    std::vector<float> y[2], mean[2], rstd[2], s[2];
    std::vector<bf16> y16[2];
    for (int d = 0; d < 2; ++d) {  // 0: the CPU, 1: the emulated GPU
      y[d].assign(rows * n, -1.f), mean[d].assign(rows, -1.f), rstd[d].assign(rows, -1.f), s[d].assign(rows * n, -1.f);
      y16[d].assign(rows * n, bf16{});
      if (add)
        (d ? kc::add_layer_norm_forward : cpu::add_layer_norm_forward)(
            x.data(), res.data(), drop, gamma.data(), beta.data(), s[d].data(), y[d].data(), mean[d].data(),
            rstd[d].data(), rows, n, 1e-5f, y16[d].data());
      else
        (d ? kc::layer_norm_forward : cpu::layer_norm_forward)(x.data(), gamma.data(), beta.data(), y[d].data(),
                                                               mean[d].data(), rstd[d].data(), rows, n, 1e-5f,
                                                               y16[d].data());
    }
    EXPECT_LT(rel(y[1], y[0]), 2e-6);
    EXPECT_LT(rel(mean[1], mean[0]), 2e-6);
    EXPECT_LT(rel(rstd[1], rstd[0]), 2e-6);
    {  // where nothing records (decoding), the ops pass no mean and rstd: the same output
      std::vector<float> y_only(rows * n, -1.f), s_only(rows * n, -1.f);
      if (add)
        kc::add_layer_norm_forward(x.data(), res.data(), drop, gamma.data(), beta.data(), s_only.data(), y_only.data(),
                                   nullptr, nullptr, rows, n, 1e-5f, nullptr);
      else
        kc::layer_norm_forward(x.data(), gamma.data(), beta.data(), y_only.data(), nullptr, nullptr, rows, n, 1e-5f,
                               nullptr);
      EXPECT_EQ(y_only, y[1]) << "without mean and rstd";
    }
    if (add) {
      EXPECT_EQ(s[1], s[0]) << "the sum, rounded as an addition";
    }
    const std::vector<float>& in = add ? s[0] : x;
    std::vector<float> dx[2], dg[2], db[2];
    for (int d = 0; d < 2; ++d) {
      dx[d].assign(rows * n, -1.f), dg[d].assign(n, -1.f), db[d].assign(n, -1.f);
      (d ? kc::layer_norm_backward : cpu::layer_norm_backward)(in.data(), gamma.data(), mean[0].data(),
                                                               rstd[0].data(), dy.data(), dx[d].data(), dg[d].data(),
                                                               db[d].data(), rows, n, {});
    }
    EXPECT_LT(rel(dx[1], dx[0]), 2e-6);
    EXPECT_LT(rel(dg[1], dg[0]), 2e-6);
    EXPECT_LT(rel(db[1], db[0]), 2e-6);
  }
  expect_all_freed();
}

TEST(LaunchersEmulated, ActivationsWithABiasAndItsGradientsColumnSums) {
  const int64_t rows = 70, cols = 48, n = rows * cols;
  const std::vector<float> x = random_floats(n, 11, 3.f), dy = random_floats(n, 12, 1.f),
                           bias = random_floats(cols, 13, 1.f), u = random_floats(n, 14, 2.f);
  const qk::DropoutMask drop = qk::dropout_mask(0.2f, 5, 40);
  for (const int kind : {0, 1, 2}) {  // relu, gelu (erf), gelu (tanh)
    SCOPED_TRACE(kind == 0 ? "relu" : kind == 1 ? "gelu" : "gelu, tanh");
    std::vector<float> y[2], cdf[2], dx[2], dbias[2];
    for (int d = 0; d < 2; ++d) {
      y[d].assign(n, -1.f), cdf[d].assign(n, -1.f), dx[d].assign(n, -1.f), dbias[d].assign(cols, -1.f);
      if (kind == 0) {
        (d ? kc::relu_forward : cpu::relu_forward)(x.data(), y[d].data(), n, drop, nullptr, bias.data(), cols);
        (d ? kc::relu_backward : cpu::relu_backward)(x.data(), dy.data(), dx[d].data(), n, drop, nullptr, bias.data(),
                                                     cols, dbias[d].data());
      } else {
        const bool t = kind == 2;
        (d ? kc::gelu_forward : cpu::gelu_forward)(x.data(), y[d].data(), n, t, cdf[d].data(), drop, nullptr,
                                                   bias.data(), cols);
        (d ? kc::gelu_backward : cpu::gelu_backward)(x.data(), dy.data(), dx[d].data(), n, t, cdf[0].data(), drop,
                                                     nullptr, bias.data(), cols, dbias[d].data());
      }
    }
    EXPECT_LT(rel(y[1], y[0]), 2e-6);
    EXPECT_LT(rel(dx[1], dx[0]), 2e-6);
    EXPECT_LT(rel(dbias[1], dbias[0]), 2e-6);
  }
  {  // SwiGLU's product, dropout
    std::vector<float> y[2], dg[2], du[2], z[2];
    for (int d = 0; d < 2; ++d) {
      y[d].assign(n, -1.f), dg[d].assign(n, -1.f), du[d].assign(n, -1.f), z[d].assign(n, -1.f);
      (d ? kc::silu_mul_forward : cpu::silu_mul_forward)(x.data(), u.data(), y[d].data(), n, nullptr);
      (d ? kc::silu_mul_backward : cpu::silu_mul_backward)(x.data(), u.data(), dy.data(), dg[d].data(), du[d].data(), n,
                                                           nullptr, nullptr);
      (d ? kc::dropout_apply : cpu::dropout_apply)(x.data(), z[d].data(), n, drop);
    }
    EXPECT_LT(rel(y[1], y[0]), 2e-6);
    EXPECT_LT(rel(dg[1], dg[0]), 2e-6);
    EXPECT_LT(rel(du[1], du[0]), 2e-6);
    EXPECT_EQ(z[1], z[0]) << "the same dropout mask, bit for bit";
  }
  expect_all_freed();
}

TEST(LaunchersEmulated, SoftmaxLogSoftmaxAndLogMeanExp) {
  const int64_t rows = 9, n = 1000;  // rows longer than a block's threads
  const std::vector<float> x = random_floats(rows * n, 21, 8.f), dy = random_floats(rows * n, 22, 1.f),
                           x2 = random_floats(rows * n, 23, 8.f);
  for (const bool log : {false, true}) {
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    std::vector<float> y[2], dx[2];
    for (int d = 0; d < 2; ++d) {
      y[d].assign(rows * n, -1.f), dx[d].assign(rows * n, -1.f);
      if (log) {
        (d ? kc::log_softmax_forward : cpu::log_softmax_forward)(x.data(), y[d].data(), rows, n);
        (d ? kc::log_softmax_backward : cpu::log_softmax_backward)(y[0].data(), dy.data(), dx[d].data(), rows, n);
      } else {
        (d ? kc::softmax_forward : cpu::softmax_forward)(x.data(), y[d].data(), rows, n);
        (d ? kc::softmax_backward : cpu::softmax_backward)(y[0].data(), dy.data(), dx[d].data(), rows, n);
      }
    }
    EXPECT_LT(rel(y[1], y[0]), 2e-6);
    EXPECT_LT(rel(dx[1], dx[0]), 2e-6);
  }
  const float* members[2] = {x.data(), x2.data()};  // an ensemble's log-mean-exp over two members
  std::vector<float> want(rows * n), got(rows * n, -1.f);
  cpu::log_mean_exp(members, 2, want.data(), rows * n);
  kc::log_mean_exp(members, 2, got.data(), rows * n);
  EXPECT_LT(rel(got, want), 2e-6);
  expect_all_freed();
}

TEST(LaunchersEmulated, CrossEntropyEmbeddingAndIndexing) {
  const int64_t N = 37, C = 300, dim = 24;
  const std::vector<float> x = random_floats(N * C, 31, 4.f), g = random_floats(N, 32, 1.f);
  std::vector<int32_t> y(N);
  for (int64_t i = 0; i < N; ++i) y[i] = static_cast<int32_t>((i * 97) % C);
  y[5] = y[20] = -100;  // ignored rows
  for (const float eps : {0.f, 0.1f}) {
    SCOPED_TRACE(eps > 0 ? "label smoothing 0.1" : "no smoothing");
    std::vector<float> lse[2], loss[2], out[2], divisor[2], dx[2];
    for (int d = 0; d < 2; ++d) {
      lse[d].assign(N, -1.f), loss[d].assign(N, -1.f), out[d].assign(1, -1.f), divisor[d].assign(1, -1.f);
      dx[d].assign(N * C, -1.f);
      (d ? kc::cross_entropy_forward : cpu::cross_entropy_forward)(x.data(), y.data(), N, C, eps, -100, lse[d].data(),
                                                                   loss[d].data());
      (d ? kc::cross_entropy_reduce : cpu::cross_entropy_reduce)(loss[d].data(), y.data(), N, -100, true,
                                                                 out[d].data(), divisor[d].data());
      (d ? kc::cross_entropy_backward : cpu::cross_entropy_backward)(x.data(), y.data(), lse[0].data(), g.data(), 1,
                                                                     divisor[0].data(), N, C, eps, -100,
                                                                     dx[d].data(), nullptr);
    }
    EXPECT_LT(rel(lse[1], lse[0]), 2e-6);
    EXPECT_LT(rel(loss[1], loss[0]), 2e-6);
    EXPECT_LT(rel(out[1], out[0]), 2e-6);
    EXPECT_EQ(divisor[1], divisor[0]);
    EXPECT_LT(rel(dx[1], dx[0]), 2e-6);
  }
  {  // an embedding's rows and their gradients (a repeated id, the padding row left alone)
    const int64_t vocab = 50, n = 40;
    const std::vector<float> weight = random_floats(vocab * dim, 33, 1.f), dout = random_floats(n * dim, 34, 1.f);
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7) % vocab);
    ids[3] = ids[4] = ids[9] = 2;
    std::vector<float> out[2], dweight[2];
    for (int d = 0; d < 2; ++d) {
      out[d].assign(n * dim, -1.f), dweight[d].assign(vocab * dim, 0.f);
      (d ? kc::embedding_forward : cpu::embedding_forward)(weight.data(), vocab, dim, ids.data(), n, out[d].data());
      (d ? kc::embedding_backward : cpu::embedding_backward)(dout.data(), ids.data(), n, dim, vocab, 7,
                                                             dweight[d].data());
    }
    EXPECT_EQ(out[1], out[0]);
    EXPECT_LT(rel(dweight[1], dweight[0]), 2e-6);
    // an id outside the vocabulary, a target outside the classes: the deferred checks' words, reported
    // at the host's next wait (the launch itself does not stop), naming the first bad position
    ids[11] = 50, ids[30] = -4;
    kc::embedding_forward(weight.data(), vocab, dim, ids.data(), n, out[1].data());
    try {
      kc::wait_for_stream(kc::stream());
      ADD_FAILURE() << "no error for id 50";
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find("id 50 at position 11 is outside the vocabulary [0, 50)"), std::string::npos)
          << e.what();
    }
    y[8] = static_cast<int32_t>(C);
    kc::check_targets(y.data(), N, C, -100);
    EXPECT_THROW(kc::wait_for_stream(kc::stream()), qkv::Error);
    y[8] = 0;
    kc::check_targets(y.data(), N, C, -100);
    EXPECT_NO_THROW(kc::wait_for_stream(kc::stream()));
  }
  {  // index_select of rows (the host's index list copied to the device), index_add, the causal mask
    const int64_t outer = 3, n = 10, inner = 5;
    const std::vector<float> src = random_floats(outer * n * inner, 35, 1.f), add = random_floats(outer * 4 * inner, 36, 1.f);
    const std::vector<int64_t> index = {7, 0, 7, 9};
    std::vector<float> sel[2], acc[2];
    std::vector<uint8_t> mask[2];
    for (int d = 0; d < 2; ++d) {
      sel[d].assign(outer * 4 * inner, -1.f), acc[d] = src, mask[d].assign(6 * 9, 7);
      (d ? kc::index_select : cpu::index_select)(reinterpret_cast<const uint8_t*>(src.data()), outer, n,
                                                 inner * sizeof(float), index.data(), 4,
                                                 reinterpret_cast<uint8_t*>(sel[d].data()));
      (d ? kc::index_add : cpu::index_add)(acc[d].data(), outer, n, inner, index.data(), 4, add.data());
      (d ? kc::causal_mask : cpu::causal_mask)(mask[d].data(), 6, 9, 3);
    }
    EXPECT_EQ(sel[1], sel[0]);
    EXPECT_LT(rel(acc[1], acc[0]), 2e-6);
    EXPECT_EQ(mask[1], mask[0]);
  }
  expect_all_freed();
}

TEST(LaunchersEmulated, TopKClipCoefficientAndAdamOverAListOfTensors) {
  {  // top-k of rows (ties to the lower index)
    const int64_t rows = 5, n = 700, k = 9;
    std::vector<float> x = random_floats(rows * n, 41, 1.f);
    x[3] = x[10] = 5.f;
    std::vector<float> values[2];
    std::vector<int32_t> indices[2];
    for (int d = 0; d < 2; ++d) {
      values[d].assign(rows * k, -1.f), indices[d].assign(rows * k, -1);
      (d ? kc::topk : cpu::topk)(x.data(), rows, n, k, values[d].data(), indices[d].data());
    }
    EXPECT_EQ(values[1], values[0]);
    EXPECT_EQ(indices[1], indices[0]);
  }
  const std::vector<float> g0 = random_floats(1000, 42, 1.f), g1 = random_floats(33, 43, 1.f);
  const float* grads[2] = {g0.data(), g1.data()};
  const int64_t sizes[2] = {1000, 33};
  std::vector<float> clip[2];
  for (int d = 0; d < 2; ++d) {
    clip[d].assign(2, -1.f);
    (d ? kc::clip_coefficient : cpu::clip_coefficient)(grads, sizes, 2, 1.5, clip[d].data());
  }
  EXPECT_LT(rel(clip[1], clip[0]), 2e-6) << "the norm and the coefficient";
  // AdamW over two tensors in one launch, the gradients clipped, bf16 copies written
  const qk::AdamCoefficients c{0.9f, 0.999f, 1e-8f, 1e-3f / 0.1f, 1.f / std::sqrt(1.f - 0.999f), 1.f - 1e-3f * 0.01f, 0.f};
  std::vector<float> param[2][2], m[2][2], v[2][2];
  std::vector<bf16> copy[2][2];
  for (int d = 0; d < 2; ++d) {
    for (int t = 0; t < 2; ++t) {
      param[d][t] = random_floats(sizes[t], 44 + t, 1.f), m[d][t] = random_floats(sizes[t], 46 + t, 0.1f);
      v[d][t] = random_floats(sizes[t], 48 + t, 0.01f), copy[d][t].assign(sizes[t], bf16{});
      for (float& e : v[d][t]) e = e * e;
    }
    float* const p[2] = {param[d][0].data(), param[d][1].data()};
    float* const mm[2] = {m[d][0].data(), m[d][1].data()};
    float* const vv[2] = {v[d][0].data(), v[d][1].data()};
    bf16* const cc[2] = {copy[d][0].data(), copy[d][1].data()};
    (d ? kc::adam_update_list : cpu::adam_update_list)(p, grads, mm, vv, sizes, 2, c, nullptr, clip[0].data() + 1, cc);
  }
  for (int t = 0; t < 2; ++t) {
    SCOPED_TRACE(t);
    EXPECT_LT(rel(param[1][t], param[0][t]), 2e-6);
    EXPECT_LT(rel(m[1][t], m[0][t]), 2e-6);
    EXPECT_LT(rel(v[1][t], v[0][t]), 2e-6);
    EXPECT_EQ(bits_of(copy[1][t]), rounded_bits(param[1][t])) << "the copies: the updated weights rounded";
  }
  expect_all_freed();
}

}  // namespace

// What a GPU's launch refuses, the emulation's too: more dynamic shared memory than 48 KB for a
// kernel whose attribute does not allow it, an attribute past the 227 KB a block may have. (The
// kernel in the kernels' namespace, where a file's dynamic shared memory is declared.)
namespace qkv::kernels::cuda {
namespace {
__global__ void reverse_through_shared_kernel(float* out) {
  extern __shared__ unsigned char smem[];
  float* s = reinterpret_cast<float*>(smem);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[31 - threadIdx.x];
}
}  // namespace
}  // namespace qkv::kernels::cuda

namespace {

TEST(LaunchersEmulated, SharedMemoryPast48KBOnlyWhereTheKernelsAttributeAllowsIt) {
  std::vector<float> out(32, -1.f);
  constexpr int bytes = 100 * 1024;
  auto* kernel = qkv::kernels::cuda::reverse_through_shared_kernel;
  EXPECT_THROW(QKV_LAUNCH(1, 32, bytes, nullptr, kernel)(out.data()), std::invalid_argument);
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024),
            cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), cudaSuccess);
  QKV_LAUNCH(1, 32, bytes, nullptr, kernel)(out.data());
  EXPECT_EQ(out[0], 31.f);
  EXPECT_EQ(out[31], 0.f);
  EXPECT_THROW(QKV_LAUNCH(1, 32, bytes + 4, nullptr, kernel)(out.data()), std::invalid_argument);
  QKV_LAUNCH(1, 32, 48 * 1024, nullptr, kernel)(out.data());  // 48 KB: no attribute needed
}

}  // namespace

#else
TEST(LaunchersEmulated, LayerNormForwardAndBackwardWithTheStripsOfItsWeightGradients) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(LaunchersEmulated, ActivationsWithABiasAndItsGradientsColumnSums) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(LaunchersEmulated, SoftmaxLogSoftmaxAndLogMeanExp) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(LaunchersEmulated, CrossEntropyEmbeddingAndIndexing) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(LaunchersEmulated, TopKClipCoefficientAndAdamOverAListOfTensors) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(LaunchersEmulated, SharedMemoryPast48KBOnlyWhereTheKernelsAttributeAllowsIt) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
