// Attention views (decode/inspect.h): words from tokens, the head search's formula and order, and
// the views of the shipped models (weights that are distributions, causal where they must be,
// logits unchanged by asking for the weights).
#include "qkv/decode/inspect.h"

#include <random>
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cmath>
#include <random>
#include <tuple>

#include "qkv/autograd/grad_mode.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/registry.h"
#include "testing.h"

namespace qkv::decode {
namespace {

TEST(Inspect, SentencePieceTokensMakeWords) {
  const TokenAxis a = make_axis({"<s>", "\xE2\x96\x81The", "\xE2\x96\x81" "cat", "\xE2\x96\x81" "did", "n", "'", "t",
                                 "\xE2\x96\x81", "tired", ".", "</s>"});
  EXPECT_EQ(a.tokens, (std::vector<std::string>{"<s>", "The", "cat", "did", "n", "'", "t", "\xE2\x96\x81", "tired", ".", "</s>"}));
  EXPECT_EQ(a.words, (std::vector<std::string>{"<s>", "The", "cat", "didn't", "tired.", "</s>"}));
  EXPECT_EQ(a.word, (std::vector<int>{0, 1, 2, 3, 3, 3, 3, -1, 4, 4, 5}));
}

TEST(Inspect, CharacterTokensMakeWordsBetweenSpaces) {
  const TokenAxis a = make_axis({"R", "O", ":", " ", "w", "h", "\n", "\n", "x", " "});
  EXPECT_EQ(a.words, (std::vector<std::string>{"RO:", "wh", "x"}));
  EXPECT_EQ(a.word, (std::vector<int>{0, 0, 0, -1, 1, 1, -1, -1, 2, -1}));
  EXPECT_EQ(a.tokens[3], " ");  // shown as it is
  // subword pieces of running text: a leading space starts a word
  const TokenAxis b = make_axis({"But", " soft", ",", " what", "\n"});
  EXPECT_EQ(b.words, (std::vector<std::string>{"But", "soft,", "what"}));
}

// A view of one kind, queries "it was" (tokens i|t, was), keys "the cat" (the, c|at), weights given.
AttentionView small_view(const std::vector<std::vector<float>>& per_head) {
  AttentionView v;
  AttentionKind k;
  k.name = "encoder_self";
  k.queries = make_axis({"\xE2\x96\x81i", "t", "\xE2\x96\x81was"});
  k.keys = make_axis({"\xE2\x96\x81the", "\xE2\x96\x81" "c", "at"});
  Tensor w = Tensor::zeros({static_cast<int64_t>(per_head.size()), 3, 3});
  for (size_t h = 0; h < per_head.size(); ++h)
    for (size_t i = 0; i < 9; ++i) w.data<float>()[h * 9 + i] = per_head[h][i];
  k.layers = {w};
  v.kinds.push_back(k);
  return v;
}

TEST(Inspect, HeadSearchAveragesOverQueryTokensAndSumsOverKeyTokens) {
  // head 0: "i" puts .2+.3 on c|at, "t" .1+.1 → mean .35; head 1: .4+.4 and .3+.5 → .8
  const AttentionView v = small_view({{0.5f, 0.2f, 0.3f, 0.8f, 0.1f, 0.1f, 1, 0, 0},  //
                                      {0.2f, 0.4f, 0.4f, 0.2f, 0.3f, 0.5f, 0, 0, 1}});
  const std::vector<HeadScore> r = rank_heads(v, "It", "CAT!");  // case and punctuation ignored
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].head, 1);
  EXPECT_NEAR(r[0].weight, 0.8f, 1e-6);
  EXPECT_EQ(r[1].head, 0);
  EXPECT_NEAR(r[1].weight, 0.35f, 1e-6);
  EXPECT_EQ(r[0].query_word, 0);
  EXPECT_EQ(r[0].key_word, 1);
  EXPECT_TRUE(rank_heads(v, "it", "dog").empty());
  EXPECT_TRUE(rank_heads(v, "cat", "it").empty());  // queries and keys are not interchangeable
}

