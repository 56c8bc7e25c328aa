#include "qkv/decode/translator.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/core/utf8.h"
#include "qkv/decode/ensemble.h"
#include "qkv/ops.h"
#include "qkv/text/parallel_corpus.h"

namespace qkv::decode {

Seq2SeqStepModel::Seq2SeqStepModel(const models::Seq2SeqModel& model, const Tensor& src, bool use_cache)
    : model_(model), state_(model.start_decoding(src, use_cache)) {}

Tensor Seq2SeqStepModel::step(const std::vector<int32_t>& tokens) { return model_.step(tokens, *state_); }

void Seq2SeqStepModel::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  state_->reorder(index, sources_changed);
}

namespace {

// What the models of an ensemble must share; the shortest max_len bounds the sources.
struct Common {
  int64_t vocab_size, max_len;
  models::SpecialTokens ids;
};
Common common_config(const std::vector<const models::Seq2SeqModel*>& models) {
  QKV_CHECK(!models.empty(), "translate: no model");
  for (const auto* m : models)
    QKV_CHECK(m->source_image().height == 0, "translate: a ", m->type(),
              " model takes images, not text (caption images with `qkv caption`)");
  Common c{models[0]->vocab_size(), models[0]->max_len(), models[0]->special_tokens()};
  for (size_t i = 1; i < models.size(); ++i) {
    const models::SpecialTokens t = models[i]->special_tokens();
    const int64_t v = models[i]->vocab_size();
    QKV_CHECK(v == c.vocab_size && t.pad == c.ids.pad && t.bos == c.ids.bos && t.eos == c.ids.eos,
              "translate: ensemble model ", i + 1, " has vocab_size ", v, " and pad/BOS/EOS ", t.pad, "/", t.bos, "/",
              t.eos, "; model 1 has ", c.vocab_size, " and ", c.ids.pad, "/", c.ids.bos, "/", c.ids.eos,
              " (an ensemble needs one vocabulary)");
    c.max_len = std::min(c.max_len, models[i]->max_len());
  }
  return c;
}

}  // namespace

bool same_batch(const TranslateOptions& a, const TranslateOptions& b) {
  return a.beam_size == b.beam_size && a.length_penalty == b.length_penalty && a.max_extra == b.max_extra &&
         a.max_length == b.max_length && a.num_hypotheses == b.num_hypotheses && a.use_cache == b.use_cache &&
         a.transformers_beam == b.transformers_beam && a.max_input_length == b.max_input_length;
}

void check_options(const TranslateOptions& opt) {
  QKV_CHECK(opt.beam_size >= 1 && opt.beam_size <= kMaxBeamSize, "translate: beam_size must be between 1 and ",
            kMaxBeamSize, ", got ", opt.beam_size);
  check_length_penalty(opt.length_penalty, "translate");
  QKV_CHECK(opt.max_extra >= 1 && opt.max_extra <= kMaxExtraTokens,
            "translate: max_extra (the tokens an output may have past its source's length) must be between 1 and ",
            kMaxExtraTokens, ", got ", opt.max_extra);
  QKV_CHECK(opt.max_length >= 0 && opt.max_length <= kMaxDecodingLength,
            "translate: max_length (the most tokens an output may have, its EOS included; 0: no limit) must be between "
            "0 and ",
            kMaxDecodingLength, ", got ", opt.max_length);
  QKV_CHECK(opt.batch_size >= 1, "translate: batch_size must be ≥ 1, got ", opt.batch_size);
  QKV_CHECK(opt.num_hypotheses >= 0, "translate: num_hypotheses must be ≥ 0 (0: the whole beam), got ",
            opt.num_hypotheses);
  QKV_CHECK(opt.max_input_length >= -1, "translate: max_input_length must be ≥ −1 (−1: an over-long line is an error; 0: ",
            "the model's longest source), got ", opt.max_input_length);
}

void check_n_best(int64_t n, int64_t beam_size, const char* what) {
  QKV_CHECK(n >= 1 && n <= std::max<int64_t>(beam_size, 1), what, " must be between 1 and beam_size (", beam_size,
            "), got ", n);
}

std::vector<Hypothesis> translate_ids(const models::Seq2SeqModel& model,
                                      const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& opt) {
  return translate_ids(std::vector<const models::Seq2SeqModel*>{&model}, sources, opt);
}

std::vector<Hypothesis> translate_ids(const std::vector<const models::Seq2SeqModel*>& models,
                                      const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& opt) {
  std::vector<Hypothesis> out;
  TranslateOptions best = opt;
  best.num_hypotheses = 1;
  for (auto& n : translate_ids_nbest(models, sources, best)) out.push_back(std::move(n.front()));
  return out;
}

