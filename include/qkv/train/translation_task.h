// Training a translation Transformer: the "translation" task of `qkv train` (seeds 003–004:
// teacher forcing, padding and causal masks, every target position predicted in parallel).
//
//   data:       parallel text — a TSV file (Tatoeba's fra.txt: English<TAB>French<TAB>…) or two
//               line-aligned files (Multi30k's train.de / train.en), plain or gzip; dev/test given
//               as files, or split off the training pairs by distinct source sentence
//   tokenizer:  one joint SentencePiece model trained on the training pairs' both sides
//               (out/spm.model; reused on --resume)
//   batches:    pairs sorted by length and cut into batches of at most batch_size tokens
//               (max(source, target) length × pairs, padding included); the batch order is
//               shuffled each epoch from the seed, so a batch depends only on (seed, step)
//   loss:       cross-entropy with label smoothing, padding ignored; teacher forcing:
//               tgt_in = BOS y₁ … y_n, tgt_out = y₁ … y_n EOS
//   evaluate:   val_loss (plain cross-entropy over the whole dev set) and val_bleu (sacreBLEU of
//               greedy translations of the first eval.bleu_sentences dev sources, all their
//               references)
//
// The split's dev and test pairs are written to out/{dev,test}.{src,ref} for `qkv eval`.
#pragma once

#include <memory>
#include <string>

#include "qkv/io/config.h"
#include "qkv/core/rng.h"
#include "qkv/models/model.h"
#include "qkv/text/batching.h"
#include "qkv/text/parallel_corpus.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// The sections of a translation config (each with its field table):
//   data.train / dev / test:  {"tsv": PATH, "src_col": 0, "tgt_col": 1} or {"src": PATH, "tgt": PATH}
//   data.split:               {"dev": 1000, "test": 2000, "seed": 1} (when no dev files are given)
//   tokenizer:                {"type": "unigram", "vocab_size": 8000, "character_coverage": 1.0,
//                              "input_sentence_size": 0}
//   eval:                     {"bleu_sentences": 500, "beam_size": 1}
struct PairFiles {
  std::string tsv, src, tgt;
  int64_t src_col = 0, tgt_col = 1;
  static const io::Fields<PairFiles>& fields();
  bool given() const { return !tsv.empty() || !src.empty() || !tgt.empty(); }
};
struct SplitConfig {
  int64_t dev = 1000, test = 2000;
  uint64_t seed = 1;
  static const io::Fields<SplitConfig>& fields();
};
struct TranslationDataConfig {
  PairFiles train, dev, test;
  SplitConfig split;
  int64_t max_tokens = 0;  // longest pair kept for training (0: the model's max_len − 1)
  static const io::Fields<TranslationDataConfig>& fields();
};
struct TranslationTokenizerConfig {
  std::string type = "unigram";  // SentencePiece's model_type: unigram | bpe | char | word
  int64_t vocab_size = 8000;
  double character_coverage = 1.0;
  int64_t input_sentence_size = 0;  // 0: every line
  static const io::Fields<TranslationTokenizerConfig>& fields();
};
struct TranslationEvalConfig {
  int64_t bleu_sentences = 500, beam_size = 1;
  static const io::Fields<TranslationEvalConfig>& fields();
};

// The whole config: {"task": "translation", "description" (or "_comment"), "init_from", "data",
// "tokenizer", "model", "train", "eval"}. "init_from": a model file to fine-tune (train/init_from.h;
// a converted OPUS-MT model, or a translator qkv trained): its weights, hyper-parameters and
// SentencePiece (Marian: sources cut by source.spm, targets by target.spm); "model" may then be
// absent and "tokenizer" must be.
struct TranslationTaskConfig {
  std::string task, description, init_from;
  TranslationDataConfig data;
  TranslationTokenizerConfig tokenizer;
  nlohmann::json model;  // {"type": …, hyper-parameters}: read by the registry's builder
  TrainConfig train;
  TranslationEvalConfig eval;
  static const io::Fields<TranslationTaskConfig>& fields();
};

class TranslationTask : public TrainingTask {
 public:
  // config: {"task": "translation", "data": {…}, "tokenizer": {…}, "model": {"type": "transformer"
  // (the default) or another sequence-to-sequence model type, its hyper-parameters}, "train": {…},
  // "eval": {…}}; relative paths resolve against base_dir; out_dir holds the SentencePiece model and
  // the split files.
  TranslationTask(const nlohmann::json& config, const std::string& base_dir, const std::string& out_dir,
                  bool resume, bool verbose = true);

  models::Model& model() override { return *model_; }
  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  nlohmann::json model_metadata() const override;
  uint64_t rng_state() const override { return gen_.counter(); }
  void set_rng_state(uint64_t c) override { gen_.set_counter(c); }

  const TrainConfig& train_config() const { return cfg_; }
  const models::Seq2SeqModel& seq2seq() const { return *model_; }
  const text::SentencePiece& tokenizer() const { return *sp_; }
  size_t train_pairs() const { return train_.size(); }
  size_t num_batches() const { return batches_.size(); }
  const text::Split& split() const { return split_; }

 private:
  const std::vector<size_t>& batch_for(int64_t global_index);

  TrainConfig cfg_;
  text::Split split_;
  std::unique_ptr<text::SentencePiece> sp_;
  std::vector<text::EncodedPair> train_, dev_;
  std::vector<std::vector<size_t>> batches_, dev_batches_;
  int64_t epoch_cached_ = -1;
  std::vector<size_t> epoch_order_;
  TranslationEvalConfig eval_;
  Generator gen_;
  std::unique_ptr<models::Seq2SeqModel> model_;
  nlohmann::json carried_;  // init_from: the metadata its trained files keep
};

}  // namespace qkv::train
