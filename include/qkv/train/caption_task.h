// Training a captioner with attention on captioned scenes: the "captioning" task of `qkv train`
// (issue 24; seed 004's "Image Captioning with RNNs and Attention"), and the figures it is judged by.
//
//   data:       scenes made on the fly from Fashion-MNIST (vision/scenes.h). Training scene k of the
//               run is train scene k — no epochs, every batch is new scenes, and a batch depends only
//               on (seed, step). Validation: the first val_scenes scenes of the val split, whose
//               clauses join class pairs training never joins
//   tokenizer:  a SentencePiece "word" model trained on the captions of the first tokenizer_scenes
//               training scenes (out/spm.model; reused on --resume)
//   batch:      batch_size scenes; tgt_in = BOS w₁ … w_n, tgt_out = w₁ … w_n EOS, padded
//   loss:       the captioner's: cross-entropy (label smoothing ε) + λ · doubly stochastic penalty
//   evaluate:   val_loss over the validation scenes; on the first eval.scenes of them, greedy
//               captions' val_bleu4 and val_exact, and val_attention (eval/caption_scores.h)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/decode/caption.h"
#include "qkv/eval/caption_scores.h"
#include "qkv/io/config.h"
#include "qkv/models/model.h"
#include "qkv/text/bleu.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/trainer.h"
#include "qkv/vision/scenes.h"

namespace qkv::train {

// The "data" section: where the items come from and how scenes are made (SceneOptions).
struct CaptionDataConfig {
  std::string path = vision::kFashionMnistDir;  // Fashion-MNIST's folder
  int64_t grid = 3, cell = 32, min_items = 1, max_items = 4;
  uint64_t seed = 1;
  int64_t val_scenes = 1000;         // validation scenes for val_loss
  int64_t tokenizer_scenes = 20000;  // training captions the vocabulary is learnt from
  static const io::Fields<CaptionDataConfig>& fields();
  vision::SceneOptions scene_options() const;
};
struct CaptionEvalConfig {
  int64_t scenes = 500, beam_size = 1;  // scenes captioned at each evaluation, and the search
  static const io::Fields<CaptionEvalConfig>& fields();
};

// The whole config: {"task": "captioning", "description", "data", "model", "train", "eval"}.
struct CaptionTaskConfig {
  std::string task, description;
  CaptionDataConfig data;
  nlohmann::json model;  // {"type": "captioner", hyper-parameters}
  TrainConfig train;
  CaptionEvalConfig eval;
  static const io::Fields<CaptionTaskConfig>& fields();
};

class CaptionTask : public TrainingTask {
 public:
  // Relative paths resolve against base_dir (the config's folder); out_dir gets the tokenizer.
  CaptionTask(const nlohmann::json& config, const std::string& base_dir, const std::string& out_dir, bool resume,
              bool verbose = true);

  models::Model& model() override { return *model_; }
  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  nlohmann::json model_metadata() const override;
  uint64_t rng_state() const override { return gen_.counter(); }
  // (each shard's loss is its own per-token mean, weighted by its rows, as DDP averages)
  void set_rng_state(uint64_t c) override { gen_.set_counter(c); }
  const char* unit() const override { return "img"; }

  const TrainConfig& train_config() const { return cfg_; }
  const models::Seq2SeqModel& captioner() const { return *model_; }
  const text::SentencePiece& tokenizer() const { return *sp_; }
  const vision::SceneGenerator& scenes() const { return *scenes_; }

 private:
  // tgt_in / tgt_out [N, T] of the scenes' captions
  std::pair<Tensor, Tensor> targets(const std::vector<vision::Scene>& scenes, int64_t* tokens) const;

  TrainConfig cfg_;
  CaptionDataConfig data_cfg_;
  CaptionEvalConfig eval_;
  vision::ImageSet train_items_, test_items_;
  std::unique_ptr<vision::SceneGenerator> scenes_;
  std::unique_ptr<text::SentencePiece> sp_;
  Generator gen_;
  std::unique_ptr<models::Seq2SeqModel> model_;
};

// The scene options a captioner was trained with, read from its model file's training config
// ("config" → "data"); the defaults when the file has none.
vision::SceneOptions scene_options_of(const nlohmann::json& model_file_meta);

}  // namespace qkv::train
