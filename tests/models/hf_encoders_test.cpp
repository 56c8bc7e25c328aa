// The encoders' other heads and kin (BertFor{Sequence,Token}Classification, DistilBERT, RoBERTa,
// XLM-RoBERTa with its Unigram tokenizer, MPNet with its relative position bias on 70-token inputs,
// sentence-transformers folders) converted and run against what `transformers` and
// sentence-transformers compute with the same tiny random models (tests/golden/hf/<case>/, written
// by make_hf_golden.py's encoder_cases, xlmr_cases and mpnet_cases): logits ≤ 1e-4 relative; the pipelines' labels,
// entities and words equal, their scores ≤ 1e-5; the embeddings ≤ 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "qkv/core/cuda.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/fill_mask.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/quantize.h"
#include "qkv/nn/bert.h"
#include "qkv/text/unicode.h"
#include "hf_golden.h"
#include "testing.h"

namespace qkv::models {
namespace {

namespace fs = std::filesystem;
using hf_golden::convert_and_load, hf_golden::int_matrix, hf_golden::kGolden, hf_golden::reference;

// Every position's logits (or hidden states) of a batch whose second row is padded, computed on `device`.
void check_logits(const std::string& name, Device device = Device::cpu()) {
  SCOPED_TRACE(name);
  testing::TempDir dir("hf-encoder");
  LoadedMaskedLanguageModel m = convert_and_load(name, dir);
  m.model->module().to(device);
  const nlohmann::json ref = reference(name);
  const Tensor ids = int_matrix(ref["input_ids"]), types = int_matrix(ref["token_type_ids"]),
               mask = int_matrix(ref["attention_mask"]);
  const Tensor di = ids.to(device), dt = types.to(device), dm = mask.to(device);
  Tensor got = ref["output"] == "last_hidden_state" ? m.model->encode(di, dt, dm)
               : m.model->has_mlm_head()            ? m.model->forward(di, dt, dm)
                                                    : m.model->classify(di, dt, dm);
  EXPECT_EQ(got.shape(), ref["logits_shape"].get<Shape>());
  std::vector<float> got_v = got.to(Device::cpu()).to_vector(), want = ref["logits"].get<std::vector<float>>();
  if (ref.contains("padded_positions_differ") && got.dim() == 3) {
    // DeBERTa: transformers masks a padded query's whole row; compare the tokens' positions alone
    const std::vector<int32_t> keep = mask.to_ints();
    const size_t width = static_cast<size_t>(got.size(2));
    std::vector<float> g, w;
    for (size_t p = 0; p < keep.size(); ++p)
      if (keep[p]) {
        g.insert(g.end(), got_v.begin() + p * width, got_v.begin() + (p + 1) * width);
        w.insert(w.end(), want.begin() + p * width, want.begin() + (p + 1) * width);
      }
    ASSERT_LT(g.size(), got_v.size());  // (row 1 is padded)
    got_v = g, want = w;
  }
  EXPECT_LE(testing::rel_error(got_v, want), 1e-4);
}

const char* const kEncoderCases[] = {
    "bert-seqcls",    "bert-tokcls",    "distilbert-seqcls", "distilbert-mlm",    "roberta-seqcls",
        "roberta-tokcls", "roberta-mlm",    "st-bert",           "xlmr-tokcls",       "xlmr-mlm",
        "st-xlmr",        "mpnet-mlm",      "mpnet-seqcls",      "st-mpnet",          "deberta-mlm",
        "deberta-seqcls", "deberta-tokcls", "deberta-v2-seqcls", "electra-seqcls",    "electra-tokcls",
        "electra-mlm",    "qa-bert",        "qa-distilbert",     "qa-roberta",        "qa-xlmr",
        "qa-deberta",     "qa-electra",     "modernbert-mlm",    "modernbert-seqcls", "modernbert-tokcls",
        "qa-modernbert",  "st-modernbert",  "albert-mlm",        "albert-seqcls",     "albert-tokcls",
        "qa-albert"};

TEST(HfEncoders, LogitsEqualTransformers) {
  for (const char* name : kEncoderCases) check_logits(name);
}

// The same on a lent GPU (docs/CUDA.md): each encoder family's forward through the CUDA backend
// (embeddings, LayerNorm, GELU, attention under the padding mask, relative positions, ModernBERT's
// local layers, ALBERT's shared one) against transformers' — a case a family, whose folders
// scripts/gpu_tree.sh's slim tree keeps
TEST(HfEncodersOnAGpu, LogitsEqualTransformers) {
  if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  for (const char* name : {"bert-seqcls", "distilbert-seqcls", "roberta-seqcls", "mpnet-seqcls", "deberta-seqcls",
                           "deberta-v2-seqcls", "modernbert-seqcls", "albert-seqcls"}) {
    if (!fs::exists(kGolden / name)) GTEST_SKIP() << "the goldens were left out (gpu_tree.sh slim all)";
    check_logits(name, Device::cuda());
  }
}

// MPNet's buckets of a relative position j − i (32 buckets, distance 128), as transformers'
// MPNetEncoder.relative_position_bucket gives them — at every boundary, the capped ones past ±128
// included (the goldens' 70-token inputs reach ±69).
TEST(HfEncoders, RelativePositionBucketsAreMPNets) {
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {-130, 15}, {-129, 15}, {-128, 15}, {-127, 15}, {-65, 14}, {-64, 14}, {-63, 13}, {-33, 12},
      {-32, 12},  {-31, 11},  {-17, 10},  {-16, 10},  {-15, 9},  {-8, 8},   {-7, 7},   {0, 0},
      {1, 17},    {7, 23},    {8, 24},    {15, 25},   {16, 26},  {17, 26},  {31, 27},  {32, 28},
      {33, 28},   {63, 29},   {64, 30},   {65, 30},   {127, 31}, {128, 31}, {129, 31}, {100000, 31}};
  for (const auto& [r, bucket] : want) EXPECT_EQ(nn::relative_position_bucket(r, 32, 128), bucket) << r;
}

// DeBERTa's backward against transformers': L = Σ over the tokens of logits · w (a token classifier,
// 70-token inputs, row 1 padded), and the gradients of the relative embeddings and their LayerNorm
// (reached only through c2p and p2c), of the projections that read them, of a value projection and
// the classifier.
TEST(HfEncoders, DebertaGradientsEqualTransformers) {
  testing::TempDir dir("hf-deberta-backward");
  LoadedMaskedLanguageModel m = convert_and_load("deberta-tokcls", dir);
  const nlohmann::json ref = reference("deberta-tokcls");
  const nlohmann::json& want = ref["backward"];
  const Tensor ids = int_matrix(ref["input_ids"]), mask = int_matrix(ref["attention_mask"]);
  const Tensor logits = m.model->classify(ids, Tensor(), mask);  // [B, T, L]
  const std::vector<float> w = want["weights"].get<std::vector<float>>();
  const int64_t L = static_cast<int64_t>(w.size());
  const Tensor keep = Tensor::from_vector(mask.to_vector(), {ids.size(0), ids.size(1), 1});
  const Tensor loss = sum(mul(mul(logits, Tensor::from_vector(w, {1, 1, L})), keep));
  EXPECT_NEAR(loss.item(), want["loss"].get<double>(), 1e-3 * std::abs(want["loss"].get<double>()));
  loss.backward();
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : m.model->module().named_parameters()) params.emplace(name, p);
  const int64_t E = 48;
  // transformers' parameter → qkv's, and the rows of it that hold it
  const std::vector<std::tuple<std::string, std::string, int64_t>> pairs = {
      {"deberta.encoder.rel_embeddings.weight", "rel_embeddings.weight", -1},
      {"deberta.encoder.LayerNorm.weight", "rel_embeddings_norm.weight", -1},
      {"deberta.encoder.layer.0.attention.self.key_proj.weight", "layers.0.self_attn.in_proj_weight", 1},
      {"deberta.encoder.layer.0.attention.self.query_proj.bias", "layers.0.self_attn.in_proj_bias", 0},
      {"deberta.encoder.layer.1.attention.self.value_proj.weight", "layers.1.self_attn.in_proj_weight", 2},
      {"classifier.weight", "classifier.weight", -1}};
  for (const auto& [hf, ours, block] : pairs) {
    SCOPED_TRACE(hf);
    ASSERT_TRUE(params.count(ours));
    Tensor g = params.at(ours).grad();
    ASSERT_TRUE(g.defined());
    if (block >= 0) g = g.slice(0, block * E, (block + 1) * E);
    EXPECT_LE(testing::rel_error(g.contiguous().to_vector(), want["grads"][hf].get<std::vector<float>>()), 1e-4);
  }
}

