#include "qkv/train/question_answering_task.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/encoder_batches.h"
#include "qkv/eval/squad.h"
#include "qkv/io/data_file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/models/model_file.h"
#include "qkv/ops.h"
#include "qkv/text/unicode.h"
#include "qkv/train/init_from.h"
#include "qkv/train/memory_plan.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kQaTask = "question_answering task";

const io::Fields<QuestionAnsweringDataConfig>& QuestionAnsweringDataConfig::fields() {
  using F = io::Fields<QuestionAnsweringDataConfig>;
  using C = QuestionAnsweringDataConfig;
  static const F f("question_answering task: data",
                   {
                       F::text("train", &C::train),
                       F::text("val", &C::val),
                       F::number("val_fraction", &C::val_fraction, 0, 1, /*hi_open=*/true),
                       F::integer("max_length", &C::max_length, 4, 1 << 20),
                       F::integer("doc_stride", &C::doc_stride, 0, 1 << 20),
                       F::boolean("version_2_with_negative", &C::version_2_with_negative),
                       F::integer("n_best_size", &C::n_best_size, 1, 1 << 16),
                       F::integer("max_answer_length", &C::max_answer_length, 1, 1 << 20),
                       F::number("null_score_diff_threshold", &C::null_score_diff_threshold, -1e30, 1e30),
                   });
  return f;
}

const io::Fields<QuestionAnsweringTaskConfig>& QuestionAnsweringTaskConfig::fields() {
  static const auto f = fine_tuning_config_fields<QuestionAnsweringTaskConfig>("question answering task");
  return f;
}

namespace {

// One example from its question object (context apart: SQuAD JSON keeps it in the paragraph), with its
// answers as SQuAD JSON lists them ([{"text", "answer_start"}]) or Hugging Face datasets ({"text": [...],
// "answer_start": [...]}).
QaExample example_of(const json& q, std::string context, size_t line, const std::string& where, bool allow_no_answer) {
  QaExample e;
  e.line = line;
  e.question = text_field(q, "question", where);
  e.context = std::move(context);
  if (q.contains("id")) e.id = q["id"].is_string() ? q["id"].get<std::string>() : q["id"].dump();
  QKV_CHECK(!e.context.empty(), where, ": the context is empty");
  QKV_CHECK(e.question.find_first_not_of(" \t\n\r") != std::string::npos, where, ": the question is empty");
  std::vector<std::pair<std::string, json>> answers;  // (text, answer_start)
  const json none = json::array();
  const json& a = q.contains("answers") ? q["answers"] : none;
  if (a.is_object()) {
    QKV_CHECK(a.contains("text") && a.contains("answer_start") && a["text"].is_array() &&
                  a["answer_start"].is_array() && a["text"].size() == a["answer_start"].size(),
              where, ": \"answers\" must hold lists \"text\" and \"answer_start\" of one length");
    for (size_t i = 0; i < a["text"].size(); ++i) {
      QKV_CHECK(a["text"][i].is_string(), where, ": an answer's text is not a string");
      answers.emplace_back(a["text"][i].get<std::string>(), a["answer_start"][i]);
    }
  } else {
    QKV_CHECK(a.is_array(), where, ": \"answers\" is neither a list nor an object of lists");
    for (const json& x : a) {
      QKV_CHECK(x.is_object() && x.contains("text") && x["text"].is_string() && x.contains("answer_start"), where,
                ": an answer is not an object with \"text\" and \"answer_start\"");
      answers.emplace_back(x["text"].get<std::string>(), x["answer_start"]);
    }
  }
  const bool impossible = q.contains("is_impossible") && q["is_impossible"].is_boolean() && q["is_impossible"];
  if (impossible) answers.clear();  // (SQuAD 2.0 JSON: plausible_answers aside)
  QKV_CHECK(!answers.empty() || allow_no_answer, where,
            ": the question has no answer — set data.version_2_with_negative (SQuAD 2.0) to train on such");
  for (size_t i = 0; i < answers.size(); ++i) {
    const auto& [t, start] = answers[i];
    QKV_CHECK(start.is_number_integer() && start.get<int64_t>() >= 0, where, ": answer_start ",
              excerpt(start.dump(), 30), " is not a character index (an integer ≥ 0)");
    QKV_CHECK(!t.empty(), where, ": an answer's text is empty");
    const size_t begin = text::byte_of_code_point(e.context, static_cast<size_t>(start.get<int64_t>()));
    QKV_CHECK(begin < e.context.size() && e.context.compare(begin, t.size(), t) == 0, where, ": the answer \"",
              excerpt(t), "\" does not stand at character ", start.get<int64_t>(), " of the context");
    if (i == 0) e.answer_begin = begin, e.answer_end = begin + t.size();
    e.answers.push_back(t);
  }
  return e;
}

}  // namespace

