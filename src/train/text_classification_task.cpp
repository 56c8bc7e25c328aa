#include "qkv/train/text_classification_task.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/encoder_batches.h"
#include "qkv/eval/label_scores.h"
#include "qkv/io/csv.h"
#include "qkv/io/data_file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"
#include "qkv/train/init_from.h"
#include "qkv/train/memory_plan.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTask = "text_classification task";  // (the sequence task's readers)

const io::Fields<TextClassificationDataConfig>& TextClassificationDataConfig::fields() {
  using F = io::Fields<TextClassificationDataConfig>;
  using C = TextClassificationDataConfig;
  static const F f("text_classification task: data",
                   {
                       F::text("train", &C::train),
                       F::text("val", &C::val),
                       F::number("val_fraction", &C::val_fraction, 0, 1, /*hi_open=*/true),
                       F::text("text", &C::text),
                       F::text("text_pair", &C::text_pair),
                       F::text("label", &C::label),
                       F::text("tokens", &C::tokens),
                       F::text("tags", &C::tags),
                       F::boolean("label_all_tokens", &C::label_all_tokens),
                       F::integer("max_length", &C::max_length, 0, 1 << 20),
                   });
  return f;
}

const io::Fields<TextClassificationTaskConfig>& TextClassificationTaskConfig::fields() {
  static const auto f = fine_tuning_config_fields<TextClassificationTaskConfig>("text classification task");
  return f;
}

namespace {

// One example as the file gives it: its texts, and its label as a JSON value (a TSV field is a string).
struct RawExample {
  std::string text, pair;
  json label;
  size_t line = 0;
};

std::vector<std::string> split_fields(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t at; (at = s.find(sep, from)) != std::string_view::npos; from = at + 1)
    out.emplace_back(s.substr(from, at - from));
  out.emplace_back(s.substr(from));
  return out;
}

// The examples of a .tsv, .csv or .jsonl file, its columns as `d` names them (the text column found
// where d.text is empty).
std::vector<RawExample> read_examples(const std::string& path, const TextClassificationDataConfig& d) {
  const std::string text = io::read_data_file(path, "text_classification task: data");
  const std::string ext = fs::path(path).extension().string();
  QKV_CHECK(ext == ".tsv" || ext == ".csv" || ext == ".jsonl", kTask, ": '", path,
            "' is neither .tsv (a header line, tab-separated), .csv (a header line, comma-separated, fields in "
            "quotes where they hold commas) nor .jsonl (an object a line)");
  const auto lines = io::numbered_lines(text);
  QKV_CHECK(!lines.empty(), kTask, ": '", path, "' holds no examples");
  std::vector<RawExample> out;
  auto where = [&](size_t line) { return detail::concat(kTask, ": '", path, "' line ", line); };
  auto text_column = [&](auto has) -> std::string {
    if (!d.text.empty()) return d.text;
    for (const char* name : {"text", "sentence"})
      if (has(name)) return name;
    return "text";
  };
  if (ext == ".tsv" || ext == ".csv") {
    io::CsvTable table;  // (a .tsv's fields are split at tabs: no quoting)
    if (ext == ".csv") {
      table = io::parse_csv(text, detail::concat(kTask, ": '", path, "'"));
    } else {
      table.header = split_fields(lines.front().second, '\t');
      for (size_t i = 1; i < lines.size(); ++i) {
        std::vector<std::string> f = split_fields(lines[i].second, '\t');
        QKV_CHECK(f.size() == table.header.size(), where(lines[i].first), ": ", f.size(),
                  " fields, but the header names ", table.header.size());
        table.records.push_back({lines[i].first, std::move(f)});
      }
    }
    const std::vector<std::string>& header = table.header;
    auto column = [&](const std::string& name, const char* what) -> size_t {
      const auto it = std::find(header.begin(), header.end(), name);
      std::string names;
      for (const auto& h : header) names += (names.empty() ? "" : ", ") + excerpt(h, 40);
      QKV_CHECK(it != header.end(), kTask, ": '", path, "' has no column \"", excerpt(name), "\" (data.", what,
                "); its header names ", names);
      return static_cast<size_t>(it - header.begin());
    };
    const std::string tname =
        text_column([&](const char* n) { return std::count(header.begin(), header.end(), n) > 0; });
    const size_t t = column(tname, "text"), l = column(d.label, "label");
    const size_t p = d.text_pair.empty() ? SIZE_MAX : column(d.text_pair, "text_pair");
    for (const io::CsvRecord& r : table.records)
      out.push_back({r.fields[t], p == SIZE_MAX ? "" : r.fields[p], json(r.fields[l]), r.line});
    QKV_CHECK(!out.empty(), kTask, ": '", path, "' holds no examples (its header line only)");
    return out;
  }
  std::string tname;
  for (const auto& [number, line] : lines) {
    const json j = io::parse_json_line(line, where(number));  // (bounded nesting, no key twice)
    QKV_CHECK(j.is_object(), where(number), ": not a JSON object");
    if (tname.empty()) tname = text_column([&](const char* n) { return j.contains(n); });
    const size_t at = number;  // (a structured binding is not captured before C++20's clang 16)
    auto field = [&](const std::string& name, const char* what) -> const json& {
      QKV_CHECK(j.contains(name), where(at), ": no \"", excerpt(name), "\" (data.", what, ")");
      return j[name];
    };
    const json& tv = field(tname, "text");
    QKV_CHECK(tv.is_string(), where(number), ": \"", excerpt(tname), "\" is not a string");
    RawExample e{tv.get<std::string>(), "", field(d.label, "label"), number};
    if (!d.text_pair.empty()) {
      const json& pv = field(d.text_pair, "text_pair");
      QKV_CHECK(pv.is_string(), where(number), ": \"", excerpt(d.text_pair), "\" is not a string");
      e.pair = pv.get<std::string>();
    }
    out.push_back(std::move(e));
  }
  return out;
}

