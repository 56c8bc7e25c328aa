// Translating text with any sequence-to-sequence model (models::Seq2SeqModel; seed 004,
// inference): encode the source once, then decode one token at a time with greedy or beam search,
// the model keeping what it needs between steps (the Transformer: self-attention K/V growing by one
// position per step, cross-attention K/V computed once per sentence). use_cache = false asks the
// model to recompute instead (the baseline the cache is measured against; it chooses the same tokens).
//
// Text in, text out: the SentencePiece model the model was trained with turns a line into ids
// (+ EOS) and the chosen ids back into text. Sentences are batched by length (sorted, then cut
// into batches of batch_size) and come back in input order.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qkv/decode/search.h"
#include "qkv/models/model.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::decode {

struct TranslateOptions {
  int64_t beam_size = kDefaultBeamSize;                                // 1: greedy search
  float length_penalty = static_cast<float>(kDefaultLengthPenalty);  // α (beam search)
  int64_t max_extra = 50;       // the output is at most |source| + max_extra tokens (the paper's +50)
  // And at most this many tokens, its EOS included (transformers' max_new_tokens, CTranslate2's
  // max_decoding_length); 0: no limit but max_extra's and the model's.
  int64_t max_length = 0;
  int64_t batch_size = 32;      // sentences per batch
  // Hypotheses each sentence's n-best list must hold (beam search; 0: beam_size): 1 when only the
  // best is wanted lets a sentence stop as soon as it is settled (SearchOptions::num_hypotheses).
  int64_t num_hypotheses = 0;
  bool use_cache = true;
  // Beam search ranks and stops as transformers' generate() (SearchOptions::transformers_rule), with
  // length_penalty as its exponent: a converted model's translations equal transformers'.
  bool transformers_beam = false;
  // Over-long sources: a line of more tokens than this (0: the model's max_len − 1, its EOS) is
  // truncated to it, with a warning naming the line (CTranslate2's max_input_length); the other
  // lines translate as usual. -1: an over-long line is an error instead.
  int64_t max_input_length = 0;
  // Told about each line the policy changed: truncated, or invalid UTF-8 (its bad bytes become
  // U+FFFD before tokenization). Default: a line on stderr.
  std::function<void(const std::string& warning)> on_warning;
  // Called after each batch with the sentences translated so far and in all (a progress bar).
  std::function<void(int64_t done, int64_t total)> on_batch;
};

// The most tokens an output may have past its source's length (TranslateOptions::max_extra,
// --max-extra, Python's max_extra_length): the paper's 50 is the default; a sum past the model's
// max_len is cut to it anyway, but 2^63 − 1 wrapped the sum negative (issue 43).
constexpr int64_t kMaxExtraTokens = 10000;
// The largest TranslateOptions::max_length taken (--max-length, Python's max_decoding_length).
constexpr int64_t kMaxDecodingLength = 1000000;

// Every option checked against the range each front end takes (the command line's flags are
// these): beam_size 1 … kMaxBeamSize, length_penalty 0 … kMaxLengthPenalty (not NaN), max_extra
// 1 … kMaxExtraTokens, max_length 0 … kMaxDecodingLength, batch_size ≥ 1, num_hypotheses ≥ 0, max_input_length ≥ −1. A
// qkv::Error "translate: <option> must be …, got …" naming the first one out of range; the
// translators below check before they tokenize or decode anything.
void check_options(const TranslateOptions& opt);
// Whether translations asked with options a and b can run as one batch (BatchingTranslator): every
// option that changes a sentence's result is equal — all but batch_size and the callbacks.
bool same_batch(const TranslateOptions& a, const TranslateOptions& b);
// An n-best list's length: 1 … beam_size (1 for greedy search). A qkv::Error "<what>: … must be
// between 1 and beam_size (4), got 9" otherwise — the server's n_best and Python's num_hypotheses.
void check_n_best(int64_t n, int64_t beam_size, const char* what);

// The search's view of a sequence-to-sequence model for one batch of sources (rows = hypotheses).
class Seq2SeqStepModel : public StepModel {
 public:
  // src: i32 [B, S] padded with the model's pad id.
  Seq2SeqStepModel(const models::Seq2SeqModel& model, const Tensor& src, bool use_cache = true);
  Tensor step(const std::vector<int32_t>& tokens) override;
  void reorder(const std::vector<int64_t>& index, bool sources_changed) override;

 private:
  const models::Seq2SeqModel& model_;
  std::unique_ptr<models::DecoderState> state_;
};

// Translates token-id sources (without EOS; it is appended here). Returns one hypothesis each.
std::vector<Hypothesis> translate_ids(const models::Seq2SeqModel& model,
                                      const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& opt);
// The same with an ensemble. The models must agree on vocab_size and the pad/BOS/EOS ids
// (qkv::Error otherwise); the longest source allowed is the smallest max_len.
std::vector<Hypothesis> translate_ids(const std::vector<const models::Seq2SeqModel*>& models,
                                      const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& opt);
// Every source's n-best list: the beam's finished hypotheses, best first (beam_search_nbest); the
// first is what translate_ids returns. Greedy search (beam_size 1) gives a list of one.
std::vector<std::vector<Hypothesis>> translate_ids_nbest(const std::vector<const models::Seq2SeqModel*>& models,
                                                         const std::vector<std::vector<int32_t>>& sources,
                                                         const TranslateOptions& opt);

class Translator {
 public:
  Translator(const models::Seq2SeqModel& model, const text::SentencePiece& sp);
  // An ensemble: every model was trained with the vocabulary of `sp`.
  Translator(std::vector<const models::Seq2SeqModel*> models, const text::SentencePiece& sp);
  // Empty (or all-space) lines translate to empty lines. A line longer than the model takes is
  // truncated with a warning (opt.max_input_length); invalid UTF-8 is repaired with a warning.
  std::vector<std::string> translate(const std::vector<std::string>& lines, const TranslateOptions& opt,
                                     std::vector<Hypothesis>* hyps = nullptr) const;
  // Each line's n-best list (translate_ids_nbest); an empty line gets an empty list.
  std::vector<std::vector<Hypothesis>> translate_nbest(const std::vector<std::string>& lines,
                                                       const TranslateOptions& opt) const;
  // The source ids of a line (SentencePiece pieces, no EOS), after normalize_spaces.
  std::vector<int32_t> encode(const std::string& line) const;
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  std::vector<const models::Seq2SeqModel*> models_;
  const text::SentencePiece& sp_;
};

}  // namespace qkv::decode