// ModernBERT's backward against transformers': the same loss over modernbert-tokcls (70-token inputs,
// row 1 padded) and the gradients of each kind of parameter — the embedding and its norm, a global and
// a local layer's Wqkv (where the window and the two rotary bases act), a norm, the gated MLP's two
// matrices, the final norm, the prediction head and the classifier. The names are transformers' less
// "model.".
TEST(HfEncoders, ModernBertGradientsEqualTransformers) {
  testing::TempDir dir("hf-modernbert-backward");
  LoadedMaskedLanguageModel m = convert_and_load("modernbert-tokcls", dir);
  const nlohmann::json ref = reference("modernbert-tokcls");
  const nlohmann::json& want = ref["backward"];
  const Tensor ids = int_matrix(ref["input_ids"]), mask = int_matrix(ref["attention_mask"]);
  const Tensor logits = m.model->classify(ids, Tensor(), mask);  // [B, T, L]
  const std::vector<float> w = want["weights"].get<std::vector<float>>();
  const Tensor keep = Tensor::from_vector(mask.to_vector(), {ids.size(0), ids.size(1), 1});
  const Tensor loss = sum(mul(mul(logits, Tensor::from_vector(w, {1, 1, static_cast<int64_t>(w.size())})), keep));
  EXPECT_NEAR(loss.item(), want["loss"].get<double>(), 1e-4 * std::abs(want["loss"].get<double>()));
  loss.backward();
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : m.model->module().named_parameters()) params.emplace(name, p);
  ASSERT_EQ(want["grads"].size(), 11u);
  for (auto& [hf, grad] : want["grads"].items()) {
    SCOPED_TRACE(hf);
    const std::string ours = hf.starts_with("model.") ? hf.substr(6) : hf;
    ASSERT_TRUE(params.count(ours));
    const Tensor g = params.at(ours).grad();
    ASSERT_TRUE(g.defined());
    EXPECT_LE(testing::rel_error(g.contiguous().to_vector(), grad.get<std::vector<float>>()), 1e-4);
  }
}

