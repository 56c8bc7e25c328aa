// int8 decoding weights (ops/inference_weight.h, kernels/cpu/gemm_int8.h): the quantization's
// round trip, the int8 product against the exact sum of the same integers, slices of a fused
// projection, and whole models: logits near f32's, and the shipped translator's int8 output equal
// to its f32 output on the seeds' sentences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops/activation.h"
#include "qkv/ops/matmul.h"
#include "qkv/ops/softmax.h"
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

// The product from the integers themselves, summed in int64: what the kernel must equal (the
// activations with the bits chosen now: int8_activation_bits()).
Tensor reference(const Tensor& x, const QuantizedRows& q, int64_t row0, int64_t N, const Tensor& b) {
  const int64_t M = x.size(0), K = x.size(1);
  Tensor y = Tensor::empty({M, N});
  for (int64_t m = 0; m < M; ++m) {
    const float* r = x.data<float>() + m * K;
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(r[k]));
    const float levels = int8_activation_bits() == 8 ? 127.f : 63.f;
    const float sx = amax > 0 ? amax / levels : 1.f;
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
  for (const int bits : testing::int8_activation_bit_choices()) {
  SCOPED_TRACE(std::to_string(bits) + "-bit activations");
  testing::Int8ActivationBits scope(bits);
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
    // against f32: |error| a few % of the output's scale (7-bit activations, 8-bit weights), half
    // that with 8-bit activations
    EXPECT_LT(testing::rel_error(y.to_vector(), linear(x, w, b).to_vector()), bits == 8 ? 0.015 : 0.03)
        << M << "x" << N << "x" << K;
  }
  }
}

