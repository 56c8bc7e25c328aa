// Language-model training on a text file (nanoGPT's shakespeare_char): the "lm" task of `qkv train`.
//
//   data:   the text → character ids (or SentencePiece subwords); the first 90% train, the last
//           10% validation (as nanoGPT)
//   batch:  B random windows of block_size + 1 tokens; x = window[0 … T−1], y = window[1 … T]
//   loss:   mean next-token cross-entropy;  evaluation: the mean over eval_iters fixed batches
//           of each split ("train_loss", "val_loss")
#pragma once

#include <memory>
#include <string>

#include "qkv/io/config.h"
#include "qkv/core/rng.h"
#include "qkv/models/model.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

struct TokenData {
  std::vector<int32_t> train, val;
};

// B windows of T+1 tokens starting at positions drawn from (seed, counter … counter+B−1):
// x, y: i32 [B, T].
std::pair<Tensor, Tensor> lm_batch(const std::vector<int32_t>& data, int64_t B, int64_t T, uint64_t seed,
                                   uint64_t counter);

// The "tokenizer" of an LM's data: "char", or {"type": "sentencepiece", "vocab_size": 2000,
// "model_type": "unigram" | "bpe"} (trained on the training split).
struct LMTokenizerSpec {
  std::string type = "char";  // "char" | "sentencepiece"
  int64_t vocab_size = 2000;
  std::string model_type = "unigram";
  static const io::Fields<LMTokenizerSpec>& fields();
  static LMTokenizerSpec from_json(const nlohmann::json& j);  // a string is the type alone
};

// The "data" section: {"path": the text file, "val_fraction": 0.1, "tokenizer": …, "block_size": 0}.
struct LMDataConfig {
  std::string path;
  double val_fraction = 0.1;  // the last fraction of the text is validation (as nanoGPT)
  nlohmann::json tokenizer = "char";
  // Tokens per training window (0: the model's block_size). A fine-tuned model's context
  // (max_position_embeddings 32768) is more than a window needs.
  int64_t block_size = 0;
  static const io::Fields<LMDataConfig>& fields();
};

// The whole config: {"task": "lm", "description" (or "_comment"): text, "init_from", "data", "model",
// "train"}. "init_from": a model file to fine-tune (train/init_from.h): its weights, hyper-parameters
// and tokenizer; "model" may then be absent and "data.tokenizer" must be.
struct LMTaskConfig {
  std::string task, description, init_from;
  LMDataConfig data;
  nlohmann::json model;  // {"type": …, hyper-parameters}: read by the registry's builder
  TrainConfig train;
  static const io::Fields<LMTaskConfig>& fields();
};

class LMTask : public TrainingTask {
 public:
  // config: {"task": "lm", "data": {…}, "model": {"type": "gpt" (the default), GPT config}, "train": {…}};
  // relative data paths are resolved against base_dir (the config file's folder). A SentencePiece
  // tokenizer is trained on the training split and written to out_dir/spm.model (reused when
  // resuming). With "init_from", the file's model and tokenizer (the text split 90/10, then each
  // part encoded).
  LMTask(const nlohmann::json& config, const std::string& base_dir, const std::string& out_dir = "",
         bool resume = false);

  models::Model& model() override { return *model_; }
  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  bool has_fixed_shape_batches() const override { return true; }
  MicroBatch micro_batch(int64_t step, int64_t micro, int64_t accum) override;  // {ids, targets}: [rows, T] i32
  Tensor micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum) override;
  Generator* dropout_generator() override { return &gen_; }
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  nlohmann::json model_metadata() const override;
  uint64_t rng_state() const override { return gen_.counter(); }
  void set_rng_state(uint64_t c) override { gen_.set_counter(c); }

  const TrainConfig& train_config() const { return cfg_; }
  const models::LanguageModel& language_model() const { return *model_; }
  const TokenData& data() const { return data_; }

 private:
  TrainConfig cfg_;
  text::LMTokenizer tok_;
  TokenData data_;
  Generator gen_;
  std::unique_ptr<models::LanguageModel> model_;
  int64_t block_ = 0;                  // tokens per window
  nlohmann::json tokenizer_meta_;      // init_from: the file's tokenizer, as it stores it
  nlohmann::json carried_;             // init_from: the metadata its trained files keep
};

}  // namespace qkv::train