// A label id from a JSON integer, a label name, or a string of digits.
int32_t label_id(const json& v, const std::vector<std::string>& labels, const std::string& where) {
  const auto L = static_cast<int64_t>(labels.size());
  if (v.is_number_integer()) {
    const auto id = v.get<int64_t>();
    QKV_CHECK(id >= 0 && id < L, where, ": the label ", id, " is not one of the model's ids 0 … ", L - 1);
    return static_cast<int32_t>(id);
  }
  QKV_CHECK(v.is_string(), where, ": the label ", excerpt(v.dump(), 60), " is neither an id nor a label name");
  const std::string& s = v.get_ref<const std::string&>();
  for (int64_t i = 0; i < L; ++i)
    if (labels[static_cast<size_t>(i)] == s) return static_cast<int32_t>(i);
  int64_t id = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
  if (ec == std::errc() && end == s.data() + s.size() && !s.empty() && id >= 0 && id < L)
    return static_cast<int32_t>(id);
  std::string names;
  for (int64_t i = 0; i < L && i < 20; ++i) names += (i ? ", " : "") + labels[static_cast<size_t>(i)];
  throw Error(detail::concat(where, ": the label \"", excerpt(s), "\" is not one of the model's (", names,
                             L > 20 ? ", …" : "", ") nor an id 0 … ", L - 1));
}