// 8-bit activations reach the ends of u8 (X8 + 128 ∈ [1, 255]) on every path: rows whose largest
// value is the sum's worst case, K long enough that Σ (X8 + 128) · W8 passes 2¹⁵ many times over.
TEST(Int8, EightBitActivationsSumExactlyOnEveryPath) {
  if (!int8_full_range_available()) GTEST_SKIP() << "this CPU's int8 products take 7-bit activations";
  testing::Int8ActivationBits scope(8);
  Generator g(16);
  for (const int64_t M : {1, 3, 8, 9, 40}) {
    Tensor w = Tensor::randn({64, 4096}, g), x = Tensor::randn({M, 4096}, g);
    for (int64_t k = 0; k < 4096; ++k) {  // every weight ±127 · s, every activation ±127 · s_x: same signs
      w.data<float>()[k] = 1.f;
      for (int64_t m = 0; m < M; ++m) x.data<float>()[m * 4096 + k] = m % 2 ? -3.f : 3.f;
    }
    SCOPED_TRACE("M=" + std::to_string(M));
    const InferenceWeight iw(w, InferenceWeights::int8);
    for (int call = 0; call < 3; ++call)  // the third call reads the packed copy
      EXPECT_TENSOR_NEAR(linear_inference(x, w, iw), reference(x, *iw.int8(), 0, 64, Tensor()), 1e-6);
    EXPECT_FLOAT_EQ(linear_inference(x, w, iw).data<float>()[0], 3.f * 4096.f);
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

// f32 weights with one row (a generation step) take the matrix–vector kernel (kernels/cpu/gemv.h):
// `linear`'s numbers to rounding, for widths with and without a vector tail (K 7, 33, 200, 1,000; 4,000
// goes to `linear` itself), an odd number of features, with and without a bias, and a slice of a fused projection.
TEST(Int8, OneRowOfF32WeightsIsLinearsProduct) {
  autograd::NoGradGuard no_grad;
  Generator g(16);
  for (const int64_t K : {7, 33, 200, 1000, 4000}) {
    SCOPED_TRACE(K);
    Tensor w = Tensor::randn({131, K}, g), b = Tensor::randn({131}, g), x = Tensor::randn({1, K}, g);
    const InferenceWeight whole(w, InferenceWeights::f32), slice = whole.slice_rows(32, 96);
    const Tensor w_slice = w.slice(0, 32, 96).contiguous(), b_slice = b.slice(0, 32, 96).contiguous();
    EXPECT_TENSOR_NEAR(linear_inference(x, w, whole, b), linear(x, w, b), 1e-5);
    EXPECT_TENSOR_NEAR(linear_inference(x, w, whole), linear(x, w), 1e-5);
    EXPECT_TENSOR_NEAR(linear_inference(x.reshape({1, 1, K}), w, whole, b), linear(x, w, b).reshape({1, 1, 131}), 1e-5);
    EXPECT_TENSOR_NEAR(linear_inference(x, w_slice, slice, b_slice), linear(x, w_slice, b_slice), 1e-5);
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

// The feed-forward block with the hidden activations quantized in the first product's epilogue
// (kernels/cpu/gemm_int8.h: feed_forward_int8) gives, bit for bit, what the three ops give one after
// the other: on the matrix–vector kernel (M ≤ 8), oneDNN's GEMM (a weight's first batch) and the
// packed copy (its third), with each activation and both activation widths. (H = 256: every
// element of a row and of the whole buffer takes the activation kernels' vector path.) silu's σ
// is the vector exp's in the fused kernel, libm's in the op: near, not equal.
TEST(Int8, FusedFeedForwardGivesTheUnfusedNumbers) {
  autograd::NoGradGuard no_grad;
  auto activate = [](const Tensor& h, const std::string& act) {  // the unfused op
    return act == "relu" ? relu(h) : act == "gelu" ? gelu(h, "none") : act == "gelu_tanh" ? gelu(h, "tanh") : silu(h);
  };
  for (const int bits : testing::int8_activation_bit_choices()) {
    testing::Int8ActivationBits scope(bits);
    Generator g(17);
    Tensor w1 = Tensor::randn({256, 96}, g), b1 = Tensor::randn({256}, g), w2 = Tensor::randn({72, 256}, g),
           b2 = Tensor::randn({72}, g);
    for (const char* act : {"relu", "gelu", "gelu_tanh", "silu"}) {
      const InferenceWeight iw1(w1, InferenceWeights::int8), iw2(w2, InferenceWeights::int8);
      for (const int64_t M : {1, 5, 8, 9, 40}) {
        SCOPED_TRACE(std::to_string(bits) + "-bit activations, " + act + ", M=" + std::to_string(M));
        const Tensor x = Tensor::randn({M, 96}, g);
        for (int call = 0; call < 3; ++call) {
          const Tensor unfused = linear_inference(activate(linear_inference(x, w1, iw1, b1), act), w2, iw2, b2);
          const Tensor fused = feed_forward_inference(x, w1, iw1, b1, act, w2, iw2, b2);
          ASSERT_EQ(fused.shape(), unfused.shape());
          if (std::string(act) == "silu")  // σ from the vector exp, ~2 ulp from libm's: a hidden value
            // may round to the next of its 255 levels, ~1/127 of its row's largest
            EXPECT_TENSOR_NEAR(fused, unfused, 0.01);
          else
            EXPECT_EQ(fused.to_vector(), unfused.to_vector()) << "call " << call;
        }
        // and a block without biases, over [B, T, K] input
        const Tensor x3 = x.view({1, M, 96});
        const Tensor plain = feed_forward_inference(x3, w1, iw1, Tensor(), act, w2, iw2, Tensor());
        const Tensor h = activate(linear_inference(x3, w1, iw1), act);
        EXPECT_EQ(plain.shape(), (Shape{1, M, 72}));
        if (std::string(act) == "silu")
          EXPECT_TENSOR_NEAR(plain, linear_inference(h, w2, iw2), 0.01);
        else
          EXPECT_EQ(plain.to_vector(), linear_inference(h, w2, iw2).to_vector());
      }
    }
  }
}

// Without int8 rows the block is the three ops (f32 weights); a wrong activation or weights that do
// not chain are errors naming them.
TEST(Int8, FeedForwardOnOtherWeightsAndItsErrors) {
  autograd::NoGradGuard no_grad;
  Generator g(18);
  Tensor w1 = Tensor::randn({32, 16}, g), w2 = Tensor::randn({8, 32}, g), x = Tensor::randn({4, 16}, g);
  const InferenceWeight f1(w1, InferenceWeights::f32), f2(w2, InferenceWeights::f32);
  EXPECT_TENSOR_NEAR(feed_forward_inference(x, w1, f1, Tensor(), "relu", w2, f2, Tensor()),
                     linear(relu(linear(x, w1)), w2), 1e-5);
  EXPECT_NE(testing::error_of([&] { feed_forward_inference(x, w1, f1, Tensor(), "swish", w2, f2, Tensor()); })
                .find("activation must be relu, gelu, gelu_tanh or silu, got \"swish\""),
            std::string::npos);
  Tensor w3 = Tensor::randn({8, 30}, g);
  const InferenceWeight q1(w1, InferenceWeights::int8), q3(w3, InferenceWeights::int8);
  EXPECT_NE(testing::error_of([&] { feed_forward_inference(x, w1, q1, Tensor(), "relu", w3, q3, Tensor()); })
                .find("do not chain"),
            std::string::npos);
}

// A step's log-probabilities with the log-softmax taken as the int8 product writes each row: the
// numbers of linear_inference then log_softmax, bit for bit, on every path; on f32 weights the two
// ops.
TEST(Int8, FusedLogSoftmaxGivesTheUnfusedNumbers) {
  autograd::NoGradGuard no_grad;
  for (const int bits : testing::int8_activation_bit_choices()) {
    testing::Int8ActivationBits scope(bits);
    Generator g(19);
    Tensor w = Tensor::randn({1000, 64}, g), b = Tensor::randn({1000}, g);
    const InferenceWeight iw(w, InferenceWeights::int8), fw(w, InferenceWeights::f32);
    for (const int64_t M : {1, 6, 9, 40}) {
      SCOPED_TRACE(std::to_string(bits) + "-bit activations, M=" + std::to_string(M));
      const Tensor x = Tensor::randn({M, 64}, g);
      for (int call = 0; call < 3; ++call)
        for (const Tensor& bias : {b, Tensor()}) {
          const Tensor fused = linear_log_softmax_inference(x, w, iw, bias);
          EXPECT_EQ(fused.to_vector(), log_softmax(linear_inference(x, w, iw, bias), -1).to_vector()) << "call " << call;
        }
      EXPECT_TENSOR_NEAR(linear_log_softmax_inference(x, w, fw, b), log_softmax(linear(x, w, b), -1), 1e-5);
    }
  }
}

// With 8-bit activations the encoder reads int8 rows too; with 7 it reads its f32 weights.
TEST(Int8, ShippedTranslatorGivesTheF32TranslationsOfTheSeedsSentences) {
  const std::string path = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";
  models::LoadedSeq2Seq f32 = models::load_seq2seq(path);
  // the seeds' sentences (000, 003: "it" and its antecedent; 001: context decides)
  const std::vector<std::string> seeds = {"The cat didn't cross the street because it was too tired.",
                                          "The trophy didn't fit in the suitcase because it was too big.",
                                          "Alice wrote a note and gave it to Bob."};
  decode::TranslateOptions o;
  const auto a = decode::Translator(*f32.model, *f32.tokenizer).translate(seeds, o);
  for (const int bits : testing::int8_activation_bit_choices()) {
    testing::Int8ActivationBits scope(bits);
    models::LoadOptions lo;
    lo.weights = InferenceWeights::int8;
    models::LoadedSeq2Seq i8 = models::load_seq2seq(path, lo);
    const auto& net = dynamic_cast<const nn::Seq2SeqTransformer&>(std::as_const(*i8.model).module());
    EXPECT_EQ(net.int8_encoder(), bits == 8);
    EXPECT_EQ(net.transformer->encoder->layers[0]->linear1->weight_inference.int8() != nullptr, bits == 8);
    EXPECT_EQ(decode::Translator(*i8.model, *i8.tokenizer).translate(seeds, o), a) << bits << "-bit activations";
  }
}

// Decoding's encoder (forward_inference) computes what the training path's encoder does: with f32
// weights to rounding, with int8 rows (the embedding's always, the encoder's with 8-bit
// activations) near it.
TEST(Int8, TheEncodersInferencePathIsTheTrainingPaths) {
  autograd::NoGradGuard no_grad;
  nn::Seq2SeqConfig c;
  c.vocab_size = 50, c.d_model = 32, c.nhead = 4, c.num_encoder_layers = 2, c.num_decoder_layers = 1;
  c.dim_feedforward = 64, c.dropout = 0.f;
  Generator g(17);
  nn::Seq2SeqTransformer m(c, &g);
  m.eval();
  const Tensor src = Tensor::from_ints({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0}, {2, 10});
  const Tensor training = m.encode(src).memory;
  EXPECT_TENSOR_NEAR(m.encode(src, nullptr, /*inference=*/true).memory, training, 1e-5);
  for (const int bits : testing::int8_activation_bit_choices()) {
    testing::Int8ActivationBits scope(bits);
    m.set_inference_weights(InferenceWeights::int8);
    EXPECT_EQ(m.int8_encoder(), bits == 8);
    EXPECT_EQ(m.transformer->encoder->layers[1]->self_attn->in_proj_inference.int8() != nullptr, bits == 8);
    EXPECT_LT(testing::rel_error(m.encode(src, nullptr, true).memory.to_vector(), training.to_vector()), 0.02);
  }
  m.set_inference_weights(InferenceWeights::f32);
  EXPECT_FALSE(m.int8_encoder());
  EXPECT_TENSOR_NEAR(m.encode(src, nullptr, true).memory, training, 1e-5);
}

}  // namespace
}  // namespace qkv