// DeBERTa's log buckets of a relative position i − j, as transformers' make_log_bucket_position gives
// them: deberta-v3's (256 buckets, 512 positions) at and past every boundary, and the goldens' (16, 64).
TEST(HfEncoders, RelativePositionBucketsAreDebertas) {
  const std::vector<std::pair<int64_t, int64_t>> v3 = {
      {-100000, -740}, {-1000, -317}, {-511, -255}, {-300, -207}, {-256, -192}, {-200, -169}, {-129, -129},
      {-128, -128},    {-127, -127},  {-64, -64},   {-1, -1},     {0, 0},       {1, 1},       {2, 2},
      {127, 127},      {128, 128},    {129, 129},   {130, 130},   {150, 143},   {200, 169},   {255, 192},
      {256, 192},      {300, 207},    {400, 233},   {511, 255},   {512, 256},   {1000, 317},  {100000, 740}};
  for (const auto& [r, bucket] : v3) EXPECT_EQ(nn::deberta_relative_bucket(r, 256, 512), bucket) << r;
  const std::vector<std::pair<int64_t, int64_t>> small = {
      {-69, -16}, {-40, -14}, {-20, -12}, {-9, -9}, {-8, -8}, {-7, -7}, {0, 0},   {7, 7},   {8, 8},  {9, 9},
      {10, 9},    {12, 10},   {16, 11},   {20, 12}, {32, 13}, {40, 14}, {63, 15}, {64, 16}, {69, 16}};
  for (const auto& [r, bucket] : small) EXPECT_EQ(nn::deberta_relative_bucket(r, 16, 64), bucket) << r;
  EXPECT_EQ(nn::deberta_relative_bucket(-700, 0, 512), -700);  // no buckets: the distance itself
}

decode::TextClassificationOptions options(int64_t top_k, std::vector<std::string> pairs = {},
                                          decode::ClassificationFunction f = decode::ClassificationFunction::auto_,
                                          int64_t batch_size = 32) {
  decode::TextClassificationOptions o;
  o.top_k = top_k, o.text_pairs = std::move(pairs), o.function = f, o.batch_size = batch_size;
  return o;
}

// pipeline("text-classification"): top 1 (the default) and every label (top_k=None), best first;
// a sentence pair; function_to_apply="softmax" over a one-label (sigmoid) model.
TEST(HfEncoders, TextClassificationEqualsThePipeline) {
  for (const char* name : {"bert-seqcls", "distilbert-seqcls", "roberta-seqcls", "mpnet-seqcls", "deberta-seqcls",
                           "deberta-v2-seqcls", "electra-seqcls", "modernbert-seqcls", "albert-seqcls"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-seqcls");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);
    auto expect_scores = [](const std::vector<decode::LabelScore>& got, const nlohmann::json& want) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].label, want[i]["label"].get<std::string>()) << i;
        EXPECT_NEAR(got[i].score, want[i]["score"].get<double>(), 1e-5) << i;
      }
    };
    std::vector<std::string> texts;
    for (const auto& c : ref["text_classification"]) {
      texts.push_back(c["text"].get<std::string>());
      EXPECT_EQ(tok.encode(texts.back()), c["ids"].get<std::vector<int32_t>>()) << texts.back();
    }
    // batched (padded to the longest) and one at a time: the same
    const auto top1 = decode::text_classification(*m.model, tok, texts);
    const auto all =
        decode::text_classification(*m.model, tok, texts, options(0, {}, decode::ClassificationFunction::auto_, 2));
    for (size_t i = 0; i < texts.size(); ++i) {
      SCOPED_TRACE(texts[i]);
      expect_scores(top1[i], ref["text_classification"][i]["top1"]);
      expect_scores(all[i], ref["text_classification"][i]["all"]);
      expect_scores(decode::text_classification(*m.model, tok, {texts[i]}, options(0))[0],
                    ref["text_classification"][i]["all"]);
    }
    const auto& pair = ref["text_classification_pair"];
    expect_scores(decode::text_classification(*m.model, tok, {pair["text"].get<std::string>()},
                                              options(0, {pair["text_pair"].get<std::string>()}))[0],
                  pair["all"]);
    expect_scores(decode::text_classification(*m.model, tok, {texts[2]},
                                              options(0, {}, decode::ClassificationFunction::softmax))[0],
                  ref["softmax"]);
    EXPECT_THROW(decode::token_classification(*m.model, tok, texts), Error);
  }
}

