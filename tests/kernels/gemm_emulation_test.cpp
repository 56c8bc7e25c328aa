// The launchers that call cuBLAS — kernels/cuda/gemm.cu (f32 on the TF32 tensor cores, bf16 through
// cublasGemmEx, C = β·C alone where K = 0, the bias in cuBLASLt's epilogue) and conv.cu (im2col, its
// GEMMs, col2im, the bias; rnn.cu's: rnn_launchers_emulation_test.cpp) — compiled here and run on the host
// through tests/kernels/cuda_emulation.h, whose cuBLAS and cuBLASLt take cublas_library.h's calls (TF32's
// rounding of each operand included), against the CPU's kernels of the same declarations. Needs the CUDA
// toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cuda/conv.cu"  // the launchers, on the emulated GPU
#include "kernels/cuda/elementwise.cu"  // (fill_f32, sum_to)
#include "kernels/cuda/gemm.cu"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel
namespace qk = qkv::kernels;

// TF32 keeps 10 of f32's 23 mantissa bits: a product's relative error ~2⁻¹¹ a term
constexpr double kTf32 = 3e-3;

TEST(GemmLaunchersEmulated, F32AndBf16ProductsInEveryTransposeAndTheScaleAlone) {
  const int64_t M = 13, N = 9, K = 20, pad = 3;
  const std::vector<float> a = random_floats((M + pad) * (K + pad), 81, 1.f),
                           b = random_floats((K + pad) * (N + pad), 82, 1.f), c0 = random_floats(M * (N + pad), 83, 1.f);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const float beta : {0.f, 1.f}) {
        SCOPED_TRACE(::testing::Message() << (ta ? "Aᵀ" : "A") << (tb ? " Bᵀ" : " B") << " β " << beta);
        const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        std::vector<float> want = c0, got = c0;
        cpu::sgemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
        kc::sgemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, beta, got.data(), ldc);
        EXPECT_LT(rel(got, want), kTf32);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(got[i * ldc + j], c0[i * ldc + j]) << "past N: untouched";
        std::vector<bf16> a16(a.size()), b16(b.size());
        cpu::convert_to_bf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
        cpu::convert_to_bf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
        std::vector<float> want16 = c0, got16 = c0;
        cpu::gemm_bf16(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, beta, want16.data(), ldc);
        kc::gemm_bf16(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, beta, got16.data(), ldc);
        EXPECT_LT(rel(got16, want16), 1e-5) << "bf16 operands: exact products, f32 sums";
      }
  for (const float beta : {0.f, 1.f, -2.f}) {  // K = 0: C = β·C (β = 0: NaN there does not survive)
    std::vector<float> want = c0, got = c0;
    got[4] = want[4] = NAN;
    cpu::sgemm(false, false, M, N, 0, 1.f, a.data(), 1, b.data(), 1, beta, want.data(), N + pad);
    kc::sgemm(false, false, M, N, 0, 1.f, a.data(), 1, b.data(), 1, beta, got.data(), N + pad);
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::isnan(got[i]) && std::isnan(want[i]))) {
        EXPECT_EQ(got[i], want[i]) << i << ", β " << beta;
      }
  }
}

