#include "qkv/train/caption_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/io/file.h"
#include "qkv/io/progress.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/train/memory_plan.h"
#include "qkv/ops.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- config --------------------------------------------------------------------------------------

const io::Fields<CaptionDataConfig>& CaptionDataConfig::fields() {
  using F = io::Fields<CaptionDataConfig>;
  using C = CaptionDataConfig;
  static const F f("captioning task: data", {
                                                F::text("path", &C::path),
                                                F::integer("grid", &C::grid, 2, 3),
                                                F::integer("cell", &C::cell, 28, 256),
                                                F::integer("min_items", &C::min_items, 1, 4),
                                                F::integer("max_items", &C::max_items, 2, 4),
                                                F::unsigned_integer("seed", &C::seed),
                                                F::integer("val_scenes", &C::val_scenes, 1, 1000000),
                                                F::integer("tokenizer_scenes", &C::tokenizer_scenes, 100, 10000000),
                                            });
  return f;
}

vision::SceneOptions CaptionDataConfig::scene_options() const {
  QKV_CHECK(min_items <= max_items, "captioning task: data.min_items ", min_items, " exceeds max_items ", max_items);
  vision::SceneOptions o;
  o.grid = grid, o.cell = cell, o.min_items = min_items, o.max_items = max_items, o.seed = seed;
  return o;
}

const io::Fields<CaptionEvalConfig>& CaptionEvalConfig::fields() {
  using F = io::Fields<CaptionEvalConfig>;
  using C = CaptionEvalConfig;
  static const F f("captioning task: eval", {
                                                F::integer("scenes", &C::scenes, 0, 1000000),
                                                F::integer("beam_size", &C::beam_size, 1, 64),
                                            });
  return f;
}

const io::Fields<CaptionTaskConfig>& CaptionTaskConfig::fields() {
  using F = io::Fields<CaptionTaskConfig>;
  using C = CaptionTaskConfig;
  static const F f("captioning task", {
                                          F::text("task", &C::task),
                                          F::text("description", &C::description),
                                          F::text("_comment", &C::description),
                                          F::section("data", &C::data),
                                          F::any("model", &C::model),
                                          F::section("train", &C::train),
                                          F::section("eval", &C::eval),
                                      });
  return f;
}

vision::SceneOptions scene_options_of(const json& meta) {
  CaptionDataConfig d;
  if (meta.contains("config") && meta["config"].is_object() && meta["config"].contains("data"))
    d = CaptionDataConfig::fields().from_json(meta["config"]["data"]);
  return d.scene_options();
}

// ---- the figures ---------------------------------------------------------------------------------

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

// ---- the task ------------------------------------------------------------------------------------

