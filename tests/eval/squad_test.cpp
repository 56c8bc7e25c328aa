// SQuAD's scores (eval/squad.h) against the official evaluate-v2.0.py's normalize_answer, compute_exact
// and compute_f1 on the same texts (tests/golden/hf_qa_finetune.json's metric_cases, written by
// tests/golden/make_qa_finetune_golden.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/eval/squad.h"
#include "qkv/io/file.h"

namespace qkv::eval::squad_test {  // (its own: the test files of a folder compile as one unit)
namespace {

TEST(Squad, ScoresAreTheOfficialScripts) {
  const nlohmann::json golden =
      nlohmann::json::parse(io::read_file(std::string(QKV_GOLDEN_DIR) + "/hf_qa_finetune.json"));
  ASSERT_GE(golden["metric_cases"].size(), 10u);
  for (const auto& c : golden["metric_cases"]) {
    SCOPED_TRACE(c.dump());
    const AnswerScores s =
        answer_scores(c["prediction"].get<std::string>(), c["answers"].get<std::vector<std::string>>());
    EXPECT_EQ(s.exact_match, c["exact_match"].get<double>());
    EXPECT_NEAR(s.f1, c["f1"].get<double>(), 1e-12);
  }
}

TEST(Squad, NormalizeAnswerIsTheOfficialScripts) {
  // normalize_answer's four steps: lower, punctuation, articles (whole words only), whitespace
  EXPECT_EQ(normalize_answer("  The  Fair, Verona! "), "fair verona");
  EXPECT_EQ(normalize_answer("Theatre an anthem a"), "theatre anthem");
  EXPECT_EQ(normalize_answer("ÉTÉ «the» été"), "été « » été");
  EXPECT_EQ(normalize_answer("the"), "");
  EXPECT_EQ(normalize_answer(""), "");
}

}  // namespace
}  // namespace qkv::eval::squad_test