// The linear layer's bias in the GEMM's epilogue (sgemm_bias, gemm_bf16_bias: cuBLASLt's BIAS epilogue,
// emulated as cuBLAS's products, the bias down D's rows — the row-major C's columns) against the CPU's
// bias rows and GEMM onto them: every transpose, f32 and bf16, C's prior contents (NaN) not read, the
// columns past N untouched; a bias off 16 bytes takes the fallback (the bias rows, then the GEMM), rows
// ldc apart or dense.
TEST(GemmLaunchersEmulated, TheBiasInTheEpilogueMatchesTheCpu) {
  const int64_t M = 11, N = 12, K = 17, pad = 3;
  const std::vector<float> a = random_floats((M + pad) * (K + pad), 91, 1.f),
                           b = random_floats((K + pad) * (N + pad), 92, 1.f);
  std::vector<float> bias_buffer = random_floats(N + 8, 93, 1.f);
  float* aligned = bias_buffer.data();
  while (reinterpret_cast<uintptr_t>(aligned) % 16 != 0) ++aligned;
  std::vector<bf16> a16(a.size()), b16(b.size());
  cpu::convert_to_bf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
  cpu::convert_to_bf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const bool off : {false, true})  // the bias off 16 bytes: the fallback
        for (const int64_t ldc : {N, N + pad}) {
          SCOPED_TRACE(::testing::Message()
                       << (ta ? "Aᵀ" : "A") << (tb ? " Bᵀ" : " B") << (off ? " bias off 16 B" : "") << " ldc " << ldc);
          const float* bias = off ? aligned + 1 : aligned;
          const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
          std::vector<float> want(M * ldc, NAN), got(M * ldc, NAN);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = N; j < ldc; ++j) want[i * ldc + j] = got[i * ldc + j] = 5.f;
          const int calls = qkv::emulation::lt_matmuls();
          cpu::sgemm_bias(ta, tb, M, N, K, a.data(), lda, b.data(), ldb, bias, want.data(), ldc);
          kc::sgemm_bias(ta, tb, M, N, K, a.data(), lda, b.data(), ldb, bias, got.data(), ldc);
          EXPECT_EQ(qkv::emulation::lt_matmuls() - calls, off ? 0 : 1)
              << "f32: not cuBLASLt's epilogue where it serves";
          EXPECT_LT(rel(got, want), kTf32) << "f32";
          std::vector<float> want16(M * ldc, NAN), got16(M * ldc, NAN);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = N; j < ldc; ++j) want16[i * ldc + j] = got16[i * ldc + j] = 5.f;
          cpu::gemm_bf16_bias(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, bias, want16.data(), ldc);
          kc::gemm_bf16_bias(ta, tb, M, N, K, a16.data(), lda, b16.data(), ldb, bias, got16.data(), ldc);
          EXPECT_EQ(qkv::emulation::lt_matmuls() - calls, off ? 0 : 2)
              << "bf16: not cuBLASLt's epilogue where it serves";
          EXPECT_LT(rel(got16, want16), 1e-5) << "bf16 operands: exact products, f32 sums";
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = N; j < ldc; ++j) {
              ASSERT_EQ(got[i * ldc + j], 5.f) << "past N: untouched";
              ASSERT_EQ(got16[i * ldc + j], 5.f) << "past N: untouched";
            }
        }
  EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "cuBLASLt's workspace not freed";
  // A thread keeps at most 256 plans: a server's batches of every size do not pile up descriptors (each
  // plan holds four; the rows are the plan's n)
  const std::vector<float> tall = random_floats(300 * K, 94, 1.f);
  for (int64_t rows = 1; rows <= 300; ++rows) {
    std::vector<float> out(rows * N);
    kc::sgemm_bias(false, true, rows, N, K, tall.data(), K, b.data(), K, aligned, out.data(), N);
  }
  EXPECT_LE(qkv::emulation::lt_descriptors().size(), 4u * 256) << "cuBLASLt's plans not bounded";
  EXPECT_GE(qkv::emulation::lt_descriptors().size(), 4u * 40) << "the plans not kept";
  // cuBLASLt refusing at the call what its heuristic offered (CUBLAS_STATUS_NOT_SUPPORTED): the two passes,
  // the same numbers, and that shape is not asked again
  {
    std::vector<float> want(5 * N), got(5 * N, NAN);
    cpu::sgemm_bias(false, true, 5, N, K + 1, a.data(), K + 1, b.data(), K + 1, aligned, want.data(), N);
    qkv::emulation::lt_refuses() = true;
    const int calls = qkv::emulation::lt_matmuls();
    kc::sgemm_bias(false, true, 5, N, K + 1, a.data(), K + 1, b.data(), K + 1, aligned, got.data(), N);
    qkv::emulation::lt_refuses() = false;
    EXPECT_LT(rel(got, want), kTf32) << "after a refusal";
    EXPECT_EQ(qkv::emulation::lt_matmuls() - calls, 1);
    got.assign(got.size(), NAN);
    kc::sgemm_bias(false, true, 5, N, K + 1, a.data(), K + 1, b.data(), K + 1, aligned, got.data(), N);
    EXPECT_LT(rel(got, want), kTf32) << "the refused shape again";
    EXPECT_EQ(qkv::emulation::lt_matmuls() - calls, 1) << "a refused shape asked again";
  }
  // A cuBLASLt that rejects the problem at the call (an invalid value: a descriptor this version reads
  // otherwise) or a descriptor itself (the bias's data type): the two passes for that shape, the same
  // numbers, said once on stderr; a failure of the work itself (execution) is an error
  namespace em = qkv::emulation;
  struct Refusal {
    int64_t rows;
    cublasStatus_t at_call, at_descriptor;
    int matmuls;  // cublasLtMatmul's calls for the shape: 1 where the call refused, 0 where a descriptor did
  };
  ::testing::internal::CaptureStderr();
  for (const Refusal r : {Refusal{6, CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_SUCCESS, 1},
                          Refusal{7, CUBLAS_STATUS_ARCH_MISMATCH, CUBLAS_STATUS_SUCCESS, 1},
                          Refusal{8, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_INVALID_VALUE, 0},
                          Refusal{9, CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_SUPPORTED, 0}}) {
    SCOPED_TRACE(::testing::Message() << r.rows << " rows");
    std::vector<float> want(r.rows * N), got(r.rows * N, NAN);
    cpu::sgemm_bias(false, true, r.rows, N, K, a.data(), K, b.data(), K, aligned, want.data(), N);
    em::lt_refuses() = r.at_call != CUBLAS_STATUS_SUCCESS, em::lt_refusal() = r.at_call;
    em::lt_bias_type_answer() = r.at_descriptor;
    const int calls = em::lt_matmuls();
    kc::sgemm_bias(false, true, r.rows, N, K, a.data(), K, b.data(), K, aligned, got.data(), N);
    em::lt_refuses() = false, em::lt_refusal() = CUBLAS_STATUS_NOT_SUPPORTED;
    em::lt_bias_type_answer() = CUBLAS_STATUS_SUCCESS;
    EXPECT_LT(rel(got, want), kTf32) << "after a refusal";
    got.assign(got.size(), NAN);
    kc::sgemm_bias(false, true, r.rows, N, K, a.data(), K, b.data(), K, aligned, got.data(), N);
    EXPECT_LT(rel(got, want), kTf32) << "the refused shape again";
    EXPECT_EQ(em::lt_matmuls() - calls, r.matmuls) << "a refused shape asked again";
  }
  // said once a process (the first refusal other than NOT_SUPPORTED: here, unless a repeat of this test)
  const std::string said = ::testing::internal::GetCapturedStderr();
  size_t notes = 0;
  for (size_t at = said.find("cuBLASLt's bias epilogue refused"); at != std::string::npos;
       at = said.find("cuBLASLt's bias epilogue refused", at + 1))
    ++notes;
  EXPECT_LE(notes, 1u) << said;
  if (notes == 1) {
    EXPECT_NE(said.find("refused the call of a 12 x 6 x 17 product"), std::string::npos) << said;
  }
  {
    std::vector<float> out(10 * N);
    em::lt_refuses() = true, em::lt_refusal() = CUBLAS_STATUS_EXECUTION_FAILED;
    EXPECT_THROW(kc::sgemm_bias(false, true, 10, N, K, a.data(), K, b.data(), K, aligned, out.data(), N), qkv::Error);
    em::lt_refuses() = false, em::lt_refusal() = CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // K = 0: C = bias in every row
  std::vector<float> got(M * N, NAN);
  kc::sgemm_bias(false, false, M, N, 0, a.data(), 1, b.data(), 1, aligned, got.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) ASSERT_EQ(got[i * N + j], aligned[j]);
}

