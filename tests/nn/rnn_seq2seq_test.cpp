// The recurrent translators (rnn-encdec, rnn-attention with additive, dot and general scores, input
// feeding): teacher forcing equals step-by-step decoding, cached and recomputed decoding choose the
// same tokens, the alignment weights are distributions over the real source tokens, a small model
// learns to reverse sequences, and configs that are not their type are refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/decode/translator.h"
#include "qkv/models/registry.h"
#include "qkv/nn/rnn_seq2seq.h"
#include "qkv/ops.h"
#include "qkv/train/optim.h"
#include "testing.h"

namespace qkv::nn {
namespace {

using nlohmann::json;

struct Variant {
  const char* type;
  json config;
};

std::vector<Variant> variants() {
  const json base = {{"vocab_size", 17}, {"embedding_dim", 8}, {"hidden_size", 12}, {"dropout", 0.0}, {"max_len", 16}};
  auto with = [&](json extra) {
    json j = base;
    j.update(extra);
    return j;
  };
  return {
      {"rnn-encdec", base},
      {"rnn-encdec", with({{"bidirectional_encoder", true}, {"encoder_layers", 2}})},
      {"rnn-attention", with({{"attention", "additive"}, {"attention_dim", 10}})},
      {"rnn-attention", with({{"attention", "general"}, {"input_feeding", true}, {"decoder_layers", 2}})},
      {"rnn-attention", with({{"attention", "general"}})},
      {"rnn-attention", with({{"attention", "dot"}, {"bidirectional_encoder", false}})},
  };
}

// Source [2, 5] with padding in row 1; target input (BOS …) [2, 4].
Tensor src_ids() { return Tensor::from_ints({5, 6, 7, 8, 3, 9, 10, 3, 0, 0}, {2, 5}); }
Tensor tgt_ids() { return Tensor::from_ints({2, 11, 12, 13, 2, 14, 15, 4}, {2, 4}); }

TEST(RnnSeq2Seq, TeacherForcingEqualsStepByStepDecoding) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(std::string(v.type) + " " + v.config.dump());
    Generator g(7);
    auto m = models::build_seq2seq(v.type, v.config, &g);
    m->module().eval();
    NoGradGuard no_grad;
    nn::AttentionMaps maps;
    const Tensor full = log_softmax(m->forward(src_ids(), tgt_ids(), &maps), -1);  // [2, 4, V]
    auto state = m->start_decoding(src_ids());
    const std::vector<int32_t> t = tgt_ids().to_ints();
    for (int64_t i = 0; i < 4; ++i) {
      const Tensor lp = m->step({t[static_cast<size_t>(i)], t[static_cast<size_t>(4 + i)]}, *state);
      EXPECT_TENSOR_NEAR(lp, full.select(1, i), 2e-5);
    }
    if (std::string(v.type) == "rnn-encdec") {
      EXPECT_TRUE(maps.cross.empty());
      continue;
    }
    // the alignments: [B, 1, T, S], rows summing to 1 over the real source tokens only
    ASSERT_EQ(maps.cross.size(), 1u);
    const Tensor w = maps.cross[0];
    EXPECT_EQ(w.shape(), (Shape{2, 1, 4, 5}));
    const std::vector<float> wv = w.contiguous().to_vector();
    for (int64_t row = 0; row < 8; ++row) {
      double s = 0;
      for (int64_t j = 0; j < 5; ++j) s += wv[static_cast<size_t>(row * 5 + j)];
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
    for (int64_t i = 0; i < 4; ++i)  // row 1's last two source positions are padding
      for (int64_t j = 3; j < 5; ++j) EXPECT_EQ(wv[static_cast<size_t>((4 + i) * 5 + j)], 0.f);
  }
}

TEST(RnnSeq2Seq, CachedAndRecomputedDecodingChooseTheSameTokens) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(std::string(v.type) + " " + v.config.dump());
    Generator g(3);
    auto m = models::build_seq2seq(v.type, v.config, &g);
    m->module().eval();
    const std::vector<std::vector<int32_t>> sources = {{5, 6, 7}, {8, 9, 10, 11, 12}, {13}, {6, 6, 5, 14}};
    for (int64_t beam : {1, 3}) {
      decode::TranslateOptions o;
      o.beam_size = beam, o.max_extra = 6, o.batch_size = 3;
      o.use_cache = true;
      auto a = decode::translate_ids(*m, sources, o);
      o.use_cache = false;
      auto b = decode::translate_ids(*m, sources, o);
      for (size_t i = 0; i < sources.size(); ++i) {
        EXPECT_EQ(a[i].tokens, b[i].tokens) << "beam " << beam << " source " << i;
        EXPECT_NEAR(a[i].score, b[i].score, 1e-4) << "beam " << beam << " source " << i;
      }
    }
  }
}

