// Hugging Face folders → qkv model files (models/hf_convert.h): the folder, the architecture table,
// and the conversion every architecture shares — build, stream, map, check, save.
#include "qkv/models/hf_convert.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <set>

#include "hf/architectures.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/core/utf8.h"
#include "qkv/io/file.h"
#include "qkv/io/json.h"
#include "qkv/io/progress.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::models {

namespace {

constexpr int64_t kMaxConfigBytes = 4 << 20;      // config.json, tokenizer_config.json, the index
constexpr int64_t kMaxTokenizerBytes = 64 << 20;  // tokenizer.json (Llama 3's: 9 MB)

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

nlohmann::json read_json(const std::string& path, int64_t max_bytes) {
  io::require_regular_file(path, "the model folder's file", "a JSON file");
  const std::string text = io::read_file(path, max_bytes, "the JSON file");
  try {
    return io::parse_json(text, "'" + path + "'");
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat("'", path, "' is not valid JSON: ", e.what()));
  }
}

// A shard named by the index must be a plain file name inside the folder: no "..", no "/".
void check_shard_name(const std::string& index_path, const std::string& shard) {
  QKV_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard.find('\\') == std::string::npos &&
                shard != "." && shard != "..",
            "'", index_path, "': weight_map names the shard '", excerpt(shard),
            "', which is not a file name inside the folder");
}

}  // namespace

HfFolder open_hf_folder(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  QKV_CHECK(::stat(dir.c_str(), &st) == 0, "the Hugging Face model folder '", dir, "' does not exist");
  QKV_CHECK(S_ISDIR(st.st_mode), "'", dir, "' is ", io::file_kind_name(st.st_mode),
            ", not a Hugging Face model folder (a directory with config.json and *.safetensors)");
  HfFolder f;
  f.dir = dir;
  const std::string config = dir + "/config.json";
  QKV_CHECK(exists(config), "'", dir, "' has no config.json: not a Hugging Face model folder");
  f.config = read_json(config, kMaxConfigBytes);
  QKV_CHECK(f.config.is_object(), "'", config, "' is not a JSON object");
  auto arch = f.config.find("architectures");
  QKV_CHECK(arch != f.config.end() && arch->is_array() && arch->size() == 1 && (*arch)[0].is_string(),
            "'", config, "': \"architectures\" must name the model class, e.g. [\"GPT2LMHeadModel\"]");
  f.architecture = (*arch)[0].get<std::string>();

  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (exists(index)) {
    const nlohmann::json j = read_json(index, kMaxConfigBytes);
    auto map = j.is_object() ? j.find("weight_map") : j.end();
    QKV_CHECK(map != j.end() && map->is_object() && !map->empty(), "'", index,
              "': no \"weight_map\" object naming each tensor's shard");
    std::set<std::string> seen;
    for (auto& [tensor, shard] : map->items()) {
      QKV_CHECK(shard.is_string(), "'", index, "': weight_map[\"", excerpt(tensor), "\"] is not a file name");
      const std::string name = shard.get<std::string>();
      check_shard_name(index, name);
      if (seen.insert(name).second) {
        QKV_CHECK(exists(dir + "/" + name), "'", index, "' names the shard '", name, "', which is not in '", dir, "'");
        f.shards.push_back(dir + "/" + name);
      }
    }
  } else if (exists(single)) {
    f.shards.push_back(single);
  } else {
    const bool bin = exists(dir + "/pytorch_model.bin") || exists(dir + "/pytorch_model.bin.index.json");
    QKV_CHECK(!bin, "'", dir, "' holds its weights as pytorch_model.bin (a pickle, which qkv does not read); "
                    "re-save them as safetensors with transformers first:\n  python3 -c \"from transformers import "
                    "AutoModel; AutoModel.from_pretrained('", dir, "').save_pretrained('", dir,
                    "-st', safe_serialization=True)\"\nthen copy the tokenizer files beside them and convert '", dir,
                    "-st'");
    QKV_CHECK(false, "'", dir, "' has neither model.safetensors nor model.safetensors.index.json");
  }
  if (exists(dir + "/tokenizer.json")) {
    io::require_regular_file(dir + "/tokenizer.json", "the tokenizer", "a JSON file");
    f.tokenizer_json = io::read_file(dir + "/tokenizer.json", kMaxTokenizerBytes, "the tokenizer");
  }
  if (exists(dir + "/source.spm") || exists(dir + "/target.spm") || exists(dir + "/vocab.json")) {
    for (const char* name : {"source.spm", "target.spm", "vocab.json"}) {
      const std::string p = dir + "/" + name;
      QKV_CHECK(exists(p), "'", dir, "' has Marian's tokenizer files but not ", name,
                " (source.spm, target.spm and vocab.json go together)");
      io::require_regular_file(p, "the tokenizer", "a file");
    }
    f.source_spm = io::read_file(dir + "/source.spm", kMaxTokenizerBytes, "the tokenizer");
    f.target_spm = io::read_file(dir + "/target.spm", kMaxTokenizerBytes, "the tokenizer");
    f.vocab_json = io::read_file(dir + "/vocab.json", kMaxTokenizerBytes, "the tokenizer");
  }
  if (exists(dir + "/tokenizer_config.json")) f.tokenizer_config = read_json(dir + "/tokenizer_config.json", kMaxConfigBytes);
  // the chat template where newer folders keep it (it wins over tokenizer_config.json's, as in transformers)
  if (exists(dir + "/chat_template.jinja")) {
    io::require_regular_file(dir + "/chat_template.jinja", "the chat template", "a text file");
    f.chat_template = io::read_file(dir + "/chat_template.jinja", kMaxConfigBytes, "the chat template");
  } else if (exists(dir + "/chat_template.json")) {
    const nlohmann::json t = read_json(dir + "/chat_template.json", kMaxConfigBytes);
    QKV_CHECK(t.is_object() && t.contains("chat_template") && t["chat_template"].is_string(), "'", dir,
              "/chat_template.json': expected {\"chat_template\": string}");
    f.chat_template = t["chat_template"].get<std::string>();
  }
  for (size_t i = 0; i < f.chat_template.size();) {  // (a model file's metadata is JSON: UTF-8 only)
    const utf8::CodePoint cp = utf8::decode_one(f.chat_template, i);
    QKV_CHECK(cp.valid(), "'", dir, "/chat_template.jinja': byte ", i, " is not UTF-8");
    i += cp.length;
  }
  return f;
}