std::vector<QaExample> read_qa_examples(const std::string& path, bool allow_no_answer) {
  const std::string text = io::read_data_file(path, detail::concat(kQaTask, ": data"));
  const std::string ext = fs::path(path).extension().string();
  QKV_CHECK(ext == ".json" || ext == ".jsonl", kQaTask, ": '", path,
            "' is neither .json (SQuAD's: data → paragraphs → qas) nor .jsonl (an example a line: id, question, "
            "context, answers)");
  std::vector<QaExample> out;
  if (ext == ".jsonl") {
    for (const auto& [number, j, csv] : data_rows(text, path, kQaTask, "id, question, context, answers")) {
      const std::string where = detail::concat(kQaTask, ": '", path, "' line ", number);
      out.push_back(example_of(j, text_field(j, "context", where), number, where, allow_no_answer));
    }
  } else {
    json j;
    try {
      j = io::parse_json(text, detail::concat(kQaTask, ": '", path, "'"));
    } catch (const json::exception& e) {
      throw Error(detail::concat(kQaTask, ": '", path, "': not JSON (", e.what(), ")"));
    }
    QKV_CHECK(j.is_object() && j.contains("data") && j["data"].is_array(), kQaTask, ": '", path,
              "' is not SQuAD's JSON (an object with a list \"data\")");
    size_t number = 0;
    for (const json& article : j["data"]) {
      QKV_CHECK(article.is_object() && article.contains("paragraphs") && article["paragraphs"].is_array(), kQaTask, ": '",
                path, "': an article without a list \"paragraphs\"");
      for (const json& p : article["paragraphs"]) {
        const std::string where_p = detail::concat(kQaTask, ": '", path, "' question ", number + 1);
        QKV_CHECK(p.is_object() && p.contains("qas") && p["qas"].is_array(), where_p,
                  ": a paragraph without a list \"qas\"");
        const std::string context = text_field(p, "context", where_p);
        for (const json& q : p["qas"]) {
          ++number;
          const std::string where =
              detail::concat(kQaTask, ": '", path, "' question ", number,
                             q.is_object() && q.contains("id") && q["id"].is_string()
                                 ? detail::concat(" (id ", excerpt(q["id"].get<std::string>()), ")")
                                 : std::string());
          out.push_back(example_of(q, context, number, where, allow_no_answer));
        }
      }
    }
  }
  QKV_CHECK(!out.empty(), kQaTask, ": '", path, "' holds no questions");
  return out;
}

