// qkv model files → Hugging Face folders (models/hf_export.h): the names, the config, the weights by
// shard, the tokenizer and the folder, each checked against the converter's own map (hf_convert.cpp).
#include "qkv/models/hf_export.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include "hf/architectures.h"
#include "hf/native.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/io/base64.h"
#include "qkv/io/config.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"
#include "qkv/models/model_file.h"
#include "qkv/ops.h"

namespace qkv::models {

namespace {

namespace fs = std::filesystem;

// ---- the names ---------------------------------------------------------------------------------------

// What an encoder's architecture carries on top of its family's encoder (transformers' class name:
// BertModel, BertForMaskedLM, BertForSequenceClassification, …).
enum class EncoderTop { none, mlm, sequence, token, span, choice };

// An encoder family as transformers names its weights: the attribute a …For… model keeps the encoder
// under (base_model_prefix: "bert.embeddings…"; a bare …Model has none), and the modules of each head
// qkv can put on it (convert --head), space-separated — their weights and biases are the head's names
// (from the classes' own __init__; tests/golden/hf's folders, written by save_pretrained, show them).
struct EncoderFamily {
  const char* family;  // the class name's start: "Bert", "XLMRoberta"
  const char* prefix;  // base_model_prefix
  const char* sequence;
  const char* token;
  const char* span;
  const char* choice;
  const char* mlm;  // (the MLM heads' names come from the checkpoint, but for ModernBERT's shared head)
};
constexpr EncoderFamily kEncoderFamilies[] = {
    {"Bert", "bert", "bert.pooler.dense classifier", "classifier", "qa_outputs", "bert.pooler.dense classifier", ""},
    {"Roberta", "roberta", "classifier.dense classifier.out_proj", "classifier", "qa_outputs",
     "roberta.pooler.dense classifier", ""},
    {"XLMRoberta", "roberta", "classifier.dense classifier.out_proj", "classifier", "qa_outputs",
     "roberta.pooler.dense classifier", ""},
    {"Electra", "electra", "classifier.dense classifier.out_proj", "classifier", "qa_outputs",
     "sequence_summary.summary classifier", ""},
    {"Albert", "albert", "albert.pooler classifier", "classifier", "qa_outputs", "albert.pooler classifier", ""},
    {"DebertaV2", "deberta", "pooler.dense classifier", "classifier", "qa_outputs", "pooler.dense classifier", ""},
    {"DistilBert", "distilbert", "pre_classifier classifier", "classifier", "qa_outputs", "pre_classifier classifier",
     ""},
    {"MPNet", "mpnet", "classifier.dense classifier.out_proj", "classifier", "qa_outputs",
     "mpnet.pooler.dense classifier", ""},
    {"ModernBert", "model", "head.dense head.norm classifier", "head.dense head.norm classifier",
     "head.dense head.norm classifier", "head.dense head.norm classifier", "head.dense head.norm"},
};

struct EncoderArchitecture {
  const EncoderFamily* family = nullptr;
  EncoderTop top = EncoderTop::none;
};
// "RobertaForTokenClassification" → Roberta's family, token; nullopt for a name of no encoder family.
std::optional<EncoderArchitecture> encoder_architecture(const std::string& arch) {
  static const std::pair<const char*, EncoderTop> tops[] = {{"Model", EncoderTop::none},
                                                            {"ForMaskedLM", EncoderTop::mlm},
                                                            {"ForSequenceClassification", EncoderTop::sequence},
                                                            {"ForTokenClassification", EncoderTop::token},
                                                            {"ForQuestionAnswering", EncoderTop::span},
                                                            {"ForMultipleChoice", EncoderTop::choice}};
  for (const EncoderFamily& f : kEncoderFamilies)
    for (const auto& [suffix, top] : tops)
      if (arch == std::string(f.family) + suffix) return EncoderArchitecture{&f, top};
  return std::nullopt;
}

const char* head_modules(const EncoderArchitecture& e) {
  switch (e.top) {
    case EncoderTop::sequence:
      return e.family->sequence;
    case EncoderTop::token:
      return e.family->token;
    case EncoderTop::span:
      return e.family->span;
    case EncoderTop::choice:
      return e.family->choice;
    case EncoderTop::mlm:
      return e.family->mlm;
    case EncoderTop::none:
      return "";
  }
  return "";
}

// An encoder's weight under the name `arch` gives it: "bert.encoder.layer.0…" in a BertFor… model,
// "encoder.layer.0…" in a BertModel, whichever the checkpoint had.
std::string encoder_body_name(const std::string& name, const EncoderArchitecture& e) {
  const std::string prefix = std::string(e.family->prefix) + ".";
  const std::string bare = name.starts_with(prefix) ? name.substr(prefix.size()) : name;
  return e.top == EncoderTop::none ? bare : prefix + bare;
}

bool same_target(const HfTensorTarget& a, const HfTensorTarget& b) {
  return a.name == b.name && a.transpose == b.transpose && a.part == b.part && a.parts == b.parts &&
         a.plus_one == b.plus_one && a.rows_of == b.rows_of && a.head_groups == b.head_groups;
}

// One weight of the folder: its name, and the parameter (or row block, or parameters) it holds.
struct FolderTensor {
  std::string name;
  HfTensorTarget target;
  Shape shape;
};

// The folder's weights for the model's parameters `params`, named by the architecture `arch`: the
// checkpoint's names (`names`, of the architecture `names_arch`), an encoder's body renamed where its
// architecture changed, a head qkv put on it named by kEncoderFamilies. Every parameter (every row
// block) is held by exactly one weight, and every name goes back to its parameter through arch.map.
std::vector<FolderTensor> folder_tensors(const HfArchitecture& arch, const std::vector<std::string>& names,
                                         const std::string& names_arch, const std::map<std::string, Tensor>& params,
                                         const nlohmann::json& model_config, const std::string& where) {
  const std::optional<EncoderArchitecture> encoder = encoder_architecture(arch.name);
  const bool same = names_arch == arch.name;
  std::vector<FolderTensor> out;
  std::map<std::string, std::string> held;  // parameter (or "name#part") → the weight that holds it
  std::map<std::string, int> parts_of;
  // the weight `name` for `t` unless a weight already holds what it would
  auto hold = [&](const std::string& name, const HfTensorTarget& t) {
    std::vector<std::string> keys;
    Shape shape;
    if (!t.rows_of.empty()) {
      int64_t rows = 0, cols = 0;
      for (const std::string& p : t.rows_of) {
        keys.push_back(p);
        rows += params.at(p).size(0), cols = params.at(p).dim() == 2 ? params.at(p).size(1) : 0;
      }
      shape = cols > 0 ? Shape{rows, cols} : Shape{rows};
    } else {
      const Tensor& p = params.at(t.name);
      keys.push_back(t.parts > 1 ? t.name + "#" + std::to_string(t.part) : t.name);
      shape = p.shape();
      if (t.parts > 1) shape[0] /= t.parts, parts_of[t.name] = t.parts;
      if (t.transpose && shape.size() == 2) std::swap(shape[0], shape[1]);
    }
    for (const std::string& k : keys)
      if (held.count(k)) return;
    for (const std::string& k : keys) held[k] = name;
    out.push_back({name, t, shape});
  };
  auto present = [&](const HfTensorTarget& t) {
    if (!t.rows_of.empty()) {
      for (const std::string& p : t.rows_of)
        if (!params.count(p) || params.at(p).dim() != params.at(t.rows_of[0]).dim()) return false;
      return true;
    }
    return !t.name.empty() && params.count(t.name) > 0;
  };
  for (const std::string& name : names) {
    const std::optional<HfTensorTarget> t = arch.target(name, model_config);
    QKV_CHECK(t.has_value() || !same, where, ": the checkpoint's tensor ", excerpt(nlohmann::json(name).dump()),
              " is not one of ", arch.name, "'s (its converted_from was changed?)");
    if (!t || !present(*t)) continue;  // a buffer, a tied copy, an old head's weight
    if (!encoder || same) {
      hold(name, *t);
      continue;
    }
    if (hf::new_head_parameter(t->name)) continue;  // the new head's own names, below
    const std::string renamed = encoder_body_name(name, *encoder);
    const std::optional<HfTensorTarget> back = arch.target(renamed, model_config);
    QKV_CHECK(back && same_target(*back, *t), where, ": the checkpoint's tensor ", excerpt(nlohmann::json(name).dump()),
              " renamed for ", arch.name, " as ", excerpt(nlohmann::json(renamed).dump()), " does not go back to ",
              t->name);
    hold(renamed, *t);
  }
  if (encoder) {  // a head qkv put on the encoder (and one the checkpoint's names did not hold)
    std::string modules = head_modules(*encoder);
    for (size_t at = 0; at < modules.size();) {
      size_t end = modules.find(' ', at);
      if (end == std::string::npos) end = modules.size();
      const std::string module = modules.substr(at, end - at);
      at = end + 1;
      for (const char* leaf : {".weight", ".bias"}) {
        const std::optional<HfTensorTarget> t = arch.target(module + leaf, model_config);
        if (t && present(*t) && hf::new_head_parameter(t->name)) hold(module + leaf, *t);
      }
    }
  }
  for (const auto& [name, p] : params) {
    const int parts = parts_of.count(name) ? parts_of.at(name) : 1;
    for (int i = 0; i < parts; ++i)
      QKV_CHECK(held.count(parts > 1 ? name + "#" + std::to_string(i) : name), where, ": no ", arch.name,
                " weight holds the parameter ", name, " (the file's converted_from names no tensor for it)");
  }
  return out;
}

// The folder's weight from the parameters, the converter's step undone: its row block, w = γ − 1 for a
// Gemma norm (exact for γ ∈ [0.5, 2²⁴] — Sterbenz below 2, a multiple of γ's ulp above — so that Gemma's
// 1 + w in f32 is γ again), transposed back to Conv1D's [in, out], fused projections
// concatenated.
Tensor folder_weight(const FolderTensor& w, const std::map<std::string, Tensor>& params) {
  const HfTensorTarget& t = w.target;
  if (!t.rows_of.empty()) {
    std::vector<Tensor> parts;
    for (const std::string& p : t.rows_of)  // (head by head: each part as [heads, 1, D·cols])
      parts.push_back(t.head_groups > 0 ? params.at(p).contiguous().reshape({t.head_groups, 1, -1}) : params.at(p));
    if (t.head_groups == 0) return cat(parts, 0);
    Shape shape = params.at(t.rows_of[0]).shape();
    shape[0] *= static_cast<int64_t>(parts.size());
    return cat(parts, 1).reshape(shape);
  }
  Tensor p = params.at(t.name);
  if (t.parts > 1) {
    const int64_t n = p.size(0) / t.parts;
    p = p.slice(0, t.part * n, (t.part + 1) * n);
  }
  if (t.plus_one) p = add(p, -1.f);
  if (t.transpose) p = p.transpose(0, 1);
  return p;
}

// ---- the config ----------------------------------------------------------------------------------

const char* torch_dtype_name(io::StoreAs store) {
  return store == io::StoreAs::kF16 ? "float16" : store == io::StoreAs::kBF16 ? "bfloat16" : "float32";
}

bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number() && !(a.is_number_integer() && b.is_number_integer())) {
    const double x = a.get<double>(), y = b.get<double>();
    return std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y));  // (a float field's double)
  }
  return a == b;
}

