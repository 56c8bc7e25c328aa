#include "qkv/decode/question_answering.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/decode/encoder_batches.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/classify.h"
#include "qkv/text/unicode.h"

namespace qkv::decode {

namespace {

using namespace batching;

// softmax over a window's logits (stride 2 in `logits`), the tokens not allowed at −10000 as the
// pipeline puts them: p[t].
std::vector<double> masked_softmax(const float* logits, const std::vector<bool>& allowed) {
  const size_t T = allowed.size();
  std::vector<double> p(T);
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t t = 0; t < T; ++t) mx = std::max(mx, p[t] = allowed[t] ? static_cast<double>(logits[2 * t]) : -10000.0);
  double sum = 0;
  for (double& v : p) sum += v = std::exp(v - mx);
  for (double& v : p) v /= sum;
  return p;
}

// tokenizers' Encoding::word_to_chars(word, sequence 1): from the first to the last token of that word
// of the context in this window; false where there is none.
bool word_chars(const text::HfEncoding& e, int32_t word, size_t* begin, size_t* end) {
  bool found = false;
  for (size_t t = 0; t < e.ids.size(); ++t) {
    if (e.sequence_ids[t] != 1 || e.word_ids[t] != word) continue;
    if (!found) *begin = e.offsets[t].first;
    *end = e.offsets[t].second;
    found = true;
  }
  return found;
}

}  // namespace

int64_t default_window(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer) {
  return std::min<int64_t>({tokenizer.model_max_length().value_or(384), 384, model.max_positions()});
}

