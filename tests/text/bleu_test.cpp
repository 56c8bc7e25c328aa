// corpus_bleu / corpus_chrf / tokenize_13a against sacreBLEU (tests/golden/bleu.json, written by
// tests/golden/make_bleu_golden.py), plus the argument checks.
#include "qkv/text/bleu.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace {

using nlohmann::json;
using qkv::text::corpus_bleu;
using qkv::text::corpus_chrf;
using qkv::text::tokenize_13a;

const json& golden() {
  static const json j = [] {
    const std::string path = std::string(QKV_GOLDEN_DIR) + "/bleu.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return json::parse(in);
  }();
  return j;
}

constexpr double kTol = 1e-9;

// A golden case's references: sacreBLEU's streams, where null marks a missing reference. With no
// null, the stream layout goes to corpus_bleu/corpus_chrf as it is; with nulls, it becomes the
// per-sentence lists of corpus_*_by_sentence.
bool has_holes(const json& refs) {
  for (const json& stream : refs)
    for (const json& r : stream)
      if (r.is_null()) return true;
  return false;
}

std::vector<std::vector<std::string>> per_sentence(const json& refs, size_t n) {
  std::vector<std::vector<std::string>> out(n);
  for (const json& stream : refs)
    for (size_t i = 0; i < n; ++i)
      if (!stream.at(i).is_null()) out[i].push_back(stream.at(i).get<std::string>());
  return out;
}

qkv::text::BleuScore golden_bleu(const json& c) {
  const auto hyps = c.at("hyps").get<std::vector<std::string>>();
  if (has_holes(c.at("refs"))) return qkv::text::corpus_bleu_by_sentence(hyps, per_sentence(c.at("refs"), hyps.size()));
  return corpus_bleu(hyps, c.at("refs").get<std::vector<std::vector<std::string>>>());
}

qkv::text::ChrfScore golden_chrf(const json& c) {
  const auto hyps = c.at("hyps").get<std::vector<std::string>>();
  if (has_holes(c.at("refs"))) return qkv::text::corpus_chrf_by_sentence(hyps, per_sentence(c.at("refs"), hyps.size()));
  return corpus_chrf(hyps, c.at("refs").get<std::vector<std::vector<std::string>>>());
}

TEST(Bleu, Tokenize13aMatchesSacrebleu) {
  const json& cases = golden().at("tokenize_13a");
  ASSERT_GT(cases.size(), 40u);
  for (const json& c : cases) {
    const std::string in = c.at("in").get<std::string>();
    EXPECT_EQ(tokenize_13a(in), c.at("out").get<std::string>()) << "input: \"" << in << "\"";
  }
}

TEST(Bleu, Tokenize13aExamples) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(tokenize_13a("U.S.A."), "U . S . A .");
  EXPECT_EQ(tokenize_13a("it costs 1,000.50 -- it's 3-4"), "it costs 1,000.50 -- it's 3 - 4");
  EXPECT_EQ(tokenize_13a("&quot;x&quot;"), "\" x \"");
  EXPECT_EQ(tokenize_13a(""), "");
}

TEST(Bleu, CorpusScoresMatchSacrebleu) {
  const json& cases = golden().at("cases");
  ASSERT_GT(cases.size(), 20u);
  for (const json& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const json& g = c.at("bleu");
    const qkv::text::BleuScore s = golden_bleu(c);
    EXPECT_NEAR(s.score, g.at("score").get<double>(), kTol);
    for (int n = 0; n < 4; ++n) {
      EXPECT_NEAR(s.precisions[n], g.at("precisions")[n].get<double>(), kTol) << "order " << n + 1;
      EXPECT_EQ(s.counts[n], g.at("counts")[n].get<int64_t>()) << "order " << n + 1;
      EXPECT_EQ(s.totals[n], g.at("totals")[n].get<int64_t>()) << "order " << n + 1;
    }
    EXPECT_NEAR(s.bp, g.at("bp").get<double>(), kTol);
    EXPECT_NEAR(s.ratio, g.at("ratio").get<double>(), kTol);
    EXPECT_EQ(s.hyp_len, g.at("hyp_len").get<int64_t>());
    EXPECT_EQ(s.ref_len, g.at("ref_len").get<int64_t>());
    EXPECT_EQ(s.format(), g.at("format").get<std::string>());
    // BLEU-1 … BLEU-4: sacreBLEU's BLEU(max_ngram_order=n)
    for (int n = 1; n <= 4; ++n) EXPECT_NEAR(s.bleu_n(n), g.at("bleu_n")[n - 1].get<double>(), kTol) << "BLEU-" << n;
  }
}

