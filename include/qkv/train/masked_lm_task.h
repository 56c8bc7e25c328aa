// Masked-language-model training of an encoder, continued on a user's text: the "masked_lm" task of
// `qkv train` (transformers' run_mlm.py: a Trainer over AutoModelForMaskedLM with
// DataCollatorForLanguageModeling) — domain-adaptive pre-training of BERT, RoBERTa, DeBERTa, ModernBERT, ….
//
//   model:   "init_from": a model file with its masked-language-model head — a converted …ForMaskedLM
//            (qkv convert DIR -o FILE), or one this task wrote
//   data:    a text file (.txt: a text a line) or JSONL (.jsonl: an object a line, its text under
//            data.text); data.val, or the first val_fraction of the lines held out (run_mlm.py's
//            train[:5%] validation split, rounded to the nearest line)
//   blocks   run_mlm.py's two ways:
//              grouped (the default): every line tokenized with its special tokens ([CLS] … [SEP]),
//                the token streams of each 1,000 lines (datasets' map batch) concatenated and cut into
//                blocks of exactly max_length tokens, the remainder of each 1,000 dropped (group_texts)
//              line_by_line: each non-blank line a block of its own, cut to max_length tokens
//   masks    DataCollatorForLanguageModeling's: each token that is not special (the tokenizer's added
//            [CLS] / [SEP] / padding) chosen with probability mlm_probability; a chosen token becomes the
//            mask token with probability mask_replace_prob, else a random token of the vocabulary with
//            probability random_replace_prob / (1 − mask_replace_prob), else stays — drawn from the
//            seed and the block's place in the run (the same in every process and on resuming); the
//            validation blocks' masks from the seed alone, the same at every evaluation.
//            data.whole_word_mask (the collator's whole_word_mask=True): a word — a token and those after
//            it that start where the one before ended, by the tokenizer's offsets — is chosen whole with
//            probability mlm_probability, each of its tokens the mask token (transformers then sets
//            mask_replace_prob to 1: no random or kept tokens)
//   batch:   batch_size blocks, drawn in epochs (io::EpochOrder), padded to the longest (line_by_line)
//   loss:    the mean cross-entropy of the chosen tokens' original ids,
//              (1/N) Σ_{chosen (n, t)} −log softmax(h_nt Wᵀ + b)[y_nt]
//            over the N chosen tokens of the whole optimizer step (its micro-batches and processes
//            together: the Trainer's num_items_in_batch), the head (h = transform(x), the decoder W
//            tied to the word embedding) run on the chosen tokens alone — about 15 % of them — through
//            linear_cross_entropy, never the [B, T, V] logits transformers makes
//   eval:    every validation block: val_loss (the mean over the chosen tokens), val_perplexity
//            (exp val_loss, run_mlm.py's "perplexity") and val_accuracy (argmax = the original id,
//            run_mlm.py's accuracy)
//
// The model file it writes is a masked language model like the one it started from: `qkv fill-mask`
// reads it, and the classification, token and question-answering tasks start from it (qkv convert
// --head … reads Hugging Face folders; a qkv file keeps its MLM head).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/io/config.h"
#include "qkv/io/sample.h"
#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/train/encoder_task.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// The "data" section.
struct MaskedLMDataConfig {
  std::string train, val;      // .txt or .jsonl; no val: the first val_fraction of train's lines
  double val_fraction = 0.05;  // run_mlm.py's validation_split_percentage 5
  std::string text = "text";   // JSONL's column
  // a block's tokens (run_mlm.py's max_seq_length; 0: the tokenizer's model_max_length, at most 1,024
  // and the model's positions)
  int64_t max_length = 0;
  bool line_by_line = false;
  double mlm_probability = 0.15;
  double mask_replace_prob = 0.8;    // of the chosen tokens: the mask token
  double random_replace_prob = 0.1;  // of the chosen tokens: a random one (the rest stay as they are)
  bool whole_word_mask = false;      // words chosen whole, every token of them the mask token
  static const io::Fields<MaskedLMDataConfig>& fields();
};

