#include "qkv/train/multiple_choice_task.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/encoder_batches.h"
#include "qkv/decode/multiple_choice.h"
#include "qkv/io/data_file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/ops.h"
#include "qkv/text/unicode.h"
#include "qkv/train/init_from.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kChoiceTask = "multiple_choice task";

const io::Fields<MultipleChoiceDataConfig>& MultipleChoiceDataConfig::fields() {
  using F = io::Fields<MultipleChoiceDataConfig>;
  using C = MultipleChoiceDataConfig;
  static const F f("multiple_choice task: data", {
                                                     F::text("train", &C::train),
                                                     F::text("val", &C::val),
                                                     F::number("val_fraction", &C::val_fraction, 0, 1, true),
                                                     F::text("context", &C::context),
                                                     F::text("header", &C::header),
                                                     F::text("label", &C::label),
                                                     F::any("endings", &C::endings),
                                                     F::integer("max_length", &C::max_length, 0, 1 << 20),
                                                 });
  return f;
}

const io::Fields<MultipleChoiceTaskConfig>& MultipleChoiceTaskConfig::fields() {
  static const auto f = fine_tuning_config_fields<MultipleChoiceTaskConfig>("multiple_choice task");
  return f;
}

namespace {

struct ChoiceExample {
  std::string context, header;
  std::vector<std::string> endings;
  int32_t label = 0;
  size_t line = 0;
};

std::vector<ChoiceExample> read_choice_examples(const std::string& path, const MultipleChoiceDataConfig& d) {
  const std::string text = io::read_data_file(path, detail::concat(kChoiceTask, ": data"));
  std::vector<ChoiceExample> out;
  size_t choices = 0;
  for (const auto& [number, row, csv] :
       data_rows(text, path, kChoiceTask, "an example a line: its context, header, endings and label")) {
    const std::string where = detail::concat(kChoiceTask, ": '", path, "' line ", number);
    ChoiceExample x;
    x.line = number;
    x.context = text_field(row, d.context, where);
    if (!d.header.empty()) x.header = text_field(row, d.header, where);
    if (d.endings.is_string()) {  // one column holding the list
      const std::string& key = d.endings.get_ref<const std::string&>();
      QKV_CHECK(row.contains(key) && row[key].is_array(), where, ": no list \"", excerpt(key), "\" of endings");
      for (const json& e : row[key]) {
        QKV_CHECK(e.is_string(), where, ": an ending of \"", excerpt(key), "\" is not a string");
        x.endings.push_back(text::valid_utf8(e.get_ref<const std::string&>()));
      }
    } else {
      for (const json& key : d.endings) x.endings.push_back(text_field(row, key.get<std::string>(), where));
    }
    QKV_CHECK(x.endings.size() >= 2 && x.endings.size() <= 1024, where, ": ", x.endings.size(),
              " endings (2 … 1,024 make a choice)");
    QKV_CHECK(choices == 0 || x.endings.size() == choices, where, ": ", x.endings.size(),
              " endings where the lines before have ", choices, " (every example has as many)");
    choices = x.endings.size();
    // the right ending's index: a JSON integer, or a CSV field of its digits ("2")
    int64_t label = -1;
    if (row.contains(d.label) && row[d.label].is_number_integer()) {
      label = row[d.label].get<int64_t>();
    } else if (csv && row.contains(d.label) && row[d.label].is_string()) {
      const std::string& s = row[d.label].get_ref<const std::string&>();
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), label);
      if (ec != std::errc() || end != s.data() + s.size() || s.empty()) label = -1;
    }
    QKV_CHECK(label >= 0 && label < static_cast<int64_t>(choices), where, ": \"", excerpt(d.label),
              "\" must be the right ending's index, 0 … ", choices - 1, ", got ",
              row.contains(d.label) ? excerpt(row[d.label].dump(), 30) : std::string("none"));
    x.label = static_cast<int32_t>(label);
    out.push_back(std::move(x));
  }
  QKV_CHECK(!out.empty(), kChoiceTask, ": '", path, "' holds no examples");
  return out;
}

ChoiceSet encode_examples(const std::vector<ChoiceExample>& examples, const models::MaskedLanguageModel& model,
                          const text::HfTokenizer& tok, int64_t max_length) {
  ChoiceSet s;
  s.choices = static_cast<int64_t>(examples.front().endings.size());
  io::ProgressBar bar("encode", static_cast<int64_t>(examples.size()), 0, /*delay_seconds=*/2);
  for (const ChoiceExample& x : examples) {
    const std::string what = detail::concat(kChoiceTask, ": line ", x.line);
    for (text::HfEncoding& e :
         decode::choice_pairs(model, tok, x.context, x.header, x.endings, max_length, what.c_str())) {
      e.offsets = {}, e.word_ids = {}, e.sequence_ids = {};  // (a step reads the ids and types alone)
      s.pairs.push_back(std::move(e));
    }
    s.labels.push_back(x.label);
    bar.update();
  }
  return s;
}

}  // namespace