std::vector<std::vector<Answer>> question_answering(const models::MaskedLanguageModel& model,
                                                    const text::HfTokenizer& tokenizer,
                                                    const std::vector<std::string>& questions,
                                                    const std::vector<std::string>& contexts,
                                                    const QuestionAnsweringOptions& options) {
  const models::EncoderTask task = model.task();
  QKV_CHECK(task.classifier == nn::BertClassifier::span,
            "question answering: the model has no question-answering head (convert a …ForQuestionAnswering folder)");
  QKV_CHECK(questions.size() == contexts.size(), "question answering: ", questions.size(), " questions for ",
            contexts.size(), " contexts");
  QKV_CHECK(options.top_k >= 1, "question answering: top_k must be at least 1, got ", options.top_k);
  QKV_CHECK(options.max_answer_len >= 1, "question answering: max_answer_len must be at least 1, got ",
            options.max_answer_len);
  const int64_t max_seq_len = options.max_seq_len > 0 ? options.max_seq_len : default_window(model, tokenizer);
  QKV_CHECK(max_seq_len <= model.max_positions(), "question answering: max_seq_len ", max_seq_len,
            " is more than the model's ", model.max_positions(), " positions");
  const int64_t stride = options.doc_stride >= 0 ? options.doc_stride : std::min<int64_t>(max_seq_len / 2, 128);
  QKV_CHECK(stride <= max_seq_len, "question answering: doc_stride ", stride, " is larger than max_seq_len ",
            max_seq_len);
  const bool types = uses_token_types(model, tokenizer);
  const int32_t cls = tokenizer.cls_token_id();

  // every question's windows, each with its allowed tokens
  std::vector<std::string> texts(contexts.size());
  std::vector<text::HfEncoding> encs;  // every question's windows, in order
  std::vector<size_t> example;         // the question each window belongs to
  for (size_t i = 0; i < questions.size(); ++i) {
    QKV_CHECK(!questions[i].empty(), "question answering: question ", i, " is empty");
    QKV_CHECK(!contexts[i].empty(), "question answering: context ", i, " is empty");
    texts[i] = text::valid_utf8(contexts[i]);
    std::vector<text::HfEncoding> parts;
    try {
      parts = tokenizer.encode_pair_windows(questions[i], contexts[i], max_seq_len, stride);
    } catch (const Error& e) {
      throw Error(detail::concat("question answering: question ", i, " '", excerpt(questions[i]), "': ", e.what()));
    }
    for (auto& p : parts) {
      give_token_types(p, model, types, "question answering");
      encs.push_back(std::move(p));
      example.push_back(i);
    }
  }

  std::vector<std::vector<Answer>> out(questions.size());
  std::vector<double> null(questions.size(), 1000000.0);
  std::vector<std::vector<std::pair<size_t, std::vector<Answer>>>> found(questions.size());  // per window, in order
  const size_t pre_top_k = static_cast<size_t>(options.align_to_words ? options.top_k * 2 + 10 : options.top_k);
  const auto L = static_cast<size_t>(options.max_answer_len);
  batches(encs, options.batch_size, pad_id_of(tokenizer), [&](const Batch& b, const std::vector<size_t>& rows) {
    const std::vector<float> logits = model.classify(b.ids, b.types, b.mask).to_vector();  // [B, T, 2]
    for (size_t r = 0; r < rows.size(); ++r) {
      const text::HfEncoding& e = encs[rows[r]];
      const size_t q = example[rows[r]];
      const size_t T = e.ids.size();
      std::vector<bool> allowed(T);
      for (size_t t = 0; t < T; ++t) allowed[t] = e.sequence_ids[t] == 1 || (cls >= 0 && e.ids[t] == cls);
      const float* row = logits.data() + r * static_cast<size_t>(b.T) * 2;
      std::vector<double> ps = masked_softmax(row, allowed), pe = masked_softmax(row + 1, allowed);
      if (options.handle_impossible_answer) null[q] = std::min(null[q], ps[0] * pe[0]);
      ps[0] = pe[0] = 0;
      // the spans s ≤ e < s + max_answer_len, best first (equal scores: the earlier start, then end)
      struct Span {
        double score;
        size_t s, e;
      };
      std::vector<Span> spans;
      for (size_t s = 0; s < T; ++s)
        for (size_t en = s; en < std::min(T, s + L); ++en) spans.push_back({ps[s] * pe[en], s, en});
      const size_t keep = std::min(pre_top_k, spans.size());
      auto better = [](const Span& a, const Span& c) {
        return a.score != c.score ? a.score > c.score : a.s != c.s ? a.s < c.s : a.e < c.e;
      };
      std::partial_sort(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(keep), spans.end(), better);
      std::vector<Answer> answers;
      for (size_t k = 0; k < keep; ++k) {
        const auto [score, s, en] = spans[k];
        if (!(score > 0) || !allowed[s] || !allowed[en]) continue;  // (only a masked token scores 0)
        size_t begin = e.offsets[s].first, end = e.offsets[en].second, unused = 0;
        if (options.align_to_words && e.word_ids[s] >= 0 && e.word_ids[en] >= 0 &&
            word_chars(e, e.word_ids[s], &begin, &unused) && word_chars(e, e.word_ids[en], &unused, &end)) {
        } else {
          begin = e.offsets[s].first, end = e.offsets[en].second;
        }
        const std::string& ctx = texts[q];
        begin = std::min(begin, ctx.size()), end = std::clamp(end, begin, ctx.size());
        answers.push_back({score, begin, end, ctx.substr(begin, end - begin)});
      }
      found[q].push_back({rows[r], std::move(answers)});
    }
  });
  for (size_t i = 0; i < questions.size(); ++i) {
    // the windows in their order (a batch takes them longest first)
    auto& per_window = found[i];
    std::sort(per_window.begin(), per_window.end(), [](const auto& a, const auto& c) { return a.first < c.first; });
    std::vector<Answer> answers;
    std::vector<std::string> lowered;
    for (auto& [window, list] : per_window)
      for (auto& a : list) {
        const std::string low = text::lowercase(a.answer);
        auto it = std::find(lowered.begin(), lowered.end(), low);
        if (it != lowered.end()) {
          answers[static_cast<size_t>(it - lowered.begin())].score += a.score;
        } else {
          lowered.push_back(low);
          answers.push_back(std::move(a));
        }
      }
    if (options.handle_impossible_answer) answers.push_back({null[i], 0, 0, ""});
    std::stable_sort(answers.begin(), answers.end(),
                     [](const Answer& a, const Answer& c) { return a.score > c.score; });
    if (answers.size() > static_cast<size_t>(options.top_k)) answers.resize(static_cast<size_t>(options.top_k));
    out[i] = std::move(answers);
  }
  return out;
}

}  // namespace qkv::decode