TEST(GemmLaunchersEmulated, Conv2dForwardAndBackwardThroughImToColumnsMatchTheCpu) {
  for (const int64_t groups : {1, 2}) {
    qk::Conv2dProblem p;
    p.N = 2, p.C = 4, p.H = 9, p.W = 7, p.O = 6, p.KH = 3, p.KW = 2, p.stride_h = 2, p.pad_h = 1, p.pad_w = 1;
    p.dilation_w = 2, p.groups = groups;
    SCOPED_TRACE(::testing::Message() << "groups " << groups);
    const int64_t nx = p.N * p.C * p.H * p.W, nw = p.O * (p.C / groups) * p.KH * p.KW,
                  ny = p.N * p.O * p.out_h() * p.out_w();
    const std::vector<float> x = random_floats(nx, 84, 1.f), w = random_floats(nw, 85, 1.f), b = random_floats(p.O, 86, 1.f),
                             dy = random_floats(ny, 87, 1.f);
    std::vector<float> y[2], dx[2], dw[2], db[2];
    for (int d = 0; d < 2; ++d) {
      y[d].assign(ny, -1.f), dx[d].assign(nx, -1.f), dw[d].assign(nw, -1.f), db[d].assign(p.O, -1.f);
      (d ? kc::conv2d_forward : cpu::conv2d_forward)(p, x.data(), w.data(), b.data(), y[d].data());
      (d ? kc::conv2d_backward_data : cpu::conv2d_backward_data)(p, dy.data(), w.data(), dx[d].data());
      (d ? kc::conv2d_backward_weights : cpu::conv2d_backward_weights)(p, x.data(), dy.data(), dw[d].data(),
                                                                       db[d].data());
    }
    EXPECT_LT(rel(y[1], y[0]), kTf32);
    EXPECT_LT(rel(dx[1], dx[0]), kTf32);
    EXPECT_LT(rel(dw[1], dw[0]), kTf32);
    EXPECT_LT(rel(db[1], db[0]), 1e-6);
  }
  EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "scratch not freed";
}

}  // namespace

#else
TEST(GemmLaunchersEmulated, F32AndBf16ProductsInEveryTransposeAndTheScaleAlone) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(GemmLaunchersEmulated, TheBiasInTheEpilogueMatchesTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(GemmLaunchersEmulated, Conv2dForwardAndBackwardThroughImToColumnsMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