TEST(Bleu, FormatLooksLikeSacrebleu) {
  const auto s = corpus_bleu({"the cat sat on the mat"}, {{"the cat sat on the mat"}});
  EXPECT_DOUBLE_EQ(s.score, 100.0);
  EXPECT_EQ(s.format(),
            "BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 6 "
            "ref_len = 6)");
}

TEST(Bleu, ClosestReferenceLengthTieTakesShorter) {
  // hyp 5 tokens, refs of 4 and 6 tokens: both 1 away, sacreBLEU takes 4 in either order.
  EXPECT_EQ(corpus_bleu({"a b c d e"}, {{"a b c d"}, {"a b c d e f"}}).ref_len, 4);
  EXPECT_EQ(corpus_bleu({"a b c d e"}, {{"a b c d e f"}, {"a b c d"}}).ref_len, 4);
  EXPECT_EQ(corpus_bleu({"a b c"}, {{"a b c d e f"}, {"a"}}).ref_len, 1);  // 2 < 3 away
}

TEST(Bleu, ArgumentErrors) {
  EXPECT_THROW(corpus_bleu({"a"}, {}), qkv::Error);
  EXPECT_THROW(corpus_bleu({"a", "b"}, {{"a"}}), qkv::Error);
  EXPECT_THROW(corpus_chrf({"a"}, {{"a"}, {}}), qkv::Error);
  try {
    corpus_bleu({"a", "b"}, {{"a", "b"}, {"a"}});
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reference stream 1 has 1 lines"), std::string::npos)
        << e.what();
  }
}

TEST(Bleu, PerSentenceReferencesEqualTheStreamLayout) {
  // Repeating a reference changes nothing, so sentence 0's single reference can fill its hole.
  const std::vector<std::string> hyps = {"the cat is on the mat", "there is a cat on the mat"};
  const auto a = qkv::text::corpus_bleu_by_sentence(hyps, {{"the cat sat on the mat"},
                                                           {"a cat is on the mat", "there is a cat on a mat"}});
  const auto b = corpus_bleu(hyps, {{"the cat sat on the mat", "a cat is on the mat"},
                                    {"the cat sat on the mat", "there is a cat on a mat"}});
  EXPECT_EQ(a.format(), b.format());
  EXPECT_NEAR(a.score, b.score, 1e-12);
  EXPECT_THROW(qkv::text::corpus_bleu_by_sentence(hyps, {{"x"}}), qkv::Error);        // too few lists
  EXPECT_THROW(qkv::text::corpus_bleu_by_sentence(hyps, {{"x"}, {}}), qkv::Error);    // a sentence without
  EXPECT_THROW(qkv::text::corpus_chrf_by_sentence(hyps, {{"x"}, {}}), qkv::Error);
}

TEST(Chrf, CorpusScoresMatchSacrebleu) {
  for (const json& c : golden().at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const qkv::text::ChrfScore s = golden_chrf(c);
    EXPECT_NEAR(s.score, c.at("chrf").at("score").get<double>(), kTol);
    EXPECT_EQ(s.format(), c.at("chrf").at("format").get<std::string>());
  }
}

TEST(Chrf, IdenticalIs100AndWhitespaceIsIgnored) {
  EXPECT_DOUBLE_EQ(corpus_chrf({"Où est l'été ?"}, {{"Où est l'été ?"}}).score, 100.0);
  EXPECT_DOUBLE_EQ(corpus_chrf({"Oùest l' été?"}, {{"Où est l'été ?"}}).score, 100.0);
  EXPECT_EQ(corpus_chrf({"abc"}, {{"xyz"}}).score, 0.0);
}

}  // namespace