// The examples encoded and their targets, as `problem` reads the labels.
LabelledTexts encode_examples(const std::vector<RawExample>& raw, const std::string& path,
                              const models::MaskedLanguageModel& model, const text::HfTokenizer& tok,
                              nn::BertProblem problem, const std::vector<std::string>& labels, int64_t max_length) {
  LabelledTexts out;
  const bool types = decode::uses_token_types(model, tok);
  io::ProgressBar bar("encode", static_cast<int64_t>(raw.size()), 0, /*delay_seconds=*/2);
  for (const RawExample& r : raw) {
    const std::string where = detail::concat(kTask, ": '", path, "' line ", r.line);
    text::HfEncoding e;
    if (r.pair.empty()) {
      e.ids = tok.encode_truncated(r.text, max_length);
      e.token_type_ids.assign(e.ids.size(), 0);
    } else {
      e = tok.encode_pair_truncated(r.text, r.pair, max_length);
    }
    QKV_CHECK(!e.ids.empty() && static_cast<int64_t>(e.ids.size()) <= max_length, where, ": the text is ", e.ids.size(),
              " tokens after the cut to ", max_length);
    decode::batching::give_token_types(e, model, types, kTask);
    out.encodings.push_back(std::move(e));
    if (problem == nn::BertProblem::single_label) {
      out.labels.push_back(label_id(r.label, labels, where));
    } else if (problem == nn::BertProblem::regression) {
      double y = 0;
      if (r.label.is_number()) {
        y = r.label.get<double>();
      } else {
        const std::string s = r.label.is_string() ? r.label.get<std::string>() : std::string();
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), y);
        QKV_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), where, ": the label ",
                  excerpt(r.label.dump(), 60), " is not a number (the model is a regression: one label)");
      }
      QKV_CHECK(std::isfinite(y) && std::abs(y) <= 3.4e38, where, ": the label ", y, " is not a finite float");
      out.values.push_back(static_cast<float>(y));
    } else {  // multi-label: a list of ids or names (a TSV field: comma-separated; empty: none)
      json list = r.label;
      if (r.label.is_string()) {
        list = json::array();
        if (!r.label.get_ref<const std::string&>().empty())
          for (const std::string& s : split_fields(r.label.get_ref<const std::string&>(), ',')) list.push_back(s);
      }
      QKV_CHECK(list.is_array(), where, ": the label ", excerpt(r.label.dump(), 60),
                " is not a list of labels (the model is multi-label)");
      std::vector<int32_t> ids;
      for (const json& v : list) ids.push_back(label_id(v, labels, where));
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      out.label_sets.push_back(std::move(ids));
    }
    bar.update();
  }
  return out;
}

// A sentence split into words, with a tag each (JSON values: an id or a label name).
struct WordExample {
  std::vector<std::string> words;
  std::vector<json> tags;
  size_t line = 0;
};

// The sentences of a .jsonl (d.tokens and d.tags, arrays of one length) or CoNLL file (.conll, .txt:
// a word a line, its tag the last of its whitespace-separated columns, a blank line between
// sentences; -DOCSTART- lines left out).
std::vector<WordExample> read_word_examples(const std::string& path, const TextClassificationDataConfig& d,
                                            const char* task) {
  const std::string text = io::read_data_file(path, detail::concat(task, ": data"));
  const std::string ext = fs::path(path).extension().string();
  QKV_CHECK(ext == ".jsonl" || ext == ".conll" || ext == ".txt", task, ": '", path,
            "' is neither .jsonl (an object a sentence: words and tags) nor CoNLL (.conll, .txt: a word and its tag a "
            "line)");
  std::vector<WordExample> out;
  auto where = [&](size_t line) { return detail::concat(task, ": '", path, "' line ", line); };
  if (ext == ".jsonl") {
    for (const auto& [number, line] : io::numbered_lines(text)) {
      const json j = io::parse_json_line(line, where(number));
      QKV_CHECK(j.is_object() && j.contains(d.tokens) && j.contains(d.tags), where(number), ": not an object with \"",
                excerpt(d.tokens), "\" and \"", excerpt(d.tags), "\" (data.tokens, data.tags)");
      const json &w = j[d.tokens], &t = j[d.tags];
      QKV_CHECK(w.is_array() && t.is_array() && w.size() == t.size() && !w.empty(), where(number), ": \"",
                excerpt(d.tokens), "\" and \"", excerpt(d.tags), "\" must be lists of one length, not empty");
      WordExample e;
      e.line = number;
      for (const json& word : w) {
        QKV_CHECK(word.is_string(), where(number), ": the word ", excerpt(word.dump(), 40), " is not a string");
        e.words.push_back(word.get<std::string>());
      }
      e.tags.assign(t.begin(), t.end());
      out.push_back(std::move(e));
    }
  } else {
    // CoNLL: a word and its tag a line, a blank line between sentences
    WordExample e;
    auto flush = [&] {
      if (!e.words.empty()) out.push_back(std::move(e));
      e = WordExample{};
    };
    for (const auto& [number, line] : io::numbered_lines(text, true)) {
      std::vector<std::string> fields;
      for (size_t i = 0; i < line.size();) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
        size_t j = i;
        while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
        if (j > i) fields.emplace_back(line.substr(i, j - i));
        i = j;
      }
      if (fields.empty()) {
        flush();
        continue;
      }
      if (fields[0] == "-DOCSTART-") continue;
      QKV_CHECK(fields.size() >= 2, where(number), ": a word without a tag (a word and its tag a line)");
      if (e.words.empty()) e.line = number;
      e.words.push_back(fields.front());
      e.tags.emplace_back(fields.back());
    }
    flush();
  }
  QKV_CHECK(!out.empty(), task, ": '", path, "' holds no sentences");
  return out;
}