CaptionTask::CaptionTask(const json& config, const std::string& base, const std::string& out_dir, bool resume,
                         bool verbose) {
  QKV_CHECK(io::get_or(config, "task", "") == "captioning", "captioning task: the config's \"task\" must be \"captioning\"");
  for (const char* k : {"data", "model", "train"})
    QKV_CHECK(config.contains(k), "captioning task: the config needs a \"", k, "\" section");
  const CaptionTaskConfig c = CaptionTaskConfig::fields().from_json(config);
  cfg_ = c.train, data_cfg_ = c.data, eval_ = c.eval;
  auto [type, m] = model_section(c.model, "captioner");
  QKV_CHECK(models::model_type(type).kind == models::Kind::image_to_text,
            "captioning task: model.type \"", type, "\" does not take images (use \"captioner\")");
  auto say = [&](const std::string& s) {
    if (verbose) std::fprintf(stderr, "%s\n", s.c_str());
  };

  // ---- data: the items, and the scenes made of them
  fs::path dir = c.data.path;
  if (dir.is_relative() && !base.empty()) dir = fs::path(base) / dir;
  train_items_ = vision::load_fashion_mnist(dir.string(), "train");
  test_items_ = vision::load_fashion_mnist(dir.string(), "test");
  scenes_ = std::make_unique<vision::SceneGenerator>(train_items_, test_items_, c.data.scene_options());

  // ---- tokenizer: SentencePiece over the words of the training captions
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  QKV_CHECK(!ec, "captioning task: cannot create '", out_dir, "': ", ec.message());
  const std::string spm_path = (fs::path(out_dir) / "spm.model").string();
  QKV_CHECK(!resume || fs::exists(spm_path), "train --resume: '", spm_path, "' is missing");
  if (resume) {
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(spm_path));
    say("tokenizer: " + spm_path + " (reused)");
  } else {
    const std::string corpus = (fs::path(out_dir) / "spm-train.txt").string();
    std::string lines;
    for (int64_t i = 0; i < c.data.tokenizer_scenes; ++i)
      lines += scenes_->generate(vision::SceneSplit::train, i).caption() + "\n";
    io::write_file_atomic(corpus, lines);
    // A "word" model with a soft size: every word of the grammar (a few dozen) and the specials.
    text::SentencePiece::train({corpus}, (fs::path(out_dir) / "spm").string(), 256, "word", 1.0, 0, false,
                               {{"hard_vocab_limit", "false"}});
    fs::remove(corpus, ec);
    sp_ = std::make_unique<text::SentencePiece>(text::SentencePiece::load(spm_path));
    say("tokenizer: " + std::to_string(sp_->vocab_size()) + " words from " + std::to_string(c.data.tokenizer_scenes) +
        " training captions → " + spm_path);
  }

  // ---- model: sized to the scenes and the tokenizer (a config may state a size; then it must agree)
  const int64_t side = scenes_->canvas_size();
  const json derived = {{"in_channels", 1},
                        {"image_height", side},
                        {"image_width", side},
                        {"vocab_size", sp_->vocab_size()},
                        {"pad_id", sp_->pad_id()},
                        {"bos_id", sp_->bos_id()},
                        {"eos_id", sp_->eos_id()}};
  for (auto& [k, v] : derived.items()) {
    QKV_CHECK(!m.contains(k) || m[k] == v, "captioning task: model.", k, " ", m[k].dump(), " differs from the data's ",
              v.dump(), " (leave it out)");
    m[k] = v;
  }
  // Sizes first (train/memory_plan.h): the model, then a batch of pictures B·C·H·W floats.
  const int64_t params = check_model_fits(
      "captioning task", m, [&type = type, &m = m] { return models::build_seq2seq(type, m, nullptr)->module().num_parameters(); });
  gen_ = Generator(cfg_.seed);
  model_ = models::build_seq2seq(type, m, &gen_);
  {
    const models::ImageShape s = model_->source_image();
    const char* keys = "captioning task: train.batch_size × pixels × 4 bytes";
    const int64_t B = cfg_.batch_size, pixels = checked_mul(checked_mul(s.channels, s.height, keys), s.width, keys);
    check_batch_fits("captioning task", params, checked_mul(checked_mul(B, pixels, keys), 4, keys),
                     detail::concat("train.batch_size ", B, " pictures of ", pixels, " floats"));
  }
  say("data: scenes of " + std::to_string(c.data.grid) + "×" + std::to_string(c.data.grid) + " cells (" +
      std::to_string(side) + "×" + std::to_string(side) + " px, " + std::to_string(c.data.min_items) + "–" +
      std::to_string(c.data.max_items) + " items) made on the fly; " + std::to_string(c.data.val_scenes) +
      " validation scenes (held-out class pairs)");
}