// The whole config: {"task": "masked_lm", "description", "init_from", "data", "model" (only its dropout
// rates may differ from the file's), "train"}.
struct MaskedLMTaskConfig {
  std::string task, description, init_from;
  MaskedLMDataConfig data;
  nlohmann::json model;
  TrainConfig train;
  static const io::Fields<MaskedLMTaskConfig>& fields();
};

// Token blocks: block i is ids[begin[i] … begin[i + 1]); flags[k] says what ids[k] is — kSpecial: a
// special token the tokenizer added (never chosen; transformers' special_tokens_mask), kContinuesWord: a
// token that starts where the one before it ended in the same text (the same word, for whole-word
// masking: the collator's offsets rule).
struct TokenBlocks {
  static constexpr uint8_t kSpecial = 1, kContinuesWord = 2;
  std::vector<int32_t> ids;
  std::vector<uint8_t> flags;
  std::vector<int64_t> begin{0};
  int64_t size() const { return static_cast<int64_t>(begin.size()) - 1; }
  int64_t length(int64_t i) const { return begin[static_cast<size_t>(i + 1)] - begin[static_cast<size_t>(i)]; }
  int64_t tokens() const { return static_cast<int64_t>(ids.size()); }
};

// The texts as blocks, as run_mlm.py makes them (above): grouped into blocks of exactly max_length
// tokens (each 1,000 texts' remainder dropped), or line_by_line — a block per text, blank texts left
// out, each cut to max_length with its special tokens kept.
TokenBlocks mlm_blocks(const std::vector<std::string>& texts, const text::HfTokenizer& tokenizer, int64_t max_length,
                       bool line_by_line);

// Which of a block's n tokens (their TokenBlocks flags) are chosen (1) — each token, or with
// whole_word_mask each word's first, drawing from (seed, stream · 2³² + t): block `stream` of a run
// chooses the same wherever and whenever it is drawn. (A word cut by a block's start begins a word there,
// as the collator sees it.)
std::vector<uint8_t> choose_tokens(const uint8_t* flags, size_t n, uint64_t seed, uint64_t stream,
                                   const MaskedLMDataConfig& data);
// One block's masking (above): `ids` changed in place, and the targets — the original id where a token
// was chosen, −100 elsewhere — returned. Random tokens are drawn from 0 … vocab − 1.
std::vector<int32_t> mask_tokens(std::vector<int32_t>& ids, const uint8_t* flags, uint64_t seed, uint64_t stream,
                                 const MaskedLMDataConfig& data, int32_t mask_id, int64_t vocab);

class MaskedLMTask : public EncoderFineTuningTask {
 public:
  // config as above; relative paths start at base_dir.
  MaskedLMTask(const nlohmann::json& config, const std::string& base_dir, bool verbose = false);

  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;

  const TokenBlocks& train_blocks() const { return train_; }
  const TokenBlocks& val_blocks() const { return val_; }

 private:
  struct Masked;  // a batch's inputs and targets (masked_lm_task.cpp)
  // Blocks `rows` of `set` masked, block rows[r] drawing as stream streams[r], and padded into one batch of
  // T tokens (at least the longest block's).
  Masked batch_of(const TokenBlocks& set, const std::vector<int64_t>& rows, const std::vector<uint64_t>& streams,
                  uint64_t seed, int64_t T) const;
  // The chosen tokens' summed cross-entropy (a scalar), and where `correct` is given, how many of them
  // the head's argmax gets right.
  Tensor loss_sum(const Masked& b, int64_t* correct = nullptr) const;
  // The run's k-th training block (EpochOrder's) and the stream its masks draw from: epoch·n + block.
  std::pair<int64_t, uint64_t> drawn(uint64_t k);
  // The chosen tokens of the run's training blocks first … first + count − 1 (EpochOrder's stream).
  int64_t chosen_in(uint64_t first, int64_t count);

  MaskedLMDataConfig data_;
  TokenBlocks train_, val_;
  int32_t mask_id_ = 0;
  int64_t vocab_ = 0;  // random replacements' range: the tokenizer's size (len(tokenizer)), at most the model's
  int64_t counted_step_ = -1, step_chosen_ = 0;  // the step whose chosen tokens were counted, and their count
};

}  // namespace qkv::train