// transformers' run_ner.py's b_to_i_label: the id of I-X for each label B-X (itself otherwise).
std::vector<int32_t> b_to_i(const std::vector<std::string>& labels) {
  std::vector<int32_t> out(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    out[i] = static_cast<int32_t>(i);
    if (labels[i].starts_with("B-")) {
      const auto it = std::find(labels.begin(), labels.end(), "I-" + labels[i].substr(2));
      if (it != labels.end()) out[i] = static_cast<int32_t>(it - labels.begin());
    }
  }
  return out;
}

// The sentences encoded (tokenizer(words, is_split_into_words=True, truncation=True, max_length)) and
// their tokens' tags: a word's first token its tag, its others −100 (or, label_all_tokens, its tag
// with B-X as I-X), the special tokens −100 — run_ner.py's tokenize_and_align_labels.
LabelledTexts encode_word_examples(const std::vector<WordExample>& raw, const std::string& path,
                                   const models::MaskedLanguageModel& model, const text::HfTokenizer& tok,
                                   const std::vector<std::string>& labels, int64_t max_length, bool label_all_tokens,
                                   const char* task) {
  LabelledTexts out;
  const bool types = decode::uses_token_types(model, tok);
  const std::vector<int32_t> inside = b_to_i(labels);
  io::ProgressBar bar("encode", static_cast<int64_t>(raw.size()), 0, /*delay_seconds=*/2);
  for (const WordExample& r : raw) {
    const std::string where = detail::concat(task, ": '", path, "' line ", r.line);
    std::vector<int32_t> tags;
    for (const json& t : r.tags) tags.push_back(label_id(t, labels, where));
    text::HfEncoding e = tok.encode_words(r.words, max_length);
    QKV_CHECK(static_cast<int64_t>(e.ids.size()) <= max_length, where, ": ", e.ids.size(), " tokens after the cut to ",
              max_length);
    decode::batching::give_token_types(e, model, types, task);
    std::vector<int32_t> token_tags(e.ids.size(), -100);
    int32_t previous = -1;
    bool any = false;
    for (size_t k = 0; k < e.ids.size(); ++k) {
      const int32_t w = e.word_ids[k];
      if (w >= 0 && w != previous)
        token_tags[k] = tags[static_cast<size_t>(w)], any = true;
      else if (w >= 0 && label_all_tokens)
        token_tags[k] = inside[static_cast<size_t>(tags[static_cast<size_t>(w)])];
      previous = w;
    }
    QKV_CHECK(any, where, ": no word of the sentence has a token (its words are empty, or max_length leaves no room)");
    out.encodings.push_back(std::move(e));
    out.token_tags.push_back(std::move(token_tags));
    bar.update();
  }
  return out;
}

// The rows `keep` of a set.
LabelledTexts rows_of(const LabelledTexts& s, const std::vector<int64_t>& keep) {
  LabelledTexts out;
  for (const int64_t i : keep) {
    const auto k = static_cast<size_t>(i);
    out.encodings.push_back(s.encodings[k]);
    if (!s.labels.empty()) out.labels.push_back(s.labels[k]);
    if (!s.label_sets.empty()) out.label_sets.push_back(s.label_sets[k]);
    if (!s.values.empty()) out.values.push_back(s.values[k]);
    if (!s.token_tags.empty()) out.token_tags.push_back(s.token_tags[k]);
  }
  return out;
}

}  // namespace