TEST(Inspect, TranslationViewOfTheShippedModel) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const std::string sentence = "The cat sat on the mat.";
  const AttentionView v = translation_attention(*t.model, *t.tokenizer, sentence);
  EXPECT_EQ(v.output, Translator(*t.model, *t.tokenizer).translate({sentence}, TranslateOptions{})[0]);
  ASSERT_EQ(v.kinds.size(), 3u);
  const AttentionKind& cross = *v.find("cross");
  EXPECT_EQ(cross.queries.tokens.back(), "</s>");
  for (const AttentionKind& k : v.kinds)
    for (const Tensor& w : k.layers) {
      ASSERT_EQ(w.size(1), static_cast<int64_t>(k.queries.tokens.size()));
      ASSERT_EQ(w.size(2), static_cast<int64_t>(k.keys.tokens.size()));
      for (int64_t r = 0; r < w.size(0) * w.size(1); ++r) {
        double sum = 0;
        for (int64_t j = 0; j < w.size(2); ++j) sum += w.data<float>()[r * w.size(2) + j];
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
}

// A model without cross-attention (rnn-encdec: one context vector) has none to show: the error
// names the model as the caller names it (qkv attend: its file) and its type.
TEST(Inspect, TranslationViewOfAModelWithoutCrossAttentionNamesItsType) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  Generator g(1);
  const nlohmann::json cfg = {{"vocab_size", t.tokenizer->vocab_size()}, {"embedding_dim", 8}, {"hidden_size", 8},
                              {"dropout", 0.0}, {"max_len", 16}};
  auto m = models::build_seq2seq("rnn-encdec", cfg, &g);
  m->module().eval();
  TranslateOptions o;
  o.max_extra = 3;
  std::string e = testing::error_of([&] { translation_attention(*m, *t.tokenizer, "The cat.", o, "'encdec.safetensors'"); });
  EXPECT_NE(e.find("'encdec.safetensors': its type, rnn-encdec ("), std::string::npos) << e;
  EXPECT_NE(e.find("has no cross-attention to show"), std::string::npos) << e;
  e = testing::error_of([&] { translation_attention(*m, *t.tokenizer, "The cat.", o); });
  EXPECT_NE(e.find("the model: its type, rnn-encdec"), std::string::npos) << e;
}