// pipeline("zero-shot-classification") over NLI classifiers (entailment first: contradiction is the
// last label; entailment second: contradiction the first): the labels' order and scores, one label
// (entailment against contradiction), multi_label, a template with braces, and a text cut
// ("only_first") to the tokenizer's model_max_length of 40; all of them in one batch and one at a time.
TEST(HfEncoders, ZeroShotEqualsThePipeline) {
  for (const char* name : {"deberta-seqcls", "mpnet-seqcls", "modernbert-seqcls"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-zero-shot");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);
    ASSERT_GE(ref["zero_shot"].size(), 4u);
    for (const auto& c : ref["zero_shot"]) {
      const std::string text = c["text"].get<std::string>();
      SCOPED_TRACE(text);
      decode::ZeroShotOptions o;
      o.multi_label = c["multi_label"].get<bool>();
      if (!c["template"].is_null()) o.hypothesis_template = c["template"].get<std::string>();
      for (int64_t batch : {32, 1}) {
        o.batch_size = batch;
        const auto got = decode::zero_shot_classification(*m.model, tok, {text, text},
                                                          c["labels"].get<std::vector<std::string>>(), o);
        ASSERT_EQ(got.size(), 2u);
        const auto& want_labels = c["result"]["labels"];
        ASSERT_EQ(got[1].size(), want_labels.size());
        for (size_t i = 0; i < got[1].size(); ++i) {
          EXPECT_EQ(got[1][i].label, want_labels[i].get<std::string>()) << i;
          EXPECT_NEAR(got[1][i].score, c["result"]["scores"][i].get<double>(), 1e-5) << i;
        }
      }
    }
  }
  // what the pipeline refuses or cannot mean: a template without its field or with a stray brace, no
  // labels, a model whose labels name no entailment
  testing::TempDir dir("hf-zero-shot");
  LoadedMaskedLanguageModel m = convert_and_load("deberta-seqcls", dir);
  const text::HfTokenizer& tok = *m.tokenizer.hf();
  decode::ZeroShotOptions o;
  for (const char* bad : {"This example is about sports.", "This {label} example", "{} {"}) {
    o.hypothesis_template = bad;
    EXPECT_THROW(decode::zero_shot_classification(*m.model, tok, {"a text"}, {"sports"}, o), Error) << bad;
  }
  EXPECT_THROW(decode::zero_shot_classification(*m.model, tok, {"a text"}, {}), Error);
  EXPECT_EQ(decode::parse_candidate_labels(" sports,politics ,\tthe sea,, \n"),
            (std::vector<std::string>{"sports", "politics", "the sea"}));
  EXPECT_TRUE(decode::parse_candidate_labels(" , ,").empty());
  LoadedMaskedLanguageModel bert = convert_and_load("bert-seqcls", dir);  // NEGATIVE, NEUTRAL, POSITIVE
  EXPECT_THROW(decode::zero_shot_classification(*bert.model, *bert.tokenizer.hf(), {"a text"}, {"sports"}), Error);
}

// pipeline("token-classification"): each token's entity ("O" left out, or nothing left out) and the
// "simple" aggregation's groups — their labels, scores and words (not the pipeline's character
// offsets, start and end: qkv's tokenizer gives none).
TEST(HfEncoders, TokenClassificationEqualsThePipeline) {
  for (const char* name : {"bert-tokcls", "roberta-tokcls", "xlmr-tokcls", "deberta-tokcls", "electra-tokcls",
                           "modernbert-tokcls", "albert-tokcls"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-tokcls");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);
    std::vector<std::string> texts;
    for (const auto& c : ref["token_classification"]) texts.push_back(c["text"].get<std::string>());
    const auto none = decode::token_classification(*m.model, tok, texts);
    decode::TokenClassificationOptions grouped, every;
    grouped.aggregation = decode::Aggregation::simple;
    every.ignore_labels = {};
    const auto simple = decode::token_classification(*m.model, tok, texts, grouped);
    const auto all = decode::token_classification(*m.model, tok, texts, every);
    auto expect = [](const std::vector<decode::TokenEntity>& got, const nlohmann::json& want, bool grouped,
                     const std::string& text) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].entity, want[i][grouped ? "entity_group" : "entity"].get<std::string>()) << i;
        EXPECT_NEAR(got[i].score, want[i]["score"].get<double>(), 1e-5) << i;
        EXPECT_EQ(got[i].word, want[i]["word"].get<std::string>()) << i;
        EXPECT_EQ(got[i].index, grouped ? -1 : want[i]["index"].get<int64_t>()) << i;
        // the characters it covers (the tokenizer's offsets)
        EXPECT_EQ(text::code_points(text, got[i].start), want[i]["start"].get<size_t>()) << i;
        EXPECT_EQ(text::code_points(text, got[i].end), want[i]["end"].get<size_t>()) << i;
      }
    };
    for (size_t i = 0; i < texts.size(); ++i) {
      SCOPED_TRACE(texts[i]);
      EXPECT_EQ(tok.encode(texts[i]), ref["token_classification"][i]["ids"].get<std::vector<int32_t>>());
      expect(none[i], ref["token_classification"][i]["none"], false, texts[i]);
      expect(simple[i], ref["token_classification"][i]["simple"], true, texts[i]);
      expect(all[i], ref["token_classification"][i]["all"], false, texts[i]);
      for (const auto a : {decode::Aggregation::first, decode::Aggregation::average, decode::Aggregation::max}) {
        SCOPED_TRACE(enum_name(a));
        decode::TokenClassificationOptions words;
        words.aggregation = a;
        expect(decode::token_classification(*m.model, tok, {texts[i]}, words)[0],
               ref["token_classification"][i][std::string(enum_name(a))], true, texts[i]);
      }
    }
    EXPECT_THROW(decode::text_classification(*m.model, tok, texts), Error);
  }
}

// DistilBERT's and RoBERTa's masked-language heads through fill-mask, as the pipeline.
TEST(HfEncoders, FillMaskEqualsThePipeline) {
  for (const char* name : {"distilbert-mlm", "roberta-mlm", "xlmr-mlm", "mpnet-mlm", "deberta-mlm", "electra-mlm",
                           "modernbert-mlm", "albert-mlm"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-mlm");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);  // (a temporary's member in the range would dangle)
    for (const auto& fm : ref["fill_mask"]) {
      const std::string text = fm["text"].get<std::string>();
      SCOPED_TRACE(text);
      EXPECT_EQ(tok.encode(text), fm["ids"].get<std::vector<int32_t>>());
      const auto got = decode::fill_mask(*m.model, tok, text, {.top_k = 5, .text_pair = {}});
      ASSERT_EQ(got.size(), 1u);
      const auto& want = fm["masks"][0];
      ASSERT_EQ(got[0].size(), want.size());
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_EQ(got[0][j].token, want[j]["token"].get<int32_t>()) << j;
        EXPECT_NEAR(got[0][j].score, want[j]["score"].get<double>(), 1e-4 * want[j]["score"].get<double>()) << j;
        EXPECT_EQ(got[0][j].token_str, want[j]["token_str"].get<std::string>()) << j;
        EXPECT_EQ(got[0][j].sequence, want[j]["sequence"].get<std::string>()) << j;
      }
    }
  }
}