// config.json for the model `meta` describes: its checkpoint's, with the architecture, labels and dtype
// the model has; checked by converting it again (arch.config) against the model's config.
nlohmann::json folder_config(const HfArchitecture& arch, const nlohmann::json& meta, io::StoreAs store,
                             const std::string& where) {
  const nlohmann::json& from = meta["converted_from"];
  const nlohmann::json& model = meta["model"];
  nlohmann::json c = from["config"];
  c["architectures"] = {arch.name};
  if (from.contains("new_head")) {  // as the converter read it for the new head
    c.erase("sentence_transformers");
    c.erase("sbert_ce_default_activation_function");
  }
  if (model.contains("labels") && model["labels"].is_array()) {
    nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
    for (size_t i = 0; i < model["labels"].size(); ++i) {
      QKV_CHECK(model["labels"][i].is_string(), where, ": the model's label ", i, " is not a string");
      id2label[std::to_string(i)] = model["labels"][i];
      label2id[model["labels"][i].get<std::string>()] = i;
    }
    c["id2label"] = id2label, c["label2id"] = label2id;
    if (c.contains("num_labels")) c["num_labels"] = model["labels"].size();
  }
  if (model.contains("problem_type") && model["problem_type"].is_string()) {
    if (model["problem_type"] == "auto")
      c.erase("problem_type");
    else
      c["problem_type"] = model["problem_type"];
  }
  const char* dtype = torch_dtype_name(store);
  if (c.contains("dtype")) c["dtype"] = dtype;
  if (c.contains("torch_dtype") || !c.contains("dtype")) c["torch_dtype"] = dtype;

  nlohmann::json expected;
  try {
    expected = arch.config(c);
  } catch (const Error& e) {
    throw Error(detail::concat(where, ": its Hugging Face config (converted_from, ", arch.name, "): ", e.what()));
  }
  // every field the config makes (the model's others are the defaults its type fills in, and the
  // sentence-transformers files' keys, written below)
  for (auto& [k, v] : expected.items()) {
    if (k.find("dropout") != std::string::npos) continue;  // qkv train may set them; the checkpoint's are written
    QKV_CHECK(model.contains(k) && same_value(model[k], v), where, ": the model's ", k, " (",
              model.contains(k) ? excerpt(model[k].dump(), 60) : "not set",
              ") is not what its Hugging Face config makes (", excerpt(v.dump(), 60), ", ", arch.name,
              "): no config.json describes this model");
  }
  return c;
}

