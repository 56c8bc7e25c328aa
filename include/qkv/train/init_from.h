// Fine-tuning: a config's "init_from": "MODEL.safetensors" starts training from a model file — one
// `qkv convert` made from a Hugging Face checkpoint, or one qkv trained — rather than from random
// weights (nanoGPT's init_from). What the run takes from the file:
//
//   weights     every parameter (names and shapes checked as loading checks them)
//   model       its "model_type" and hyper-parameters; the config's "model" section may be absent,
//               and each field it gives must equal the file's (a qkv::Error naming the field), except
//               the dropout rates, which a fine-tuning run may set ("model": {"dropout": 0.1})
//   tokenizer   its tokenizer (an LM's Hugging Face, SentencePiece or character one; a translator's
//               SentencePiece or Marian vocabulary): the data is read with it, and a config section
//               that would train a new one is refused
//   carried     "generation" (the ids that end a text) and "converted_from", written again into
//               every model file the run saves (with "init_from": the path), so `qkv generate` /
//               `qkv translate` run on the fine-tuned file as on the imported one
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/rng.h"
#include "qkv/io/config.h"
#include "qkv/io/sample.h"
#include "qkv/models/model.h"
#include "qkv/nn/encoder_heads.h"
#include "qkv/text/lm_tokenizer.h"

namespace qkv::train {

struct Pretrained {
  std::string path;
  std::string type;                                   // the file's model_type: "gpt", "llama", "transformer"
  nlohmann::json model;                               // its hyper-parameters (with the config's dropout)
  nlohmann::json tokenizer;                           // its tokenizer, as the file stores it
  nlohmann::json carried = nlohmann::json::object();  // the metadata the trained files keep

  std::string task;                                   // "lm task", for messages

  // The file's weights streamed into `module` (built from `type` and `model`), one tensor at a
  // time (models::load_model_streaming: never the whole file beside the model). A missing,
  // unexpected or misshapen tensor is a qkv::Error naming the file.
  void load_into(nn::Module& module) const;
};

// The model file at `path` (relative paths start at base_dir), which must hold a model of `kind`;
// `model_section` is the config's "model" (null when absent). A missing or corrupt file, a model of
// another kind, or a "model" field that differs from the file's: a qkv::Error that starts with
// `task` ("lm task") and names the file.
Pretrained load_pretrained(const std::string& path, const std::string& base_dir, models::Kind kind,
                           const nlohmann::json& model_section, const std::string& task);

// An encoder's model file to fine-tune with a head of kind `head` (the text, token and question-answering
// tasks; nn::BertClassifier::none: its masked-language-model head, the masked_lm task's): the file
// (load_pretrained, a masked language model), its Hugging Face tokenizer, the model —
// its parameters counted against the machine's memory first (check_model_fits), then built and loaded
// with `gen` (the run's generator: the model's dropout draws from it). A file of another head, or a tokenizer that is
// not a Hugging Face one: a qkv::Error that starts with `task` and says how to convert a checkpoint with the head.
struct PretrainedEncoder {
  Pretrained file;
  text::LMTokenizer tokenizer;
  std::unique_ptr<models::MaskedLanguageModel> model;
  int64_t parameters = 0;
};
PretrainedEncoder load_pretrained_encoder(const std::string& path, const std::string& base_dir,
                                          const nlohmann::json& model_section, const std::string& task,
                                          nn::BertClassifier head, Generator& gen);

// The string `key` of a data file's row (an object), made valid UTF-8 as the tokenizer reads text; else a
// qkv::Error "<where>: no string \"key\"".
std::string text_field(const nlohmann::json& row, const std::string& key, const std::string& where);

// The rows of a fine-tuning data file (`text`, read from `path`), each an object and the line it starts
// on, as datasets reads the example scripts' --train_file: .jsonl (an object a line) or .csv (io/csv.h:
// a header line, then a record a line, each field a string under its column's name: a CSV label "2"
// is the label 2 where a JSON one must be 2). Another extension, or a line that is no object: a qkv::Error naming
// `task`, the file and the line. `what` says what a row holds, for the message ("an example a line: …").
struct DataRow {
  size_t line = 0;
  nlohmann::json row;
  bool csv = false;  // (its values all strings)
};
std::vector<DataRow> data_rows(std::string_view text, const std::string& path, const std::string& task,
                               const std::string& what);

// The validation examples a fine-tuning run holds out where its config gives no data.val: a `fraction`
// of the n examples of the file at `path`, drawn with `seed` (io::hold_out). A fraction that leaves no
// example on either side: a qkv::Error naming `task`, the file and what the examples are ("questions").
io::HeldOut hold_out_fraction(int64_t n, double fraction, uint64_t seed, const std::string& task,
                              const std::string& path, const char* what);
// `items` split by `split`: the held-out ones moved into the returned vector, the rest kept, in order.
template <class T>
std::vector<T> take_held_out(std::vector<T>& items, const io::HeldOut& split) {
  std::vector<T> held, rest;
  for (const int64_t i : split.held) held.push_back(std::move(items[static_cast<size_t>(i)]));
  for (const int64_t i : split.rest) rest.push_back(std::move(items[static_cast<size_t>(i)]));
  items = std::move(rest);
  return held;
}

// The metadata of a model file a fine-tuning run writes: the model's (models::metadata, with `tokenizer`),
// and what the file it started from carries (Pretrained::carried: "converted_from", "generation",
// "init_from").
nlohmann::json fine_tuned_metadata(const models::Model& model, const nlohmann::json& tokenizer,
                                   const nlohmann::json& carried);

// The fields of a task's config C — {"task", "description" (or "_comment"), "init_from", "data", "model"
// (with init_from, only its dropout rates may differ from the file's), "train"} — for the tasks whose
// configs are those alone (the language model's, text and token classification, question answering,
// multiple choice, masked LM).
template <class C>
io::Fields<C> fine_tuning_config_fields(const char* name) {
  using F = io::Fields<C>;
  return F(name, {
                     F::text("task", &C::task),
                     F::text("description", &C::description),
                     F::text("_comment", &C::description),
                     F::text("init_from", &C::init_from),
                     F::section("data", &C::data),
                     F::any("model", &C::model),
                     F::section("train", &C::train),
                 });
}

// Refuses a run whose micro-batch cannot fit beside the encoder (check_batch_fits): batch_size examples
// of up to max_length tokens × hidden_size floats for each of a layer's ~16 saved tensors (attention's
// inputs and outputs, the FFN's 4E-wide hidden layer), each layer; `config` the file's model section
// (its num_hidden_layers), `parameters` the model's count.
void check_encoder_batch_fits(const std::string& task, const models::MaskedLanguageModel& model,
                              const nlohmann::json& config, int64_t parameters, int64_t batch_size, int64_t max_length);

}  // namespace qkv::train
