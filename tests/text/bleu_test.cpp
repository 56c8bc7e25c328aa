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
    const auto hyps = c.at("hyps").get<std::vector<std::string>>();
    const auto refs = c.at("refs").get<std::vector<std::vector<std::string>>>();
    const json& g = c.at("bleu");
    const qkv::text::BleuScore s = corpus_bleu(hyps, refs);
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

TEST(Chrf, CorpusScoresMatchSacrebleu) {
  for (const json& c : golden().at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const auto hyps = c.at("hyps").get<std::vector<std::string>>();
    const auto refs = c.at("refs").get<std::vector<std::vector<std::string>>>();
    const qkv::text::ChrfScore s = corpus_chrf(hyps, refs);
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