TEST(Inspect, LanguageModelViewIsCausalAndLeavesTheLogitsAlone) {
  models::LoadedLanguageModel g =
      models::load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  const std::string text = "ROMEO: what light";
  const AttentionView v = language_model_attention(*g.model, g.tokenizer, text);
  ASSERT_EQ(v.kinds.size(), 1u);
  const AttentionKind& k = v.kinds[0];
  EXPECT_EQ(k.queries.words, (std::vector<std::string>{"ROMEO:", "what", "light"}));
  for (const Tensor& w : k.layers)
    for (int64_t h = 0; h < w.size(0); ++h)
      for (int64_t i = 0; i < w.size(1); ++i) {
        double sum = 0;
        for (int64_t j = 0; j < w.size(2); ++j) {
          const float x = w.data<float>()[(h * w.size(1) + i) * w.size(2) + j];
          sum += x;
          if (j > i) {
            EXPECT_EQ(x, 0.f);
          }
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
  // the same logits with and without the weights kept
  NoGradGuard no_grad;
  const std::vector<int32_t> ids = g.tokenizer.encode(text);
  const Tensor idx = Tensor::from_ints(ids, {1, static_cast<int64_t>(ids.size())});
  nn::AttentionMaps maps;
  const Tensor with = g.model->forward(idx, &maps), without = g.model->forward(idx);
  EXPECT_TENSOR_NEAR(with, without, 1e-4);  // (the weights come from the reference kernel, not the flash one)
  EXPECT_EQ(maps.decoder_self.size(), k.layers.size());
}

TEST(Inspect, EmptyAndOverlongInputsAreErrors) {
  models::LoadedLanguageModel g =
      models::load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  EXPECT_NE(testing::error_of([&] { language_model_attention(*g.model, g.tokenizer, ""); }).find("empty"), std::string::npos);
  const std::string msg =
      testing::error_of([&] { language_model_attention(*g.model, g.tokenizer, std::string(5000, 'a')); });
  EXPECT_NE(msg.find("context"), std::string::npos) << msg;
}

// Attention rollout by hand: two layers of two tokens, one head each.
//   A1 = [[1, 0], [.5, .5]] → Â1 = .5·A1 + .5·I = [[1, 0], [.25, .75]]
//   A2 = [[0, 1], [0, 1]]   → Â2 = [[.5, .5], [0, 1]]
//   rollout = Â2 · Â1 = [[.5 + .125, .375], [.25, .75]]
TEST(Inspect, RolloutIsTheProductOfHalfResidualLayers) {
  Tensor a1 = Tensor::zeros({1, 2, 2}), a2 = Tensor::zeros({1, 2, 2});
  const float v1[] = {1, 0, 0.5f, 0.5f}, v2[] = {0, 1, 0, 1};
  std::copy(v1, v1 + 4, a1.data<float>());
  std::copy(v2, v2 + 4, a2.data<float>());
  const Tensor r = attention_rollout({a1, a2});
  ASSERT_EQ(r.size(0), 2);
  const float want[] = {0.625f, 0.375f, 0.25f, 0.75f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(r.data<float>()[i], want[i], 1e-6) << i;
  // heads are averaged first: two heads [[1,0],[1,0]] and [[0,1],[0,1]] make one of [[.5,.5],[.5,.5]]
  Tensor two = Tensor::zeros({2, 2, 2});
  const float v3[] = {1, 0, 1, 0, 0, 1, 0, 1};
  std::copy(v3, v3 + 8, two.data<float>());
  const Tensor m = attention_rollout({two});
  const float want1[] = {0.75f, 0.25f, 0.25f, 0.75f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(m.data<float>()[i], want1[i], 1e-6) << i;
  EXPECT_NE(testing::error_of([&] { attention_rollout({Tensor::zeros({1, 2, 3})}); }).find("self-attention"),
            std::string::npos);
}

// Attention flow (Abnar & Zuidema 2020): by hand on two layers of two tokens, where it differs from
// rollout; against the minimum cut found by trying every cut on random 3-layer, 3-token graphs
// (max-flow = min-cut); one layer is its Â; causal stays causal; over kMaxFlowTokens is refused.
TEST(Inspect, AttentionFlowIsTheMaxFlowThroughTheLayers) {
  // Â_1 = [[1, 0], [.25, .75]], Â_2 = [[.5, .5], [0, 1]] (the rollout test's layers). From the
  // last layer's token 0: to input 0 through (1,0): min(.5, 1), through (1,1): min(.5, .25) — .75;
  // to input 1 through (1,1): min(.5, .75) — .5; renormalised [.6, .4] (rollout: [.625, .375]).
  // From token 1: all through (1,1), split .25 / .75.
  Tensor a1 = Tensor::zeros({1, 2, 2}), a2 = Tensor::zeros({1, 2, 2});
  const float v1[] = {1, 0, 0.5f, 0.5f}, v2[] = {0, 1, 0, 1};
  std::copy(v1, v1 + 4, a1.data<float>());
  std::copy(v2, v2 + 4, a2.data<float>());
  const Tensor f = attention_flow({a1, a2});
  const float want[] = {0.6f, 0.4f, 0.25f, 0.75f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f.data<float>()[i], want[i], 1e-6) << i;

  // random layers of 2 heads: every cut between (L, i) and (0, j) tried; the smallest is the flow
  std::mt19937 g(7);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const int64_t L = 3, T = 3, H = 2;
  std::vector<Tensor> layers;
  std::vector<std::vector<double>> hat;  // Â_l
  for (int64_t l = 0; l < L; ++l) {
    Tensor w = Tensor::zeros({H, T, T});
    for (int64_t r = 0; r < H * T; ++r) {
      double sum = 0;
      std::vector<double> row(static_cast<size_t>(T));
      for (double& x : row) sum += x = std::exp(3.0 * (u01(g) - 0.5));
      for (int64_t j = 0; j < T; ++j) w.data<float>()[r * T + j] = static_cast<float>(row[static_cast<size_t>(j)] / sum);
    }
    layers.push_back(w);
    hat.push_back(residual_attention(w, T, "test"));
  }
  const Tensor flow = attention_flow(layers);
  const int64_t N = (L + 1) * T;  // node l·T + t
  for (int64_t i = 0; i < T; ++i) {
    std::vector<double> cut(static_cast<size_t>(T));
    for (int64_t j = 0; j < T; ++j) {
      const int64_t s = L * T + i, t = j;
      double best = 1e300;
      for (int64_t mask = 0; mask < (int64_t{1} << N); ++mask) {
        if (!(mask >> s & 1) || (mask >> t & 1)) continue;  // s on the source side, t on the other
        double c = 0;
        for (int64_t l = 1; l <= L; ++l)
          for (int64_t a = 0; a < T; ++a)
            for (int64_t b = 0; b < T; ++b)
              if ((mask >> (l * T + a) & 1) && !(mask >> ((l - 1) * T + b) & 1))
                c += hat[static_cast<size_t>(l - 1)][static_cast<size_t>(a * T + b)];
        best = std::min(best, c);
      }
      cut[static_cast<size_t>(j)] = best;
    }
    double sum = 0;
    for (double c : cut) sum += c;
    for (int64_t j = 0; j < T; ++j)
      EXPECT_NEAR(flow.data<float>()[i * T + j], cut[static_cast<size_t>(j)] / sum, 1e-5) << i << "," << j;
  }
  // one layer: the flow is the edge itself, Â's row (as rollout)
  const Tensor one = attention_flow({layers[0]}), roll = attention_rollout({layers[0]});
  for (int64_t k = 0; k < T * T; ++k) EXPECT_NEAR(one.data<float>()[k], roll.data<float>()[k], 1e-6);

  models::LoadedLanguageModel gpt =
      models::load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  const Tensor c = attention_flow(language_model_attention(*gpt.model, gpt.tokenizer, "ROMEO: what").kinds[0].layers);
  for (int64_t i = 0; i < c.size(0); ++i) {
    double sum = 0;
    for (int64_t j = 0; j < c.size(1); ++j) {
      sum += c.data<float>()[i * c.size(1) + j];
      if (j > i) {
        EXPECT_EQ(c.data<float>()[i * c.size(1) + j], 0.f);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
  const std::string e = testing::error_of([&] { attention_flow({Tensor::zeros({1, 129, 129})}); });
  EXPECT_NE(e.find("129 tokens, more than the 128"), std::string::npos) << e;
}

// On the shipped character GPT: rows are distributions and the rollout stays causal.
TEST(Inspect, RolloutOfACausalModelIsCausal) {
  models::LoadedLanguageModel g =
      models::load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  const AttentionView v = language_model_attention(*g.model, g.tokenizer, "ROMEO: what light");
  const Tensor r = attention_rollout(v.kinds[0].layers);
  const int64_t T = r.size(0);
  for (int64_t i = 0; i < T; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) {
      sum += r.data<float>()[i * T + j];
      if (j > i) {
        EXPECT_EQ(r.data<float>()[i * T + j], 0.f);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// The neuron view by hand: every score is q·k/√d from the returned vectors (summed in double here,
// not read from the view), their softmax is the returned weights, and those are the head's row of
// the attention map the model itself records — for `query`, in `layer` and `head`. The query sees
// keys first … last: causal, last = query (a sliding window's first = query − window + 1); else all.
// (Gemma 2's scores: q·k · scale, soft-capped, softcap · tanh(s / softcap).)
// (around > 0: keys within `around` of the query either way, ModernBERT's local layers)
void check_neuron(const NeuronView& n, const AttentionKind& k, bool causal, int64_t window = 0, double scale = 0,
                  double softcap = 0, int64_t around = 0) {
  const int64_t Tq = static_cast<int64_t>(n.axis.tokens.size()), Tk = static_cast<int64_t>(n.key_axis.tokens.size());
  const int64_t d = n.head_dim;
  ASSERT_EQ(n.axis.tokens, k.queries.tokens);
  ASSERT_EQ(n.key_axis.tokens, k.keys.tokens);
  ASSERT_EQ(static_cast<int64_t>(n.queries.size()), Tq);
  ASSERT_EQ(static_cast<int64_t>(n.keys.size()), Tk);
  const std::vector<float>& q = n.queries[static_cast<size_t>(n.query)];
  ASSERT_EQ(static_cast<int64_t>(q.size()), d);
  std::vector<double> s(static_cast<size_t>(Tk)), w(static_cast<size_t>(Tk), 0.0);
  double top = -1e300, z = 0;
  int64_t last = causal ? n.query : Tk - 1, first = window > 0 ? std::max<int64_t>(0, n.query - window + 1) : 0;
  if (around > 0) first = std::max<int64_t>(0, n.query - around), last = std::min(Tk - 1, n.query + around);
  for (int64_t j = first; j <= last; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      const double p = static_cast<double>(q[static_cast<size_t>(c)]) * n.keys[static_cast<size_t>(j)][static_cast<size_t>(c)];
      EXPECT_NEAR(n.products[static_cast<size_t>(j)][static_cast<size_t>(c)], p, 1e-6 * (1 + std::abs(p)));
      dot += p;
    }
    s[static_cast<size_t>(j)] = dot * (scale > 0 ? scale : 1 / std::sqrt(static_cast<double>(d)));
    if (softcap > 0) s[static_cast<size_t>(j)] = softcap * std::tanh(s[static_cast<size_t>(j)] / softcap);
    EXPECT_NEAR(n.scores[static_cast<size_t>(j)], s[static_cast<size_t>(j)], 1e-6 * (1 + std::abs(dot))) << j;
    top = std::max(top, s[static_cast<size_t>(j)]);
  }
  for (int64_t j = first; j <= last; ++j) z += w[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - top);
  const Tensor& map = k.layers[static_cast<size_t>(n.layer)];  // [H, Tq, Tk]
  const float* row = map.data<float>() + (n.head * Tq + n.query) * Tk;
  for (int64_t j = 0; j < Tk; ++j) {
    EXPECT_NEAR(n.weights[static_cast<size_t>(j)], w[static_cast<size_t>(j)] / z, 1e-9) << j;
    EXPECT_NEAR(n.weights[static_cast<size_t>(j)], row[j], 2e-5) << "key " << j << " of the recorded map";
    if (j > last || j < first) {
      EXPECT_TRUE(std::isinf(n.scores[static_cast<size_t>(j)]) && n.scores[static_cast<size_t>(j)] < 0) << j;
      EXPECT_TRUE(n.products[static_cast<size_t>(j)].empty()) << j;
    }
  }
}

TEST(Inspect, NeuronViewOfAGptIsItsAttentionRowByHand) {
  models::LoadedLanguageModel g =
      models::load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  const std::string text = "ROMEO: what light";
  const AttentionView v = language_model_attention(*g.model, g.tokenizer, text);
  const int64_t L = static_cast<int64_t>(v.kinds[0].layers.size()), H = v.kinds[0].layers[0].size(0);
  for (const auto& [layer, head, query] : std::vector<std::array<int64_t, 3>>{{0, 0, 0}, {L - 1, H - 1, 9}, {1, 2, 16}}) {
    SCOPED_TRACE(::testing::Message() << "layer " << layer << " head " << head << " query " << query);
    const NeuronView n = language_model_neuron(*g.model, g.tokenizer, text, layer, head, query);
    EXPECT_EQ(n.kind, "decoder_self");
    EXPECT_EQ(n.head_dim, g.model->width() / H);
    check_neuron(n, v.kinds[0], /*causal=*/true);
  }
  EXPECT_NE(testing::error_of([&] { language_model_neuron(*g.model, g.tokenizer, text, L, 0, 0); }).find("layer"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { language_model_neuron(*g.model, g.tokenizer, text, 0, H, 0); }).find("head"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { language_model_neuron(*g.model, g.tokenizer, text, 0, 0, 17); }).find("query 17"),
            std::string::npos);
}

// A BERT converted from transformers (tests/golden/hf/bert-uncased): bidirectional, post-LN; and its
// kin whose embeddings differ — RoBERTa's positions from padding_idx + 1, DistilBERT's and MPNet's
// missing token types, ELECTRA's projection of narrower embeddings (the view once read positions 0 …
// and a token-type table DistilBERT has not). MPNet's bias and DeBERTa's position terms are not q·k:
// their view is refused, naming them.
TEST(Inspect, NeuronViewOfBertIsItsAttentionRowByHand) {
  for (const char* name : {"bert-uncased", "roberta-mlm", "distilbert-mlm", "electra-mlm", "albert-mlm"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("neuron-bert");
    const std::string out = (dir.path / "bert.safetensors").string();
    models::convert_hf(std::string(QKV_GOLDEN_DIR) + "/hf/" + name, out);
    models::LoadedMaskedLanguageModel m = models::load_masked_language_model(out);
    const std::string text = "The cat sat on the mat because it was tired.";
    const AttentionView v = masked_language_model_attention(*m.model, m.tokenizer, text);
    const AttentionKind& k = v.kinds[0];
    const int64_t L = static_cast<int64_t>(k.layers.size()), H = k.layers[0].size(0);
    const int64_t T = static_cast<int64_t>(k.queries.tokens.size());
    for (const auto& [layer, head, query] :
         std::vector<std::array<int64_t, 3>>{{0, 1, 0}, {L - 1, H - 1, T - 1}, {L - 1, 0, 3}}) {
      SCOPED_TRACE(::testing::Message() << "layer " << layer << " head " << head << " query " << query);
      const NeuronView n = masked_language_model_neuron(*m.model, m.tokenizer, text, layer, head, query);
      EXPECT_EQ(n.kind, "encoder_self");
      EXPECT_EQ(n.axis.words, k.queries.words);
      check_neuron(n, k, /*causal=*/false);
    }
  }
  for (const auto& [name, names] : {std::pair{"mpnet-mlm", "MPNet's relative position bias"},
                                    std::pair{"deberta-mlm", "DeBERTa's relative position terms"}}) {
    testing::TempDir dir("neuron-refused");
    const std::string out = (dir.path / "m.safetensors").string();
    models::convert_hf(std::string(QKV_GOLDEN_DIR) + "/hf/" + name, out);
    models::LoadedMaskedLanguageModel m = models::load_masked_language_model(out);
    EXPECT_NE(testing::error_of([&] {
                masked_language_model_neuron(*m.model, m.tokenizer, "The cat sat.", 0, 0, 0);
              }).find(names),
              std::string::npos)
        << name;
  }
}

// A ModernBERT converted from transformers (tests/golden/hf/modernbert-mlm): pre-LN (layer 0 without a
// norm), q and k rotated on the global base in layers 0 and 2, on the local one in layer 1, whose
// queries see the keys within 4 tokens either way.
TEST(Inspect, NeuronViewOfModernBertIsItsAttentionRowByHand) {
  testing::TempDir dir("neuron-modernbert");
  const std::string out = (dir.path / "m.safetensors").string();
  models::convert_hf(std::string(QKV_GOLDEN_DIR) + "/hf/modernbert-mlm", out);
  models::LoadedMaskedLanguageModel m = models::load_masked_language_model(out);
  const std::string text = "The cat sat on the mat because it was tired.";
  const AttentionView v = masked_language_model_attention(*m.model, m.tokenizer, text);
  const AttentionKind& k = v.kinds[0];
  const int64_t L = static_cast<int64_t>(k.layers.size()), H = k.layers[0].size(0);
  const int64_t T = static_cast<int64_t>(k.queries.tokens.size());
  ASSERT_EQ(L, 3);
  ASSERT_GT(T, 10);  // (past the local window)
  for (const auto& [layer, head, query] :
       std::vector<std::array<int64_t, 3>>{{0, 1, 0}, {1, 2, 6}, {1, 0, T - 1}, {2, H - 1, T - 1}}) {
    SCOPED_TRACE(::testing::Message() << "layer " << layer << " head " << head << " query " << query);
    const NeuronView n = masked_language_model_neuron(*m.model, m.tokenizer, text, layer, head, query);
    EXPECT_EQ(n.kind, "encoder_self");
    check_neuron(n, k, /*causal=*/false, 0, 0, 0, /*around=*/layer == 1 ? 4 : 0);
  }
  EXPECT_NE(testing::error_of([&] {
              masked_language_model_neuron(*m.model, m.tokenizer, text, 3, 0, 0);
            }).find("layer 3 is out of range"),
            std::string::npos);
}

// The shipped Transformer translator's encoder (post-LN, sinusoids, the source and EOS); a recurrent
// translator has no self-attention to show: an error naming its type.
TEST(Inspect, NeuronViewOfATranslatorsEncoderIsItsAttentionRowByHand) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const std::string text = "The cat didn't cross the street because it was too tired.";
  const AttentionView v = translation_attention(*t.model, *t.tokenizer, text);
  const AttentionKind& k = *v.find("encoder_self");
  const int64_t L = static_cast<int64_t>(k.layers.size()), H = k.layers[0].size(0);
  const int64_t T = static_cast<int64_t>(k.queries.tokens.size());
  for (const auto& [layer, head, query] : std::vector<std::array<int64_t, 3>>{{0, 0, 0}, {L - 1, H - 1, T - 1}, {L - 1, 5, 8}}) {
    SCOPED_TRACE(::testing::Message() << "layer " << layer << " head " << head << " query " << query);
    const NeuronView n = translation_neuron(*t.model, *t.tokenizer, text, layer, head, query);
    EXPECT_EQ(n.kind, "encoder_self");
    EXPECT_EQ(n.axis.words, k.queries.words);
    check_neuron(n, k, /*causal=*/false);
  }
  models::LoadedSeq2Seq gru = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr-gru.safetensors");
  EXPECT_NE(testing::error_of([&] { translation_neuron(*gru.model, *gru.tokenizer, text, 0, 0, 0); }).find("Transformer translator"),
            std::string::npos);
}

// Llama-family folders converted from transformers (tests/golden/hf): grouped-query attention (4
// heads reading 2 key/value heads), multi-query with biases (1), Mistral's sliding window of 8,
// Qwen3's heads normalized before RoPE, Phi-3's split projections and RoPE on 3/4 of each head, Gemma 3's
// windowed layers (0 and 2, a window of 4, their own RoPE base) around a global one, and Gemma 2's
// scores scaled by 1/√24 and soft-capped. q and k are rotated by position; each head's row is the map the model
// records.
TEST(Inspect, NeuronViewOfALlamaIsItsAttentionRowByHand) {
  testing::TempDir dir("neuron-llama");
  const std::string text = "The cat didn't cross the street because it was too tired.";
  for (const auto& [name, kv_heads, window] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{{"llama-gqa", 2, 0},
                                                              {"llama3-mqa-tied-bias", 1, 0},
                                                              {"mistral-window", 2, 8},
                                                              {"qwen3", 2, 0},
                                                              {"phi3", 2, 6},
                                                              {"gemma3", 2, 4},
                                                              {"gemma2", 2, 4}}) {
    SCOPED_TRACE(name);
    const std::string out = (dir.path / (name + ".safetensors")).string();
    models::convert_hf(std::string(QKV_GOLDEN_DIR) + "/hf/" + name, out);
    models::LoadedLanguageModel g = models::load_language_model(out);
    const AttentionView v = language_model_attention(*g.model, g.tokenizer, text);
    const AttentionKind& k = v.kinds[0];
    const int64_t L = static_cast<int64_t>(k.layers.size()), H = k.layers[0].size(0);
    const int64_t T = static_cast<int64_t>(k.queries.tokens.size());
    ASSERT_GT(T, 12);  // (past the window)
    for (const auto& [layer, head, query] : std::vector<std::array<int64_t, 3>>{{0, 0, 0}, {L - 1, H - 1, T - 1}, {1, 1, 11}}) {
      SCOPED_TRACE(::testing::Message() << "layer " << layer << " head " << head << " query " << query);
      const NeuronView n = language_model_neuron(*g.model, g.tokenizer, text, layer, head, query);
      EXPECT_EQ(n.kind, "decoder_self");
      EXPECT_EQ(n.kv_head, head / (H / kv_heads));
      // (Gemma's layer 1 is global: every second layer, as its layer_types say)
      // (Gemma 2's scores: · 1/√24, soft-capped at 5 — its config.json's query_pre_attn_scalar and
      // attn_logit_softcapping)
      const bool gemma2 = name == "gemma2";
      check_neuron(n, k, /*causal=*/true, name.starts_with("gemma") && layer % 2 == 1 ? 0 : window,
                   gemma2 ? 1 / std::sqrt(24.0) : 0, gemma2 ? 5.0 : 0);
    }
    EXPECT_NE(testing::error_of([&] { language_model_neuron(*g.model, g.tokenizer, text, 0, H, 0); }).find("head 4"),
              std::string::npos);
    EXPECT_NE(testing::error_of([&] {
                language_model_neuron(*g.model, g.tokenizer, text, L, 0, 0);
              }).find("layer " + std::to_string(L) + " is out of range"),
              std::string::npos);
  }
}

// A translator's decoder: its self-attention (queries the translation and EOS, keys <s> and the
// translation, causal) and its cross-attention (keys the source and EOS, from the encoder's
// output) — for the shipped Transformer (post-LN) and a Marian converted from transformers.
TEST(Inspect, NeuronViewOfATranslatorsDecoderIsItsAttentionRowByHand) {
  testing::TempDir dir("neuron-marian");
  const std::string marian = (dir.path / "marian.safetensors").string();
  models::convert_hf(std::string(QKV_GOLDEN_DIR) + "/hf/marian", marian);
  const std::string text = "The cat didn't cross the street because it was too tired.";
  for (const std::string& path : {std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors", marian}) {
    SCOPED_TRACE(path);
    models::LoadedSeq2Seq t = models::load_seq2seq(path);
    const AttentionView v = translation_attention(*t.model, *t.tokenizer, text);
    for (const std::string kind : {"decoder_self", "cross"}) {
      SCOPED_TRACE(kind);
      const AttentionKind& k = *v.find(kind);
      const int64_t L = static_cast<int64_t>(k.layers.size()), H = k.layers[0].size(0);
      const int64_t T = static_cast<int64_t>(k.queries.tokens.size());
      ASSERT_GT(T, 2);
      for (const auto& [layer, head, query] : std::vector<std::array<int64_t, 3>>{{0, 0, 0}, {L - 1, H - 1, T - 1}, {L - 1, 1, 2}}) {
        SCOPED_TRACE(::testing::Message() << "layer " << layer << " head " << head << " query " << query);
        const NeuronView n = translation_neuron(*t.model, *t.tokenizer, text, layer, head, query, kind);
        EXPECT_EQ(n.kind, kind);
        check_neuron(n, k, /*causal=*/kind == "decoder_self");
      }
      EXPECT_NE(testing::error_of([&] { translation_neuron(*t.model, *t.tokenizer, text, 0, 0, T, kind); })
                    .find("query " + std::to_string(T)),
                std::string::npos);
    }
    EXPECT_NE(testing::error_of([&] { translation_neuron(*t.model, *t.tokenizer, text, 0, 0, 0, "self"); }).find("encoder_self, decoder_self or cross"),
              std::string::npos);
  }
}

// The coreference probe by hand: two items over "it … trophy … suitcase" axes (one token a word), the
// second with the answer swapped. Head 0 follows the answer (100%), head 1 always looks at "trophy"
// (50%: right once, wrong once), head 2 at neither (0%: ties are not right).
TEST(Inspect, CoreferenceProbeScoresEachHeadOnThePairs) {
  auto view = [](const std::vector<std::array<float, 3>>& it_row) {  // "it"'s weights on (it, trophy, suitcase) per head
    AttentionView v;
    AttentionKind k;
    k.name = "encoder_self";
    k.queries = k.keys = make_axis({"\xE2\x96\x81it", "\xE2\x96\x81trophy", "\xE2\x96\x81suitcase"});
    Tensor w = Tensor::zeros({static_cast<int64_t>(it_row.size()), 3, 3});
    for (size_t h = 0; h < it_row.size(); ++h)
      for (int j = 0; j < 3; ++j) w.data<float>()[h * 9 + j] = it_row[h][static_cast<size_t>(j)];
    k.layers = {w};
    v.kinds.push_back(k);
    return v;
  };
  const std::vector<CoreferenceItem> items = {{"it trophy suitcase", "it", "trophy", "suitcase"},
                                              {"it trophy suitcase", "It", "suitcase", "trophy"}};
  const std::vector<AttentionView> views = {view({{0.1f, 0.8f, 0.1f}, {0.2f, 0.7f, 0.1f}, {1, 0, 0}}),
                                            view({{0.1f, 0.1f, 0.8f}, {0.2f, 0.6f, 0.2f}, {1, 0, 0}})};
  const std::vector<CoreferenceScore> s = coreference_probe(items, views);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].head, 0);
  EXPECT_EQ(s[0].items, 2);
  EXPECT_EQ(s[0].right, 2);
  EXPECT_NEAR(s[0].antecedent, 0.8, 1e-6);
  EXPECT_NEAR(s[0].other, 0.1, 1e-6);
  EXPECT_EQ(s[1].head, 1);
  EXPECT_DOUBLE_EQ(s[1].accuracy(), 0.5);
  EXPECT_NEAR(s[1].antecedent, (0.7 + 0.2) / 2, 1e-6);
  EXPECT_NEAR(s[1].other, (0.1 + 0.6) / 2, 1e-6);
  EXPECT_EQ(s[2].head, 2);
  EXPECT_EQ(s[2].right, 0);
  // an item whose words a view lacks is not scored
  const std::vector<CoreferenceScore> none =
      coreference_probe({{"x", "he", "trophy", "suitcase"}}, {view({{0.1f, 0.8f, 0.1f}})});
  EXPECT_TRUE(none.empty());
  EXPECT_NE(testing::error_of([&] { coreference_probe(items, {views[0]}); }).find("2 items but 1 views"), std::string::npos);
}

// The built-in pairs: each item's pronoun and candidates are words of its text (once each), and
// each pair swaps the answer; the TSV reader reads the same fields and names a bad line.
TEST(Inspect, WinogradPairsAreWellFormedAndTsvItemsParse) {
  const std::vector<CoreferenceItem>& items = winograd_pairs();
  ASSERT_EQ(items.size() % 2, 0u);
  EXPECT_GE(items.size(), 28u);
  auto count = [](const std::string& text, const std::string& word) {  // words as rank_heads compares them
    auto norm = [](const std::string& w) {
      std::string x;
      for (char c : w)
        if (!std::ispunct(static_cast<unsigned char>(c))) x += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return x;
    };
    int n = 0;
    size_t b = 0;
    for (size_t e = 0; e != std::string::npos; b = e + 1) {
      e = text.find(' ', b);
      n += norm(text.substr(b, e == std::string::npos ? std::string::npos : e - b)) == norm(word);
    }
    return n;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    SCOPED_TRACE(items[i].text);
    EXPECT_EQ(count(items[i].text, items[i].pronoun), 1);
    EXPECT_EQ(count(items[i].text, items[i].antecedent), 1);
    EXPECT_EQ(count(items[i].text, items[i].other), 1);
    const CoreferenceItem& pair = items[i ^ 1];
    EXPECT_EQ(pair.antecedent, items[i].other);
    EXPECT_EQ(pair.other, items[i].antecedent);
    EXPECT_NE(pair.text, items[i].text);
  }
  const std::vector<CoreferenceItem> t = parse_coreference_items("# text, pronoun, antecedent, other\n\nA b it.\tit\tA\tb\r\n");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].text, "A b it.");
  EXPECT_EQ(t[0].other, "b");
  EXPECT_NE(testing::error_of([] { parse_coreference_items("ok\tit\ta\tb\nbad\tit\n"); }).find("line 2 has 2"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::decode
