#include "qkv/decode/classify.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/encoder_batches.h"
#include "qkv/text/unicode.h"

namespace qkv::decode {

namespace batching {

// The texts order[from … to) padded into one batch (row r is text order[from + r]).
Batch pad(const std::vector<text::HfEncoding>& encs, const std::vector<size_t>& order, size_t from, size_t to,
          int32_t pad_id) {
  Batch b;
  for (size_t i = from; i < to; ++i) b.T = std::max<int64_t>(b.T, static_cast<int64_t>(encs[order[i]].ids.size()));
  const int64_t B = static_cast<int64_t>(to - from);
  std::vector<int32_t> ids(static_cast<size_t>(B * b.T), pad_id), types(ids.size(), 0), mask(ids.size(), 0);
  for (size_t i = from; i < to; ++i) {
    const auto& e = encs[order[i]];
    const size_t at = (i - from) * static_cast<size_t>(b.T);
    std::copy(e.ids.begin(), e.ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy(e.token_type_ids.begin(), e.token_type_ids.end(), types.begin() + static_cast<std::ptrdiff_t>(at));
    std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(at), e.ids.size(), 1);
    b.lengths.push_back(static_cast<int64_t>(e.ids.size()));
  }
  b.ids = Tensor::from_ints(ids, {B, b.T}), b.types = Tensor::from_ints(types, {B, b.T});
  b.mask = Tensor::from_ints(mask, {B, b.T});
  return b;
}

// The token types the model is given (uses_token_types: the tokenizer's, else zeros), each checked
// against the types the model knows; `what` names the task in errors.
void give_token_types(text::HfEncoding& e, const models::MaskedLanguageModel& model, bool types, const char* what) {
  if (!types) e.token_type_ids.assign(e.ids.size(), 0);
  for (int32_t t : e.token_type_ids)
    QKV_CHECK(t < std::max<int64_t>(model.type_vocab_size(), 1), what, ": the tokenizer gives token type ", t,
              " but the model knows ", model.type_vocab_size(), " (type_vocab_size)");
}

void batches(const std::vector<text::HfEncoding>& encs, int64_t batch_size, int32_t pad_id,
             const std::function<void(const Batch&, const std::vector<size_t>&)>& run) {
  QKV_CHECK(batch_size >= 1, "batch_size must be at least 1, got ", batch_size);
  std::vector<size_t> order(encs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return encs[a].ids.size() > encs[b].ids.size(); });
  for (size_t from = 0; from < encs.size(); from += static_cast<size_t>(batch_size)) {
    const size_t to = std::min(encs.size(), from + static_cast<size_t>(batch_size));
    NoGradGuard no_grad;
    run(pad(encs, order, from, to, pad_id), std::vector<size_t>(order.begin() + static_cast<std::ptrdiff_t>(from),
                                                                order.begin() + static_cast<std::ptrdiff_t>(to)));
  }
}

int32_t pad_id_of(const text::HfTokenizer& tokenizer) { return std::max(tokenizer.pad_token_id(), 0); }

}  // namespace batching

