// Captioned scenes (issue 24): the data a captioner with attention learns from, made here because
// no captioned image set can be downloaded. A scene is a canvas of grid × grid cells with 1–4 real
// Fashion-MNIST items in distinct cells (each jittered inside its cell), and a caption written from
// the layout by a small grammar:
//
//   1 item:   "a sneaker in the top left", "a bag on the right"
//   2 items:  "a bag above and to the left of a coat"
//   3 items:  "a pair of trousers to the left of a sandal and a dress at the bottom"
//   4 items:  "a tee above a shirt and a boot to the left of a pullover"
//
// The items are named in reading order (top row first, left to right; a clause joins the first two,
// the next clause or position phrase the rest), so the caption is a function of the picture: one
// right answer, which a model can be scored against word for word.
//
// Every word that names an item ("sneaker", "trousers", …) carries that item's bounding box: the
// ground truth for where the captioner's attention should go when it writes the word.
//
// Composition, not memory: a relation clause ("X above Y") joins two classes. Five class pairs are
// held out for validation and five others for test; a training scene never joins a held-out pair in
// a clause, and every validation or test scene joins one of its split's pairs. Training scenes take
// their items from Fashion-MNIST's training images; validation from the first half of its test
// images, test from the second half. Scene `index` of a split is a pure function of (seed, split,
// index): the same scene on every machine and at every thread count, none of them stored.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/vision/dataset.h"

namespace qkv::vision {

enum class SceneSplit { train, val, test };
SceneSplit scene_split_from_name(const std::string& name);  // "train", "val", "test"
const char* scene_split_name(SceneSplit split);

struct SceneOptions {
  int64_t grid = 3;       // grid × grid cells
  int64_t cell = 32;      // cell side in pixels (≥ the item side, 28); canvas = grid · cell square
  int64_t min_items = 1;  // items per scene: uniform in [min_items, max_items] (validation and test
  int64_t max_items = 4;  //   scenes have at least 2: their clause needs a pair)
  uint64_t seed = 1;
};

// A half-open pixel rectangle [x0, x1) × [y0, y1) (x = column, y = row).
struct Box {
  int64_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int64_t area() const { return (x1 - x0) * (y1 - y0); }
  bool operator==(const Box&) const = default;
};

struct SceneItem {
  int32_t label = 0;         // Fashion-MNIST class, 0 … 9
  int64_t row = 0, col = 0;  // its grid cell
  int64_t source = 0;        // index of the item image in the split's Fashion-MNIST set
  Box box;                   // the tight box of its non-zero pixels on the canvas
};

struct Scene {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;      // [height, width], 0 = background
  std::vector<SceneItem> items;
  std::vector<std::string> words;   // the caption, word by word
  std::vector<int32_t> word_item;   // [words.size()]: the item a word names, or −1
  std::string caption() const;      // the words joined by single spaces
};

// The caption's name for each class ("tee", "trousers", …; "pair of trousers" is the only plural)
// and the row/column words of an item's cell.
const std::array<const char*, 10>& scene_class_words();

class SceneGenerator {
 public:
  // `train_items`: Fashion-MNIST's training images; `test_items`: its test images (any ImageSets of
  // one-channel items no larger than a cell, with every class 0 … 9 among the training images and in
  // each half of the test images). The generator borrows both: they must outlive it.
  SceneGenerator(const ImageSet& train_items, const ImageSet& test_items, const SceneOptions& options = {});

  Scene generate(SceneSplit split, int64_t index) const;

  const SceneOptions& options() const { return options_; }
  int64_t canvas_size() const { return options_.grid * options_.cell; }

  // The class pairs (unordered, smaller label first) a clause may not join in training.
  static const std::vector<std::array<int32_t, 2>>& held_out_pairs(SceneSplit split);
  static bool is_held_out(int32_t a, int32_t b, SceneSplit split);

 private:
  const ImageSet& images(SceneSplit split) const;

  const ImageSet& train_;
  const ImageSet& test_;
  SceneOptions options_;
  // by_class_[split][label]: the indices of that split's item images of that class
  std::array<std::array<std::vector<int64_t>, 10>, 3> by_class_;
};

}  // namespace qkv::vision
