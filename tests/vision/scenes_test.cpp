// The captioned-scenes generator (issue 24): deterministic for a seed, boxes that match the pixels
// it drew, captions that say where the items are, and splits that hold out class pairs.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "qkv/core/error.h"
#include "qkv/vision/scenes.h"
#include "testing.h"

namespace qkv::vision {
namespace {

// `n` 28×28 items with labels i % 10; item i is a filled rectangle whose margins and value depend on
// i, so the tight box of each is known and no two items look alike.
ImageSet items(int64_t n, int64_t side = 28) {
  ImageSet s;
  s.height = s.width = side;
  s.pixels.assign(static_cast<size_t>(n * side * side), 0);
  for (int64_t i = 0; i < n; ++i) {
    s.labels.push_back(static_cast<int32_t>(i % 10));
    for (int64_t y = 1 + i % 3; y < side - 2 - i % 4; ++y)
      for (int64_t x = 2 + i % 5; x < side - 1 - i % 2; ++x)
        s.pixels[static_cast<size_t>((i * side + y) * side + x)] = static_cast<uint8_t>(1 + (i * 37) % 255);
  }
  return s;
}

struct Fixture {
  ImageSet train = items(40), test = items(40);
  SceneGenerator gen{train, test};
};

TEST(Scenes, AreAFunctionOfSeedSplitAndIndex) {
  Fixture f;
  ImageSet train2 = items(40), test2 = items(40);
  SceneGenerator again(train2, test2);
  SceneOptions other;
  other.seed = 2;
  SceneGenerator reseeded(f.train, f.test, other);
  int differ_index = 0, differ_seed = 0;
  for (SceneSplit split : {SceneSplit::train, SceneSplit::val, SceneSplit::test})
    for (int64_t i = 0; i < 50; ++i) {
      const Scene a = f.gen.generate(split, i), b = again.generate(split, i);
      EXPECT_EQ(a.pixels, b.pixels);
      EXPECT_EQ(a.words, b.words);
      // the generator keeps no state: asking out of order gives the same scene
      EXPECT_EQ(f.gen.generate(split, 49 - i).caption(), again.generate(split, 49 - i).caption());
      differ_index += a.pixels != f.gen.generate(split, i + 1).pixels;
      differ_seed += a.pixels != reseeded.generate(split, i).pixels;
    }
  EXPECT_EQ(differ_index, 150);
  EXPECT_EQ(differ_seed, 150);
}

TEST(Scenes, BoxesMatchThePixelsDrawn) {
  Fixture f;
  const int64_t cell = f.gen.options().cell, side = f.gen.canvas_size();
  for (SceneSplit split : {SceneSplit::train, SceneSplit::val, SceneSplit::test})
    for (int64_t i = 0; i < 200; ++i) {
      const Scene s = f.gen.generate(split, i);
      ASSERT_EQ(s.height, side);
      ASSERT_EQ(s.pixels.size(), static_cast<size_t>(side * side));
      std::set<int64_t> cells;
      std::vector<int64_t> covered(s.pixels.size(), 0);
      for (const SceneItem& it : s.items) {
        EXPECT_TRUE(cells.insert(it.row * 3 + it.col).second) << "two items in one cell";
        // the box lies in the item's cell, and the pixels inside are the source image's non-zero ones
        EXPECT_GE(it.box.x0, it.col * cell);
        EXPECT_LE(it.box.x1, (it.col + 1) * cell);
        EXPECT_GE(it.box.y0, it.row * cell);
        EXPECT_LE(it.box.y1, (it.row + 1) * cell);
        const ImageSet& src = split == SceneSplit::train ? f.train : f.test;
        EXPECT_EQ(src.labels[static_cast<size_t>(it.source)], it.label);
        int64_t nonzero = 0;
        for (int64_t p = 0; p < 28 * 28; ++p) nonzero += src.pixels[static_cast<size_t>(it.source * 784 + p)] != 0;
        int64_t inside = 0;
        for (int64_t y = it.box.y0; y < it.box.y1; ++y)
          for (int64_t x = it.box.x0; x < it.box.x1; ++x) {
            inside += s.pixels[static_cast<size_t>(y * side + x)] != 0;
            covered[static_cast<size_t>(y * side + x)] = 1;
          }
        EXPECT_EQ(inside, nonzero);
        // tight: every edge row and column of the box holds a drawn pixel (the items are rectangles)
        EXPECT_NE(s.pixels[static_cast<size_t>(it.box.y0 * side + it.box.x0)], 0);
        EXPECT_NE(s.pixels[static_cast<size_t>((it.box.y1 - 1) * side + it.box.x1 - 1)], 0);
      }
      for (size_t p = 0; p < s.pixels.size(); ++p)
        if (s.pixels[p]) {
          ASSERT_TRUE(covered[p]) << "a drawn pixel outside every box";
        }
    }
}

// Where item a is seen from item b, as the caption should say it.
std::string expected_relation(const SceneItem& a, const SceneItem& b) {
  std::string r;
  if (a.row < b.row) r = "above";
  if (a.row > b.row) r = "below";
  if (a.row != b.row && a.col != b.col) r += " and ";
  if (a.col < b.col) r += "to the left of";
  if (a.col > b.col) r += "to the right of";
  return r;
}

std::string noun(const SceneItem& it) {
  return std::string(it.label == 1 ? "a pair of " : "a ") + scene_class_words()[it.label];
}

std::string where(const SceneItem& it) {
  static const char* names[3][3] = {{"in the top left", "at the top", "in the top right"},
                                    {"on the left", "in the middle", "on the right"},
                                    {"in the bottom left", "at the bottom", "in the bottom right"}};
  return names[it.row][it.col];
}

TEST(Scenes, CaptionsSayWhereTheItemsAre) {
  Fixture f;
  std::map<size_t, int> counts;
  std::set<std::string> relations;
  for (int64_t i = 0; i < 400; ++i) {
    const Scene s = f.gen.generate(SceneSplit::train, i);
    const auto& it = s.items;
    ++counts[it.size()];
    std::string want;
    if (it.size() == 1) want = noun(it[0]) + " " + where(it[0]);
    if (it.size() >= 2) want = noun(it[0]) + " " + expected_relation(it[0], it[1]) + " " + noun(it[1]);
    if (it.size() == 3) want += " and " + noun(it[2]) + " " + where(it[2]);
    if (it.size() == 4) want += " and " + noun(it[2]) + " " + expected_relation(it[2], it[3]) + " " + noun(it[3]);
    ASSERT_EQ(s.caption(), want);
    if (it.size() >= 2) relations.insert(expected_relation(it[0], it[1]));
    // each item is named by exactly one word, its class word
    ASSERT_EQ(s.word_item.size(), s.words.size());
    std::vector<int> named(it.size(), 0);
    for (size_t w = 0; w < s.words.size(); ++w)
      if (s.word_item[w] >= 0) {
        ++named[static_cast<size_t>(s.word_item[w])];
        EXPECT_EQ(s.words[w], scene_class_words()[it[static_cast<size_t>(s.word_item[w])].label]);
      }
    for (int c : named) EXPECT_EQ(c, 1);
  }
  for (size_t n = 1; n <= 4; ++n) EXPECT_GT(counts[n], 60) << n << " items";
  // in reading order the first item is above or left of the second: the left side, the top side and
  // the two upper diagonals
  EXPECT_EQ(relations.size(), 4u);
}

// The caption is a function of the picture: items come in reading order, so a clause's first item
// is never below or on the same row to the right of its second.
TEST(Scenes, ItemsAreNamedInReadingOrder) {
  Fixture f;
  for (SceneSplit split : {SceneSplit::train, SceneSplit::val, SceneSplit::test})
    for (int64_t i = 0; i < 300; ++i) {
      const Scene s = f.gen.generate(split, i);
      for (size_t k = 1; k < s.items.size(); ++k)
        EXPECT_LT(s.items[k - 1].row * 3 + s.items[k - 1].col, s.items[k].row * 3 + s.items[k].col) << s.caption();
      EXPECT_EQ(s.caption().find("below"), std::string::npos) << s.caption();
    }
}

TEST(Scenes, TestSplitsHoldOutClassPairs) {
  Fixture f;
  auto clauses = [](const Scene& s) {
    std::vector<std::pair<int32_t, int32_t>> c;
    if (s.items.size() >= 2) c.push_back({s.items[0].label, s.items[1].label});
    if (s.items.size() == 4) c.push_back({s.items[2].label, s.items[3].label});
    return c;
  };
  std::set<std::pair<int32_t, int32_t>> seen_train;
  for (int64_t i = 0; i < 3000; ++i)
    for (auto [a, b] : clauses(f.gen.generate(SceneSplit::train, i))) {
      ASSERT_FALSE(SceneGenerator::is_held_out(a, b, SceneSplit::val));
      ASSERT_FALSE(SceneGenerator::is_held_out(a, b, SceneSplit::test));
      seen_train.insert({std::min(a, b), std::max(a, b)});
    }
  EXPECT_EQ(seen_train.size(), 45u - 10u + 10u /* same-class pairs */);
  for (SceneSplit split : {SceneSplit::val, SceneSplit::test}) {
    std::set<std::pair<int32_t, int32_t>> forced;
    for (int64_t i = 0; i < 300; ++i) {
      const Scene s = f.gen.generate(split, i);
      ASSERT_GE(s.items.size(), 2u);
      const auto c = clauses(s);
      ASSERT_TRUE(SceneGenerator::is_held_out(c[0].first, c[0].second, split));
      forced.insert({std::min(c[0].first, c[0].second), std::max(c[0].first, c[0].second)});
      if (c.size() == 2) {
        EXPECT_FALSE(SceneGenerator::is_held_out(c[1].first, c[1].second, split));
      }
      for (const SceneItem& it : s.items)  // validation from the first half of the test images, test the second
        EXPECT_EQ(it.source >= 20, split == SceneSplit::test);
    }
    EXPECT_EQ(forced.size(), 5u);
  }
}

TEST(Scenes, BadSetupsAreClearErrors) {
  ImageSet train = items(40), test = items(40), big = items(40, 40), few = items(9);
  SceneOptions grid4;
  grid4.grid = 4;
  EXPECT_NE(testing::error_of([&] { SceneGenerator g(train, test, grid4); }).find("grid must be 2 or 3"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { SceneGenerator g(big, test); }).find("fit a cell of 32"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { SceneGenerator g(few, test); }).find("no boot (class 9)"), std::string::npos);
  SceneOptions five;
  five.max_items = 5;
  EXPECT_NE(testing::error_of([&] { SceneGenerator g(train, test, five); }).find("max_items"), std::string::npos);
  EXPECT_NE(testing::error_of([] { scene_split_from_name("dev"); }).find("not \"dev\""), std::string::npos);
  SceneGenerator g(train, test);
  EXPECT_NE(testing::error_of([&] { g.generate(SceneSplit::train, -1); }).find("out of range"), std::string::npos);
}

}  // namespace
}  // namespace qkv::vision
