// Translation scoring as `qkv eval` reports it (eval/translation_scores.h): the plain scores are
// corpus BLEU/chrF over the reference streams; grouped, each distinct source is scored once against
// the references of all its lines; by length, each bucket is scored on its own sentences.
#include "qkv/eval/translation_scores.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing.h"

namespace qkv::eval {
namespace {

const std::vector<std::string> kSources = {"I like tea .", "I like tea .", "The cat sat on the mat and looked around .",
                                           "Go !"};
const std::vector<std::string> kRefs = {"J'aime le thé .", "J'adore le thé .",
                                        "Le chat s'est assis sur le tapis et a regardé autour .", "Va !"};

TEST(TranslationScores, PlainScoresAreTheCorpusScores) {
  const std::vector<std::string> hyps = {"J'aime le thé .", "J'aime le thé .", "Le chat est assis sur le tapis .",
                                         "Vas-y !"};
  const SentenceGroups g = group_by_source(kSources, 4, false);
  EXPECT_EQ(g.sentences(), 4u);
  const TranslationScores s = score_translations(g, hyps, {kRefs});
  EXPECT_DOUBLE_EQ(s.bleu.score, text::corpus_bleu(hyps, {kRefs}).score);
  EXPECT_DOUBLE_EQ(s.chrf.score, text::corpus_chrf(hyps, {kRefs}).score);
  EXPECT_EQ(s.sentences, 4u);
  EXPECT_TRUE(s.by_length.empty());
}

TEST(TranslationScores, GroupedScoresEachSourceOnceWithAllItsReferences) {
  const SentenceGroups g = group_by_source(kSources, 4, true);
  ASSERT_EQ(g.sentences(), 3u);  // "I like tea ." twice
  EXPECT_EQ(g.first_line, (std::vector<size_t>{0, 2, 3}));
  EXPECT_EQ(g.sentence_of, (std::vector<size_t>{0, 0, 1, 2}));
  const std::vector<std::string> hyps = {"J'adore le thé .", "Le chat est assis sur le tapis .", "Va !"};
  const TranslationScores s = score_translations(g, hyps, {kRefs});
  const std::vector<std::vector<std::string>> refs_of = {{kRefs[0], kRefs[1]}, {kRefs[2]}, {kRefs[3]}};
  EXPECT_DOUBLE_EQ(s.bleu.score, text::corpus_bleu_by_sentence(hyps, refs_of).score);
  EXPECT_DOUBLE_EQ(s.chrf.score, text::corpus_chrf_by_sentence(hyps, refs_of).score);
  // "J'adore …" matches the second line's reference: grouped, that sentence is perfect; scored on
  // its own first line, it is not
  const std::vector<std::string> tea = {kSources[0], kSources[1]};
  const std::vector<std::string> tea_refs = {kRefs[0], kRefs[1]};
  EXPECT_DOUBLE_EQ(score_translations(group_by_source(tea, 2, true), {"J'adore le thé ."}, {tea_refs}).bleu.score, 100);
  EXPECT_LT(score_translations(group_by_source({kSources[0]}, 1, false), {"J'adore le thé ."}, {{kRefs[0]}}).bleu.score,
            100);
}

TEST(TranslationScores, BucketsBySourceLength) {
  const std::vector<std::string> hyps = {"J'aime le thé .", "J'aime le thé .", "Le chat est assis sur le tapis .",
                                         "Va !"};
  const SentenceGroups g = group_by_source(kSources, 4, false);
  // 13a tokens: 4, 4, 10, 2 → width 5: bucket 0-5 holds lines 0, 1, 3; bucket 6-10 line 2
  const TranslationScores s = score_translations(g, hyps, {kRefs}, kSources, 5);
  ASSERT_EQ(s.by_length.size(), 2u);
  EXPECT_EQ(s.by_length[0].from, 0);
  EXPECT_EQ(s.by_length[0].to, 5);
  EXPECT_EQ(s.by_length[0].sentences, 3u);
  EXPECT_EQ(s.by_length[1].from, 6);
  EXPECT_EQ(s.by_length[1].to, 10);
  EXPECT_EQ(s.by_length[1].sentences, 1u);
  EXPECT_DOUBLE_EQ(s.by_length[1].bleu.score, text::corpus_bleu_by_sentence({hyps[2]}, {{kRefs[2]}}).score);
  EXPECT_DOUBLE_EQ(s.by_length[0].chrf.score,
                   text::corpus_chrf_by_sentence({hyps[0], hyps[1], hyps[3]}, {{kRefs[0]}, {kRefs[1]}, {kRefs[3]}}).score);
  // a width of 20 puts everything in one bucket, 0-20
  const TranslationScores wide = score_translations(g, hyps, {kRefs}, kSources, 20);
  ASSERT_EQ(wide.by_length.size(), 1u);
  EXPECT_EQ(wide.by_length[0].sentences, 4u);
}

TEST(TranslationScores, MismatchedInputsAreClearErrors) {
  const SentenceGroups g = group_by_source(kSources, 4, false);
  EXPECT_NE(testing::error_of([&] { score_translations(g, {"a"}, {kRefs}); }).find("1 translations for 4 sentences"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { score_translations(g, kRefs, {{"a"}}); }).find("reference stream 1 has 1 lines"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { score_translations(g, kRefs, {}); }).find("no references"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { score_translations(g, kRefs, {kRefs}, {}, 5); }).find("need the 4 source lines"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { group_by_source({"a"}, 4, true); }).find("1 sources for 4 lines"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::eval
