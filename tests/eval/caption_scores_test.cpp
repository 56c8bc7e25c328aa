// The captioning figures (eval/caption_scores.h): attention mass inside boxes against its
// definition, the grammar's class words, and where a class word's noun phrase starts. (The figures
// of a whole evaluation are checked through the captioning task: tests/train/caption_task_test.cpp.)
#include "qkv/eval/caption_scores.h"

#include <gtest/gtest.h>

#include "qkv/core/error.h"

namespace qkv::eval {
namespace {

TEST(CaptionScores, AttentionMassInBoxesFollowsItsDefinition) {
  // a 2×2 grid over an 8×8 canvas: cells of 4×4 pixels
  const std::vector<float> uniform(4, 0.25f);
  const vision::Box left{0, 0, 4, 8}, quarter{0, 0, 2, 2}, centre{2, 2, 6, 6};
  EXPECT_DOUBLE_EQ(mass_in_boxes(uniform, 2, 2, 8, 8, {left}), 0.5);             // the area share
  EXPECT_DOUBLE_EQ(mass_in_boxes({1, 0, 0, 0}, 2, 2, 8, 8, {left}), 1.0);        // all of it inside
  EXPECT_DOUBLE_EQ(mass_in_boxes({0, 1, 0, 0}, 2, 2, 8, 8, {left}), 0.0);        // all of it outside
  EXPECT_DOUBLE_EQ(mass_in_boxes({1, 0, 0, 0}, 2, 2, 8, 8, {quarter}), 0.25);    // 4 of the cell's 16 pixels
  EXPECT_DOUBLE_EQ(mass_in_boxes(uniform, 2, 2, 8, 8, {centre}), 16.0 / 64);
  EXPECT_DOUBLE_EQ(mass_in_boxes(uniform, 2, 2, 8, 8, {left, left, quarter}), 0.5);  // a pixel counts once
  EXPECT_THROW(mass_in_boxes({1, 0, 0}, 2, 2, 8, 8, {left}), Error);
}

TEST(CaptionScores, ClassWordsAreTheGrammarsNames) {
  EXPECT_EQ(class_of_word("tee"), 0);
  EXPECT_EQ(class_of_word("trousers"), 1);
  EXPECT_EQ(class_of_word("boot"), 9);
  EXPECT_EQ(class_of_word("pair"), -1);
  EXPECT_EQ(class_of_word("left"), -1);
  EXPECT_EQ(class_of_word("Boot"), -1);
}

// A class word's noun phrase starts at its "a": "a bag" one word back, "a pair of trousers" three.
TEST(CaptionScores, NounPhrasesStartAtTheirArticle) {
  const std::vector<std::string> w = {"a", "pair", "of", "trousers", "to", "the", "left", "of", "a", "bag"};
  EXPECT_EQ(noun_phrase_start(w, 3), 0u);
  EXPECT_EQ(noun_phrase_start(w, 9), 8u);
  EXPECT_EQ(noun_phrase_start(w, 0), 0u);                              // no word before: itself
  EXPECT_EQ(noun_phrase_start({"to", "the", "left", "of", "bag"}, 4), 4u);  // no "a" within three words
}

}  // namespace
}  // namespace qkv::eval