// ---- the folder ----------------------------------------------------------------------------------

void write_text(const fs::path& path, const std::string& text) { io::write_file_atomic(path.string(), text); }
void write_json(const fs::path& path, const nlohmann::json& j) { write_text(path, j.dump(2) + "\n"); }

// The tokenizer's files, as the converter read them (meta's "tokenizer").
void write_tokenizer(const fs::path& dir, const nlohmann::json& meta, std::vector<std::string>& files) {
  const nlohmann::json tokenizer = meta.value("tokenizer", nlohmann::json());
  if (!tokenizer.is_object()) return;
  const std::string type = io::get_or(tokenizer, "type", "");
  auto text = [&](const char* key) -> std::string {
    QKV_CHECK(tokenizer.contains(key) && tokenizer[key].is_string(), "export: the model file's tokenizer has no ", key);
    return tokenizer[key].get<std::string>();
  };
  if (type == "hf") {
    write_text(dir / "tokenizer.json", text("tokenizer_json"));
    files.push_back("tokenizer.json");
    if (tokenizer.contains("tokenizer_config") && tokenizer["tokenizer_config"].is_object()) {
      write_json(dir / "tokenizer_config.json", tokenizer["tokenizer_config"]);
      files.push_back("tokenizer_config.json");
    }
    if (tokenizer.contains("chat_template") && tokenizer["chat_template"].is_string()) {
      write_text(dir / "chat_template.jinja", tokenizer["chat_template"].get<std::string>());
      files.push_back("chat_template.jinja");
    }
  } else if (type == "marian") {
    write_text(dir / "source.spm", io::base64_decode(text("source_base64"), "the model file's source.spm"));
    write_text(dir / "target.spm", io::base64_decode(text("target_base64"), "the model file's target.spm"));
    QKV_CHECK(tokenizer.contains("vocab") && tokenizer["vocab"].is_array(),
              "export: the Marian tokenizer has no vocab");
    nlohmann::json vocab = nlohmann::json::object();
    for (size_t i = 0; i < tokenizer["vocab"].size(); ++i) vocab[tokenizer["vocab"][i].get<std::string>()] = i;
    write_json(dir / "vocab.json", vocab);
    files.insert(files.end(), {"source.spm", "target.spm", "vocab.json"});
    const nlohmann::json& from = meta["converted_from"];
    if (from.contains("tokenizer_config") && from["tokenizer_config"].is_object()) {
      write_json(dir / "tokenizer_config.json", from["tokenizer_config"]);
      files.push_back("tokenizer_config.json");
    }
  } else {
    throw Error(detail::concat("export: the model file's tokenizer (\"", excerpt(type),
                               "\") is not a Hugging Face one (tokenizer.json, or Marian's)"));
  }
}

