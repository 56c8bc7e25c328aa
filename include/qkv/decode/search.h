// Autoregressive search over a model's next-token distributions (seed 004: at inference the decoder
// produces one token at a time, feeding each back in):
//
//   greedy:  y_t = argmax_v log p(v | y_<t, x)
//   beam:    keep the K best partial hypotheses by Σ log p; a hypothesis ends at EOS and is ranked
//            by  score = Σ log p / lp(|Y|),  lp(n) = ((5 + n) / 6)^α  (GNMT's length penalty, the
//            paper's §6.1 uses α = 0.6, beam 4)
//
// Both are batched: many sentences at once, one row per hypothesis, rows of finished sentences
// dropped as they finish. The model is anything that maps the rows' last tokens to next-token
// log-probabilities (StepModel), so the search is tested on hand-made distributions as well as on
// the Transformer.
//
// Beam details, as fairseq: each step takes the 2K best continuations of a sentence's K beams; an
// EOS among the first K of them finishes a hypothesis, the first K others continue. A sentence is
// done when it has K finished hypotheses, or when its hypotheses reach max_len tokens (they then
// finish without EOS). With K = 1 this is exactly greedy search.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::decode {

class StepModel {
 public:
  virtual ~StepModel() = default;
  // The next-token log-probabilities [rows, V] after feeding tokens[r] to row r.
  virtual Tensor step(const std::vector<int32_t>& tokens) = 0;
  // Keep rows `index` (in that order, repeats allowed). sources_changed: some row now belongs to
  // another sentence than before (a sentence was dropped or the beams were first expanded).
  virtual void reorder(const std::vector<int64_t>& index, bool sources_changed) = 0;
};

// The widest beam any front end may ask for (the command line's --beam, Python's beam_size, the
// server's): each sentence keeps K hypotheses and scores 2K continuations a step, so a beam of 10⁶
// took gigabytes before its first step (issue 43); past 64 no published recipe goes.
constexpr int64_t kMaxBeamSize = 64;

// The largest length penalty α any front end takes (--alpha, Python's length_penalty, the
// server's): 0 ranks by Σ log p, published recipes use 0.6–1, and past 5 the ranking is by length
// alone. NaN or ∞ made every score NaN, so no hypothesis ranked above another (issue 43: Python's
// length_penalty=nan and 1e300 were taken).
constexpr float kMaxLengthPenalty = 5.0f;
// A qkv::Error "<what>: length_penalty (α) must be between 0 and 5, got nan" unless 0 ≤ α ≤ 5.
void check_length_penalty(float alpha, const char* what);

// The beam search's defaults, written once: every front end (TranslateOptions, the CLI's --beam and
// --alpha, qkv serve's fields, Python's keyword arguments) takes them from here — the 4 and 0.6 of
// Marian's and the Transformer paper's recipes.
inline constexpr int64_t kDefaultBeamSize = 4;
inline constexpr double kDefaultLengthPenalty = 0.6;

struct SearchOptions {
  int64_t beam_size = kDefaultBeamSize;
  float length_penalty = static_cast<float>(kDefaultLengthPenalty);  // α; 0 ranks by Σ log p
  int32_t bos_id = 2, eos_id = 3;
  // Hypotheses each sentence needs (beam search; 0: beam_size). Fewer than beam_size lets a
  // sentence stop as soon as its num_hypotheses best finished hypotheses can no longer be beaten:
  // log-probabilities only fall as a hypothesis grows, so a live beam's final score is at most
  // log p / lp(max_len) — the same results, fewer steps (CTranslate2 and fairseq stop so too).
  int64_t num_hypotheses = 0;
  // A token never chosen (−1: none): the translators pass the pad, which no hypothesis may hold —
  // a model rarely puts weight on it, but a random or converted one may (OPUS-MT's
  // generation_config bans it the same way, bad_words_ids = [[pad]]).
  int32_t banned_id = -1;
  // Rank and stop as Hugging Face transformers' generate(num_beams=…) does (transformers_beam.cpp):
  // score = log p / n^length_penalty, its stopping heuristic, EOS forced at the length limit. For
  // converted models whose outputs should equal transformers'. Beam search only.
  bool transformers_rule = false;
};

struct Hypothesis {
  std::vector<int32_t> tokens;  // without BOS and EOS
  double log_prob = 0;          // Σ log p, EOS included when it ended with EOS
  double score = 0;             // log_prob / lp(length) (beam) or log_prob (greedy)
  bool finished = false;        // ended with EOS (false: stopped at max_len)
};

// lp(n) = ((5 + n) / 6)^α
double length_penalty(int64_t n, float alpha);

// The model starts with one row per sentence (`max_len.size()` sentences); max_len[i] bounds the
// tokens generated for sentence i (EOS included).
std::vector<Hypothesis> greedy_search(StepModel& model, const std::vector<int64_t>& max_len, const SearchOptions& opt);
std::vector<Hypothesis> beam_search(StepModel& model, const std::vector<int64_t>& max_len, const SearchOptions& opt);
// Every sentence's n-best list: the K best of its finished hypotheses (those that ended with EOS,
// and the beams that ran out of length), best score first, ties in the order they finished — at
// least opt.num_hypotheses of them (all K when 0), more where they finished before the search could
// stop. beam_search returns the first of each (num_hypotheses 1).
std::vector<std::vector<Hypothesis>> beam_search_nbest(StepModel& model, const std::vector<int64_t>& max_len,
                                                       const SearchOptions& opt);
// The model's n rows (one per sentence) become n·K (one per beam, sentence s at rows s·K …): what
// both beam searches do before their first step.
void expand_to_beams(StepModel& model, int64_t n, int64_t K);
// The same search under transformers' rule (SearchOptions::transformers_rule; beam_search_nbest
// comes here when it is set).
std::vector<std::vector<Hypothesis>> transformers_beam_search_nbest(StepModel& model, const std::vector<int64_t>& max_len,
                                                                    const SearchOptions& opt);

}  // namespace qkv::decode
