// The figures a captioner of captioned scenes (vision/scenes.h) is judged by, as training's
// evaluation, `qkv eval` / `qkv caption --score` and the tests report them (the evaluation floor,
// beside decode): corpus BLEU-1…4 and exact match against the scenes' own captions, and
// attention correctness.
//
// Attention correctness (Liu et al. 2017, "Attention Correctness in Neural Image Captioning"):
// for every generated word that names an item class present in the scene, the share of that step's
// attention mass inside the boxes of the scene's items of that class — each grid cell's weight
// spread evenly over the pixels the cell covers. A uniform attention would put area(boxes) / area
// (canvas) there: the baseline it is reported against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/decode/caption.h"
#include "qkv/ops/tensor.h"
#include "qkv/text/bleu.h"
#include "qkv/vision/scenes.h"

namespace qkv::eval {

// The figures of a set of captioned scenes.
struct CaptionScores {
  int64_t scenes = 0;
  text::BleuScore bleu;  // corpus BLEU against the scenes' captions (bleu.bleu_n(1 … 4))
  double exact = 0;      // share of captions equal to the scene's own
  // attention correctness over the generated words that name a class present in their scene
  int64_t named_words = 0;         // such words
  int64_t unseen_words = 0;        // generated class words whose class is not in the scene
  double attention_in_box = 0;     // mean attention mass inside the named items' boxes
  double uniform_in_box = 0;       // the same for a uniform attention (area share)
  bool has_attention = false;      // false: a model without attention (the two figures are 0)
  // Which step looks at the item (issue 49): for the same class words, the mass inside the box at
  // the step before the word (computed while writing the word before it), at the word's own step
  // (attention_in_box), at the step after (while writing the next word), and the largest over the
  // steps of the word's noun phrase ("a … pair of trousers": a, pair, of, trousers). Attention
  // α_t is computed from the decoder state before word t is written and feeds word t's output; it
  // is drawn and scored under word t.
  struct ByStep {
    int64_t words = 0;
    double before = 0, own = 0, after = 0, phrase = 0;  // means over `words`
  };
  ByStep by_step;                 // every named class word
  std::vector<ByStep> by_class;   // the same per class (vision::scene_class_words() order)
  std::vector<decode::Caption> captions;
};

// The first word of the noun phrase that ends at caption word `t` ("a" of "a pair of trousers"):
// the nearest "a" among the three words before t (t itself when none).
size_t noun_phrase_start(const std::vector<std::string>& words, size_t t);

// The class a caption word names (−1: none): the scene grammar's class words ("sneaker", …).
int32_t class_of_word(const std::string& word);

// The attention mass inside `boxes` of weights [rows, cols] spread over a height × width canvas.
double mass_in_boxes(const std::vector<float>& weights, int64_t rows, int64_t cols, int64_t height, int64_t width,
                     const std::vector<vision::Box>& boxes);

// A batch of scenes as the model takes them: f32 [N, 1, H, W], pixels / 255.
Tensor scene_images(const std::vector<vision::Scene>& scenes);

// Captions scenes first … first + count − 1 of `split` and scores them.
CaptionScores score_captions(const decode::ImageCaptioner& captioner, const vision::SceneGenerator& scenes,
                             vision::SceneSplit split, int64_t first, int64_t count,
                             const decode::CaptionOptions& opt);

}  // namespace qkv::eval