// A sentence-transformers model's files (modules.json, the pooling's config, the length, a cross-encoder's
// activation) for the qkv config's keys that came from them (pooling, normalize, max_seq_length,
// score_activation: unset, false, 0 and unset where they did not).
void write_sentence_transformers(const fs::path& dir, const nlohmann::json& model, bool activation_in_config,
                                 std::vector<std::string>& files) {
  const std::string pooling = model.value("pooling", std::string("unset"));
  const std::string activation = model.value("score_activation", std::string("unset"));
  const int64_t length = model.value("max_seq_length", int64_t{0});
  const bool pooled = pooling == "cls" || pooling == "mean" || pooling == "max",
             normalized = model.value("normalize", false);
  const bool activation_file = activation != "unset" && !activation_in_config;
  if (!pooled && !normalized && length <= 0 && !activation_file) return;  // not a sentence-transformers model
  // (a cross-encoder whose config.json carries its activation has no file of its own: modules.json
  // would make its tokenizer's model_max_length the model's, which it was not)
  nlohmann::json modules = nlohmann::json::array();
  modules.push_back({{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}});
  if (pooled) {
    modules.push_back(
        {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}});
    fs::create_directories(dir / "1_Pooling");
    write_json(dir / "1_Pooling" / "config.json", {{"word_embedding_dimension", model.value("hidden_size", 0)},
                                                   {"pooling_mode_cls_token", pooling == "cls"},
                                                   {"pooling_mode_mean_tokens", pooling == "mean"},
                                                   {"pooling_mode_max_tokens", pooling == "max"},
                                                   {"pooling_mode_mean_sqrt_len_tokens", false},
                                                   {"pooling_mode_weightedmean_tokens", false},
                                                   {"pooling_mode_lasttoken", false},
                                                   {"include_prompt", true}});
    files.push_back("1_Pooling/config.json");
  }
  if (normalized)
    modules.push_back({{"idx", modules.size()},
                       {"name", std::to_string(modules.size())},
                       {"path", std::to_string(modules.size()) + "_Normalize"},
                       {"type", "sentence_transformers.models.Normalize"}});
  write_json(dir / "modules.json", modules);
  files.push_back("modules.json");
  if (length > 0) {
    write_json(dir / "sentence_bert_config.json", {{"max_seq_length", length}, {"do_lower_case", false}});
    files.push_back("sentence_bert_config.json");
  }
  if (activation_file) {
    write_json(dir / "config_sentence_transformers.json",
               {{"model_type", "CrossEncoder"},
                {"activation_fn", activation == "sigmoid" ? "torch.nn.modules.activation.Sigmoid"
                                                          : "torch.nn.modules.linear.Identity"}});
    files.push_back("config_sentence_transformers.json");
  }
}

