// Extractive question answering (…ForQuestionAnswering of BERT, DistilBERT, RoBERTa, XLM-RoBERTa,
// DeBERTa v3 and ELECTRA) against transformers 4.57's pipeline("question-answering") on the same tiny
// random models (tests/golden/hf/qa-*/, make_hf_golden.py's qa group): the windows a long context is
// cut into (ids, offsets, words, sequences) equal the tokenizer's; every answer's text and character
// offsets equal, its score ≤ 1e-5 — over default and top-k answers, long contexts of dozens of
// windows, a short window and stride, the null answer, max_answer_len, accents, tabs and newlines
// with and without align_to_words, and a batch. (Scores to 5e-4 relative: products of two softmaxes of
// logits that agree to 1e-4, ELECTRA's 4.57 and 5.25 logits differing by 2e-4 themselves.)
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/decode/question_answering.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/text/unicode.h"
#include "hf_golden.h"
#include "testing.h"

namespace qkv::models {
namespace {

using hf_golden::convert_and_load, hf_golden::reference;

const char* const kModels[] = {"qa-bert",    "qa-distilbert", "qa-roberta",    "qa-xlmr",
                               "qa-deberta", "qa-electra",    "qa-modernbert", "qa-albert"};

decode::QuestionAnsweringOptions options_of(const nlohmann::json& args) {
  decode::QuestionAnsweringOptions o;
  o.top_k = args.value("top_k", int64_t{1});
  o.max_seq_len = args.value("max_seq_len", int64_t{0});
  o.doc_stride = args.value("doc_stride", int64_t{-1});
  o.max_answer_len = args.value("max_answer_len", int64_t{15});
  o.handle_impossible_answer = args.value("handle_impossible_answer", false);
  o.align_to_words = args.value("align_to_words", true);
  return o;
}

// The pipeline's result for one question (a dict where one answer is left, else a list).
void expect_answers(const std::vector<decode::Answer>& got, const nlohmann::json& result, const std::string& context) {
  const nlohmann::json want = result.is_array() ? result : nlohmann::json::array({result});
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(got[k].answer, want[k]["answer"].get<std::string>());
    EXPECT_EQ(text::code_points(context, got[k].start), want[k]["start"].get<size_t>());
    EXPECT_EQ(text::code_points(context, got[k].end), want[k]["end"].get<size_t>());
    const double score = want[k]["score"].get<double>();  // (the null answer's is ~1e-7)
    EXPECT_NEAR(got[k].score, score, 5e-4 * std::abs(score) + 1e-12);
  }
}

TEST(HfQuestionAnswering, WindowsEqualTheTokenizers) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-qa");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);  // (kept: a loop over a temporary's member would dangle)
    ASSERT_EQ(ref["qa_features"].size(), 2u);
    for (const auto& f : ref["qa_features"]) {
      const std::string q = f["question"], c = f["context"];
      const auto windows = tok.encode_pair_windows(q, c, f["args"]["max_length"], f["args"]["stride"]);
      ASSERT_EQ(windows.size(), f["input_ids"].size());
      for (size_t w = 0; w < windows.size(); ++w) {
        SCOPED_TRACE(w);
        const auto& e = windows[w];
        EXPECT_EQ(e.ids, f["input_ids"][w].get<std::vector<int32_t>>());
        if (!f["token_type_ids"].is_null())
          EXPECT_EQ(e.token_type_ids, f["token_type_ids"][w].get<std::vector<int32_t>>());
        ASSERT_EQ(e.offsets.size(), e.ids.size());
        for (size_t t = 0; t < e.ids.size(); ++t) {
          const std::string& text = e.sequence_ids[t] == 0 ? q : c;
          const nlohmann::json& want = f["offset_mapping"][w][t];
          EXPECT_EQ(text::code_points(text, e.offsets[t].first), want[0].get<size_t>()) << "token " << t;
          EXPECT_EQ(text::code_points(text, e.offsets[t].second), want[1].get<size_t>()) << "token " << t;
          const nlohmann::json& seq = f["sequence_ids"][w][t];
          EXPECT_EQ(e.sequence_ids[t], seq.is_null() ? -1 : seq.get<int32_t>()) << "token " << t;
          const nlohmann::json& word = f["word_ids"][w][t];
          EXPECT_EQ(e.word_ids[t], word.is_null() ? -1 : word.get<int32_t>()) << "token " << t;
        }
      }
    }
  }
}

TEST(HfQuestionAnswering, AnswersEqualThePipeline) {
  for (const char* name : kModels) {
    SCOPED_TRACE(name);
    testing::TempDir dir("hf-qa");
    LoadedMaskedLanguageModel m = convert_and_load(name, dir);
    const text::HfTokenizer& tok = *m.tokenizer.hf();
    const nlohmann::json ref = reference(name);
    ASSERT_EQ(ref["question_answering"].size(), 13u);
    for (const auto& c : ref["question_answering"]) {
      SCOPED_TRACE(c["args"].dump() + " " + c["question"].dump().substr(0, 60));
      const auto opts = options_of(c["args"]);
      if (c["question"].is_array()) {  // a batch: a result per question
        const auto qs = c["question"].get<std::vector<std::string>>(),
                   cs = c["context"].get<std::vector<std::string>>();
        const auto got = decode::question_answering(*m.model, tok, qs, cs, opts);
        ASSERT_EQ(got.size(), qs.size());
        for (size_t i = 0; i < qs.size(); ++i) expect_answers(got[i], c["result"][i], cs[i]);
      } else {
        const std::string q = c["question"], ctx = c["context"];
        expect_answers(decode::question_answering(*m.model, tok, {q}, {ctx}, opts).at(0), c["result"], ctx);
      }
    }
  }
}

TEST(HfQuestionAnswering, WrongInputsAreErrorsNamingThem) {
  testing::TempDir dir("hf-qa");
  LoadedMaskedLanguageModel m = convert_and_load("qa-bert", dir);
  const text::HfTokenizer& tok = *m.tokenizer.hf();
  auto error = [&](std::vector<std::string> q, std::vector<std::string> c, decode::QuestionAnsweringOptions o = {}) {
    return testing::error_of([&] { decode::question_answering(*m.model, tok, q, c, o); });
  };
  EXPECT_NE(error({"Who?"}, {}).find("1 questions for 0 contexts"), std::string::npos);
  EXPECT_NE(error({""}, {"a text"}).find("question 0 is empty"), std::string::npos);
  EXPECT_NE(error({"Who?"}, {""}).find("context 0 is empty"), std::string::npos);
  decode::QuestionAnsweringOptions o;
  o.top_k = 0;
  EXPECT_NE(error({"Who?"}, {"a text"}, o).find("top_k"), std::string::npos);
  o = {}, o.doc_stride = 100;
  EXPECT_NE(error({"Who?"}, {"a text"}, o).find("doc_stride 100 is larger than max_seq_len 40"), std::string::npos);
  o = {}, o.max_seq_len = 1000;
  EXPECT_NE(error({"Who?"}, {"a text"}, o).find("positions"), std::string::npos);
  // a question that fills the window
  std::string long_question;
  for (int i = 0; i < 50; ++i) long_question += "who ";
  EXPECT_NE(error({long_question}, {"a text"}).find("no room for the text"), std::string::npos);
  // a model of another head
  LoadedMaskedLanguageModel cls = convert_and_load("bert-seqcls", dir);
  EXPECT_NE(testing::error_of([&] {
              decode::question_answering(*cls.model, *cls.tokenizer.hf(), {"Who?"}, {"a"});
            }).find("no question-answering head"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::models
