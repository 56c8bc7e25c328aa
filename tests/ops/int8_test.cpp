// int8 decoding weights (ops/inference_weight.h, kernels/cpu/gemm_int8.h): the quantization's
// round trip, the int8 product against the exact sum of the same integers, slices of a fused
// projection, and whole models: logits near f32's, and the shipped translator's int8 output equal
// to its f32 output on the seeds' sentences.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"
#include "qkv/ops/matmul.h"
#include "testing.h"

namespace qkv {
namespace {

TEST(Int8, QuantizeRowsRoundTripsWithinHalfAStep) {
  Generator g(11);
  Tensor w = Tensor::randn({33, 70}, g);
  w.data<float>()[5 * 70 + 3] = 40.f;  // an outlier: only its own row's scale grows
  for (int64_t k = 0; k < 70; ++k) w.data<float>()[7 * 70 + k] = 0.f;  // an all-zero row
  const QuantizedRows q = QuantizedRows::quantize(w);
  const Tensor back = q.dequantize();
  for (int64_t n = 0; n < 33; ++n) {
    float amax = 0.f;
    int8_t qmax = 0;
    for (int64_t k = 0; k < 70; ++k) {
      amax = std::max(amax, std::fabs(w.data<float>()[n * 70 + k]));
      qmax = std::max<int8_t>(qmax, static_cast<int8_t>(std::abs(q.values[static_cast<size_t>(n * 70 + k)])));
    }
    const float s = q.scales[static_cast<size_t>(n)];
    if (amax == 0.f) {
      EXPECT_EQ(s, 1.f);
      continue;
    }
    EXPECT_FLOAT_EQ(s, amax / 127.f);
    EXPECT_EQ(qmax, 127) << "the largest weight of a row maps to ±127";
    for (int64_t k = 0; k < 70; ++k)
      EXPECT_LE(std::fabs(back.data<float>()[n * 70 + k] - w.data<float>()[n * 70 + k]), 0.5f * s * (1 + 1e-5f));
  }
}

// The product from the integers themselves, summed in int64: what the kernel must equal.
Tensor reference(const Tensor& x, const QuantizedRows& q, int64_t row0, int64_t N, const Tensor& b) {
  const int64_t M = x.size(0), K = x.size(1);
  Tensor y = Tensor::empty({M, N});
  for (int64_t m = 0; m < M; ++m) {
    const float* r = x.data<float>() + m * K;
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(r[k]));
    const float sx = amax > 0 ? amax / 63.f : 1.f;
    for (int64_t n = 0; n < N; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<int64_t>(std::nearbyint(r[k] * (1.f / sx))) * q.values[static_cast<size_t>((row0 + n) * K + k)];
      y.data<float>()[m * N + n] = static_cast<float>(acc) * (sx * q.scales[static_cast<size_t>(row0 + n)]) +
                                   (b.defined() ? b.data<float>()[n] : 0.f);
    }
  }
  return y;
}

TEST(Int8, LinearEqualsTheExactIntegerSumAndStaysNearF32) {
  Generator g(12);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 37, 70}, {5, 64, 256}, {128, 768, 256}, {33, 8000, 256},
                                 // the matrix–vector kernel's blocks: 4 rows and 2 activation rows at a time,
                                 // 64-byte steps, a masked or scalar tail
                                 {1, 203, 768}, {2, 130, 100}, {3, 67, 129}, {7, 9, 63}, {8, 300, 2048}}) {
    Tensor w = Tensor::randn({N, K}, g), b = Tensor::randn({N}, g), x = Tensor::randn({M, K}, g);
    const InferenceWeight iw(w, InferenceWeights::int8);
    const Tensor y = linear_inference(x, w, iw, b);
    EXPECT_TENSOR_NEAR(y, reference(x, *iw.int8(), 0, N, b), 1e-6);
    EXPECT_TENSOR_NEAR(linear_inference(x, w, iw), reference(x, *iw.int8(), 0, N, Tensor()), 1e-6);
    // against f32: |error| a few % of the output's scale (7-bit activations, 8-bit weights)
    EXPECT_LT(testing::rel_error(y.to_vector(), linear(x, w, b).to_vector()), 0.03) << M << "x" << N << "x" << K;
  }
}