// `dir` may receive the folder: absent, an empty folder, or (force) a folder.
void check_destination(const fs::path& dir, bool force) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  QKV_CHECK(fs::is_directory(dir, ec), "export: '", dir.string(), "' exists and is not a folder");
  QKV_CHECK(force || fs::is_empty(dir, ec), "export: the folder '", dir.string(),
            "' is not empty (--force writes into it, replacing its weights)");
}

// The written folder `tmp` into its place `dir`: renamed there, or (a folder that has files) its files
// moved in one by one and the weights of an earlier export (model*.safetensors, the index) removed.
void move_into_place(const fs::path& tmp, const fs::path& dir, const std::vector<std::string>& files) {
  std::error_code ec;
  if (fs::exists(dir, ec) && fs::is_empty(dir, ec)) fs::remove(dir, ec);
  if (!fs::exists(dir, ec)) {
    fs::rename(tmp, dir, ec);
    QKV_CHECK(!ec, "export: cannot move the folder into '", dir.string(), "': ", ec.message());
    return;
  }
  const std::set<std::string> written(files.begin(), files.end());
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if ((name.starts_with("model") && name.ends_with(".safetensors")) || name == "model.safetensors.index.json")
      if (!written.count(name)) fs::remove(entry.path(), ec);
  }
  for (const std::string& f : files) {
    fs::create_directories((dir / f).parent_path());
    fs::rename(tmp / f, dir / f, ec);
    QKV_CHECK(!ec, "export: cannot move '", f, "' into '", dir.string(), "': ", ec.message());
  }
  fs::remove_all(tmp, ec);
}

}  // namespace