QaWindows qa_windows(const std::vector<QaExample>& examples, const text::HfTokenizer& tok,
                     const models::MaskedLanguageModel& model, int64_t max_length, int64_t doc_stride,
                     bool keep_offsets) {
  QaWindows out;
  const bool types = decode::uses_token_types(model, tok);
  const int32_t cls = tok.cls_token_id() >= 0 ? tok.cls_token_id() : tok.bos_token_id();
  io::ProgressBar bar("windows", static_cast<int64_t>(examples.size()), 0, /*delay_seconds=*/2);
  for (size_t k = 0; k < examples.size(); ++k) {
    const QaExample& x = examples[k];
    const std::string_view question = std::string_view(x.question).substr(x.question.find_first_not_of(" \t\n\r"));
    std::vector<text::HfEncoding> parts;
    try {
      parts = tok.encode_pair_windows(question, x.context, max_length, doc_stride);
    } catch (const Error& e) {
      throw Error(detail::concat(kQaTask, ": question ", x.line, x.id.empty() ? "" : " (id " + excerpt(x.id) + ")", ": ",
                                 e.what(), " (data.max_length ", max_length, ", data.doc_stride ", doc_stride, ")"));
    }
    for (text::HfEncoding& w : parts) {
      // the window's context tokens: first … last (sequence 1)
      const auto T = static_cast<int64_t>(w.ids.size());
      int64_t first = 0, last = T - 1;
      while (first < T && w.sequence_ids[static_cast<size_t>(first)] != 1) ++first;
      while (last >= 0 && w.sequence_ids[static_cast<size_t>(last)] != 1) --last;
      const auto where_cls = std::find(w.ids.begin(), w.ids.end(), cls);
      int64_t start = where_cls == w.ids.end() ? 0 : where_cls - w.ids.begin(), end = start;
      const bool answered = x.answer_end > x.answer_begin;
      if (answered && first <= last && w.offsets[static_cast<size_t>(first)].first <= x.answer_begin &&
          w.offsets[static_cast<size_t>(last)].second >= x.answer_end) {
        // the last context token starting at or before the answer, the first ending at or after it
        int64_t s = first;
        while (s <= last && w.offsets[static_cast<size_t>(s)].first <= x.answer_begin) ++s;
        int64_t e = last;
        while (e >= first && w.offsets[static_cast<size_t>(e)].second >= x.answer_end) --e;
        start = s - 1, end = e + 1;
      }
      decode::batching::give_token_types(w, model, types, kQaTask);
      if (!keep_offsets) {  // (a step reads the ids and types alone: SQuAD's 88k windows in 3 KB each, not 12)
        w.offsets = {}, w.word_ids = {}, w.sequence_ids = {};
        w.ids.shrink_to_fit(), w.token_type_ids.shrink_to_fit();
      }
      out.encodings.push_back(std::move(w));
      out.example.push_back(static_cast<int32_t>(k));
      out.start.push_back(static_cast<int32_t>(start));
      out.end.push_back(static_cast<int32_t>(end));
    }
    bar.update();
  }
  return out;
}

QuestionAnsweringTask::QuestionAnsweringTask(const json& config, const std::string& base_dir, bool verbose) {
  QKV_CHECK(io::get_or(config, "task", "") == "question_answering", kQaTask,
            ": the config's \"task\" must be \"question_answering\"");
  QKV_CHECK(config.contains("init_from") && config.contains("data") && config.contains("train"), kQaTask,
            ": the config needs \"init_from\" (a model file with a question-answering head: qkv convert --head span), "
            "\"data\" and \"train\"");
  const QuestionAnsweringTaskConfig c = QuestionAnsweringTaskConfig::fields().from_json(config);
  cfg_ = c.train, data_ = c.data;
  gen_ = Generator(cfg_.seed);
  PretrainedEncoder pre = load_pretrained_encoder(c.init_from, base_dir, config.value("model", json()), kQaTask,
                                                  nn::BertClassifier::span, gen_);
  tok_ = std::move(pre.tokenizer), model_ = std::move(pre.model);
  tokenizer_meta_ = pre.file.tokenizer, carried_ = pre.file.carried;

  // The data: read, cut into windows with the file's tokenizer.
  const text::HfTokenizer& tok = *tok_.hf();
  pad_id_ = decode::batching::pad_id_of(tok);
  const QuestionAnsweringDataConfig& d = data_;
  QKV_CHECK(!d.train.empty(), kQaTask, ": data.train (the training questions: SQuAD's .json or .jsonl) is missing");
  QKV_CHECK(d.val_fraction > 0 || !d.val.empty(), kQaTask, ": data.val_fraction must be > 0 where there is no data.val");
  QKV_CHECK(d.max_length <= model_->max_positions(), kQaTask, ": data.max_length ", d.max_length,
            " is more than the model's ", model_->max_positions(), " positions");
  QKV_CHECK(d.doc_stride < d.max_length, kQaTask, ": data.doc_stride ", d.doc_stride,
            " must be less than data.max_length ", d.max_length);
  auto resolve = [&](const std::string& p) { return io::config_path(p, base_dir); };
  {
    const io::ProgressBar::MutedScope muted(!verbose);
    const std::string train_path = resolve(d.train);
    std::vector<QaExample> train = read_qa_examples(train_path, d.version_2_with_negative);
    if (!d.val.empty()) {
      val_examples_ = read_qa_examples(resolve(d.val), d.version_2_with_negative);
    } else {
      // val_fraction of the questions, drawn with the seed
      val_examples_ = take_held_out(train, hold_out_fraction(static_cast<int64_t>(train.size()), d.val_fraction,
                                                             cfg_.seed, kQaTask, train_path, "questions"));
    }
    train_ = qa_windows(train, tok, *model_, d.max_length, d.doc_stride, /*keep_offsets=*/false);
    val_ = qa_windows(val_examples_, tok, *model_, d.max_length, d.doc_stride, /*keep_offsets=*/true);
  }
  QKV_CHECK(train_.size() >= 1 && val_.size() >= 1, kQaTask, ": no windows to train on or to validate on");
  order_ = io::EpochOrder(train_.size(), cfg_.seed);
  check_encoder_batch_fits(kQaTask, *model_, pre.file.model, pre.parameters, cfg_.batch_size, d.max_length);
}