TextClassificationTask::TextClassificationTask(const json& config, const std::string& base_dir, bool verbose) {
  const std::string task = io::get_or(config, "task", "");
  QKV_CHECK(
      task == "text_classification" || task == "token_classification",
      "text classification task: the config's \"task\" must be \"text_classification\" or \"token_classification\"");
  tokens_ = task == "token_classification";
  const char* name = tokens_ ? "token_classification task" : "text_classification task";
  const char* kind = tokens_ ? "token" : "sequence";
  QKV_CHECK(config.contains("init_from") && config.contains("data") && config.contains("train"), name,
            ": the config needs \"init_from\" (a model file with a ", kind, " classifier: qkv convert --head ", kind,
            " --labels …), \"data\" and \"train\"");
  const TextClassificationTaskConfig c = TextClassificationTaskConfig::fields().from_json(config);
  cfg_ = c.train;
  QKV_CHECK(!c.init_from.empty(), name, ": init_from is empty (a model file to fine-tune)");
  gen_ = Generator(cfg_.seed);
  PretrainedEncoder pre =
      load_pretrained_encoder(c.init_from, base_dir, config.value("model", json()), name,
                              tokens_ ? nn::BertClassifier::token : nn::BertClassifier::sequence, gen_);
  tok_ = std::move(pre.tokenizer), model_ = std::move(pre.model);
  tokenizer_meta_ = pre.file.tokenizer, carried_ = pre.file.carried;
  const models::EncoderTask head = model_->task();
  labels_ = head.labels;
  problem_ = tokens_                                       ? nn::BertProblem::single_label
             : head.problem_type != nn::BertProblem::auto_ ? head.problem_type
             : labels_.size() == 1                         ? nn::BertProblem::regression
                                                           : nn::BertProblem::single_label;
  QKV_CHECK(problem_ != nn::BertProblem::regression || labels_.size() == 1, name, ": init_from '", pre.file.path,
            "': a regression has one label, this classifier ", labels_.size());

  // The data: read, encoded with the file's tokenizer, cut to max_length tokens.
  const text::HfTokenizer& tok = *tok_.hf();
  pad_id_ = decode::batching::pad_id_of(tok);
  const TextClassificationDataConfig& d = c.data;
  QKV_CHECK(!d.train.empty(), name,
            ": data.train (the training examples: ", tokens_ ? ".jsonl or CoNLL" : ".tsv or .jsonl", ") is missing");
  QKV_CHECK(d.val_fraction > 0 || !d.val.empty(), name, ": data.val_fraction must be > 0 where there is no data.val");
  const int64_t longest = std::min(model_->max_positions(), tok.model_max_length().value_or(INT64_MAX));
  QKV_CHECK(d.max_length <= model_->max_positions(), name, ": data.max_length ", d.max_length,
            " is more than the model's ", model_->max_positions(), " positions");
  QKV_CHECK(d.max_length == 0 || d.max_length >= 4, name, ": data.max_length ", d.max_length,
            " leaves no room for a text beside the special tokens");
  const int64_t max_length = d.max_length > 0 ? d.max_length : longest;
  auto resolve = [&](const std::string& p) { return io::config_path(p, base_dir); };
  {
    const io::ProgressBar::MutedScope muted(!verbose);
    const std::string train_path = resolve(d.train);
    auto read = [&](const std::string& path) {
      return tokens_ ? encode_word_examples(read_word_examples(path, d, name), path, *model_, tok, labels_, max_length,
                                            d.label_all_tokens, name)
                     : encode_examples(read_examples(path, d), path, *model_, tok, problem_, labels_, max_length);
    };
    LabelledTexts all = read(train_path);
    if (!d.val.empty()) {
      train_ = std::move(all);
      val_ = read(resolve(d.val));
    } else {
      // val_fraction of the examples, drawn with the seed (a file sorted by label splits evenly)
      const io::HeldOut split = hold_out_fraction(all.size(), d.val_fraction, cfg_.seed, name, train_path, "examples");
      val_ = rows_of(all, split.held);
      train_ = rows_of(all, split.rest);
    }
  }
  QKV_CHECK(train_.size() >= 1 && val_.size() >= 1, name, ": no examples to train on or to validate on");
  order_ = io::EpochOrder(train_.size(), cfg_.seed);

  check_encoder_batch_fits(name, *model_, pre.file.model, pre.parameters, cfg_.batch_size, max_length);
}