namespace {

using namespace batching;

// The longest input a pair is cut to: the tokenizer's model_max_length (the pipelines' and
// CrossEncoder's cut), at most the model's positions.
int64_t longest_input(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer) {
  return std::min(model.max_positions(), tokenizer.model_max_length().value_or(INT64_MAX));
}

// Every text encoded (with its pair where given), each checked against the model's positions and
// token types; `what` names the task in errors.
std::vector<text::HfEncoding> encode_all(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                         const std::vector<std::string>& texts, const std::vector<std::string>& pairs,
                                         const char* what, bool offsets = false) {
  QKV_CHECK(pairs.empty() || pairs.size() == texts.size(), what, ": ", pairs.size(), " text pairs for ", texts.size(),
            " texts");
  const bool types = uses_token_types(model, tokenizer);
  std::vector<text::HfEncoding> encs;
  for (size_t i = 0; i < texts.size(); ++i) {
    text::HfEncoding e;
    if (pairs.empty() && offsets)
      e = tokenizer.encode_with_offsets(texts[i]);
    else if (pairs.empty())
      e.ids = tokenizer.encode(texts[i]), e.token_type_ids.assign(e.ids.size(), 0);
    else
      e = tokenizer.encode_pair(texts[i], pairs[i]);
    QKV_CHECK(!e.ids.empty(), what, ": the text '", excerpt(texts[i]), "' has no tokens");
    QKV_CHECK(static_cast<int64_t>(e.ids.size()) <= model.max_positions(), what, ": the text '", excerpt(texts[i]),
              "' is ", e.ids.size(), " tokens long, more than the model's ", model.max_positions(), " positions");
    give_token_types(e, model, types, what);
    encs.push_back(std::move(e));
  }
  return encs;
}

// softmax(x) over a row, in double.
std::vector<double> softmax(const float* x, int64_t n) {
  const double mx = *std::max_element(x, x + n);
  std::vector<double> p(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[static_cast<size_t>(i)] = std::exp(static_cast<double>(x[i]) - mx);
  for (double& v : p) v /= sum;
  return p;
}

// "B-PER" → {'B', "PER"}; "I-PER" → {'I', "PER"}; "PER" → {'I', "PER"} (the pipeline's get_tag).
std::pair<char, std::string> tag_of(const std::string& entity) {
  if (entity.starts_with("B-")) return {'B', entity.substr(2)};
  if (entity.starts_with("I-")) return {'I', entity.substr(2)};
  return {'I', entity};
}

}  // namespace

bool uses_token_types(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer) {
  return model.type_vocab_size() > 0 && tokenizer.returns_token_type_ids().value_or(true);
}

std::vector<std::vector<LabelScore>> text_classification(const models::MaskedLanguageModel& model,
                                                         const text::HfTokenizer& tokenizer,
                                                         const std::vector<std::string>& texts,
                                                         const TextClassificationOptions& options) {
  const models::EncoderTask task = model.task();
  QKV_CHECK(task.classifier == nn::BertClassifier::sequence,
            "text classification: the model has no sequence classifier (convert a …ForSequenceClassification folder)");
  ClassificationFunction f = options.function;
  if (f == ClassificationFunction::auto_) {  // as the pipeline picks it from the config
    if (task.problem_type == nn::BertProblem::regression)
      f = ClassificationFunction::none;
    else if (task.problem_type == nn::BertProblem::multi_label || task.labels.size() == 1)
      f = ClassificationFunction::sigmoid;
    else
      f = ClassificationFunction::softmax;
  }
  const auto encs = encode_all(model, tokenizer, texts, options.text_pairs, "text classification");
  const int64_t L = static_cast<int64_t>(task.labels.size());
  std::vector<std::vector<LabelScore>> out(texts.size());
  batches(encs, options.batch_size, pad_id_of(tokenizer), [&](const Batch& b, const std::vector<size_t>& rows) {
    const std::vector<float> logits = model.classify(b.ids, b.types, b.mask).to_vector();  // [B, L]
    for (size_t r = 0; r < b.lengths.size(); ++r) {
      const float* row = logits.data() + static_cast<int64_t>(r) * L;
      std::vector<double> s;
      if (f == ClassificationFunction::softmax)
        s = softmax(row, L);
      else
        for (int64_t i = 0; i < L; ++i)
          s.push_back(f == ClassificationFunction::sigmoid ? 1 / (1 + std::exp(-static_cast<double>(row[i]))) : row[i]);
      std::vector<LabelScore> scores;
      for (int64_t i = 0; i < L; ++i)
        scores.push_back({task.labels[static_cast<size_t>(i)], s[static_cast<size_t>(i)]});
      std::stable_sort(scores.begin(), scores.end(),
                       [](const LabelScore& a, const LabelScore& b) { return a.score > b.score; });
      if (options.top_k > 0 && options.top_k < L) scores.resize(static_cast<size_t>(options.top_k));
      out[rows[r]] = std::move(scores);
    }
  });
  return out;
}

std::vector<std::vector<TokenEntity>> token_classification(const models::MaskedLanguageModel& model,
                                                           const text::HfTokenizer& tokenizer,
                                                           const std::vector<std::string>& texts,
                                                           const TokenClassificationOptions& options) {
  const models::EncoderTask task = model.task();
  QKV_CHECK(task.classifier == nn::BertClassifier::token,
            "token classification: the model has no token classifier (convert a …ForTokenClassification folder)");
  const auto encs = encode_all(model, tokenizer, texts, {}, "token classification", /*offsets=*/true);
  const int64_t L = static_cast<int64_t>(task.labels.size());
  auto ignored = [&](const std::string& e) {
    return std::find(options.ignore_labels.begin(), options.ignore_labels.end(), e) != options.ignore_labels.end();
  };
  const std::string prefix = tokenizer.continuing_subword_prefix();
  std::vector<std::vector<TokenEntity>> out(texts.size());
  batches(encs, options.batch_size, pad_id_of(tokenizer), [&](const Batch& b, const std::vector<size_t>& rows) {
    const std::vector<float> logits = model.classify(b.ids, b.types, b.mask).to_vector();  // [B, T, L]
    for (size_t r = 0; r < b.lengths.size(); ++r) {
      const auto& ids = encs[rows[r]].ids;
      const auto& offsets = encs[rows[r]].offsets;
      const std::string text = text::valid_utf8(texts[rows[r]]);
      // Each token but the special ones: its label, score, position, spelling and place, its
      // probabilities, and whether it goes on the word before it (the pipeline's is_subword: a
      // continuing-prefix vocabulary's token that spells more than it covers — "##ing" —, else one
      // that starts right after a character that is not a space; never an unknown token)
      struct Token {
        TokenEntity e;
        std::vector<double> p;
        bool subword;
      };
      std::vector<Token> tokens;
      for (int64_t t = 0; t < b.lengths[r]; ++t) {
        const int32_t id = ids[static_cast<size_t>(t)];
        if (tokenizer.is_special(id)) continue;
        std::vector<double> p = softmax(logits.data() + (static_cast<int64_t>(r) * b.T + t) * L, L);
        const auto best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
        auto [start, end] = offsets[static_cast<size_t>(t)];
        start = std::min(start, text.size()), end = std::clamp(end, start, text.size());
        const std::string covered = text.substr(start, end - start), spelled = tokenizer.id_to_token(id);
        const bool unknown = id == tokenizer.unk_token_id();
        bool subword = false;
        if (!unknown && !prefix.empty())
          subword = text::code_points(spelled, spelled.size()) != text::code_points(covered, covered.size());
        else if (!unknown)
          subword = start > 0 && text[start] != ' ' && text[text::char_start_before(text, start)] != ' ';
        tokens.push_back(
            {{task.labels[best], p[best], t, unknown ? covered : spelled, start, end}, std::move(p), subword});
      }
      std::vector<TokenEntity> entities;
      if (options.aggregation == Aggregation::none) {
        for (auto& tk : tokens)
          if (!ignored(tk.e.entity)) entities.push_back(std::move(tk.e));
        out[rows[r]] = std::move(entities);
        continue;
      }
      // The units grouped: the tokens (simple), or the words (first, average, max: a token and the
      // subwords after it, labelled by the first token's argmax, by the argmax of the one with the
      // highest score, or by the argmax of their mean probabilities)
      struct Unit {
        std::string entity;
        double score;
        size_t from, to;   // its tokens [from, to)
        std::string word;  // a token's, or the word's tokens' through the decoder
      };
      std::vector<Unit> units;
      for (size_t i = 0; i < tokens.size();) {
        size_t j = i + 1;
        if (options.aggregation != Aggregation::simple)
          while (j < tokens.size() && tokens[j].subword) ++j;
        std::vector<double> p = tokens[i].p;
        if (options.aggregation == Aggregation::max) {
          size_t top = i;
          for (size_t k = i + 1; k < j; ++k)
            if (tokens[k].e.score > tokens[top].e.score) top = k;
          p = tokens[top].p;
        } else if (options.aggregation == Aggregation::average) {
          for (size_t k = i + 1; k < j; ++k)
            for (size_t c = 0; c < p.size(); ++c) p[c] += tokens[k].p[c];
          for (double& v : p) v /= static_cast<double>(j - i);
        }
        const auto best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
        std::vector<std::string> words;
        for (size_t k = i; k < j; ++k) words.push_back(tokens[k].e.word);
        units.push_back(
            {task.labels[best], p[best], i, j,
             options.aggregation == Aggregation::simple ? words[0] : tokenizer.convert_tokens_to_string(words)});
        i = j;
      }
      // Groups: a unit joins the group before it when its tag is the group's and it is not a B-; its
      // word the units' words through the decoder (the pipeline's convert_tokens_to_string: a
      // SentencePiece decoder joins two words' texts without a space, as the pipeline does)
      for (size_t i = 0; i < units.size();) {
        size_t j = i + 1;
        const std::string tag = tag_of(units[i].entity).second;
        while (j < units.size() && tag_of(units[j].entity) == std::pair<char, std::string>{'I', tag}) ++j;
        double sum = 0;
        std::vector<std::string> words;
        for (size_t k = i; k < j; ++k) sum += units[k].score, words.push_back(units[k].word);
        TokenEntity g{tag,
                      sum / static_cast<double>(j - i),
                      -1,
                      tokenizer.convert_tokens_to_string(words),
                      tokens[units[i].from].e.start,
                      tokens[units[j - 1].to - 1].e.end};
        if (!ignored(g.entity)) entities.push_back(std::move(g));
        i = j;
      }
      out[rows[r]] = std::move(entities);
    }
  });
  return out;
}

std::vector<RankedDocument> rerank(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                   const std::string& query, const std::vector<std::string>& documents,
                                   const RerankOptions& options, std::vector<int64_t>* tokens) {
  const models::EncoderTask task = model.task();
  QKV_CHECK(
      task.classifier == nn::BertClassifier::sequence,
      "rerank: the model has no sequence classifier (a cross-encoder: convert its …ForSequenceClassification folder)");
  QKV_CHECK(task.labels.size() == 1, "rerank: a cross-encoder scores a pair with one label, and this classifier has ",
            task.labels.size(), " (", excerpt(task.labels[0]),
            ", …): classify the pairs with text classification instead");
  ClassificationFunction f = options.function;
  QKV_CHECK(f != ClassificationFunction::softmax, "rerank: softmax over one label is always 1 (sigmoid or none)");
  if (f == ClassificationFunction::auto_)
    f = task.score_activation == nn::ScoreActivation::identity ? ClassificationFunction::none
                                                               : ClassificationFunction::sigmoid;
  // the cut: max_length, or the tokenizer's model_max_length (CrossEncoder's), or the model's positions
  int64_t max_length = options.max_length;
  if (max_length <= 0) max_length = longest_input(model, tokenizer);
  QKV_CHECK(max_length <= model.max_positions(), "rerank: max_length ", max_length, " is more than the model's ",
            model.max_positions(), " positions");
  const bool types = uses_token_types(model, tokenizer);
  std::vector<text::HfEncoding> encs;
  for (const std::string& doc : documents) {
    text::HfEncoding e = tokenizer.encode_pair_truncated(query, doc, max_length);
    QKV_CHECK(!e.ids.empty() && static_cast<int64_t>(e.ids.size()) <= max_length, "rerank: max_length ", max_length,
              " leaves no room for the pair's special tokens");
    give_token_types(e, model, types, "rerank");
    if (tokens) tokens->push_back(static_cast<int64_t>(e.ids.size()));
    encs.push_back(std::move(e));
  }
  std::vector<RankedDocument> out(documents.size());
  batches(encs, options.batch_size, pad_id_of(tokenizer), [&](const Batch& b, const std::vector<size_t>& rows) {
    const std::vector<float> logits = model.classify(b.ids, b.types, b.mask).to_vector();  // [B, 1]
    for (size_t r = 0; r < rows.size(); ++r) {
      const double x = logits[r];
      out[rows[r]] = {static_cast<int64_t>(rows[r]), f == ClassificationFunction::sigmoid ? 1 / (1 + std::exp(-x)) : x};
    }
  });
  std::stable_sort(out.begin(), out.end(),
                   [](const RankedDocument& a, const RankedDocument& b) { return a.score > b.score; });
  if (options.top_k > 0 && options.top_k < static_cast<int64_t>(out.size()))
    out.resize(static_cast<size_t>(options.top_k));
  return out;
}

namespace {

// template.format(label) for the forms a hypothesis template takes: "{}" and "{0}" the label, "{{" and
// "}}" a brace; anything else between braces, or no field at all, an error naming the template.
std::string format_hypothesis(const std::string& t, const std::string& label) {
  std::string out;
  bool field = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '{' && i + 1 < t.size() && t[i + 1] == '{') {
      out += '{', ++i;
    } else if (t[i] == '}' && i + 1 < t.size() && t[i + 1] == '}') {
      out += '}', ++i;
    } else if (t.compare(i, 2, "{}") == 0 || t.compare(i, 3, "{0}") == 0) {
      out += label, field = true, i += t[i + 1] == '}' ? 1 : 2;
    } else {
      QKV_CHECK(t[i] != '{' && t[i] != '}', "zero-shot: the hypothesis template '", excerpt(t),
                "' has a brace that is not {}, {0}, {{ or }}");
      out += t[i];
    }
  }
  QKV_CHECK(field, "zero-shot: the hypothesis template '", excerpt(t),
            "' has no {} where the label goes (e.g. \"This example is {}.\")");
  return out;
}

}  // namespace