Tensor QuestionAnsweringTask::loss(const Tensor& z, const Tensor& pad_bias, const QaWindows& set,
                                   const std::vector<size_t>& rows) const {
  // z [B, T, 2] + the padding's −10⁹ [B, T, 1] → [B, 2, T] → [2B, T]: row 2n the start logits of window n,
  // row 2n + 1 its end logits; their mean cross-entropy is ½ (CE(s) + CE(e))
  const int64_t B = z.size(0), T = z.size(1);
  const Tensor rows_2b = (z + pad_bias.unsqueeze(2)).transpose(1, 2).contiguous().reshape({2 * B, T});
  std::vector<int32_t> y(static_cast<size_t>(2 * B));
  for (size_t r = 0; r < rows.size(); ++r) y[2 * r] = set.start[rows[r]], y[2 * r + 1] = set.end[rows[r]];
  return cross_entropy(rows_2b, Tensor::from_ints(y, {2 * B}).to(z.device()));
}

namespace {

// 0 where a token is, −10⁹ on the padding: [B, T]
Tensor padding_bias(const decode::batching::Batch& b) {
  const auto B = static_cast<int64_t>(b.lengths.size());
  std::vector<float> bias(static_cast<size_t>(B * b.T), 0.f);
  for (int64_t r = 0; r < B; ++r)
    std::fill(bias.begin() + r * b.T + b.lengths[static_cast<size_t>(r)], bias.begin() + (r + 1) * b.T, -1e9f);
  return Tensor::from_vector(bias, {B, b.T});
}

}  // namespace

StepStats QuestionAnsweringTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  // this process's windows of the batch (all of them in one process)
  const int64_t batch = cfg_.batch_size;
  const Rows rows = shard_rows(batch, gen_, kQaTask);
  const auto first = static_cast<uint64_t>((step * accum + micro) * batch + rows.first);
  std::vector<size_t> index(static_cast<size_t>(rows.count));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<size_t>(order_.at(first + i));
  const decode::batching::Batch b = decode::batching::pad(train_.encodings, index, 0, index.size(), pad_id_);
  const Tensor z = model_->classify(b.ids.to(device_), b.types.to(device_), b.mask.to(device_));  // [B, T, 2]
  const Tensor l = loss(z, padding_bias(b).to(device_), train_, index);
  const double share = static_cast<double>(rows.count) / static_cast<double>(batch);
  backward_share(l, share, accum);
  return {l.item(), rows.count, share};
}