// A sentence-transformers folder (modules.json: mean pooling, max_seq_length 16; st-bert with
// Normalize, st-xlmr — paraphrase-multilingual's form — without, st-mpnet — all-mpnet-base-v2's — with;
// st-modernbert — gte-modernbert's form — CLS pooling with Normalize): its settings
// are kept by the conversion, and the embeddings equal SentenceTransformer.encode's — long texts cut to 16 tokens as it
// cuts them; CLS, mean and max pooling without normalizing equal the pooled hidden states.
TEST(HfEncoders, SentenceEmbeddingsEqualSentenceTransformers) {
  for (const auto& [case_name, normalized, pooled] :
       {std::tuple{"st-bert", true, nn::BertPooling::mean}, std::tuple{"st-xlmr", false, nn::BertPooling::mean},
        std::tuple{"st-mpnet", true, nn::BertPooling::mean}, std::tuple{"st-modernbert", true, nn::BertPooling::cls}}) {
    SCOPED_TRACE(case_name);
    testing::TempDir dir("hf-st");
    LoadedMaskedLanguageModel m = convert_and_load(case_name, dir);
    const EncoderTask task = m.model->task();
    EXPECT_EQ(task.pooling, pooled);
    EXPECT_EQ(task.normalize, normalized);
    EXPECT_EQ(task.max_seq_length, 16);
    const nlohmann::json ref = reference(case_name);
    const auto texts = ref["sentence_embeddings"]["texts"].get<std::vector<std::string>>();
    const auto want = ref["sentence_embeddings"]["embeddings"].get<std::vector<std::vector<float>>>();
    decode::EmbedOptions in_fours;
    in_fours.batch_size = 4;
    const auto got = decode::embed(*m.model, *m.tokenizer.hf(), texts, in_fours);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      // (unnormalized embeddings are of the hidden states' size: ≤ 1e-5 of it)
      for (size_t d = 0; d < got[i].size(); ++d)
        EXPECT_NEAR(got[i][d], want[i][d], normalized ? 1e-5 : 1e-5 * std::max(1.0f, std::abs(want[i][d])))
            << i << "," << d;
    }
    for (const auto& [name, pooling] :
         {std::pair{"cls", nn::BertPooling::cls}, std::pair{"mean", nn::BertPooling::mean},
          std::pair{"max", nn::BertPooling::max}}) {
      SCOPED_TRACE(name);
      decode::EmbedOptions o;
      o.pooling = pooling, o.normalize = 0;
      const auto p = decode::embed(*m.model, *m.tokenizer.hf(), texts, o);
      for (size_t i = 0; i < texts.size(); ++i)
        EXPECT_LE(testing::rel_error(p[i], ref["pooled_truncated_16"][i][name].get<std::vector<float>>()), 1e-5);
    }
  }
}

// Cross-encoders (rerankers) as sentence-transformers' CrossEncoder ranks with them: ce-bert as
// CrossEncoder.save_pretrained writes it (sentence-transformers 6: config_sentence_transformers.json's
// activation_fn, the length in tokenizer_config.json: 24), ce-roberta a transformers folder whose
// config.json names Identity (older sentence-transformers) and whose tokenizer cuts at 28,
// ce-bert-no-types one whose tokenizer (a plain TokenizersBackend) hands the model no token types,
// so that the pair's second text is read as type 0 as transformers reads it, ce-deberta a DeBERTa v3
// (mxbai-rerank-v1's form: a SentencePiece tokenizer whose token types the model has none of). Each pair
// cut as truncation=True cuts it (the longer first): the same ids, scores ≤ 1e-5 (the logits
// ≤ 5e-5), the same order.
TEST(HfEncoders, RerankEqualsCrossEncoder) {
  for (const char* name : {"ce-bert", "ce-roberta", "ce-bert-no-types", "ce-deberta"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-ce");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    EXPECT_EQ(m.model->task().score_activation,
              std::string(name) == "ce-roberta" ? nn::ScoreActivation::identity : nn::ScoreActivation::sigmoid);
    const nlohmann::json ref = reference(name);  // (a temporary's member in the range would dangle)
    for (const auto& c : ref["cases"]) {
      const std::string query = c["query"].get<std::string>();
      const auto docs = c["documents"].get<std::vector<std::string>>();
      SCOPED_TRACE(query);
      std::vector<int64_t> tokens;
      decode::RerankOptions o;
      o.batch_size = 2;
      const auto ranked = decode::rerank(*m.model, tok, query, docs, o, &tokens);
      for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(tokens[i], static_cast<int64_t>(c["ids"][i].size())) << i;
      ASSERT_EQ(ranked.size(), c["rank"].size());
      for (size_t i = 0; i < ranked.size(); ++i) {
        EXPECT_EQ(ranked[i].index, c["rank"][i]["corpus_id"].get<int64_t>()) << i;
        // (ce-roberta's scores are its logits, up to ~3, where f32's rounding reaches 1.5e-5)
        EXPECT_NEAR(ranked[i].score, c["rank"][i]["score"].get<double>(),
                    std::string(name) == "ce-roberta" ? 5e-5 : 1e-5)
            << i;
      }
      o.top_k = 2;
      const auto top = decode::rerank(*m.model, tok, query, docs, o);
      ASSERT_EQ(top.size(), 2u);
      for (size_t i = 0; i < 2; ++i) EXPECT_EQ(top[i].index, c["rank_top2"][i]["corpus_id"].get<int64_t>());
      // the pairs' ids, as the tokenizer cut them
      const int64_t cut = std::string(name) == "ce-roberta" ? 28 : 24;
      for (size_t i = 0; i < docs.size(); ++i)
        EXPECT_EQ(tok.encode_pair_truncated(query, docs[i], cut).ids, c["ids"][i].get<std::vector<int32_t>>()) << i;
    }
  }
  // a classifier of several labels, an embedder, softmax: named
  testing::TempDir dir("hf-ce-bad");
  LoadedMaskedLanguageModel three = convert_and_load("bert-seqcls", dir);
  EXPECT_NE(testing::error_of([&] {
              decode::rerank(*three.model, *three.tokenizer.hf(), "q", {"d"});
            }).find("one label, and this classifier has 3"),
            std::string::npos);
  LoadedMaskedLanguageModel st = convert_and_load("st-bert", dir);
  EXPECT_NE(testing::error_of([&] {
              decode::rerank(*st.model, *st.tokenizer.hf(), "q", {"d"});
            }).find("no sequence classifier"),
            std::string::npos);
}

