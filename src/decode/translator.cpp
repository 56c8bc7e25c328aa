#include "qkv/decode/translator.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/decode/ensemble.h"
#include "qkv/ops.h"
#include "qkv/text/parallel_corpus.h"

namespace qkv::decode {

Seq2SeqStepModel::Seq2SeqStepModel(const nn::Seq2SeqTransformer& model, const Tensor& src, bool use_cache)
    : model_(model), use_cache_(use_cache) {
  NoGradGuard no_grad;
  memory_ = model.encode(src, &kpm_);
  if (use_cache_) {
    state_ = model.start_decoding(memory_, kpm_);
    memory_ = Tensor(), kpm_ = Tensor();
  } else {
    prefix_.assign(static_cast<size_t>(src.size(0)), {});
  }
}

Tensor Seq2SeqStepModel::step(const std::vector<int32_t>& tokens) {
  if (use_cache_) return model_.step(tokens, state_);
  // Recompute: run the decoder over every row's whole prefix, keep the last position.
  NoGradGuard no_grad;
  const auto rows = static_cast<int64_t>(prefix_.size());
  QKV_CHECK(static_cast<int64_t>(tokens.size()) == rows, "Seq2SeqStepModel: ", tokens.size(), " tokens for ", rows,
            " rows");
  for (size_t r = 0; r < prefix_.size(); ++r) prefix_[r].push_back(tokens[r]);  // the first step feeds BOS
  const auto T = static_cast<int64_t>(prefix_[0].size());
  std::vector<int32_t> flat;
  for (auto& p : prefix_) flat.insert(flat.end(), p.begin(), p.end());
  Tensor tgt = Tensor::from_ints(flat, {rows, T});
  Tensor h = model_.transformer->decoder->forward(model_.embed(tgt, 0), memory_, kpm_);
  Tensor logits = linear(h.select(1, T - 1), model_.embedding->weight);
  return log_softmax(logits, -1);
}

void Seq2SeqStepModel::reorder(const std::vector<int64_t>& index, bool sources_changed) {
  if (use_cache_) {
    state_.reorder(index, sources_changed);
    return;
  }
  std::vector<std::vector<int32_t>> p;
  for (int64_t i : index) p.push_back(prefix_[static_cast<size_t>(i)]);
  prefix_ = std::move(p);
  if (!sources_changed) return;
  memory_ = nn::gather_rows(memory_, index);  // the rows follow their hypotheses
  kpm_ = nn::gather_rows(kpm_, index);
}

namespace {

// What the models of an ensemble must share; the shortest max_len bounds the sources.
nn::Seq2SeqConfig common_config(const std::vector<const nn::Seq2SeqTransformer*>& models) {
  QKV_CHECK(!models.empty(), "translate: no model");
  nn::Seq2SeqConfig c = models[0]->config;
  for (size_t i = 1; i < models.size(); ++i) {
    const auto& m = models[i]->config;
    QKV_CHECK(m.vocab_size == c.vocab_size && m.pad_id == c.pad_id && m.bos_id == c.bos_id && m.eos_id == c.eos_id,
              "translate: ensemble model ", i + 1, " has vocab_size ", m.vocab_size, " and pad/BOS/EOS ", m.pad_id, "/",
              m.bos_id, "/", m.eos_id, "; model 1 has ", c.vocab_size, " and ", c.pad_id, "/", c.bos_id, "/", c.eos_id,
              " (an ensemble needs one vocabulary)");
    c.max_len = std::min(c.max_len, m.max_len);
  }
  return c;
}

}  // namespace

std::vector<Hypothesis> translate_ids(const nn::Seq2SeqTransformer& model,
                                      const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& opt) {
  return translate_ids(std::vector<const nn::Seq2SeqTransformer*>{&model}, sources, opt);
}

std::vector<Hypothesis> translate_ids(const std::vector<const nn::Seq2SeqTransformer*>& models,
                                      const std::vector<std::vector<int32_t>>& sources, const TranslateOptions& opt) {
  std::vector<Hypothesis> out;
  for (auto& n : translate_ids_nbest(models, sources, opt)) out.push_back(std::move(n.front()));
  return out;
}

std::vector<std::vector<Hypothesis>> translate_ids_nbest(const std::vector<const nn::Seq2SeqTransformer*>& models,
                                                         const std::vector<std::vector<int32_t>>& sources,
                                                         const TranslateOptions& opt) {
  const nn::Seq2SeqConfig c = common_config(models);
  std::vector<std::vector<Hypothesis>> out(sources.size());
  // longest first, so each batch holds sentences of similar length (little padding)
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });
  SearchOptions so;
  so.beam_size = opt.beam_size, so.length_penalty = opt.length_penalty, so.bos_id = c.bos_id, so.eos_id = c.eos_id;
  for (size_t b0 = 0; b0 < order.size(); b0 += static_cast<size_t>(opt.batch_size)) {
    const size_t b1 = std::min(order.size(), b0 + static_cast<size_t>(opt.batch_size));
    const auto S = static_cast<int64_t>(sources[order[b0]].size()) + 1;
    QKV_CHECK(S <= c.max_len, "translate: a source of ", S, " tokens (EOS included) exceeds the model's max_len ",
              c.max_len);
    std::vector<int32_t> flat;
    std::vector<int64_t> max_len;
    for (size_t i = b0; i < b1; ++i) {
      const auto& s = sources[order[i]];
      flat.insert(flat.end(), s.begin(), s.end());
      flat.push_back(c.eos_id);
      flat.insert(flat.end(), static_cast<size_t>(S) - s.size() - 1, c.pad_id);
      max_len.push_back(std::min<int64_t>(static_cast<int64_t>(s.size()) + 1 + opt.max_extra, c.max_len));
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

Translator::Translator(std::vector<const nn::Seq2SeqTransformer*> models, const text::SentencePiece& sp)
    : models_(std::move(models)), sp_(sp) {
  const nn::Seq2SeqConfig c = common_config(models_);
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
  const int64_t max_len = common_config(models_).max_len;
  std::vector<std::vector<int32_t>> sources;
  std::vector<size_t> where;  // non-empty line i → sources[k]
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int32_t> ids = encode(lines[i]);
    if (ids.empty()) continue;
    QKV_CHECK(static_cast<int64_t>(ids.size()) + 1 <= max_len, "translate: line ", i + 1, " has ", ids.size(),
              " tokens; the model takes at most ", max_len - 1);
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
  std::vector<std::vector<Hypothesis>> nbest = translate_nbest(lines, opt);
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
