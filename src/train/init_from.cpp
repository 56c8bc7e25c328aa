#include "qkv/train/init_from.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/io/csv.h"
#include "qkv/io/data_file.h"
#include "qkv/io/json.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"
#include "qkv/text/unicode.h"
#include "qkv/train/memory_plan.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A field a fine-tuning run may set to its own value: the dropout rates (training only; the
// weights mean the same without them).
bool settable(const std::string& key) { return key.find("dropout") != std::string::npos; }

// Equal as a config means them: numbers by value (2 == 2.0; a float the file stored as f32 —
// 0.1 read back as 0.10000000149 — within 1e-6 relative), the rest exactly.
bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::abs(x - y) <= 1e-6 * std::max(std::abs(x), std::abs(y));
  }
  return a == b;
}

std::string shown(const json& v) {
  const std::string s = v.dump();
  return s.size() <= 60 ? s : s.substr(0, 60) + "…";
}

}  // namespace

Pretrained load_pretrained(const std::string& path, const std::string& base_dir, models::Kind kind,
                           const json& model_section, const std::string& task) {
  Pretrained p;
  p.task = task;
  p.path = io::config_path(path, base_dir);
  const std::string where = detail::concat(task, ": init_from '", p.path, "'");
  // The metadata alone (format, version, model type, hyper-parameters: checked); the tensors are read
  // by load_into, into the model built from it.
  json meta;
  try {
    meta = models::load_model_metadata(p.path);
    QKV_CHECK(meta["model_type"].is_string(), "the model type ", shown(meta["model_type"]), " is not a name");
    const models::ModelType& t = models::model_type(meta["model_type"].get<std::string>());
    QKV_CHECK(t.kind == kind, "it holds a \"", t.name, "\" model (", models::kind_name(t.kind), "), not the ",
              models::kind_name(kind), " model this task trains");
  } catch (const Error& e) {
    throw Error(detail::concat(where, ": ", e.what()));
  }
  p.type = meta["model_type"].get<std::string>();
  p.model = meta["model"];
  QKV_CHECK(p.model.is_object(), where, ": its \"model\" metadata is not an object");
  QKV_CHECK(meta.contains("tokenizer") && !meta["tokenizer"].is_null(), where,
            ": the file carries no tokenizer (a fine-tuning run reads its data with the model's own)");
  p.tokenizer = meta["tokenizer"];
  for (const char* key : {"generation", "converted_from"})
    if (meta.contains(key)) p.carried[key] = meta[key];
  p.carried["init_from"] = p.path;

  // The config's "model" section, where given: the file's values, or a dropout rate of its own.
  if (!model_section.is_null()) {
    QKV_CHECK(model_section.is_object(), task, ": \"model\" must be an object, got ", shown(model_section));
    for (const auto& [key, value] : model_section.items()) {
      if (key == "type") {
        QKV_CHECK(value == json(p.type), task, ": model.type ", shown(value), " differs from the \"", p.type,
                  "\" model in init_from '", p.path, "' (leave \"model\" out: the file's hyper-parameters are used)");
        continue;
      }
      QKV_CHECK(p.model.contains(key), task, ": model.", key, " is not a hyper-parameter of the \"", p.type,
                "\" model in init_from '", p.path, "' (leave \"model\" out: the file's are used)");
      if (settable(key)) {
        p.model[key] = value;  // checked by the model's own config when it is built
        continue;
      }
      QKV_CHECK(same_value(value, p.model[key]), task, ": model.", key, " ", shown(value), " differs from ",
                shown(p.model[key]), " in init_from '", p.path,
                "' (a fine-tuned model keeps the file's hyper-parameters; only the dropout rates may be set)");
    }
  }
  return p;
}

void Pretrained::load_into(nn::Module& module) const {
  try {
    models::load_model_streaming(path, [&](const json&, size_t) -> nn::Module& { return module; });
  } catch (const Error& e) {
    throw Error(detail::concat(task, ": init_from: ", e.what()));  // (the message names the file)
  }
}