// A bi-encoder as sentence-transformers 6 saves it (module types under new packages, 1_Pooling's
// "pooling_mode": "mean", the length only in tokenizer_config.json): the same embeddings as it gives.
TEST(HfEncoders, SentenceTransformers6FoldersConvert) {
  testing::TempDir dir("hf-st6");
  LoadedMaskedLanguageModel m = convert_and_load("st6-bert", dir);
  const EncoderTask task = m.model->task();
  EXPECT_EQ(task.pooling, nn::BertPooling::mean);
  EXPECT_TRUE(task.normalize);
  EXPECT_EQ(task.max_seq_length, 16);
  const nlohmann::json ref = reference("st6-bert");
  const auto texts = ref["texts"].get<std::vector<std::string>>();
  const auto want = ref["embeddings"].get<std::vector<std::vector<float>>>();
  const auto got = decode::embed(*m.model, *m.tokenizer.hf(), texts);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(testing::rel_error(got[i], want[i]), 1e-5) << i;
}

// int8 rows for the encoder's layers (--dtype int8, or a file qkv quantize wrote): the same model,
// its embeddings close to f32's and equal between the two ways of asking; the classifier's labels
// kept. Attention maps (training's path) are not read from int8 rows: the f32 parameters answer.
TEST(HfEncoders, Int8LayersStayCloseToF32) {
  testing::TempDir dir("hf-int8");
  const std::string f32_file = (dir.path / "st.safetensors").string(),
                    q_file = (dir.path / "st-int8.safetensors").string();
  convert_hf((kGolden / "st-bert").string(), f32_file);
  const nlohmann::json ref = reference("st-bert");
  const auto texts = ref["sentence_embeddings"]["texts"].get<std::vector<std::string>>();
  LoadOptions int8;
  int8.weights = nn::InferenceWeights::int8;
  LoadedMaskedLanguageModel f = load_masked_language_model(f32_file), q = load_masked_language_model(f32_file, int8);
  const auto ef = decode::embed(*f.model, *f.tokenizer.hf(), texts),
             eq = decode::embed(*q.model, *q.tokenizer.hf(), texts);
  for (size_t i = 0; i < texts.size(); ++i) {
    double dot = 0;
    for (size_t d = 0; d < ef[i].size(); ++d) dot += double(ef[i][d]) * eq[i][d];  // both of unit length
    EXPECT_GT(dot, 0.995) << texts[i];
    EXPECT_LT(dot, 1 - 1e-9) << "int8 rows were not read: " << texts[i];
  }
  quantize_model_file(f32_file, q_file);
  LoadedMaskedLanguageModel from_file = load_masked_language_model(q_file);
  EXPECT_EQ(decode::embed(*from_file.model, *from_file.tokenizer.hf(), texts), eq);
  testing::TempDir dir2("hf-int8-cls");
  const std::string cls = (dir2.path / "cls.safetensors").string();
  convert_hf((kGolden / "bert-seqcls").string(), cls);
  LoadedMaskedLanguageModel c = load_masked_language_model(cls, int8);
  const nlohmann::json cref = reference("bert-seqcls");
  std::vector<std::string> short_texts;
  for (const auto& x : cref["text_classification"]) short_texts.push_back(x["text"].get<std::string>());
  const auto got = decode::text_classification(*c.model, *c.tokenizer.hf(), short_texts, options(0));
  // The tiny model's scores differ little from f32's, each label's own (two labels' near-equal scores
  // may swap places): at most 0.020 from the reference with 7-bit activations (CPUs without VNNI) and
  // 0.026 with 8 bits (one row's one label; the 15 scores' mean error is lower at 8 bits, 0.006
  // against 0.008): int8's rounding, which a random model with scores near a third amplifies.
  ASSERT_EQ(got.size(), cref["text_classification"].size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), cref["text_classification"][i]["all"].size());
    for (const nlohmann::json& want : cref["text_classification"][i]["all"]) {
      const auto it = std::find_if(got[i].begin(), got[i].end(),
                                   [&](const decode::LabelScore& g) { return g.label == want["label"]; });
      ASSERT_NE(it, got[i].end()) << i << " " << want["label"];
      EXPECT_NEAR(it->score, want["score"].get<double>(), 0.035) << i << " " << want["label"];
    }
  }
  // DeBERTa's position terms project the relative embeddings through the same int8 rows, ModernBERT's
  // layers are of their own kind (a fused Wqkv, a gated MLP), and ALBERT's one layer runs three times on
  // the same int8 rows (a file qkv quantize wrote holds them once): embeddings of their inputs (70
  // tokens; ALBERT's 12) close to f32's (as BERT's above), and equal from a file qkv quantize wrote (which holds no
  // f32 layer matrices to fall back on)
  NoGradGuard no_grad;
  for (const char* name : {"deberta-tokcls", "modernbert-tokcls", "albert-tokcls"}) {
    SCOPED_TRACE(name);
    const std::string deberta = (dir2.path / (std::string(name) + ".safetensors")).string(),
                      deberta_q = (dir2.path / (std::string(name) + "-int8.safetensors")).string();
    convert_hf((kGolden / name).string(), deberta);
    const nlohmann::json dref = reference(name);
    const Tensor ids = int_matrix(dref["input_ids"]), mask = int_matrix(dref["attention_mask"]);
    LoadedMaskedLanguageModel d32 = load_masked_language_model(deberta), d8 = load_masked_language_model(deberta, int8);
    const Tensor h32 = d32.model->encode(ids, Tensor(), mask), h8 = d8.model->encode(ids, Tensor(), mask);  // [B, T, E]
    // each row's mean over its tokens (the tiny random model's single positions drift more: MPNet's too)
    const std::vector<int32_t> keep = mask.to_ints();
    const std::vector<float> v32 = h32.to_vector(), v8 = h8.to_vector();
    const size_t T = static_cast<size_t>(ids.size(1)), E = static_cast<size_t>(h32.size(2));
    for (size_t b = 0; b < 2; ++b) {
      std::vector<double> a(E), c(E);
      for (size_t t = 0; t < T; ++t)
        for (size_t d = 0; d < E && keep[b * T + t]; ++d)
          a[d] += v32[(b * T + t) * E + d], c[d] += v8[(b * T + t) * E + d];
      double ac = 0, aa = 0, cc = 0;
      for (size_t d = 0; d < E; ++d) ac += a[d] * c[d], aa += a[d] * a[d], cc += c[d] * c[d];
      // (ModernBERT's gated MLP multiplies two projections of the golden's std-0.5 weights, whose int8
      // errors multiply too: 0.984–0.996 here; at transformers' own init, std 0.02, 0.9999996)
      EXPECT_GT(ac / std::sqrt(aa * cc), std::string(name) == "modernbert-tokcls" ? 0.98 : 0.995) << "row " << b;
    }
    EXPECT_NE(h32.to_vector(), h8.to_vector()) << "int8 rows were not read";
    quantize_model_file(deberta, deberta_q);
    EXPECT_EQ(load_masked_language_model(deberta_q).model->encode(ids, Tensor(), mask).to_vector(), h8.to_vector());
  }
}