std::vector<std::string> parse_candidate_labels(const std::string& labels) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= labels.size()) {
    size_t to = labels.find(',', from);
    if (to == std::string::npos) to = labels.size();
    // (Python's str.strip: whitespace, not only spaces)
    size_t a = from, b = to;
    while (a < b && std::isspace(static_cast<unsigned char>(labels[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(labels[b - 1]))) --b;
    if (b > a) out.push_back(labels.substr(a, b - a));
    from = to + 1;
  }
  return out;
}

std::vector<std::vector<LabelScore>> zero_shot_classification(const models::MaskedLanguageModel& model,
                                                              const text::HfTokenizer& tokenizer,
                                                              const std::vector<std::string>& texts,
                                                              const std::vector<std::string>& candidate_labels,
                                                              const ZeroShotOptions& options) {
  const models::EncoderTask task = model.task();
  QKV_CHECK(task.classifier == nn::BertClassifier::sequence,
            "zero-shot: the model has no sequence classifier (an NLI model: convert its …ForSequenceClassification "
            "folder)");
  QKV_CHECK(!candidate_labels.empty(), "zero-shot: no candidate labels");
  // the entailment label (the pipeline's: the first whose name starts with "entail", any case), and
  // contradiction the first label, or the last where entailment is the first
  int64_t entail = -1;
  for (size_t i = 0; i < task.labels.size() && entail < 0; ++i) {
    std::string l = task.labels[i].substr(0, 6);
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == "entail") entail = static_cast<int64_t>(i);
  }
  QKV_CHECK(entail >= 0 && task.labels.size() >= 2, "zero-shot: the model's labels (", excerpt(task.labels[0]),
            task.labels.size() > 1 ? ", …" : "",
            ") name no entailment: zero-shot classification needs an NLI model "
            "whose config's id2label has one (\"entailment\")");
  const int64_t contra = entail == 0 ? static_cast<int64_t>(task.labels.size()) - 1 : 0;
  std::vector<std::string> hypotheses;
  for (const std::string& label : candidate_labels)
    hypotheses.push_back(format_hypothesis(options.hypothesis_template, label));
  const int64_t max_length = longest_input(model, tokenizer);
  const bool types = uses_token_types(model, tokenizer);
  std::vector<text::HfEncoding> encs;  // text t's hypothesis h at t·n + h
  for (const std::string& text : texts)
    for (size_t h = 0; h < hypotheses.size(); ++h) {
      text::HfEncoding e =
          tokenizer.encode_pair_truncated(text, hypotheses[h], max_length, text::HfTokenizer::Truncation::only_first);
      QKV_CHECK(static_cast<int64_t>(e.ids.size()) <= model.max_positions(), "zero-shot: the hypothesis '",
                excerpt(hypotheses[h]), "' with its special tokens leaves the text no room in the model's ",
                model.max_positions(), " positions");
      give_token_types(e, model, types, "zero-shot");
      encs.push_back(std::move(e));
    }
  const int64_t L = static_cast<int64_t>(task.labels.size());
  std::vector<float> logits(encs.size() * static_cast<size_t>(L));  // [pairs, L]
  batches(encs, options.batch_size, pad_id_of(tokenizer), [&](const Batch& b, const std::vector<size_t>& rows) {
    const std::vector<float> x = model.classify(b.ids, b.types, b.mask).to_vector();  // [B, L]
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy(x.begin() + static_cast<std::ptrdiff_t>(r) * L, x.begin() + static_cast<std::ptrdiff_t>(r + 1) * L,
                logits.begin() + static_cast<std::ptrdiff_t>(rows[r]) * L);
  });
  const size_t n = candidate_labels.size();
  std::vector<std::vector<LabelScore>> out(texts.size());
  for (size_t t = 0; t < texts.size(); ++t) {
    const float* row = logits.data() + t * n * static_cast<size_t>(L);  // [n, L]
    std::vector<LabelScore>& scores = out[t];
    if (options.multi_label || n == 1) {
      // each label alone: softmax(contradiction, entailment)[entailment]
      for (size_t h = 0; h < n; ++h) {
        const float pair[2] = {row[h * L + contra], row[h * L + entail]};
        scores.push_back({candidate_labels[h], softmax(pair, 2)[1]});
      }
    } else {  // softmax of the entailment logits over the labels
      std::vector<float> e(n);
      for (size_t h = 0; h < n; ++h) e[h] = row[h * L + entail];
      const std::vector<double> p = softmax(e.data(), static_cast<int64_t>(n));
      for (size_t h = 0; h < n; ++h) scores.push_back({candidate_labels[h], p[h]});
    }
    std::stable_sort(scores.begin(), scores.end(),
                     [](const LabelScore& a, const LabelScore& b) { return a.score > b.score; });
  }
  return out;
}

