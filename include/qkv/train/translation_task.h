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

#include "qkv/nn/transformer.h"
#include "qkv/text/parallel_corpus.h"
#include "qkv/text/sentencepiece.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

struct EncodedPair {
  std::vector<int32_t> src;  // pieces + EOS
  std::vector<int32_t> tgt;  // BOS + pieces + EOS
};

struct Batch {
  Tensor src, tgt_in, tgt_out;  // i32 [B, S], [B, T], [B, T], padded with pad_id
  int64_t tgt_tokens = 0;       // real target tokens (EOS included)
};

// Cuts pairs (already sorted by length) into batches of at most max_tokens padded tokens.
std::vector<std::vector<size_t>> token_batches(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& order,
                                               int64_t max_tokens);
Batch make_batch(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& index, int32_t pad_id);

class TranslationTask : public TrainingTask {
 public:
  // config: {"task": "translation", "data": {…}, "tokenizer": {…}, "model": {…}, "train": {…}, "eval": {…}};
  // relative paths resolve against base_dir; out_dir holds the SentencePiece model and split files.
  TranslationTask(const nlohmann::json& config, const std::string& base_dir, const std::string& out_dir,
                  bool resume, bool verbose = true);

  nn::Module& model() override { return *model_; }
  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  nlohmann::json model_metadata() const override;
  uint64_t rng_state() const override { return gen_.counter(); }
  void set_rng_state(uint64_t c) override { gen_.set_counter(c); }

  const TrainConfig& train_config() const { return cfg_; }
  const nn::Seq2SeqTransformer& transformer() const { return *model_; }
  const text::SentencePiece& tokenizer() const { return *sp_; }
  size_t train_pairs() const { return train_.size(); }
  size_t num_batches() const { return batches_.size(); }
  const text::Split& split() const { return split_; }

 private:
  const std::vector<size_t>& batch_for(int64_t global_index);

  TrainConfig cfg_;
  text::Split split_;
  std::unique_ptr<text::SentencePiece> sp_;
  std::vector<EncodedPair> train_, dev_;
  std::vector<std::vector<size_t>> batches_, dev_batches_;
  int64_t epoch_cached_ = -1;
  std::vector<size_t> epoch_order_;
  int64_t bleu_sentences_ = 500, bleu_beam_ = 1;
  Generator gen_;
  std::unique_ptr<nn::Seq2SeqTransformer> model_;
};

// A translation model file with its SentencePiece model (carried in the file's metadata).
struct LoadedTranslator {
  std::unique_ptr<nn::Seq2SeqTransformer> model;
  std::unique_ptr<text::SentencePiece> tokenizer;
  nlohmann::json meta;
};
LoadedTranslator load_translator(const std::string& path);
// Several models for an ensemble: each loaded as above, and all with the same tokenizer pieces
// (qkv::Error naming the first model and piece that differ).
std::vector<LoadedTranslator> load_translators(const std::vector<std::string>& paths);

}  // namespace qkv::train