// A copy of the golden folder `golden` under `dir` with `config` as its config.json.
fs::path patched_folder(const testing::TempDir& dir, const fs::path& golden, const nlohmann::json& config) {
  const fs::path f = dir.path / "case";
  fs::remove_all(f);
  fs::create_directories(f);
  for (const auto& e : fs::directory_iterator(golden)) fs::copy(e.path(), f / e.path().filename());
  io::write_file_atomic((f / "config.json").string(), config.dump());
  return f;
}

// That folder's conversion, which must fail: its error (and nothing written).
std::string refused_conversion(const testing::TempDir& dir, const fs::path& golden, const nlohmann::json& config) {
  const fs::path f = patched_folder(dir, golden, config);
  const std::string out = (dir.path / "out.safetensors").string();
  fs::remove(out);  // (an earlier, successful conversion's)
  const std::string e = testing::error_of([&] { convert_hf(f.string(), out); });
  EXPECT_FALSE(fs::exists(out)) << e;
  return e;
}

// Hostile classifier configs: id2label with a gap or a non-numeric key, a num_labels that contradicts
// it, an unknown problem_type — each refused, named, before anything is written.
TEST(HfEncoders, CraftedClassifierConfigsAreRefusedByName) {
  testing::TempDir dir("hf-encoder-hostile");
  const nlohmann::json base = nlohmann::json::parse(io::read_file((kGolden / "bert-seqcls" / "config.json").string()));
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"id2label", {{"0", "A"}, {"2", "B"}}}}, "id2label: the entry '2'"},
      {{{"id2label", {{"zero", "A"}}}}, "id2label: the entry 'zero'"},
      {{{"id2label", {{"0", ""}}}}, "the label of 0 is empty"},
      {{{"id2label", {{"0", 7}}}}, "id2label: the entry '0' (= 7)"},
      {{{"num_labels", 5}}, "num_labels 5 differs from id2label's 3 labels"},
      {{{"problem_type", "ranking"}}, "problem_type 'ranking'"},
  };
  for (const auto& [patch, want] : cases) {
    SCOPED_TRACE(want);
    nlohmann::json c = base;
    c.merge_patch(patch);
    if (patch.contains("id2label")) c["id2label"] = patch["id2label"];
    const std::string e = refused_conversion(dir, kGolden / "bert-seqcls", c);
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
}