std::vector<std::vector<float>> embed(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                      const std::vector<std::string>& texts, const EmbedOptions& options,
                                      std::vector<int64_t>* tokens) {
  const models::EncoderTask task = model.task();
  nn::BertPooling pooling = options.pooling != nn::BertPooling::unset ? options.pooling : task.pooling;
  if (pooling == nn::BertPooling::unset) pooling = nn::BertPooling::mean;
  const bool normalize = options.normalize >= 0 ? options.normalize > 0 : task.normalize;
  int64_t max_length = options.max_length > 0    ? options.max_length
                       : task.max_seq_length > 0 ? task.max_seq_length
                                                 : model.max_positions();
  QKV_CHECK(max_length >= 1, "embed: max_length must be at least 1, got ", max_length);
  max_length = std::min(max_length, model.max_positions());
  std::vector<text::HfEncoding> encs;
  for (const std::string& text : texts) {
    text::HfEncoding e;
    e.ids = tokenizer.encode_truncated(text, max_length);
    QKV_CHECK(!e.ids.empty(), "embed: the text '", excerpt(text), "' has no tokens");
    e.token_type_ids.assign(e.ids.size(), 0);
    if (tokens) tokens->push_back(static_cast<int64_t>(e.ids.size()));
    encs.push_back(std::move(e));
  }
  std::vector<std::vector<float>> out(texts.size());
  batches(encs, options.batch_size, pad_id_of(tokenizer), [&](const Batch& b, const std::vector<size_t>& rows) {
    const Tensor h = model.encode(b.ids, b.types, b.mask);  // [B, T, E]
    const int64_t E = h.size(2);
    const std::vector<float> v = h.to_vector();
    for (size_t r = 0; r < b.lengths.size(); ++r) {
      const float* x = v.data() + static_cast<int64_t>(r) * b.T * E;
      const int64_t n = b.lengths[r];
      std::vector<double> e(static_cast<size_t>(E), pooling == nn::BertPooling::max ? -INFINITY : 0.0);
      // cls: x[0];  mean: Σₜ x[t] / n;  max: maxₜ x[t]   (t over the text's tokens, special ones included)
      for (int64_t t = 0; t < (pooling == nn::BertPooling::cls ? 1 : n); ++t)
        for (int64_t d = 0; d < E; ++d) {
          double& a = e[static_cast<size_t>(d)];
          a = pooling == nn::BertPooling::max ? std::max(a, static_cast<double>(x[t * E + d])) : a + x[t * E + d];
        }
      if (pooling == nn::BertPooling::mean)
        for (double& a : e) a /= static_cast<double>(n);
      double norm = 0;
      for (double a : e) norm += a * a;
      // e / max(‖e‖₂, 1e-12)   (torch.nn.functional.normalize)
      const double scale = normalize ? 1 / std::max(std::sqrt(norm), 1e-12) : 1.0;
      std::vector<float> f;
      for (double a : e) f.push_back(static_cast<float>(a * scale));
      out[rows[r]] = std::move(f);
    }
  });
  return out;
}

}  // namespace qkv::decode