uint64_t parse_shard_size(const std::string& text, const std::string& what) {
  static const std::pair<const char*, uint64_t> units[] = {{"GiB", uint64_t{1} << 30},
                                                           {"MiB", uint64_t{1} << 20},
                                                           {"KiB", uint64_t{1} << 10},
                                                           {"GB", 1'000'000'000},
                                                           {"MB", 1'000'000},
                                                           {"KB", 1'000},
                                                           {"B", 1}};
  uint64_t scale = 1;
  std::string digits = text;
  for (const auto& [unit, s] : units)
    if (text.size() > std::string(unit).size() && text.ends_with(unit)) {
      digits = text.substr(0, text.size() - std::string(unit).size()), scale = s;
      break;
    }
  QKV_CHECK(!digits.empty() && digits.size() <= 12 && digits.find_first_not_of("0123456789") == std::string::npos, what,
            " must be a size such as 5GB, 500MB or 2GiB, got \"", excerpt(text), "\"");
  const uint64_t count = std::stoull(digits);
  QKV_CHECK(count > 0 && count <= UINT64_MAX / scale, what, " must be more than 0 bytes and fewer than 2⁶⁴, got \"",
            excerpt(text), "\"");
  const uint64_t n = count * scale;
  return n;
}

HfExportReport export_hf(const std::string& model_file, const std::string& out_dir, const HfExportOptions& options) {
  QKV_CHECK(
      options.store == io::StoreAs::kF32 || options.store == io::StoreAs::kF16 || options.store == io::StoreAs::kBF16,
      "export: the weights' dtype must be f32, f16 or bf16");
  QKV_CHECK(options.max_shard_bytes > 0, "export: the shard size must be more than 0 bytes");
  const std::string where = "export: '" + model_file + "'";
  nlohmann::json meta = load_model_metadata(model_file);
  QKV_CHECK(!meta.contains("quantized"), where,
            " is int8 (qkv quantize): Hugging Face folders hold float weights; export the file it was made from");
  // A language model qkv trained: the checkpoint it would have come from (hf/native.h).
  std::optional<hf::NativeCheckpoint> native;
  if (!meta.contains("converted_from")) {
    native = hf::native_checkpoint(meta, where);
    meta["converted_from"] = native->converted_from;
    meta["model"] = native->model;
    meta["tokenizer"] = native->tokenizer;
  }
  const nlohmann::json none;
  const nlohmann::json& from = meta["converted_from"];
  QKV_CHECK(from.is_object() && from.contains("architecture") && from["architecture"].is_string() &&
                from.contains("config") && from["config"].is_object(),
            where, ": its converted_from is not a Hugging Face checkpoint's (an architecture and a config)");
  const std::string arch_name = from["architecture"].get<std::string>();
  QKV_CHECK(arch_name != "Gemma3ForConditionalGeneration", where,
            " came from Gemma3ForConditionalGeneration, whose vision tower the qkv file does not keep: there is no "
            "folder to write it back to");
  const nlohmann::json& tensors = from.value("tensors", none);
  QKV_CHECK(native || (tensors.is_object() && tensors.contains("names") && tensors["names"].is_array() &&
                       tensors.contains("architecture") && tensors["architecture"].is_string()),
            where,
            " was converted by an older qkv, which did not keep the checkpoint's tensor names: convert the folder "
            "again (qkv convert --from hf), or train from a new conversion");
  std::vector<std::string> names;
  if (!native)
    for (const auto& n : tensors["names"]) {
      QKV_CHECK(n.is_string(), where, ": converted_from's tensor names are not all strings");
      names.push_back(n.get<std::string>());
    }
  const HfArchitecture& arch = hf_architecture(arch_name);
  QKV_CHECK(meta.value("model_type", "") == arch.model_type, where, " holds a \"", meta.value("model_type", ""),
            "\" model, not the \"", arch.model_type, "\" ", arch.name, " makes");
  fs::path dir = fs::path(out_dir).lexically_normal();  // ("out/" is the folder out: its name, not "")
  if (dir.filename().empty() && dir.has_parent_path()) dir = dir.parent_path();
  QKV_CHECK(!dir.empty() && !dir.filename().empty(), "export: '", out_dir, "' names no folder to write");
  check_destination(dir, options.force);
  // the model, its parameters streamed in (a converted language model need not carry a tokenizer)
  std::unique_ptr<Model> model;
  load_model_streaming(model_file, [&](const nlohmann::json& file_meta, size_t param_bytes) -> nn::Module& {
    try {  // (what its tensors justify, as every loader bounds a file's config)
      AllocationBudget budget(2 * param_bytes + (size_t{64} << 20),
                              detail::concat("its config describes a model larger than the tensors it holds (",
                                             param_bytes >> 20, " MiB) justify"));
      nn::init::SkipInit no_init;
      model = model_type(file_meta.at("model_type").get<std::string>()).build(file_meta.at("model"), nullptr);
    } catch (const Error& e) {
      throw Error(detail::concat(where, ": ", e.what()));
    }
    return model->module();
  });
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model->module().named_parameters()) params.emplace(name, p.detach());
  if (native) {
    // the parameters of the model the checkpoint describes: the file's, and zeros for the biases a GPT
    // without them lacks
    std::unique_ptr<Model> full;
    {
      nn::init::SkipInit no_init;
      full = model_type(meta["model_type"].get<std::string>()).build(meta["model"], nullptr);
    }
    std::map<std::string, Tensor> all;
    std::vector<std::string> order;
    for (auto& [name, p] : full->module().named_parameters()) {
      auto it = params.find(name);
      QKV_CHECK(it == params.end() || it->second.shape() == p.shape(), where, ": its parameter ", name,
                " has the shape ", shape_str(it->second.shape()), ", not the ", shape_str(p.shape()),
                " its config makes");
      all.emplace(name, it != params.end() ? it->second : Tensor::zeros(p.shape()));
      order.push_back(name);
    }
    for (const auto& [name, p] : params)
      QKV_CHECK(all.count(name), where, ": its parameter ", name, " is not one of its Hugging Face class's");
    params = std::move(all);
    names = hf::native_tensor_names(*native, order);
  }
  const nlohmann::json config = folder_config(arch, meta, options.store, where);  // (the model's config read)
  const std::vector<FolderTensor> weights = folder_tensors(
      arch, names, native ? arch.name : tensors["architecture"].get<std::string>(), params, meta["model"], where);

  // save_pretrained's shards: in order, a new shard where the next weight would pass the size (a weight
  // larger than it alone in one)
  const size_t item = options.store == io::StoreAs::kF32 ? 4 : 2;
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(numel_of(weights[i].shape)) * item;
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) shards.emplace_back(), shard_bytes = 0;
    shards.back().push_back(i);
    shard_bytes += bytes, total += bytes;
  }

  HfExportReport report;
  report.architecture = arch.name;
  report.tensors = static_cast<int64_t>(weights.size());
  report.bytes = total;
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  const fs::path tmp = parent / detail::concat(".", dir.filename().string(), ".tmp-", ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp);
    write_json(tmp / "config.json", config);
    report.files.push_back("config.json");
    nlohmann::json weight_map = nlohmann::json::object();
    io::ProgressBar bar("export", static_cast<int64_t>(weights.size()), 0, /*delay_seconds=*/2);
    for (size_t s = 0; s < shards.size(); ++s) {
      char file[64];
      std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      const std::string name = shards.size() == 1 ? "model.safetensors" : file;
      std::vector<std::pair<std::string, Tensor>> shard;
      for (size_t i : shards[s]) {
        shard.emplace_back(weights[i].name, folder_weight(weights[i], params));
        weight_map[weights[i].name] = name;
      }
      io::save_safetensors((tmp / name).string(), shard, {{"format", "pt"}}, options.store);
      bar.update(static_cast<int64_t>(shard.size()));
      report.files.push_back(name);
    }
    bar.close();
    if (shards.size() > 1) {
      write_json(tmp / "model.safetensors.index.json",
                 {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
      report.files.push_back("model.safetensors.index.json");
    }
    if (from.contains("generation_config") && from["generation_config"].is_object()) {
      write_json(tmp / "generation_config.json", from["generation_config"]);
      report.files.push_back("generation_config.json");
    }
    write_tokenizer(tmp, meta, report.files);
    write_sentence_transformers(
        tmp, meta["model"],
        config.contains("sentence_transformers") || config.contains("sbert_ce_default_activation_function"),
        report.files);
    move_into_place(tmp, dir, report.files);
  } catch (const std::filesystem::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw Error(detail::concat("export: writing '", out_dir, "': ", e.what()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return report;
}

}  // namespace qkv::models