// ModernBERT's config in both forms: the Hub's 4.x (global_attn_every_n_layers, global_rope_theta,
// local_rope_theta; no layer_types nor rope_parameters) converts to the same model as transformers 5's,
// and what qkv cannot compute is refused by name — a scaled rope_type, a pooling it lacks, layer_types
// of another length or kind, an untied decoder — before anything is written.
TEST(HfEncoders, ModernBertConfigsOfBothFormsAndCraftedOnes) {
  testing::TempDir dir("hf-modernbert-config");
  const fs::path golden = kGolden / "modernbert-seqcls";
  const nlohmann::json base = nlohmann::json::parse(io::read_file((golden / "config.json").string()));
  auto convert_with = [&](const nlohmann::json& config, const fs::path& golden_dir) {
    const std::string out = (dir.path / "out.safetensors").string();
    fs::remove(out);
    return std::pair{patched_folder(dir, golden_dir, config), out};
  };

  // the 4.x form (with fields no ModernBERT code reads): the golden's logits; and the bases are read
  // from its fields — a local base of 160000 gives other logits
  nlohmann::json old = base;
  old.erase("layer_types");
  old.erase("rope_parameters");
  old["global_rope_theta"] = 160000.0, old["local_rope_theta"] = 10000.0, old["global_attn_every_n_layers"] = 2;
  old["reference_compile"] = nullptr, old["layer_norm_eps"] = 1e-5, old["position_embedding_type"] = "absolute";
  {
    const auto [f, out] = convert_with(old, golden);
    convert_hf(f.string(), out);
    LoadedMaskedLanguageModel m = load_masked_language_model(out);
    const nlohmann::json ref = reference("modernbert-seqcls");
    const Tensor got = m.model->classify(int_matrix(ref["input_ids"]), Tensor(), int_matrix(ref["attention_mask"]));
    EXPECT_LE(testing::rel_error(got.to_vector(), ref["logits"].get<std::vector<float>>()), 1e-4);
    old["local_rope_theta"] = 160000.0;
    const auto [f2, out2] = convert_with(old, golden);
    convert_hf(f2.string(), out2);
    const Tensor other = load_masked_language_model(out2).model->classify(int_matrix(ref["input_ids"]), Tensor(),
                                                                          int_matrix(ref["attention_mask"]));
    EXPECT_GT(testing::rel_error(other.to_vector(), ref["logits"].get<std::vector<float>>()), 1e-3);
  }
  nlohmann::json scaled = base;
  scaled["rope_parameters"]["full_attention"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}, {"factor", 4}};
  nlohmann::json untied = nlohmann::json::parse(io::read_file((kGolden / "modernbert-mlm" / "config.json").string()));
  untied["tie_word_embeddings"] = false;
  auto patched = [&](const nlohmann::json& patch) {
    nlohmann::json c = base;
    c.merge_patch(patch);
    return c;
  };
  const std::vector<std::tuple<nlohmann::json, fs::path, std::string>> cases = {
      {scaled, golden, "rope_parameters.full_attention: the field 'factor'"},
      {patched({{"rope_parameters", {{"sliding_attention", {{"rope_type", "linear"}}}}}}), golden,
       "rope_type 'linear' is not supported"},
      {patched({{"classifier_pooling", "max"}}), golden, "classifier_pooling 'max'"},
      {patched({{"layer_types", {"full_attention"}}}), golden, "layer_types must list 3"},
      {patched({{"layer_types", {"full_attention", "chunked", "full_attention"}}}), golden,
       "layer_types holds 'chunked'"},
      {patched({{"hidden_activation", "quick_gelu"}}), golden, "hidden_activation 'quick_gelu'"},
      {patched({{"local_attention", -2}}), golden, "local_attention"},
      {patched({{"sliding_window_pattern", 4}}), golden, "'sliding_window_pattern'"},
      {untied, kGolden / "modernbert-mlm", "tie_word_embeddings = false"},
  };
  for (const auto& [config, from, want] : cases) {
    SCOPED_TRACE(want);
    const std::string e = refused_conversion(dir, from, config);
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
}

// A wrong attention_mask is an error naming the model and what is wrong, in both encoder networks:
// another shape, a value other than 0 and 1, a row of padding alone.
TEST(HfEncoders, WrongAttentionMasksAreErrorsNamingThem) {
  testing::TempDir dir("hf-masks");
  for (const auto& [name, model] : {std::pair{"bert-seqcls", "BERT"}, std::pair{"modernbert-seqcls", "ModernBERT"}}) {
    SCOPED_TRACE(name);
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const Tensor ids = Tensor::from_ints({5, 6, 7, 8, 9, 10}, {2, 3});
    const std::vector<std::pair<Tensor, std::string>> cases = {
        {Tensor::from_ints({1, 1, 1}, {1, 3}), ": attention_mask must be i32 [2,3]"},
        {Tensor::from_ints({1, 1, 2, 1, 1, 0}, {2, 3}), ": attention_mask holds 2 (row 0)"},
        {Tensor::from_ints({1, 1, 1, 0, 0, 0}, {2, 3}), ": row 1 of attention_mask has no token"}};
    for (const auto& [mask, want] : cases) {
      const std::string e = testing::error_of([&] { m.model->classify(ids, Tensor(), mask); });
      EXPECT_NE(e.find(std::string(model) + want), std::string::npos) << e;
    }
    EXPECT_EQ(m.model->classify(ids, Tensor(), Tensor::from_ints({1, 1, 1, 1, 1, 0}, {2, 3})).shape(), (Shape{2, 3}));
  }
}

// ALBERT's groupings that no released checkpoint has (several layer groups, several layers in a group):
// refused by name, nothing written; its one shared layer is one set of parameters in the model.
TEST(HfEncoders, AlbertSharesOneLayerAndRefusesOtherGroupings) {
  testing::TempDir dir("hf-albert-config");
  const fs::path golden = kGolden / "albert-seqcls";
  const nlohmann::json base = nlohmann::json::parse(io::read_file((golden / "config.json").string()));
  for (const auto& [key, want] : {std::pair{"num_hidden_groups", "num_hidden_groups 3"},
                                  std::pair{"inner_group_num", "inner_group_num 3"}}) {
    SCOPED_TRACE(key);
    nlohmann::json c = base;
    c[key] = 3;
    const std::string e = refused_conversion(dir, golden, c);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
  LoadedMaskedLanguageModel m = convert_and_load("albert-seqcls", dir);
  std::set<std::string> layer_params;
  for (auto& [name, p] : m.model->module().named_parameters())
    if (name.starts_with("layers.")) layer_params.insert(name.substr(0, name.find('.', 7)));
  EXPECT_EQ(layer_params, (std::set<std::string>{"layers.0"}));  // (3 layers run, 1 stored)
}

}  // namespace
}  // namespace qkv::models