Tensor TextClassificationTask::loss(const Tensor& z, const LabelledTexts& set, const std::vector<size_t>& rows) const {
  const auto B = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(labels_.size());
  if (problem_ == nn::BertProblem::single_label) {
    // (1/B) Σ_n −log softmax(z_n)[y_n]
    std::vector<int32_t> y(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) y[r] = set.labels[rows[r]];
    return cross_entropy(z, Tensor::from_ints(y, {B}).to(z.device()));
  }
  // the targets [B, L] (multi-label: 1 at the example's labels) or [B, 1] (regression)
  const int64_t per = problem_ == nn::BertProblem::multi_label ? L : 1;
  std::vector<float> t(rows.size() * static_cast<size_t>(per), 0.f);
  for (size_t r = 0; r < rows.size(); ++r) {
    if (problem_ == nn::BertProblem::regression)
      t[r] = set.values[rows[r]];
    else
      for (const int32_t l : set.label_sets[rows[r]]) t[r * static_cast<size_t>(L) + static_cast<size_t>(l)] = 1.f;
  }
  const Tensor y = Tensor::from_vector(t, {B, per}).to(z.device());
  if (problem_ == nn::BertProblem::regression) {
    const Tensor e = z - y;  // (1/B) Σ_n (z_n − y_n)²
    return mean(e * e);
  }
  // (1/BL) Σ softplus(z) − y z,  softplus(z) = max(z, 0) + log(1 + e^(−|z|))   (stable for any z)
  const Tensor pos = relu(z), abs_z = pos + relu(-z);
  return mean(pos - z * y + log(exp(-abs_z) + 1.f));
}

Tensor TextClassificationTask::token_loss(const Tensor& z, const LabelledTexts& set, const std::vector<size_t>& rows,
                                          int64_t T, std::vector<int32_t>* tags) const {
  // (1/N) Σ over the N tagged tokens of −log softmax(z_t)[y_t]   (y_t = −100: left out)
  const auto B = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(labels_.size());
  std::vector<int32_t> y(static_cast<size_t>(B * T), -100);
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::vector<int32_t>& t = set.token_tags[rows[r]];
    std::copy(t.begin(), t.end(), y.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(T)));
  }
  Tensor loss = cross_entropy(z.reshape({B * T, L}), Tensor::from_ints(y, {B * T}).to(z.device()), -100);
  if (tags) *tags = std::move(y);
  return loss;
}

StepStats TextClassificationTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  // this process's examples of the batch (all of them in one process)
  const int64_t batch = cfg_.batch_size;
  const Rows rows = shard_rows(batch, gen_, tokens_ ? "token_classification task" : "text_classification task");
  const auto first = static_cast<uint64_t>((step * accum + micro) * batch + rows.first);
  std::vector<size_t> index(static_cast<size_t>(rows.count));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<size_t>(order_.at(first + i));
  const decode::batching::Batch b = decode::batching::pad(train_.encodings, index, 0, index.size(), pad_id_);
  const Tensor z = model_->classify(b.ids.to(device_), b.types.to(device_), b.mask.to(device_));  // [B, L] or [B, T, L]
  const Tensor l = tokens_ ? token_loss(z, train_, index, b.T) : loss(z, train_, index);
  const double share = static_cast<double>(rows.count) / static_cast<double>(batch);
  backward_share(l, share, accum);
  return {l.item(), rows.count, share};
}