std::pair<Tensor, Tensor> CaptionTask::targets(const std::vector<vision::Scene>& scenes, int64_t* tokens) const {
  const models::SpecialTokens ids = model_->special_tokens();
  std::vector<std::vector<int>> enc;
  int64_t T = 0;
  for (const vision::Scene& s : scenes) {
    enc.push_back(sp_->encode(s.caption()));
    T = std::max<int64_t>(T, static_cast<int64_t>(enc.back().size()) + 1);
  }
  QKV_CHECK(T <= model_->max_len() - 1, "captioning task: a caption of ", T - 1,
            " words does not fit the model's max_len ", model_->max_len(), " (raise model.max_len)");
  const auto N = static_cast<int64_t>(scenes.size());
  std::vector<int32_t> in(static_cast<size_t>(N * T), ids.pad), out(static_cast<size_t>(N * T), ids.pad);
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    const auto& e = enc[static_cast<size_t>(i)];
    in[static_cast<size_t>(i * T)] = ids.bos;
    for (size_t t = 0; t < e.size(); ++t) {
      in[static_cast<size_t>(i * T) + t + 1] = e[t];
      out[static_cast<size_t>(i * T) + t] = e[t];
    }
    out[static_cast<size_t>(i * T) + e.size()] = ids.eos;
    count += static_cast<int64_t>(e.size()) + 1;
  }
  if (tokens) *tokens = count;
  return {Tensor::from_ints(in, {N, T}), Tensor::from_ints(out, {N, T})};
}

StepStats CaptionTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  // this process's scenes of the batch (all of it in one process)
  const int64_t all = cfg_.batch_size;
  const Rows rows = shard_rows(all, gen_, "captioning task");
  const int64_t B = rows.count, first = (step * accum + micro) * all + rows.first;
  std::vector<vision::Scene> batch;
  for (int64_t i = 0; i < B; ++i) batch.push_back(scenes_->generate(vision::SceneSplit::train, first + i));
  int64_t tokens = 0;
  auto [tgt_in, tgt_out] = targets(batch, &tokens);
  Tensor loss = model_->loss(scene_images(batch), tgt_in, tgt_out, static_cast<float>(cfg_.label_smoothing));
  const double value = loss.item();
  const double share = static_cast<double>(B) / static_cast<double>(all);
  backward_share(loss, share, accum);
  return {value, B, share};
}

std::vector<std::pair<std::string, double>> CaptionTask::evaluate(int64_t) {
  NoGradGuard no_grad;
  // val_loss: the loss (no smoothing) per caption token, over the validation scenes
  double sum = 0;
  int64_t count = 0;
  io::ProgressBar loss_bar("eval loss", data_cfg_.val_scenes, 0, /*delay_seconds=*/2);  // scenes
  for (int64_t b0 = 0; b0 < data_cfg_.val_scenes; b0 += 100) {
    std::vector<vision::Scene> batch;
    for (int64_t i = b0; i < std::min(data_cfg_.val_scenes, b0 + 100); ++i)
      batch.push_back(scenes_->generate(vision::SceneSplit::val, i));
    int64_t tokens = 0;
    auto [tgt_in, tgt_out] = targets(batch, &tokens);
    sum += model_->loss(scene_images(batch), tgt_in, tgt_out).item() * static_cast<double>(tokens);
    count += tokens;
    loss_bar.update(static_cast<int64_t>(batch.size()));
  }
  loss_bar.close();
  std::vector<std::pair<std::string, double>> out{{"val_loss", sum / static_cast<double>(count)}};
  if (eval_.scenes > 0) {
    decode::CaptionOptions o;
    o.beam_size = eval_.beam_size;
    io::ProgressBar bar("eval captions", std::min(eval_.scenes, data_cfg_.val_scenes), 0, /*delay_seconds=*/2);
    o.on_batch = [&bar](int64_t done, int64_t) { bar.update(done - bar.n()); };
    const CaptionScores s = score_captions(decode::ImageCaptioner(*model_, *sp_), *scenes_, vision::SceneSplit::val, 0,
                                           std::min(eval_.scenes, data_cfg_.val_scenes), o);
    out.emplace_back("val_bleu4", s.bleu.score);
    out.emplace_back("val_exact", s.exact);
    if (s.has_attention) out.emplace_back("val_attention", s.attention_in_box);
  }
  return out;
}

json CaptionTask::model_metadata() const { return models::metadata(*model_, sp_->to_json()); }

}  // namespace qkv::train