MultipleChoiceTask::MultipleChoiceTask(const json& config, const std::string& base_dir, bool verbose) {
  QKV_CHECK(io::get_or(config, "task", "") == "multiple_choice", kChoiceTask,
            ": the config's \"task\" must be \"multiple_choice\"");
  QKV_CHECK(config.contains("init_from") && config.contains("data") && config.contains("train"), kChoiceTask,
            ": the config needs \"init_from\" (a model file with a multiple-choice head: qkv convert --head choice), "
            "\"data\" and \"train\"");
  const MultipleChoiceTaskConfig c = MultipleChoiceTaskConfig::fields().from_json(config);
  cfg_ = c.train, data_ = c.data;
  gen_ = Generator(cfg_.seed);
  MultipleChoiceDataConfig& d = data_;
  const bool columns = d.endings.is_array() && !d.endings.empty() &&
                       std::all_of(d.endings.begin(), d.endings.end(), [](const json& e) { return e.is_string(); });
  QKV_CHECK(columns || d.endings.is_string(), kChoiceTask,
            ": data.endings must be a list of the endings' columns ([\"ending0\", \"ending1\", …]) or the name of "
            "one column holding them, got ",
            excerpt(d.endings.dump(), 60));
  PretrainedEncoder pre = load_pretrained_encoder(c.init_from, base_dir, config.value("model", json()), kChoiceTask,
                                                  nn::BertClassifier::choice, gen_);
  tok_ = std::move(pre.tokenizer), model_ = std::move(pre.model);
  tokenizer_meta_ = pre.file.tokenizer, carried_ = pre.file.carried;
  const text::HfTokenizer& tok = *tok_.hf();
  pad_id_ = decode::batching::pad_id_of(tok);
  QKV_CHECK(!d.train.empty(), kChoiceTask, ": data.train (the examples: .jsonl or .csv) is missing");
  QKV_CHECK(d.val_fraction > 0 || !d.val.empty(), kChoiceTask,
            ": data.val_fraction must be > 0 where there is no data.val");
  if (d.max_length == 0) d.max_length = decode::default_choice_length(*model_, tok);
  QKV_CHECK(d.max_length >= 4 && d.max_length <= model_->max_positions(), kChoiceTask, ": data.max_length ",
            d.max_length, " must be 4 … the model's ", model_->max_positions(), " positions");
  {
    const io::ProgressBar::MutedScope muted(!verbose);
    const std::string train_path = io::config_path(d.train, base_dir);
    std::vector<ChoiceExample> train = read_choice_examples(train_path, d), val;
    if (!d.val.empty()) {
      val = read_choice_examples(io::config_path(d.val, base_dir), d);
      QKV_CHECK(val.front().endings.size() == train.front().endings.size(), kChoiceTask, ": data.val's examples have ",
                val.front().endings.size(), " endings, data.train's ", train.front().endings.size());
    } else {
      // val_fraction of the examples, drawn with the seed
      val = take_held_out(train, hold_out_fraction(static_cast<int64_t>(train.size()), d.val_fraction, cfg_.seed,
                                                   kChoiceTask, train_path, "examples"));
    }
    train_ = encode_examples(train, *model_, tok, d.max_length);
    val_ = encode_examples(val, *model_, tok, d.max_length);
  }
  order_ = io::EpochOrder(train_.size(), cfg_.seed);
  check_encoder_batch_fits(kChoiceTask, *model_, pre.file.model, pre.parameters,
                           checked_mul(cfg_.batch_size, train_.choices, "train.batch_size × the choices"),
                           d.max_length);
}

Tensor MultipleChoiceTask::loss(const ChoiceSet& set, const std::vector<size_t>& rows, int64_t* right) const {
  // the examples' C pairs each, padded together: B·C rows → scores [B·C, 1] → [B, C]
  const auto B = static_cast<int64_t>(rows.size()), C = set.choices;
  std::vector<size_t> pairs;
  std::vector<int32_t> labels;
  for (const size_t n : rows) {
    for (int64_t c = 0; c < C; ++c) pairs.push_back(n * static_cast<size_t>(C) + static_cast<size_t>(c));
    labels.push_back(set.labels[n]);
  }
  const decode::batching::Batch b = decode::batching::pad(set.pairs, pairs, 0, pairs.size(), pad_id_);
  const Tensor s = model_->classify(b.ids.to(device_), b.types.to(device_), b.mask.to(device_)).reshape({B, C});
  if (right) {
    const std::vector<float> v = s.to_vector();
    *right = 0;
    for (int64_t n = 0; n < B; ++n) {
      const auto row = v.begin() + n * C;
      *right += std::max_element(row, row + C) - row == labels[static_cast<size_t>(n)];
    }
  }
  // (1/B) Σ_n −log softmax(s_n)[label_n]
  return cross_entropy(s, Tensor::from_ints(labels, {B}).to(device_));
}

StepStats MultipleChoiceTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  const int64_t batch = cfg_.batch_size;
  const Rows rows = shard_rows(batch, gen_, kChoiceTask);
  const auto first = static_cast<uint64_t>((step * accum + micro) * batch + rows.first);
  std::vector<size_t> index(static_cast<size_t>(rows.count));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<size_t>(order_.at(first + i));
  const Tensor l = loss(train_, index);
  const double share = static_cast<double>(rows.count) / static_cast<double>(batch);
  backward_share(l, share, accum);
  return {l.item(), rows.count, share};
}

std::vector<std::pair<std::string, double>> MultipleChoiceTask::evaluate(int64_t) {
  const NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t right = 0;
  io::ProgressBar bar("eval", val_.size(), 0, /*delay_seconds=*/2);
  for (int64_t from = 0; from < val_.size(); from += cfg_.batch_size) {
    std::vector<size_t> rows;
    for (int64_t n = from; n < std::min(val_.size(), from + cfg_.batch_size); ++n)
      rows.push_back(static_cast<size_t>(n));
    int64_t hits = 0;
    loss_sum += loss(val_, rows, &hits).item() * static_cast<double>(rows.size());
    right += hits;
    bar.update(static_cast<int64_t>(rows.size()));
  }
  const auto n = static_cast<double>(val_.size());
  return {{"val_loss", loss_sum / n}, {"val_accuracy", static_cast<double>(right) / n}};
}

}  // namespace qkv::train
