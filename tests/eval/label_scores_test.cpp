// Label scores (eval/label_scores.h) against what seqeval and scikit-learn give for the same labels
// (the values below printed by seqeval 1.2.2's get_entities / precision_score / recall_score /
// f1_score and sklearn.metrics.f1_score(average="macro")).
#include <gtest/gtest.h>

#include "qkv/eval/label_scores.h"

namespace qkv::eval::label_scores_test {  // (its own: the test files of a folder compile as one unit)
namespace {

using Chunk = std::tuple<std::string, size_t, size_t>;

TEST(LabelScores, EntitiesAreSeqevalsChunks) {
  // seqeval.metrics.sequence_labeling.get_entities of the same tags
  EXPECT_EQ(entities({"I-PER", "I-PER", "B-LOC", "I-ORG", "O", "E-X", "S-Y", "I-Y", "PER"}),
            (std::vector<Chunk>{
                {"PER", 0, 1}, {"LOC", 2, 2}, {"ORG", 3, 3}, {"X", 5, 5}, {"Y", 6, 6}, {"Y", 7, 7}, {"ER", 8, 8}}));
  EXPECT_EQ(entities({"O", "O"}), std::vector<Chunk>{});
  EXPECT_EQ(entities({}), std::vector<Chunk>{});
  EXPECT_EQ(entities({"B-A", "I-A", "I-A"}), (std::vector<Chunk>{{"A", 0, 2}}));
}

TEST(LabelScores, EntityScoresAreSeqevals) {
  // seqeval's README example: precision, recall and F1 all 0.5
  const EntityScores s =
      entity_scores({{"O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"}, {"B-PER", "I-PER", "O"}},
                    {{"O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"}, {"B-PER", "I-PER", "O"}});
  EXPECT_EQ(s.true_entities, 2);
  EXPECT_EQ(s.predicted, 2);
  EXPECT_EQ(s.correct, 1);
  EXPECT_DOUBLE_EQ(s.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.f1, 0.5);
  const EntityScores none = entity_scores({{"O"}}, {{"O"}});
  EXPECT_EQ(none.f1, 0.0);
}

TEST(LabelScores, MacroF1IsScikitLearns) {
  // f1_score([0, 1, 2, 0, 1], [0, 2, 1, 0, 0], average="macro") = 0.2666…; a fourth label neither seen
  // nor predicted is not one of its labels
  LabelCounts c(4);
  const size_t truth[] = {0, 1, 2, 0, 1}, predicted[] = {0, 2, 1, 0, 0};
  for (int i = 0; i < 5; ++i) c.add(predicted[i], truth[i]);
  EXPECT_NEAR(c.macro_f1(), 0.26666666666666666, 1e-15);
  EXPECT_EQ(LabelCounts(3).macro_f1(), 0.0);
}

}  // namespace
}  // namespace qkv::eval::label_scores_test
