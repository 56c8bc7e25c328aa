#include "qkv/vision/scenes.h"

#include <algorithm>
#include <numeric>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"

namespace qkv::vision {

namespace {

constexpr int kClasses = 10;

// The draws of one scene: a counter-based stream keyed by (seed, split), starting at the scene's
// own block of counters, so scene i never depends on scenes before it.
struct Draws {
  uint64_t key, counter;
  uint64_t bits() { return Generator::bits(key, counter++); }
  int64_t below(int64_t n) { return static_cast<int64_t>(bits() % static_cast<uint64_t>(n)); }
};

int split_id(SceneSplit s) { return static_cast<int>(s); }

// The words of a noun phrase for an item: "a sneaker", "a pair of trousers"; the class word is the
// one that names the item.
void noun_phrase(int32_t label, int32_t item, Scene& scene) {
  auto word = [&](const char* w, int32_t names) {
    scene.words.emplace_back(w);
    scene.word_item.push_back(names);
  };
  word("a", -1);
  if (label == 1) {
    word("pair", -1);
    word("of", -1);
  }
  word(scene_class_words()[label], item);
}

// "above", "to the left of", "below and to the right of": where item a is seen from item b.
void relation(const SceneItem& a, const SceneItem& b, Scene& scene) {
  auto word = [&](const char* w) {
    scene.words.emplace_back(w);
    scene.word_item.push_back(-1);
  };
  if (a.row != b.row) word(a.row < b.row ? "above" : "below");
  if (a.row != b.row && a.col != b.col) word("and");
  if (a.col != b.col) {
    for (const char* w : {"to", "the", a.col < b.col ? "left" : "right", "of"}) word(w);
  }
}

// "in the top left", "in the middle", "at the top", "on the left": an item's cell (grid 2 has no middle).
void position(const SceneItem& it, int64_t grid, Scene& scene) {
  auto word = [&](const char* w) {
    scene.words.emplace_back(w);
    scene.word_item.push_back(-1);
  };
  const bool mid_row = grid == 3 && it.row == 1, mid_col = grid == 3 && it.col == 1;
  word(mid_row == mid_col ? "in" : mid_row ? "on" : "at");
  word("the");
  if (mid_row && mid_col) return word("middle");
  if (!mid_row) word(it.row == 0 ? "top" : "bottom");
  if (!mid_col) word(it.col == 0 ? "left" : "right");
}

}  // namespace

SceneSplit scene_split_from_name(const std::string& name) {
  if (name == "train") return SceneSplit::train;
  if (name == "val") return SceneSplit::val;
  if (name == "test") return SceneSplit::test;
  throw Error(detail::concat("captioned scenes have the splits \"train\", \"val\" and \"test\", not \"", name, "\""));
}

const char* scene_split_name(SceneSplit split) {
  static const char* names[] = {"train", "val", "test"};
  return names[split_id(split)];
}

const std::array<const char*, 10>& scene_class_words() {
  static const std::array<const char*, 10> words = {"tee",   "trousers", "pullover", "dress", "coat",
                                                    "sandal", "shirt",    "sneaker",  "bag",   "boot"};
  return words;
}

std::string Scene::caption() const {
  std::string s;
  for (const std::string& w : words) {
    if (!s.empty()) s += ' ';
    s += w;
  }
  return s;
}

const std::vector<std::array<int32_t, 2>>& SceneGenerator::held_out_pairs(SceneSplit split) {
  // Each class appears once in each list; no pair is in both.
  static const std::vector<std::array<int32_t, 2>> none, val = {{0, 8}, {1, 5}, {2, 9}, {3, 6}, {4, 7}},
                                                         test = {{0, 7}, {1, 8}, {2, 5}, {3, 9}, {4, 6}};
  return split == SceneSplit::val ? val : split == SceneSplit::test ? test : none;
}

bool SceneGenerator::is_held_out(int32_t a, int32_t b, SceneSplit split) {
  const std::array<int32_t, 2> p = {std::min(a, b), std::max(a, b)};
  const auto& pairs = held_out_pairs(split);
  return std::find(pairs.begin(), pairs.end(), p) != pairs.end();
}

SceneGenerator::SceneGenerator(const ImageSet& train_items, const ImageSet& test_items, const SceneOptions& options)
    : train_(train_items), test_(test_items), options_(options) {
  const SceneOptions& o = options_;
  QKV_CHECK(o.grid == 2 || o.grid == 3, "captioned scenes: grid must be 2 or 3 (the caption names rows and "
            "columns as top/middle/bottom and left/middle/right), got ", o.grid);
  QKV_CHECK(o.min_items >= 1 && o.min_items <= o.max_items && o.max_items <= 4 && o.max_items >= 2 &&
                o.max_items <= o.grid * o.grid,
            "captioned scenes: items per scene must satisfy 1 ≤ min_items ≤ max_items ≤ 4 with max_items ≥ 2 "
            "and at most grid² = ", o.grid * o.grid, "; got ", o.min_items, " … ", o.max_items);
  for (const ImageSet* set : {&train_, &test_}) {
    QKV_CHECK(set->channels == 1 && set->height > 0 && set->width > 0 && set->height <= o.cell &&
                  set->width <= o.cell && o.cell <= 1024,
              "captioned scenes: item images must have one channel and fit a cell of ", o.cell,
              " pixels (at most 1024); got ", set->channels, "×", set->height, "×", set->width);
  }
  const int64_t half = test_.size() / 2;
  const std::array<std::pair<int64_t, int64_t>, 3> ranges = {
      std::pair<int64_t, int64_t>{0, train_.size()}, {0, half}, {half, test_.size()}};
  for (int s = 0; s < 3; ++s) {
    const ImageSet& set = s == 0 ? train_ : test_;
    for (int64_t i = ranges[s].first; i < ranges[s].second; ++i) {
      const int32_t label = set.labels[static_cast<size_t>(i)];
      QKV_CHECK(label >= 0 && label < kClasses, "captioned scenes: item image ", i, " has label ", label,
                ", not a Fashion-MNIST class (0 … 9)");
      by_class_[s][label].push_back(i);
    }
    for (int c = 0; c < kClasses; ++c)
      QKV_CHECK(!by_class_[s][c].empty(), "captioned scenes: the ", scene_split_name(static_cast<SceneSplit>(s)),
                " split's item images have no ", scene_class_words()[c], " (class ", c, ")");
  }
}

const ImageSet& SceneGenerator::images(SceneSplit split) const {
  return split == SceneSplit::train ? train_ : test_;
}

Scene SceneGenerator::generate(SceneSplit split, int64_t index) const {
  QKV_CHECK(index >= 0 && index < (int64_t{1} << 40), "captioned scenes: scene index ", index, " out of range");
  const SceneOptions& o = options_;
  const int s = split_id(split);
  Draws d{Generator::bits(o.seed, 0x5CE9E0 + s), static_cast<uint64_t>(index) << 20};
  const bool train = split == SceneSplit::train;

  // How many items, and their classes in caption order. Clauses join items (0, 1) and (2, 3).
  const int64_t lo = train ? o.min_items : std::max<int64_t>(2, o.min_items);
  const int64_t n = lo + d.below(o.max_items - lo + 1);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (auto& l : labels) l = static_cast<int32_t>(d.below(kClasses));
  auto held_anywhere = [](int32_t a, int32_t b) {
    return is_held_out(a, b, SceneSplit::val) || is_held_out(a, b, SceneSplit::test);
  };
  if (!train) {  // the first clause joins one of this split's held-out pairs, in either order
    const auto& pair = held_out_pairs(split)[static_cast<size_t>(d.below(5))];
    const int64_t first = d.below(2);
    labels[0] = pair[first];
    labels[1] = pair[1 - first];
  }
  for (int64_t c = train ? 0 : 2; c + 1 < n; c += 2)  // every other clause joins a pair no split holds out
    while (held_anywhere(labels[c], labels[c + 1])) labels[c + 1] = static_cast<int32_t>(d.below(kClasses));

  // Distinct cells (a partial Fisher–Yates shuffle) taken in reading order — item i is the i-th in
  // reading order, so the caption is a function of the picture: the words say the items top row
  // first, left to right — then a random image of each class and a jitter in its cell.
  std::vector<int64_t> cells(static_cast<size_t>(o.grid * o.grid));
  std::iota(cells.begin(), cells.end(), 0);
  for (int64_t i = 0; i < n; ++i) std::swap(cells[i], cells[i + d.below(static_cast<int64_t>(cells.size()) - i)]);
  std::sort(cells.begin(), cells.begin() + n);
  const ImageSet& set = images(split);
  const int64_t h = set.height, w = set.width;
  Scene scene;
  scene.height = scene.width = canvas_size();
  scene.pixels.assign(static_cast<size_t>(scene.height * scene.width), 0);
  for (int64_t i = 0; i < n; ++i) {
    SceneItem it;
    it.label = labels[i];
    it.row = cells[i] / o.grid;
    it.col = cells[i] % o.grid;
    const auto& pool = by_class_[s][it.label];
    it.source = pool[static_cast<size_t>(d.below(static_cast<int64_t>(pool.size())))];
    const int64_t y0 = it.row * o.cell + d.below(o.cell - h + 1), x0 = it.col * o.cell + d.below(o.cell - w + 1);
    // Paste the item and find the tight box of its non-zero pixels (the whole placement if it has none).
    const uint8_t* src = set.pixels.data() + it.source * h * w;
    Box box{x0 + w, y0 + h, x0, y0};
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const uint8_t v = src[y * w + x];
        scene.pixels[static_cast<size_t>((y0 + y) * scene.width + x0 + x)] = v;
        if (v) box = {std::min(box.x0, x0 + x), std::min(box.y0, y0 + y), std::max(box.x1, x0 + x + 1),
                      std::max(box.y1, y0 + y + 1)};
      }
    it.box = box.x0 < box.x1 ? box : Box{x0, y0, x0 + w, y0 + h};
    scene.items.push_back(it);
  }

  // The caption.
  const auto& items = scene.items;
  auto clause = [&](int32_t a, int32_t b) {
    noun_phrase(items[a].label, a, scene);
    relation(items[a], items[b], scene);
    noun_phrase(items[b].label, b, scene);
  };
  if (n == 1) {
    noun_phrase(items[0].label, 0, scene);
    position(items[0], o.grid, scene);
    return scene;
  }
  clause(0, 1);
  if (n >= 3) {
    scene.words.emplace_back("and");
    scene.word_item.push_back(-1);
    if (n == 4) {
      clause(2, 3);
    } else {
      noun_phrase(items[2].label, 2, scene);
      position(items[2], o.grid, scene);
    }
  }
  return scene;
}

}  // namespace qkv::vision