PretrainedEncoder load_pretrained_encoder(const std::string& path, const std::string& base_dir,
                                          const json& model_section, const std::string& task, nn::BertClassifier head,
                                          Generator& gen) {
  PretrainedEncoder out;
  Pretrained& pre = out.file;
  pre = load_pretrained(path, base_dir, models::Kind::masked_language_model, model_section, task);
  try {
    out.tokenizer = text::LMTokenizer::from_json(pre.tokenizer);
  } catch (const Error& e) {
    QKV_CHECK(false, task, ": init_from '", pre.path, "': its tokenizer: ", e.what());
  }
  QKV_CHECK(out.tokenizer.hf(), task, ": init_from '", pre.path,
            "': an encoder reads its texts with a Hugging Face tokenizer (", out.tokenizer.type(), " found)");

  // The model: its parameters counted first (train/memory_plan.h), then built and loaded.
  out.parameters = check_model_fits(task, pre.model, [&] {
    return models::build_masked_language_model(pre.type, pre.model, nullptr)->module().num_parameters();
  });
  {
    nn::init::SkipInit no_init;  // (the file's values replace them)
    out.model = models::build_masked_language_model(pre.type, pre.model, &gen);
  }
  const nn::BertClassifier has = out.model->task().classifier;
  auto name = [](nn::BertClassifier c) {
    return c == nn::BertClassifier::none       ? "an encoder without a classifier"
           : c == nn::BertClassifier::sequence ? "a sequence classifier"
           : c == nn::BertClassifier::token    ? "a token classifier"
           : c == nn::BertClassifier::span     ? "a question-answering head"
                                               : "a multiple-choice head";
  };
  if (head == nn::BertClassifier::none) {
    // (masked-language-model training: the MLM head the checkpoint has)
    QKV_CHECK(has == head && out.model->has_mlm_head(), task, ": init_from '", pre.path, "' holds ",
              has == head ? "an encoder without its masked-language-model head (a …Model checkpoint)" : name(has),
              ", not a masked language model: convert a …ForMaskedLM checkpoint (qkv convert DIR -o FILE)");
  } else {
    const char* kind = head == nn::BertClassifier::sequence ? "sequence"
                       : head == nn::BertClassifier::token  ? "token"
                       : head == nn::BertClassifier::span   ? "span"
                                                            : "choice";
    QKV_CHECK(has == head, task, ": init_from '", pre.path, "' holds ", name(has), ", not ", name(head),
              ": convert the checkpoint with one (qkv convert DIR --head ", kind,
              head == nn::BertClassifier::span || head == nn::BertClassifier::choice ? "" : " --labels A,B,…",
              " -o FILE)");
  }
  pre.load_into(out.model->module());
  return out;
}

std::string text_field(const json& row, const std::string& key, const std::string& where) {
  QKV_CHECK(row.is_object() && row.contains(key) && row[key].is_string(), where, ": no string \"", excerpt(key), "\"");
  return text::valid_utf8(row[key].get_ref<const std::string&>());
}

std::vector<DataRow> data_rows(std::string_view text, const std::string& path, const std::string& task,
                               const std::string& what) {
  const std::string ext = std::filesystem::path(path).extension().string();
  QKV_CHECK(ext == ".jsonl" || ext == ".csv", task, ": '", path, "' is neither .jsonl (", what,
            ") nor .csv (a header line naming the columns, then a record a line)");
  std::vector<DataRow> out;
  if (ext == ".csv") {
    io::CsvTable t = io::parse_csv(text, detail::concat(task, ": '", path, "'"));
    out.reserve(t.records.size());
    for (io::CsvRecord& r : t.records) {
      json row = json::object();
      for (size_t i = 0; i < t.header.size(); ++i) row[t.header[i]] = std::move(r.fields[i]);
      out.push_back({r.line, std::move(row), /*csv=*/true});
    }
    return out;
  }
  for (const auto& [number, line] : io::numbered_lines(text)) {
    const std::string where = detail::concat(task, ": '", path, "' line ", number);
    json row = io::parse_json_line(line, where);
    QKV_CHECK(row.is_object(), where, ": not an object (", what, ")");
    out.push_back({number, std::move(row), /*csv=*/false});
  }
  return out;
}

io::HeldOut hold_out_fraction(int64_t n, double fraction, uint64_t seed, const std::string& task,
                              const std::string& path, const char* what) {
  const auto n_val = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  QKV_CHECK(n_val >= 1 && n_val < n, task, ": data.val_fraction ", fraction, " of the ", n, " ", what, " of '", path,
            "' leaves ", n_val, " to validate on and ", n - n_val, " to train on (give data.val)");
  return io::hold_out(n, n_val, seed ^ 0x7A1D5E7ull);
}

json fine_tuned_metadata(const models::Model& model, const json& tokenizer, const json& carried) {
  json meta = models::metadata(model, tokenizer);
  for (const auto& [key, value] : carried.items()) meta[key] = value;
  return meta;
}

void check_encoder_batch_fits(const std::string& task, const models::MaskedLanguageModel& model, const json& config,
                              int64_t parameters, int64_t batch_size, int64_t max_length) {
  const int64_t B = batch_size, E = model.width();
  const int64_t layers = config.value("num_hidden_layers", int64_t{1});
  const std::string keys_text = detail::concat(task, ": train.batch_size × data.max_length × hidden_size");
  const char* keys = keys_text.c_str();
  check_batch_fits(task, parameters,
                   checked_mul(checked_mul(checked_mul(checked_mul(B, max_length, keys), E, keys), 64, keys),
                               std::max<int64_t>(layers, 1), keys),
                   detail::concat("train.batch_size ", B, " examples of up to ", max_length, " tokens × hidden_size ",
                                  E, " × ", layers, " layers"));
}

}  // namespace qkv::train