// rnn-attention learns to reverse sequences of 3–6 tokens (a task a single context vector finds
// hard and attention solves: output i looks at input n − 1 − i).
TEST(RnnSeq2Seq, AttentionLearnsToReverse) {
  Generator g(11);
  const json cfg = {{"vocab_size", 14}, {"embedding_dim", 16}, {"hidden_size", 32}, {"attention", "additive"},
                    {"dropout", 0.0}, {"max_len", 16}};
  auto m = models::build_seq2seq("rnn-attention", cfg, &g);
  train::AdamOptions ao;
  ao.lr = 1e-2f;
  train::Adam opt({{m->module().named_parameters(), 0.f}}, ao);
  auto batch = [&](uint64_t seed, Tensor& src, Tensor& tin, Tensor& tout) {
    const int64_t B = 32, S = 7;  // up to 6 tokens + EOS
    std::vector<int32_t> s(B * S, 0), ti(B * S, 0), to(B * S, 0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = 3 + static_cast<int64_t>(Generator::bits(seed, b) % 4);
      std::vector<int32_t> x;
      for (int64_t i = 0; i < n; ++i) x.push_back(4 + static_cast<int32_t>(Generator::bits(seed + 1, b * 8 + i) % 10));
      for (int64_t i = 0; i < n; ++i) s[b * S + i] = x[i];
      s[b * S + n] = 3;
      ti[b * S] = 2;
      for (int64_t i = 0; i < n; ++i) ti[b * S + i + 1] = x[n - 1 - i], to[b * S + i] = x[n - 1 - i];
      to[b * S + n] = 3;
    }
    src = Tensor::from_ints(s, {B, S}), tin = Tensor::from_ints(ti, {B, S}), tout = Tensor::from_ints(to, {B, S});
  };
  for (int step = 0; step < 250; ++step) {
    Tensor s, ti, to;
    batch(100 + step, s, ti, to);
    Tensor loss = m->loss(s, ti, to);
    loss.backward();
    train::clip_grad_norm_(m->module().parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  }
  m->module().eval();
  Tensor s, ti, to;
  batch(9999, s, ti, to);
  std::vector<std::vector<int32_t>> sources;
  const std::vector<int32_t> flat = s.to_ints();
  for (int64_t b = 0; b < 32; ++b) {
    std::vector<int32_t> x;
    for (int64_t i = 0; i < 7 && flat[b * 7 + i] != 3; ++i) x.push_back(flat[b * 7 + i]);
    sources.push_back(x);
  }
  decode::TranslateOptions o;
  o.beam_size = 1;
  auto hyps = decode::translate_ids(*m, sources, o);
  int right = 0;
  for (size_t i = 0; i < sources.size(); ++i)
    right += hyps[i].tokens == std::vector<int32_t>(sources[i].rbegin(), sources[i].rend());
  EXPECT_GE(right, 28) << "of 32 reversed exactly after 250 steps";
}

TEST(RnnSeq2Seq, ConfigsThatAreNotTheirTypeAreRefused) {
  const json base = {{"vocab_size", 17}, {"embedding_dim", 8}, {"hidden_size", 12}};
  auto err = [&](const char* type, json extra) {
    json j = base;
    j.update(extra);
    return testing::error_of([&] { models::build_seq2seq(type, j); });
  };
  EXPECT_NE(err("rnn-encdec", {{"attention", "additive"}}).find("rnn-encdec has no attention"), std::string::npos);
  EXPECT_NE(err("rnn-attention", {{"attention", "none"}}).find("needs an attention"), std::string::npos);
  EXPECT_NE(err("rnn-attention", {{"attention", "dot"}}).find("dot scores need"), std::string::npos);
  EXPECT_NE(err("rnn-attention", {{"attention", "additive"}, {"input_feeding", true}}).find("input_feeding is Luong"),
            std::string::npos);
  EXPECT_NE(err("rnn-attention", {{"hiden_size", 3}}).find("unknown key \"hiden_size\""), std::string::npos);
  // the defaults make each type what its name says
  auto encdec = models::build_seq2seq("rnn-encdec", base);
  EXPECT_EQ(nn::RNNSeq2SeqConfig::from_json(encdec->config_json()).bidirectional_encoder, false);
  EXPECT_NE(encdec->describe().find("no attention"), std::string::npos);
  auto att = models::build_seq2seq("rnn-attention", base);
  EXPECT_NE(att->describe().find("additive attention"), std::string::npos);
}

}  // namespace
}  // namespace qkv::nn