// Batches of rows read the weights' packed copy (kernels/cpu/packed_linear.h) from a weight's second
// batch on: int8 gives the same integers, so the same numbers, as the first (unpacked) call; f32
// equals `linear` to rounding. Batch sizes the packed primitive was not laid out for (9, 17, 100)
// and a slice of a fused projection included.
TEST(Int8, PackedCopiesGiveTheSameNumbers) {
  autograd::NoGradGuard no_grad;  // decoding: the f32 packed copy is never read with the tape on
  Generator g(15);
  Tensor w = Tensor::randn({96, 200}, g), b = Tensor::randn({96}, g);
  for (const int64_t M : {9, 17, 32, 100}) {
    Tensor x = Tensor::randn({M, 200}, g);
    for (const auto kind : {InferenceWeights::int8, InferenceWeights::f32}) {
      const InferenceWeight whole(w, kind), slice = whole.slice_rows(32, 64);
      const Tensor w_slice = w.slice(0, 32, 64).contiguous(), b_slice = b.slice(0, 32, 64).contiguous();
      const Tensor first = linear_inference(x, w, whole, b);  // before any packing
      for (int call = 0; call < 3; ++call) {
        const Tensor again = linear_inference(x, w, whole, b);
        if (kind == InferenceWeights::int8)
          EXPECT_EQ(again.to_vector(), first.to_vector()) << "M=" << M << " call " << call;
        else
          EXPECT_TENSOR_NEAR(again, linear(x, w, b), 1e-5);
        const Tensor part = linear_inference(x, w_slice, slice, b_slice);
        if (kind == InferenceWeights::int8)
          EXPECT_TENSOR_NEAR(part, reference(x, *whole.int8(), 32, 32, b_slice), 1e-6);
        else
          EXPECT_TENSOR_NEAR(part, linear(x, w_slice, b_slice), 1e-5);
      }
    }
  }
}

// A decoding step's few rows take the matrix–vector kernel, a batch oneDNN's GEMM: the same integers,
// so the same numbers, bit for bit.
TEST(Int8, FewRowsAndManyRowsGiveTheSameNumbers) {
  Generator g(14);
  Tensor w = Tensor::randn({300, 200}, g), b = Tensor::randn({300}, g), x = Tensor::randn({40, 200}, g);
  const InferenceWeight iw(w, InferenceWeights::int8);
  const Tensor all = linear_inference(x, w, iw, b);
  for (int64_t m0 : {0, 7, 39}) {
    const Tensor few = linear_inference(x.slice(0, m0, std::min<int64_t>(m0 + 3, 40)).contiguous(), w, iw, b);
    EXPECT_TENSOR_NEAR(few, all.slice(0, m0, std::min<int64_t>(m0 + 3, 40)).contiguous(), 0.0);
  }
}

TEST(Int8, SlicedRowsAreTheRowsOfTheWhole) {
  Generator g(13);
  Tensor w = Tensor::randn({3 * 16, 40}, g), x = Tensor::randn({4, 40}, g);
  const InferenceWeight iw(w, InferenceWeights::int8);
  const Tensor whole = linear_inference(x, w, iw);
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor part = linear_inference(x, w.slice(0, i * 16, (i + 1) * 16), iw.slice_rows(i * 16, (i + 1) * 16));
    EXPECT_TENSOR_NEAR(part, whole.slice(1, i * 16, (i + 1) * 16).contiguous(), 0.0);
  }
}

TEST(Int8, ShippedTranslatorGivesTheF32TranslationsOfTheSeedsSentences) {
  const std::string path = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";
  models::LoadedSeq2Seq f32 = models::load_seq2seq(path);
  models::LoadOptions lo;
  lo.weights = InferenceWeights::int8;
  models::LoadedSeq2Seq i8 = models::load_seq2seq(path, lo);
  // the seeds' sentences (000, 003: "it" and its antecedent; 001: context decides)
  const std::vector<std::string> seeds = {"The cat didn't cross the street because it was too tired.",
                                          "The trophy didn't fit in the suitcase because it was too big.",
                                          "Alice wrote a note and gave it to Bob."};
  decode::TranslateOptions o;
  const auto a = decode::Translator(*f32.model, *f32.tokenizer).translate(seeds, o);
  const auto b = decode::Translator(*i8.model, *i8.tokenizer).translate(seeds, o);
  EXPECT_EQ(b, a);
}

}  // namespace
}  // namespace qkv