// ---- sentence-transformers ---------------------------------------------------------------------

// A sentence-transformers folder (modules.json beside the model's files), as sentence-transformers
// 2–5 and 6 save it: its Pooling module's mode (1_Pooling/config.json: "pooling_mode": "mean" (6) or
// pooling_mode_mean_tokens: true (before) — one of cls, mean, max), whether a Normalize module
// follows, and the length texts are cut to (sentence_bert_config.json's max_seq_length, else the
// tokenizer's model_max_length — 6 keeps it there —, at most the model's positions), kept in the
// encoder's config for qkv embed; a CrossEncoder's activation_fn (config_sentence_transformers.json),
// for qkv rerank. Modules other than Transformer, Pooling and Normalize (a Dense projection, …) are
// refused by name: the embedding would not be theirs.
void read_sentence_transformers(const std::string& dir, nlohmann::json& config) {
  const std::string modules_path = dir + "/modules.json";
  if (!exists(modules_path)) return;
  const nlohmann::json modules = read_json(modules_path, kMaxConfigBytes);
  QKV_CHECK(modules.is_array(), "'", modules_path, "': expected a list of modules");
  // "sentence_transformers.models.Pooling" (2–5) or
  // "sentence_transformers.sentence_transformer.modules.pooling.Pooling" (6)
  auto is = [](const std::string& type, const char* name) {
    return type == name || type.ends_with(std::string(".") + name);
  };
  for (const auto& m : modules) {
    QKV_CHECK(m.is_object() && m.contains("type") && m["type"].is_string(), "'", modules_path,
              "': a module without a \"type\"");
    const std::string type = m["type"].get<std::string>();
    const std::string path = m.value("path", nlohmann::json("")).is_string() ? m.value("path", std::string()) : "";
    QKV_CHECK(path.find("..") == std::string::npos && !path.starts_with("/"), "'", modules_path, "': the module path '",
              excerpt(path), "' leaves the folder");
    if (is(type, "Transformer")) continue;
    if (is(type, "Normalize")) {
      config["normalize"] = true;
      continue;
    }
    QKV_CHECK(is(type, "Pooling"), "'", modules_path, "': the module '", excerpt(type),
              "' is not supported (Transformer, Pooling and Normalize are)");
    const std::string pooling_path = dir + "/" + path + "/config.json";
    const nlohmann::json p = read_json(pooling_path, kMaxConfigBytes);
    QKV_CHECK(p.is_object(), "'", pooling_path, "': expected an object");
    std::vector<std::string> modes;
    for (auto& [key, value] : p.items()) {
      if (key == "pooling_mode") {  // (6) a mode, or a list of them
        for (const auto& v : value.is_array() ? value : nlohmann::json::array({value})) {
          QKV_CHECK(v.is_string(), "'", pooling_path, "': pooling_mode must be a mode's name or a list of them");
          const std::string mode = v.get<std::string>();
          modes.push_back(mode == "cls"    ? "cls_token"
                          : mode == "mean" ? "mean_tokens"
                          : mode == "max"  ? "max_tokens"
                                           : mode);
        }
        continue;
      }
      if (!key.starts_with("pooling_mode_")) continue;
      QKV_CHECK(value.is_boolean(), "'", pooling_path, "': ", key, " must be true or false");
      if (value.get<bool>()) modes.push_back(key.substr(13));
    }
    QKV_CHECK(modes.size() == 1 && (modes[0] == "cls_token" || modes[0] == "mean_tokens" || modes[0] == "max_tokens"),
              "'", pooling_path, "': the pooling ", modes.empty() ? "(none)" : excerpt(modes[0]),
              modes.size() > 1 ? " with others" : "", " is not supported (one of cls, mean, max is)");
    config["pooling"] = modes[0] == "cls_token" ? "cls" : modes[0] == "mean_tokens" ? "mean" : "max";
  }
  // the length: sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length
  const int64_t pad = config.value("padding_idx", int64_t{-1});
  const int64_t positions = config["max_position_embeddings"].get<int64_t>() - (pad >= 0 ? pad + 1 : 0);
  int64_t max_seq_length = 0;
  for (const auto& [file, key] : {std::pair{"/sentence_bert_config.json", "max_seq_length"},
                                  std::pair{"/tokenizer_config.json", "model_max_length"}}) {
    const std::string path = dir + file;
    if (max_seq_length > 0 || !exists(path)) continue;
    const nlohmann::json c = read_json(path, kMaxConfigBytes);
    if (!c.is_object() || !c.contains(key) || c[key].is_null()) continue;
    if (std::string(key) == "model_max_length" && !c[key].is_number_integer()) continue;  // (1e30: "none")
    QKV_CHECK(c[key].is_number_integer() && c[key].get<int64_t>() >= 1, "'", path, "': ", key,
              " must be a positive integer");
    max_seq_length = c[key].get<int64_t>();
  }
  // (at most the model's positions: sentence-transformers cuts to the smaller of the two too)
  if (max_seq_length > 0) config["max_seq_length"] = std::min(max_seq_length, positions);
  // a CrossEncoder's activation (sentence-transformers ≥ 4 writes it here; config.json's
  // sentence_transformers.activation_fn, read by the converter, is the older place)
  const std::string st_path = dir + "/config_sentence_transformers.json";
  if (exists(st_path)) {
    const nlohmann::json c = read_json(st_path, kMaxConfigBytes);
    if (c.is_object() && c.value("model_type", nlohmann::json()) == "CrossEncoder" && c.contains("activation_fn") &&
        !c["activation_fn"].is_null()) {
      QKV_CHECK(c["activation_fn"].is_string(), "'", st_path, "': activation_fn must be a string");
      const std::string f = c["activation_fn"].get<std::string>();
      QKV_CHECK(f == "torch.nn.modules.activation.Sigmoid" || f == "torch.nn.modules.linear.Identity", "'", st_path,
                "': the cross-encoder's activation_fn '", excerpt(f),
                "' is not supported (torch.nn.modules.activation.Sigmoid and torch.nn.modules.linear.Identity are)");
      QKV_CHECK(config.value("classifier", std::string()) == "sequence", "'", st_path,
                "': a CrossEncoder's folder, and the model has no sequence classifier");
      config["score_activation"] = f.ends_with("Sigmoid") ? "sigmoid" : "identity";
    }
  }
}

