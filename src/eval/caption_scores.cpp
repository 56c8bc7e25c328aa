#include "qkv/eval/caption_scores.h"

#include <algorithm>

#include "qkv/core/error.h"
#include "qkv/ops.h"

namespace qkv::eval {

int32_t class_of_word(const std::string& word) {
  const auto& words = vision::scene_class_words();
  for (size_t c = 0; c < words.size(); ++c)
    if (word == words[c]) return static_cast<int32_t>(c);
  return -1;
}

size_t noun_phrase_start(const std::vector<std::string>& words, size_t t) {
  // the grammar's phrases are "a CLASS" and "a pair of CLASS": look back three words at most
  for (size_t u = std::min(t, words.size()); u-- > 0 && u + 3 >= t;)  // t − 1 … t − 3
    if (words[u] == "a") return u;
  return t;
}

double mass_in_boxes(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t height, int64_t width,
                     const std::vector<vision::Box>& boxes) {
  QKV_CHECK(rows > 0 && cols > 0 && height > 0 && width > 0 && w.size() == static_cast<size_t>(rows * cols),
            "attention mass: ", w.size(), " weights for a ", rows, "×", cols, " grid");
  // Cell (r, c) covers rows [r·H/rows, (r+1)·H/rows) and the like (integer cuts, as the pixels
  // split when H is not a multiple); its weight spreads evenly over its pixels. A pixel counts once
  // however many boxes hold it.
  double mass = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y0 = r * height / rows, y1 = (r + 1) * height / rows;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t x0 = c * width / cols, x1 = (c + 1) * width / cols;
      const int64_t area = (y1 - y0) * (x1 - x0);
      if (area == 0) continue;
      int64_t inside = 0;
      for (int64_t y = y0; y < y1; ++y)
        for (int64_t x = x0; x < x1; ++x)
          inside += std::any_of(boxes.begin(), boxes.end(),
                                [&](const vision::Box& b) { return x >= b.x0 && x < b.x1 && y >= b.y0 && y < b.y1; });
      mass += static_cast<double>(w[static_cast<size_t>(r * cols + c)]) * static_cast<double>(inside) /
              static_cast<double>(area);
    }
  }
  return mass;
}

Tensor scene_images(const std::vector<vision::Scene>& scenes) {
  QKV_CHECK(!scenes.empty(), "scene_images: no scenes");
  const int64_t H = scenes[0].height, W = scenes[0].width, N = static_cast<int64_t>(scenes.size());
  Tensor x = Tensor::empty({N, 1, H, W});
  float* p = x.data<float>();
  for (const vision::Scene& s : scenes) {
    QKV_CHECK(s.height == H && s.width == W, "scene_images: scenes of different sizes");
    for (uint8_t v : s.pixels) *p++ = static_cast<float>(v) / 255.f;
  }
  return x;
}

CaptionScores score_captions(const decode::ImageCaptioner& captioner, const vision::SceneGenerator& gen,
                             vision::SceneSplit split, int64_t first, int64_t count, const decode::CaptionOptions& opt) {
  QKV_CHECK(count > 0, "score_captions: no scenes");
  const models::ImageShape shape = captioner.image_shape();
  QKV_CHECK(shape.channels == 1 && shape.height == gen.canvas_size() && shape.width == gen.canvas_size(),
            "captions: the model takes ", shape.channels, "×", shape.height, "×", shape.width, " images, the scenes are 1×",
            gen.canvas_size(), "×", gen.canvas_size());
  CaptionScores s;
  s.scenes = count;
  std::vector<std::string> hyps, refs;
  int64_t exact = 0;
  double in_box = 0, uniform = 0;
  decode::CaptionOptions o = opt;
  o.attention = true;
  o.on_batch = nullptr;
  const int64_t chunk = std::max<int64_t>(opt.batch_size, 1);
  std::vector<float> flat;  // the uniform attention, made once
  for (int64_t b0 = 0; b0 < count; b0 += chunk) {
    std::vector<vision::Scene> batch;
    for (int64_t i = b0; i < std::min(count, b0 + chunk); ++i) batch.push_back(gen.generate(split, first + i));
    std::vector<decode::Caption> caps = captioner.caption(scene_images(batch), o);
    for (size_t i = 0; i < batch.size(); ++i) {
      const vision::Scene& sc = batch[i];
      decode::Caption& c = caps[i];
      const std::string ref = sc.caption();
      exact += c.text == ref;
      hyps.push_back(c.text), refs.push_back(ref);
      if (c.attention.empty()) continue;
      s.has_attention = true;
      // a uniform attention over this grid: what it puts in the boxes is their area share
      if (flat.size() != static_cast<size_t>(c.rows * c.cols))
        flat.assign(static_cast<size_t>(c.rows * c.cols), 1.f / static_cast<float>(c.rows * c.cols));
      for (size_t t = 0; t < c.words.size() && t < c.attention.size(); ++t) {
        const int32_t k = class_of_word(c.words[t]);
        if (k < 0) continue;
        std::vector<vision::Box> boxes;
        for (const vision::SceneItem& it : sc.items)
          if (it.label == k) boxes.push_back(it.box);
        if (boxes.empty()) {
          ++s.unseen_words;
          continue;
        }
        uniform += mass_in_boxes(flat, c.rows, c.cols, sc.height, sc.width, boxes);  // the boxes' area share
        auto at = [&](size_t u) { return mass_in_boxes(c.attention[u], c.rows, c.cols, sc.height, sc.width, boxes); };
        const double own = at(t);
        in_box += own;
        ++s.named_words;
        // the steps around it: the one before (t = 0 has none: its own), the one after (the EOS step
        // when the caption ends with it; none when the caption ran out of length: its own)
        double phrase = 0;
        for (size_t u = noun_phrase_start(c.words, t); u <= t; ++u) phrase = std::max(phrase, u == t ? own : at(u));
        const double before = t > 0 ? at(t - 1) : own, after = t + 1 < c.attention.size() ? at(t + 1) : own;
        if (s.by_class.empty()) s.by_class.resize(vision::scene_class_words().size());
        for (CaptionScores::ByStep* b : {&s.by_step, &s.by_class[static_cast<size_t>(k)]}) {
          ++b->words;
          b->before += before, b->own += own, b->after += after, b->phrase += phrase;
        }
      }
    }
    for (auto& c : caps) s.captions.push_back(std::move(c));
    if (opt.on_batch) opt.on_batch(std::min(count, b0 + chunk), count);
  }
  s.bleu = text::corpus_bleu(hyps, {refs});
  s.exact = static_cast<double>(exact) / static_cast<double>(count);
  auto mean_of = [](CaptionScores::ByStep& b) {
    if (!b.words) return;
    const auto n = static_cast<double>(b.words);
    b.before /= n, b.own /= n, b.after /= n, b.phrase /= n;
  };
  mean_of(s.by_step);
  for (CaptionScores::ByStep& b : s.by_class) mean_of(b);
  if (s.named_words) {
    s.attention_in_box = in_box / static_cast<double>(s.named_words);
    s.uniform_in_box = uniform / static_cast<double>(s.named_words);
  }
  return s;
}

}  // namespace qkv::eval
