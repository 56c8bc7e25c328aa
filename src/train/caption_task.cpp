#include "qkv/train/caption_task.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/eval/caption_scores.h"
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
  Tensor loss = model_->loss(eval::scene_images(batch), tgt_in, tgt_out, static_cast<float>(cfg_.label_smoothing));
  const double share = static_cast<double>(B) / static_cast<double>(all);
  backward_share(loss, share, accum);
  const double value = loss.item();  // after the backward is queued: a GPU runs it meanwhile
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
    sum += model_->loss(eval::scene_images(batch), tgt_in, tgt_out).item() * static_cast<double>(tokens);
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
    const eval::CaptionScores s = eval::score_captions(decode::ImageCaptioner(*model_, *sp_), *scenes_, vision::SceneSplit::val, 0,
                                           std::min(eval_.scenes, data_cfg_.val_scenes), o);
    out.emplace_back("val_bleu4", s.bleu.score);
    out.emplace_back("val_exact", s.exact);
    if (s.has_attention) out.emplace_back("val_attention", s.attention_in_box);
  }
  return out;
}

json CaptionTask::model_metadata() const { return models::metadata(*model_, sp_->to_json()); }

}  // namespace qkv::train