std::vector<std::pair<std::string, double>> TextClassificationTask::evaluate(int64_t) {
  // Every validation example, in batches of train.batch_size (longest first: little padding).
  const auto L = static_cast<int64_t>(labels_.size());
  if (tokens_) {
    // run_ner.py's figures: the tagged tokens' mean loss and accuracy; the entities (seqeval) of each
    // sentence's tagged tokens, predicted against true
    double loss_sum = 0;
    int64_t tagged = 0, right = 0;
    std::vector<std::vector<std::string>> truth(static_cast<size_t>(val_.size())), guess(truth.size());
    io::ProgressBar bar("eval", val_.size(), 0, /*delay_seconds=*/2);
    decode::batching::batches(val_.encodings, cfg_.batch_size, pad_id_,
                              [&](const decode::batching::Batch& b, const std::vector<size_t>& rows) {
                                const Tensor z =
                                    model_->classify(b.ids.to(device_), b.types.to(device_), b.mask.to(device_));
                                std::vector<int32_t> y;
                                const double l = token_loss(z, val_, rows, b.T, &y).item();
                                const std::vector<float> v = z.to_vector();
                                int64_t n = 0;
                                for (size_t k = 0; k < y.size(); ++k) {
                                  if (y[k] < 0) continue;
                                  const float* zk = v.data() + k * static_cast<size_t>(L);
                                  const auto p = static_cast<int32_t>(std::max_element(zk, zk + L) - zk);
                                  const size_t row = rows[k / static_cast<size_t>(b.T)];
                                  truth[row].push_back(labels_[static_cast<size_t>(y[k])]);
                                  guess[row].push_back(labels_[static_cast<size_t>(p)]);
                                  right += p == y[k];
                                  ++n;
                                }
                                loss_sum += l * static_cast<double>(n);
                                tagged += n;
                                bar.update(static_cast<int64_t>(rows.size()));
                              });
    // seqeval over the sentences (as its nested lists: each sentence's entities alone)
    const eval::EntityScores e = eval::entity_scores(truth, guess);
    const double n = static_cast<double>(std::max<int64_t>(tagged, 1));
    return {{"val_loss", loss_sum / n},
            {"val_accuracy", static_cast<double>(right) / n},
            {"val_precision", e.precision},
            {"val_recall", e.recall},
            {"val_f1", e.f1}};
  }
  double loss_sum = 0;
  int64_t right = 0;
  eval::LabelCounts counts(static_cast<size_t>(L));                    // single-label
  std::vector<double> pred(static_cast<size_t>(val_.size()), 0.0);     // regression
  io::ProgressBar bar("eval", val_.size(), 0, /*delay_seconds=*/2);
  decode::batching::batches(
      val_.encodings, cfg_.batch_size, pad_id_, [&](const decode::batching::Batch& b, const std::vector<size_t>& rows) {
        const Tensor z = model_->classify(b.ids.to(device_), b.types.to(device_), b.mask.to(device_));
        loss_sum += loss(z, val_, rows).item() * static_cast<double>(rows.size());
        const std::vector<float> v = z.to_vector();
        for (size_t r = 0; r < rows.size(); ++r) {
          const float* zr = v.data() + r * static_cast<size_t>(L);
          if (problem_ == nn::BertProblem::regression) {
            pred[rows[r]] = zr[0];
          } else if (problem_ == nn::BertProblem::multi_label) {
            // σ(z) ≥ ½ ⇔ z ≥ 0: right where the labels so predicted are the example's
            const std::vector<int32_t>& want = val_.label_sets[rows[r]];
            bool all = true;
            for (int64_t l = 0; l < L && all; ++l)
              all = (zr[l] >= 0.f) == std::binary_search(want.begin(), want.end(), static_cast<int32_t>(l));
            right += all;
          } else {
            const auto p = static_cast<size_t>(std::max_element(zr, zr + L) - zr);
            const auto y = static_cast<size_t>(val_.labels[rows[r]]);
            right += p == y;
            counts.add(p, y);
          }
        }
        bar.update(static_cast<int64_t>(rows.size()));
      });
  const auto n = static_cast<double>(val_.size());
  std::vector<std::pair<std::string, double>> out = {{"val_loss", loss_sum / n}};
  if (problem_ == nn::BertProblem::regression) {
    // Pearson's r of the predictions and the targets (0 where either is constant)
    double mp = 0, my = 0;
    for (int64_t i = 0; i < val_.size(); ++i)
      mp += pred[static_cast<size_t>(i)], my += val_.values[static_cast<size_t>(i)];
    mp /= n, my /= n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < val_.size(); ++i) {
      const double a = pred[static_cast<size_t>(i)] - mp, b = val_.values[static_cast<size_t>(i)] - my;
      sxy += a * b, sxx += a * a, syy += b * b;
    }
    out.emplace_back("val_pearson", sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0);
    return out;
  }
  out.emplace_back("val_accuracy", static_cast<double>(right) / n);
  if (problem_ == nn::BertProblem::single_label) {
    out.emplace_back("val_f1", counts.macro_f1());  // (scikit-learn's f1_score(average="macro"))
  }
  return out;
}

}  // namespace qkv::train