// ---- the architecture table ----------------------------------------------------------------------

std::optional<HfTensorTarget> HfArchitecture::target(const std::string& hf_name, const nlohmann::json& config) const {
  std::optional<HfTensorTarget> t = map(hf_name);
  if (t && t->head_groups < 0) {
    const auto it = config.find("num_attention_heads");
    QKV_CHECK(it != config.end() && it->is_number_integer() && it->get<int64_t>() > 0, name, ": the tensor '",
              excerpt(hf_name), "' comes head by head, and the model's config gives no num_attention_heads");
    t->head_groups = it->get<int64_t>();
  }
  return t;
}

const std::vector<HfArchitecture>& hf_architectures() {
  static const std::vector<HfArchitecture> archs = {
      hf::gpt2(),
      hf::opt(),
      hf::llama(),
      hf::qwen2(),
      hf::qwen3(),
      hf::mistral(),
      hf::phi3(),
      hf::gpt_neox(),
      hf::stablelm(),
      hf::phi(),
      hf::gemma2(),
      hf::gemma3(),
      hf::gemma3_multimodal(),
      hf::marian(),
      hf::bert("BertForMaskedLM", hf::EncoderHead::mlm),
      hf::bert("BertModel", hf::EncoderHead::none),
      hf::bert("BertForSequenceClassification", hf::EncoderHead::sequence),
      hf::bert("BertForTokenClassification", hf::EncoderHead::token),
      hf::distilbert("DistilBertForMaskedLM", hf::EncoderHead::mlm),
      hf::distilbert("DistilBertModel", hf::EncoderHead::none),
      hf::distilbert("DistilBertForSequenceClassification", hf::EncoderHead::sequence),
      hf::distilbert("DistilBertForTokenClassification", hf::EncoderHead::token),
      hf::roberta("RobertaForMaskedLM", hf::EncoderHead::mlm),
      hf::roberta("RobertaModel", hf::EncoderHead::none),
      hf::roberta("RobertaForSequenceClassification", hf::EncoderHead::sequence),
      hf::roberta("RobertaForTokenClassification", hf::EncoderHead::token),
      hf::roberta("XLMRobertaForMaskedLM", hf::EncoderHead::mlm),
      hf::roberta("XLMRobertaModel", hf::EncoderHead::none),
      hf::roberta("XLMRobertaForSequenceClassification", hf::EncoderHead::sequence),
      hf::roberta("XLMRobertaForTokenClassification", hf::EncoderHead::token),
      hf::mpnet("MPNetForMaskedLM", hf::EncoderHead::mlm),
      hf::mpnet("MPNetModel", hf::EncoderHead::none),
      hf::mpnet("MPNetForSequenceClassification", hf::EncoderHead::sequence),
      hf::mpnet("MPNetForTokenClassification", hf::EncoderHead::token),
      hf::electra("ElectraForMaskedLM", hf::EncoderHead::mlm),
      hf::electra("ElectraModel", hf::EncoderHead::none),
      hf::electra("ElectraForSequenceClassification", hf::EncoderHead::sequence),
      hf::electra("ElectraForTokenClassification", hf::EncoderHead::token),
      hf::deberta_v2("DebertaV2ForMaskedLM", hf::EncoderHead::mlm),
      hf::deberta_v2("DebertaV2Model", hf::EncoderHead::none),
      hf::deberta_v2("DebertaV2ForSequenceClassification", hf::EncoderHead::sequence),
      hf::deberta_v2("DebertaV2ForTokenClassification", hf::EncoderHead::token),
      hf::question_answering(hf::bert("BertForQuestionAnswering", hf::EncoderHead::token)),
      hf::question_answering(hf::distilbert("DistilBertForQuestionAnswering", hf::EncoderHead::token)),
      hf::question_answering(hf::roberta("RobertaForQuestionAnswering", hf::EncoderHead::token)),
      hf::question_answering(hf::roberta("XLMRobertaForQuestionAnswering", hf::EncoderHead::token)),
      hf::question_answering(hf::mpnet("MPNetForQuestionAnswering", hf::EncoderHead::token)),
      hf::question_answering(hf::electra("ElectraForQuestionAnswering", hf::EncoderHead::token)),
      hf::question_answering(hf::deberta_v2("DebertaV2ForQuestionAnswering", hf::EncoderHead::token)),
      hf::albert("AlbertForMaskedLM", hf::EncoderHead::mlm),
      hf::albert("AlbertModel", hf::EncoderHead::none),
      hf::albert("AlbertForSequenceClassification", hf::EncoderHead::sequence),
      hf::albert("AlbertForTokenClassification", hf::EncoderHead::token),
      hf::question_answering(hf::albert("AlbertForQuestionAnswering", hf::EncoderHead::token)),
      hf::modernbert("ModernBertForMaskedLM", hf::EncoderHead::mlm),
      hf::modernbert("ModernBertModel", hf::EncoderHead::none),
      hf::modernbert("ModernBertForSequenceClassification", hf::EncoderHead::sequence),
      hf::modernbert("ModernBertForTokenClassification", hf::EncoderHead::token),
      hf::modernbert("ModernBertForQuestionAnswering", hf::EncoderHead::token, /*span=*/true),
      hf::multiple_choice(hf::bert("BertForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::distilbert("DistilBertForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::roberta("RobertaForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::roberta("XLMRobertaForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::mpnet("MPNetForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::electra("ElectraForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::albert("AlbertForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::deberta_v2("DebertaV2ForMultipleChoice", hf::EncoderHead::sequence)),
      hf::multiple_choice(hf::modernbert("ModernBertForMultipleChoice", hf::EncoderHead::sequence))};
  return archs;
}

const HfArchitecture& hf_architecture(const std::string& name) {
  std::string known;
  for (const auto& a : hf_architectures()) {
    if (a.name == name) return a;
    known += (known.empty() ? "" : ", ") + a.name;
  }
  throw Error(detail::concat("the Hugging Face architecture '", excerpt(name), "' is not supported; qkv converts ",
                             known));
}

bool hf_field_is_bookkeeping(const std::string& key) {
  static const std::set<std::string> keys = {"_name_or_path",
                                             "architectures",
                                             "model_type",
                                             "transformers_version",
                                             "torch_dtype",
                                             "dtype",
                                             "use_cache",
                                             "initializer_range",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "pad_token_id",
                                             "sep_token_id",
                                             "decoder_start_token_id",
                                             "task_specific_params",
                                             "id2label",
                                             "label2id",
                                             "gradient_checkpointing",
                                             "output_attentions",
                                             "sentence_transformers",
                                             "sbert_ce_default_activation_function",  // (read by encoder_head_config)
                                             "output_hidden_states",
                                             "return_dict",
                                             "problem_type",
                                             "tokenizer_class",
                                             "prefix",
                                             "finetuning_task",
                                             "torchscript",
                                             "use_return_dict",
                                             "max_length",
                                             "num_beams",
                                             "bad_words_ids",
                                             "forced_eos_token_id",
                                             "forced_bos_token_id",
                                             "num_labels",
                                             "is_decoder",
                                             "is_encoder_decoder",
                                             "chunk_size_feed_forward",
                                             "pruned_heads",
                                             "attn_implementation",
                                             "_attn_implementation_autoset"};
  return keys.count(key) > 0;
}

void hf_refuse_unknown_fields(const nlohmann::json& hf_config, const std::string& architecture,
                              const std::vector<std::string>& known) {
  const std::set<std::string> k(known.begin(), known.end());
  for (auto& [key, value] : hf_config.items()) {
    if (k.count(key) || hf_field_is_bookkeeping(key)) continue;
    throw Error(detail::concat("config.json: the field '", excerpt(key), "' (= ", excerpt(value.dump(), 60),
                               ") is not one qkv supports for ", architecture,
                               "; refusing rather than computing something else (docs/PRETRAINED.md lists the "
                               "supported fields)"));
  }
}

// ---- the conversion ------------------------------------------------------------------------------

namespace {

// A new head (HfConvertOptions::head): the folder read as <Family>ForSequenceClassification or
// …ForTokenClassification — the family its architecture's name starts with (BertForMaskedLM,
// BertModel → Bert) — with the labels as id2label. Returns that architecture's name; `config` is
// config.json so rewritten.
std::string new_head_architecture(const HfFolder& f, const HfConvertOptions& o, nlohmann::json& config) {
  QKV_CHECK(o.head == "sequence" || o.head == "token" || o.head == "span" || o.head == "choice",
            "convert: the new head must be \"sequence\", \"token\", \"span\" or \"choice\", got \"", excerpt(o.head),
            "\"");
  const bool span = o.head == "span";  // (question answering: two outputs, the answer's start and end)
  const bool choice = o.head == "choice";  // (multiple choice: one output, a pair's score)
  QKV_CHECK(!span || o.labels.empty(), "convert: a new span head (question answering) takes no labels");
  QKV_CHECK(!choice || o.labels.empty(), "convert: a new choice head (multiple choice) takes no labels");
  QKV_CHECK(span || choice || (!o.labels.empty() && o.labels.size() <= (1u << 20)), "convert: a new ", o.head,
            " classifier needs its labels (at least one)");
  std::set<std::string> seen;
  for (const std::string& l : o.labels)
    QKV_CHECK(!l.empty() && l.size() <= 256 && seen.insert(l).second, "convert: the label \"", excerpt(l),
              "\" is empty, longer than 256 bytes, or given twice");
  QKV_CHECK(o.problem_type.empty() || o.head == "sequence", "convert: problem_type is a sequence classifier's");
  const std::string& a = f.architecture;
  for (const auto& known : hf_architectures())
    QKV_CHECK(known.name != a || known.model_type == "bert" || known.model_type == "modernbert", "'", f.dir, "' (", a,
              "): only an encoder's checkpoint (BERT, RoBERTa, DeBERTa, ModernBERT, …) takes a new classifier");
  const size_t at = a.find("For");
  const std::string family = at != std::string::npos && at > 0      ? a.substr(0, at)
                             : a.ends_with("Model") && a.size() > 5 ? a.substr(0, a.size() - 5)
                                                                    : a;
  const std::string target = family + (o.head == "sequence" ? "ForSequenceClassification"
                                       : span               ? "ForQuestionAnswering"
                                       : choice             ? "ForMultipleChoice"
                                                            : "ForTokenClassification");
  const HfArchitecture& arch = [&]() -> const HfArchitecture& {
    try {
      return hf_architecture(target);
    } catch (const Error& e) {
      throw Error(
          detail::concat("'", f.dir, "' (", a, "): a new ", o.head, " classifier makes it ", target, ": ", e.what()));
    }
  }();
  QKV_CHECK(arch.model_type == "bert" || arch.model_type == "modernbert", "'", f.dir, "' (", a,
            "): only an encoder takes a new classifier");
  config = f.config;
  config["architectures"] = {target};
  // (a span head's two outputs named as transformers names labels it was not given)
  const std::vector<std::string> labels = span     ? std::vector<std::string>{"LABEL_0", "LABEL_1"}
                                          : choice ? std::vector<std::string>{"LABEL_0"}
                                                   : o.labels;
  nlohmann::json id2label = nlohmann::json::object(), label2id = nlohmann::json::object();
  for (size_t i = 0; i < labels.size(); ++i) {
    id2label[std::to_string(i)] = labels[i];
    label2id[labels[i]] = i;
  }
  config["id2label"] = id2label, config["label2id"] = label2id, config["num_labels"] = labels.size();
  if (!o.problem_type.empty())
    config["problem_type"] = o.problem_type;
  else
    config.erase("problem_type");
  config.erase("sentence_transformers");  // (a cross-encoder's activation: the old head's)
  config.erase("sbert_ce_default_activation_function");
  return target;
}

// A checkpoint tensor a new head may leave out: one of the old heads' (cls.*, lm_head.*, …), never
// one of the encoder's layers or embeddings.
bool encoder_body(const std::string& name) {
  for (const char* part : {"embeddings.", "encoder.", "layer.", "layers.", "transformer."})
    if (name.find(part) != std::string::npos) return true;
  return false;
}

// A new head's parameter the checkpoint has no tensor for, drawn as transformers' _init_weights draws
// it: N(0, initializer_range) for a matrix, 0 for a bias, a LayerNorm as built (1 / 0). `range` is
// config.json's initializer_range (0.02 where absent), checked by new_head_range.
double new_head_range(const nlohmann::json& hf_config, const std::string& where) {
  const auto range = hf::field<double>(hf_config, "initializer_range", 0.02);
  QKV_CHECK(range >= 0 && range <= 1, where, ": initializer_range ", range, " is out of [0, 1]");
  return range;
}
void draw_new_head_parameter(const std::string& name, Tensor t, Generator& gen, double range) {
  if (name.find("norm") != std::string::npos) return;
  if (t.dim() >= 2)
    nn::init::normal_(t, gen, 0.f, static_cast<float>(range));
  else
    nn::init::zeros_(t);
}

}  // namespace

namespace {

// The model a config describes, built under a bound on what it may allocate: at most 4 × the bytes of the
// tensors that will fill it (`tensor_bytes`: f16 and 8-bit tensors widen to f32) + 256 MiB (a new head's
// pooler and classifier, buffers) — a crafted config.json (10⁵ layers beside 10 MB of tensors) is refused
// by name before it takes the machine's memory. `where` starts the message.
std::unique_ptr<Model> build_bounded(const HfArchitecture& arch, const nlohmann::json& config, Generator& gen,
                                     uint64_t tensor_bytes, const std::string& where) {
  try {
    const uint64_t bound = std::min<uint64_t>(tensor_bytes, uint64_t{1} << 60) * 4 + (uint64_t{256} << 20);
    AllocationBudget budget(static_cast<size_t>(bound),
                            detail::concat("its config describes a model larger than its ", tensor_bytes >> 20,
                                           " MiB of tensors can fill"));
    return model_type(arch.model_type).build(config, &gen);
  } catch (const Error& e) {
    throw Error(detail::concat(where, " (", arch.name, "): ", e.what()));
  } catch (const std::bad_alloc&) {
    throw Error(detail::concat(where, " (", arch.name, "): out of memory building the model it describes"));
  }
}

uint64_t file_bytes(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// A new head on a qkv model file's encoder (convert_hf with a file): the model its converted_from's
// architecture and config make with the head, the file's tensors where they fit, the head drawn.
nlohmann::json new_head_on_model_file(const std::string& file, const std::string& out, const HfConvertOptions& options,
                                      HfHeadReport* report) {
  const nlohmann::json meta = load_model_metadata(file);
  QKV_CHECK(!options.head.empty(), "convert: '", file,
            "' is a qkv model file: it takes a new head (--head sequence|token|span) and nothing else (qkv convert "
            "reads Hugging Face folders)");
  const nlohmann::json none;
  const nlohmann::json& from = meta.contains("converted_from") ? meta["converted_from"] : none;
  QKV_CHECK(from.is_object() && from.contains("architecture") && from["architecture"].is_string() &&
                from.contains("config") && from["config"].is_object(),
            "convert: '", file,
            "' does not say which Hugging Face checkpoint it came from (no converted_from in its metadata): a new "
            "head goes on an encoder qkv convert made, or a run trained from one");
  HfFolder f;
  f.dir = file, f.config = from["config"], f.architecture = from["architecture"].get<std::string>();
  nlohmann::json hf_config;
  const HfArchitecture& arch = hf_architecture(new_head_architecture(f, options, hf_config));
  nlohmann::json config;
  try {
    config = arch.config(hf_config);
  } catch (const Error& e) {
    throw Error(detail::concat("convert: '", file, "' (its converted_from config, ", arch.name, "): ", e.what()));
  }
  // the encoder its converted_from describes must be the one the file holds
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                          "max_position_embeddings", "type_vocab_size", "embedding_size", "hidden_act"})
    QKV_CHECK(!config.contains(key) || !meta["model"].contains(key) || config[key] == meta["model"][key], "convert: '",
              file, "': its converted_from config gives ", key, " ", excerpt(config[key].dump(), 40), ", the model it holds ",
              excerpt(meta["model"][key].dump(), 40), " (the metadata was changed?)");
  Generator gen(options.seed);
  const std::unique_ptr<Model> model =
      build_bounded(arch, config, gen, file_bytes(file), detail::concat("convert: '", file, "': its converted_from"));
  QKV_CHECK(meta.value("model_type", "") == arch.model_type, "convert: '", file, "' holds a \"",
            meta.value("model_type", ""), "\" model, not the \"", arch.model_type, "\" its converted_from (",
            f.architecture, ") makes");
  const ModelFile src = load_model_file(file);
  HfHeadReport head_report;
  head_report.architecture = arch.name;
  std::set<std::string> used;
  const double range = new_head_range(hf_config, detail::concat("convert: '", file, "': its converted_from config"));
  std::map<std::string, Tensor> params;  // (by name: the new head drawn in the order a folder's conversion draws it)
  for (auto& [name, p] : model->module().named_parameters()) params.emplace(name, p.detach());
  for (auto& [name, t] : params) {
    const auto it = src.params.find(name);
    if (it != src.params.end() && it->second.shape() == t.shape()) {
      t.copy_(it->second);
      used.insert(name);
      continue;
    }
    QKV_CHECK(hf::new_head_parameter(name), "convert: '", file, "' has no tensor ", name, " of ", arch.name,
              it == src.params.end() ? "" : " of its shape", " (a file of another model?)");
    draw_new_head_parameter(name, t, gen, range);
    head_report.initialized.push_back(name);
  }
  for (const auto& [name, t] : src.params)
    if (!used.count(name)) head_report.unused.push_back(name);  // the old head's (checked: the body is all used)
  nlohmann::json out_meta = metadata(*model, meta["tokenizer"]);
  out_meta["converted_from"] = from;
  out_meta["converted_from"]["architecture"] = arch.name;
  out_meta["converted_from"]["new_head"] = {{"checkpoint_architecture", f.architecture},
                                            {"model_file", file},
                                            {"initialized", head_report.initialized},
                                            {"unused", head_report.unused.size()}};
  if (meta.contains("init_from")) out_meta["init_from"] = meta["init_from"];
  {
    io::StatusLine writing("convert: writing " + out);
    save_model_file(out, model->module(), out_meta, options.store);
  }
  if (report) *report = std::move(head_report);
  return out_meta;
}

}  // namespace

nlohmann::json convert_hf(const std::string& dir, const std::string& out, const HfConvertOptions& options,
                          HfHeadReport* report) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return new_head_on_model_file(dir, out, options, report);
  const HfFolder f = open_hf_folder(dir);
  const bool new_head = !options.head.empty();
  nlohmann::json hf_config = f.config;
  const HfArchitecture& arch =
      hf_architecture(new_head ? new_head_architecture(f, options, hf_config) : f.architecture);
  nlohmann::json config;
  try {
    config = arch.config(hf_config);
  } catch (const Error& e) {
    throw Error(detail::concat("'", f.dir, "/config.json' (", arch.name, "): ", e.what()));
  }
  if (arch.model_type == "bert" || arch.model_type == "modernbert") read_sentence_transformers(f.dir, config);
  Generator gen(options.seed);  // (a new head's draws)
  uint64_t shard_bytes = 0;
  for (const std::string& shard : f.shards) shard_bytes += file_bytes(shard);
  const std::unique_ptr<Model> model = build_bounded(arch, config, gen, shard_bytes, "'" + f.dir + "/config.json'");
  HfHeadReport head_report;
  head_report.architecture = arch.name;
  std::map<std::string, Tensor> params;
  for (auto& [name, p] : model->module().named_parameters()) params.emplace(name, p.detach());
  // qkv parameter (and row block, "name#part") → the checkpoint tensor that filled it
  std::map<std::string, std::string> filled_from;
  std::map<std::string, int> parts_of;  // qkv parameter → how many row blocks fill it
  std::map<std::string, int> parts_done;
  std::vector<std::string> stored;  // the checkpoint's tensors that fill parameters, in its order (for export_hf)
  // a checkpoint of gigabytes takes minutes: a bar over the parameters filled (shown after 2 s)
  io::ProgressBar bar("convert", static_cast<int64_t>(params.size()), 0, /*delay_seconds=*/2);

  for (const std::string& shard : f.shards) {
    std::map<std::string, HfTensorTarget> targets;
    io::stream_safetensors(
        shard, /*keep_bf16=*/false,
        [&](const std::map<std::string, std::string>&, const std::vector<io::SafetensorsEntry>& entries) {
          // Every name is checked before any data is read: a checkpoint of another architecture, or
          // a config that lies about the layer count, fails at once.
          for (const auto& e : entries) {
            std::optional<HfTensorTarget> t = arch.target(e.name, config);
            if (new_head && !encoder_body(e.name) &&
                (!t || (!t->name.empty() && t->rows_of.empty() && !params.count(t->name) && !t->tied_copy))) {
              head_report.unused.push_back(e.name);  // the old head's: transformers' "weights … not used"
              continue;
            }
            QKV_CHECK(t.has_value(), "'", shard, "': the tensor '", excerpt(e.name), "' is not part of ", arch.name,
                      " as its config.json describes it (", model->describe(), ")");
            if (!t->rows_of.empty()) {  // a fused projection: [Σ rows, cols] (a bias: [Σ rows]) for its parameters
              int64_t rows = 0, cols = -1, dim = 0;
              for (const std::string& name : t->rows_of) {
                auto p = params.find(name);
                QKV_CHECK(p != params.end() && (p->second.dim() == 2 || p->second.dim() == 1) &&
                              (dim == 0 || p->second.dim() == dim),
                          "'", shard, "': the tensor '", excerpt(e.name),
                          "' has no place in the model config.json describes (", model->describe(), "; it would fill ",
                          name, ")");
                dim = p->second.dim();
                const int64_t width = dim == 2 ? p->second.size(1) : 1;
                QKV_CHECK(cols < 0 || width == cols, "'", shard, "': ", name, " and the other parts of '", e.name,
                          "' differ in width");
                QKV_CHECK(t->head_groups == 0 || (p->second.size(0) % t->head_groups == 0 &&
                                                  p->second.size(0) == params.at(t->rows_of[0]).size(0)),
                          "'", shard, "': the parts of '", e.name, "' are not ", t->head_groups, " heads each");
                rows += p->second.size(0), cols = width;
                QKV_CHECK(!filled_from.count(name), "'", shard, "': the tensors '", filled_from[name], "' and '",
                          e.name, "' both fill ", name);
                filled_from[name] = e.name;
              }
              const Shape want = dim == 2 ? Shape{rows, cols} : Shape{rows};
              QKV_CHECK(e.shape == want, "'", shard, "': the tensor '", e.name, "' is ", shape_str(e.shape),
                        " but config.json makes it ", shape_str(want));
              targets.emplace(e.name, *t);
              stored.push_back(e.name);
              continue;
            }
            if (t->name.empty()) continue;
            auto p = params.find(t->name);
            if (p == params.end() && t->tied_copy) continue;  // the tied head's copy of the embedding
            if (new_head && p != params.end() && hf::new_head_parameter(t->name) && t->parts == 1 && !t->transpose &&
                e.shape != p->second.shape()) {
              head_report.unused.push_back(e.name);  // a classifier of other labels (ignore_mismatched_sizes)
              continue;
            }
            QKV_CHECK(p != params.end(), "'", shard, "': the tensor '", excerpt(e.name), "' has no place in the model ",
                      "config.json describes (", model->describe(), "; it would be ", t->name, ")");
            Shape want = p->second.shape();
            if (t->parts > 1) want[0] /= t->parts;
            if (t->transpose && want.size() == 2) std::swap(want[0], want[1]);
            QKV_CHECK(e.shape == want, "'", shard, "': the tensor '", e.name, "' is ", shape_str(e.shape),
                      " but config.json makes it ", shape_str(want));
            const std::string key = t->parts > 1 ? t->name + "#" + std::to_string(t->part) : t->name;
            QKV_CHECK(!filled_from.count(key), "'", shard, "': the tensors '", filled_from[key], "' and '", e.name,
                      "' both fill ", t->name);
            filled_from[key] = e.name;
            parts_of[t->name] = t->parts;
            targets.emplace(e.name, *t);
            stored.push_back(e.name);
          }
        },
        [&](const std::string& name) { return targets.count(name) > 0; },
        [&](const std::string& name, TensorBase&& t) {
          const HfTensorTarget& target = targets.at(name);
          Tensor src(std::move(t));
          if (!target.rows_of.empty()) {  // each part its rows, in order (or each head's in turn)
            // (head by head: the rows as [heads, parts, D·cols], each part's [heads, D·cols] selected)
            const Tensor grouped =
                target.head_groups > 0
                    ? src.contiguous().reshape({target.head_groups, static_cast<int64_t>(target.rows_of.size()), -1})
                    : Tensor();
            int64_t at = 0, index = 0;
            for (const std::string& part : target.rows_of) {
              Tensor dst = params.at(part);
              if (grouped.defined())
                dst.copy_(grouped.select(1, index).reshape(dst.shape()));
              else
                dst.copy_(src.slice(0, at, at + dst.size(0)));
              at += dst.size(0), ++index;
              bar.update();
            }
            return;
          }
          if (target.transpose) src = src.transpose(0, 1);
          if (target.plus_one) src = add(src, 1.f);  // γ = 1 + w, rounded in f32 as Gemma's 1.0 + w.float()
          Tensor dst = params.at(target.name);
          if (target.parts > 1) {
            const int64_t n = dst.size(0) / target.parts;
            dst = dst.slice(0, target.part * n, (target.part + 1) * n);
          }
          dst.copy_(src);
          if (++parts_done[target.name] == target.parts) bar.update();
        });
  }
  bar.close();
  // A new head's parameters the checkpoint had no tensor for, drawn as transformers draws them.
  if (new_head) {
    const double range = new_head_range(hf_config, "'" + f.dir + "/config.json'");
    for (auto& [name, p] : params) {
      if (filled_from.count(name) || parts_of.count(name) || !hf::new_head_parameter(name)) continue;
      draw_new_head_parameter(name, p, gen, range);
      filled_from[name] = "";
      head_report.initialized.push_back(name);
    }
  }
  for (auto& [name, p] : params) {
    const int parts = parts_of.count(name) ? parts_of[name] : 1;
    for (int i = 0; i < parts; ++i)
      QKV_CHECK(filled_from.count(parts > 1 ? name + "#" + std::to_string(i) : name), "'", f.dir,
                "': no tensor of the checkpoint fills the parameter ", name, parts > 1 ? " (row block " : "",
                parts > 1 ? std::to_string(i) + ")" : "", " of ", arch.name, " (a truncated or partial checkpoint?)");
  }

  nlohmann::json tokenizer = nullptr;
  if (!f.vocab_json.empty()) {  // Marian: its own tokenizer files, not tokenizer.json
    text::SentencePiece sp = text::SentencePiece::marian(f.source_spm, f.target_spm, f.vocab_json, "'" + f.dir + "'");
    QKV_CHECK(sp.vocab_size() == model->vocab_size(), "'", f.dir, "/vocab.json' has ", sp.vocab_size(),
              " pieces but config.json's vocab_size is ", model->vocab_size());
    tokenizer = sp.to_json();
  } else if (!f.tokenizer_json.empty()) {
    tokenizer = {{"type", "hf"}, {"tokenizer_json", f.tokenizer_json}};
    if (!f.tokenizer_config.is_null()) tokenizer["tokenizer_config"] = f.tokenizer_config;
    if (!f.chat_template.empty()) tokenizer["chat_template"] = f.chat_template;
  } else if (exists(f.dir + "/vocab.txt")) {  // BERT's older folders: vocab.txt + tokenizer_config.json
    const text::HfTokenizer t = text::HfTokenizer::from_folder(f.dir);
    tokenizer = {{"type", "hf"}, {"tokenizer_json", t.tokenizer_json()}};
    if (!f.tokenizer_config.is_null()) tokenizer["tokenizer_config"] = f.tokenizer_config;
  }
  // A masked language model is read with its tokenizer only (fill-mask finds [MASK] through it).
  QKV_CHECK(model->kind() != Kind::masked_language_model || !tokenizer.is_null(), "'", f.dir,
            "' has no tokenizer (tokenizer.json, or vocab.txt with tokenizer_config.json): ", arch.name,
            " needs its own");
  if (model->kind() == Kind::masked_language_model) {
    // The tokenizer must load, and give no id past the model's embedding.
    const text::HfTokenizer t = text::HfTokenizer::from_json(
        tokenizer["tokenizer_json"].get_ref<const std::string&>(),
        f.tokenizer_config.is_object() ? f.tokenizer_config.dump() : std::string(), "'" + f.dir + "/tokenizer.json'");
    QKV_CHECK(t.vocab_size() <= model->vocab_size(), "'", f.dir,
              "/tokenizer.json' has ", t.vocab_size(), " tokens but config.json's vocab_size is ", model->vocab_size());
  }
  nlohmann::json meta = metadata(*model, tokenizer);
  const nlohmann::json generation = exists(f.dir + "/generation_config.json")
                                        ? read_json(f.dir + "/generation_config.json", kMaxConfigBytes)
                                        : nlohmann::json();
  // Where a language model's text ends: generation_config.json's eos_token_id, else config.json's.
  if (model->kind() == Kind::language_model) {
    nlohmann::json eos = f.config.value("eos_token_id", nlohmann::json());
    if (generation.is_object() && generation.contains("eos_token_id")) eos = generation["eos_token_id"];
    nlohmann::json ids = nlohmann::json::array();
    for (const auto& id : eos.is_array() ? eos : nlohmann::json::array({eos}))
      if (id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < model->vocab_size()) ids.push_back(id);
    if (!ids.empty()) meta["generation"] = {{"eos_token_id", ids}};
  }
  meta["converted_from"] = {{"format", "huggingface"}, {"architecture", arch.name}, {"config", f.config}};
  // what export_hf needs to write the folder back: the checkpoint's tensor names (and the architecture
  // they are of), its generation_config.json, and a Marian folder's tokenizer_config.json
  meta["converted_from"]["tensors"] = {{"architecture", f.architecture}, {"names", stored}};
  if (generation.is_object()) meta["converted_from"]["generation_config"] = generation;
  if (!f.vocab_json.empty() && f.tokenizer_config.is_object())
    meta["converted_from"]["tokenizer_config"] = f.tokenizer_config;
  if (new_head)  // the checkpoint's own class, and what the new head drew
    meta["converted_from"]["new_head"] = {{"checkpoint_architecture", f.architecture},
                                          {"initialized", head_report.initialized},
                                          {"unused", head_report.unused.size()}};
  {
    io::StatusLine writing("convert: writing " + out);
    save_model_file(out, model->module(), meta, options.store);
  }
  if (report) *report = std::move(head_report);
  return meta;
}

}  // namespace qkv::models