std::vector<std::vector<Hypothesis>> translate_ids_nbest(const std::vector<const models::Seq2SeqModel*>& models,
                                                         const std::vector<std::vector<int32_t>>& sources,
                                                         const TranslateOptions& opt) {
  check_options(opt);
  const Common c = common_config(models);
  std::vector<std::vector<Hypothesis>> out(sources.size());
  // longest first, so each batch holds sentences of similar length (little padding)
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });
  SearchOptions so;
  so.beam_size = opt.beam_size, so.length_penalty = opt.length_penalty, so.bos_id = c.ids.bos, so.eos_id = c.ids.eos;
  so.banned_id = c.ids.pad, so.transformers_rule = opt.transformers_beam;
  so.num_hypotheses = opt.beam_size > 1 ? std::min(opt.num_hypotheses, opt.beam_size) : 0;
  for (size_t b0 = 0; b0 < order.size(); b0 += static_cast<size_t>(opt.batch_size)) {
    const ThreadBudget threads;  // as many threads as there are free cores now (core/thread_budget.h)
    const size_t b1 = std::min(order.size(), b0 + static_cast<size_t>(opt.batch_size));
    const auto S = static_cast<int64_t>(sources[order[b0]].size()) + 1;
    QKV_CHECK(S <= c.max_len, "translate: a source of ", S, " tokens (EOS included) exceeds the model's max_len ",
              c.max_len);
    std::vector<int32_t> flat;
    std::vector<int64_t> max_len;
    for (size_t i = b0; i < b1; ++i) {
      const auto& s = sources[order[i]];
      flat.insert(flat.end(), s.begin(), s.end());
      flat.push_back(c.ids.eos);
      flat.insert(flat.end(), static_cast<size_t>(S) - s.size() - 1, c.ids.pad);
      // |source| + EOS + max_extra, max_length and the model's positions: the least
      const int64_t longest = std::min<int64_t>(static_cast<int64_t>(s.size()) + 1 + opt.max_extra, c.max_len);
      max_len.push_back(opt.max_length > 0 ? std::min(longest, opt.max_length) : longest);
    }
    const Tensor src = Tensor::from_ints(flat, {static_cast<int64_t>(b1 - b0), S});
    std::vector<std::unique_ptr<StepModel>> members;
    for (const auto* m : models) members.push_back(std::make_unique<Seq2SeqStepModel>(*m, src, opt.use_cache));
    std::unique_ptr<StepModel> sm =
        members.size() == 1 ? std::move(members[0]) : std::make_unique<EnsembleStepModel>(std::move(members));
    std::vector<std::vector<Hypothesis>> hyps;
    if (opt.beam_size == 1)
      for (auto& h : greedy_search(*sm, max_len, so)) hyps.push_back({std::move(h)});
    else
      hyps = beam_search_nbest(*sm, max_len, so);
    for (size_t i = b0; i < b1; ++i) out[order[i]] = std::move(hyps[i - b0]);
    if (opt.on_batch) opt.on_batch(static_cast<int64_t>(b1), static_cast<int64_t>(order.size()));
  }
  return out;
}

Translator::Translator(const models::Seq2SeqModel& model, const text::SentencePiece& sp)
    : Translator(std::vector<const models::Seq2SeqModel*>{&model}, sp) {}

Translator::Translator(std::vector<const models::Seq2SeqModel*> models, const text::SentencePiece& sp)
    : models_(std::move(models)), sp_(sp) {
  const Common c = common_config(models_);
  QKV_CHECK(c.vocab_size == sp_.vocab_size(), "translate: the models have ", c.vocab_size,
            " tokens but the tokenizer has ", sp_.vocab_size());
}

std::vector<int32_t> Translator::encode(const std::string& line) const {
  std::vector<int> ids = sp_.encode(text::normalize_spaces(line));
  return {ids.begin(), ids.end()};
}

std::string Translator::decode(const std::vector<int32_t>& ids) const { return sp_.decode({ids.begin(), ids.end()}); }

std::vector<std::vector<Hypothesis>> Translator::translate_nbest(const std::vector<std::string>& lines,
                                                                 const TranslateOptions& opt) const {
  check_options(opt);
  const int64_t max_len = common_config(models_).max_len;
  const int64_t limit = opt.max_input_length > 0 ? std::min(opt.max_input_length, max_len - 1) : max_len - 1;
  auto warn = [&](const std::string& w) {
    if (opt.on_warning) opt.on_warning(w);
    else std::fprintf(stderr, "qkv translate: warning: %s\n", w.c_str());
  };
  std::vector<std::vector<int32_t>> sources;
  std::vector<size_t> where;  // non-empty line i → sources[k]
  for (size_t i = 0; i < lines.size(); ++i) {
    // Invalid UTF-8 (a binary file, a Latin-1 line): the bad bytes become U+FFFD, and the user is told.
    std::string line = lines[i];
    if (const size_t bad = utf8::replace_invalid(line))
      warn(detail::concat("line ", i + 1, ": ", bad, " byte", bad > 1 ? "s" : "", " of invalid UTF-8 replaced by U+FFFD"));
    std::vector<int32_t> ids = encode(line);
    if (ids.empty()) continue;
    if (static_cast<int64_t>(ids.size()) > limit) {
      QKV_CHECK(opt.max_input_length >= 0, "translate: line ", i + 1, " has ", ids.size(),
                " tokens; the model takes at most ", limit);
      warn(detail::concat("line ", i + 1, ": ", ids.size(), " tokens, truncated to the first ", limit,
                          " (the model's longest source)"));
      ids.resize(static_cast<size_t>(limit));
    }
    sources.push_back(std::move(ids));
    where.push_back(i);
  }
  std::vector<std::vector<Hypothesis>> hyps = translate_ids_nbest(models_, sources, opt);
  std::vector<std::vector<Hypothesis>> out(lines.size());
  for (size_t k = 0; k < sources.size(); ++k) out[where[k]] = std::move(hyps[k]);
  return out;
}

std::vector<std::string> Translator::translate(const std::vector<std::string>& lines, const TranslateOptions& opt,
                                               std::vector<Hypothesis>* hyps_out) const {
  TranslateOptions best = opt;
  best.num_hypotheses = 1;
  std::vector<std::vector<Hypothesis>> nbest = translate_nbest(lines, best);
  std::vector<std::string> out(lines.size());
  if (hyps_out) hyps_out->assign(lines.size(), Hypothesis{});
  for (size_t i = 0; i < lines.size(); ++i) {
    if (nbest[i].empty()) continue;  // an empty line
    out[i] = decode(nbest[i].front().tokens);
    if (hyps_out) (*hyps_out)[i] = std::move(nbest[i].front());
  }
  return out;
}

}  // namespace qkv::decode