std::vector<std::pair<std::string, double>> QuestionAnsweringTask::evaluate(int64_t) {
  // Every validation window (longest first: little padding): the loss, and each token's start and end logits.
  const QuestionAnsweringDataConfig& d = data_;
  double loss_sum = 0;
  std::vector<std::vector<float>> start_logits(static_cast<size_t>(val_.size())), end_logits(start_logits.size());
  io::ProgressBar bar("eval", val_.size(), 0, /*delay_seconds=*/2);
  decode::batching::batches(
      val_.encodings, cfg_.batch_size, pad_id_, [&](const decode::batching::Batch& b, const std::vector<size_t>& rows) {
        const Tensor z = model_->classify(b.ids.to(device_), b.types.to(device_), b.mask.to(device_));
        loss_sum += loss(z, padding_bias(b).to(device_), val_, rows).item() * static_cast<double>(rows.size());
        const std::vector<float> v = z.to_vector();  // [B, T, 2]
        for (size_t r = 0; r < rows.size(); ++r) {
          const size_t n = val_.encodings[rows[r]].ids.size();
          std::vector<float>&s = start_logits[rows[r]], &e = end_logits[rows[r]];
          s.resize(n), e.resize(n);
          for (size_t t = 0; t < n; ++t) {
            const size_t at = (r * static_cast<size_t>(b.T) + t) * 2;
            s[t] = v[at], e[t] = v[at + 1];
          }
        }
        bar.update(static_cast<int64_t>(rows.size()));
      });

  // run_qa.py's postprocess_qa_predictions: each example's answer from its windows' logits
  struct Candidate {
    size_t begin, end;  // bytes of the context ((0, 0): the null answer)
    double score, start_logit, end_logit;
  };
  std::vector<std::vector<size_t>> windows_of(val_examples_.size());
  for (int64_t w = 0; w < val_.size(); ++w)
    windows_of[static_cast<size_t>(val_.example[static_cast<size_t>(w)])].push_back(static_cast<size_t>(w));
  // the n highest of v, highest first (numpy's argsort(v)[-1:-n-1:-1]: equal values, the later index first)
  auto top = [](const std::vector<float>& v, int64_t n) {
    std::vector<size_t> order(v.size());
    std::iota(order.begin(), order.end(), size_t{0});
    const auto k = static_cast<std::ptrdiff_t>(std::min(order.size(), static_cast<size_t>(n)));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](size_t a, size_t b) { return v[a] > v[b] || (v[a] == v[b] && a > b); });
    order.resize(static_cast<size_t>(k));
    return order;
  };
  answers_.assign(val_examples_.size(), std::string());
  double exact = 0, f1 = 0;
  for (size_t k = 0; k < val_examples_.size(); ++k) {
    const QaExample& x = val_examples_[k];
    std::vector<Candidate> prelim;
    // the least [CLS] score of the windows (every question has one window at least)
    Candidate null{0, 0, std::numeric_limits<double>::infinity(), 0, 0};
    for (const size_t w : windows_of[k]) {
      const text::HfEncoding& e = val_.encodings[w];
      const std::vector<float>&s = start_logits[w], &en = end_logits[w];
      const double null_score = static_cast<double>(s[0]) + en[0];
      if (null.score > null_score) null = {0, 0, null_score, s[0], en[0]};
      const std::vector<size_t> starts = top(s, d.n_best_size), ends = top(en, d.n_best_size);
      for (const size_t a : starts)
        for (const size_t b : ends) {
          if (e.sequence_ids[a] != 1 || e.sequence_ids[b] != 1) continue;  // (outside the context)
          if (b < a || static_cast<int64_t>(b - a + 1) > d.max_answer_length) continue;
          prelim.push_back({e.offsets[a].first, e.offsets[b].second, static_cast<double>(s[a]) + en[b], s[a], en[b]});
        }
    }
    const bool v2 = d.version_2_with_negative;
    if (v2) prelim.push_back(null);
    std::stable_sort(prelim.begin(), prelim.end(),
                     [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    if (prelim.size() > static_cast<size_t>(d.n_best_size)) prelim.resize(static_cast<size_t>(d.n_best_size));
    auto is_null = [](const Candidate& c) { return c.begin == 0 && c.end == 0; };  // (run_qa.py's test)
    if (v2 && std::none_of(prelim.begin(), prelim.end(), is_null)) prelim.push_back(null);
    // the texts, best first (run_qa.py's "empty" first where no span is left)
    struct Pick {
      std::string text;
      double start_logit, end_logit;
    };
    std::vector<Pick> picks;
    for (const Candidate& c : prelim) {
      const size_t begin = std::min(c.begin, x.context.size());
      picks.push_back(
          {x.context.substr(begin, std::clamp(c.end, begin, x.context.size()) - begin), c.start_logit, c.end_logit});
    }
    if (picks.empty() || (picks.size() == 1 && picks[0].text.empty())) picks.insert(picks.begin(), {"empty", 0, 0});
    std::string answer = picks[0].text;
    if (v2) {
      // the best non-null text, unless the null answer beats it by more than the threshold
      size_t i = 0;
      while (i + 1 < picks.size() && picks[i].text.empty()) ++i;
      const Pick& best = picks[i];
      answer = null.score - best.start_logit - best.end_logit > d.null_score_diff_threshold ? "" : best.text;
    }
    const eval::AnswerScores sc = eval::answer_scores(answer, x.answers);
    exact += sc.exact_match, f1 += sc.f1;
    answers_[k] = std::move(answer);
  }
  const auto n = static_cast<double>(val_examples_.size());
  return {{"val_loss", loss_sum / static_cast<double>(val_.size())},
          {"val_exact_match", 100 * exact / n},
          {"val_f1", 100 * f1 / n}};
}

}  // namespace qkv::train
