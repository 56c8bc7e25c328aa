// Loading a model file for inference: the registry builds the model its metadata names, the
// parameters are loaded and checked, and the tokenizer it carries comes with it — one file
// translates or generates.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/models/model.h"
#include "qkv/models/registry.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::models {

struct LoadOptions {
  // What decoding steps read; unset: the file's own (decoding_weights below).
  std::optional<nn::InferenceWeights> weights;
  // Where the model decodes: its parameters move there before the inference copies are made, so a
  // bf16 copy lives on the GPU beside them (int8 copies are the CPU's kernels': refused on a GPU).
  Device device = Device::cpu();
};

// A sequence-to-sequence model (Kind::seq2seq, a translator; or Kind::image_to_text, a captioner)
// and its SentencePiece vocabulary.
struct LoadedSeq2Seq {
  std::unique_ptr<Seq2SeqModel> model;
  std::unique_ptr<text::SentencePiece> tokenizer;
  nlohmann::json meta;
  std::string path;
};
// A missing or corrupt file, a file of another kind of model, or one whose tensors or tokenizer do
// not fit the model its metadata describes: a qkv::Error naming the path and the problem.
LoadedSeq2Seq load_seq2seq(const std::string& path, const LoadOptions& options = {});
// The same for an image-to-text model (a captioner): any other kind is that error.
LoadedSeq2Seq load_image_to_text(const std::string& path, const LoadOptions& options = {});
// Several models for an ensemble: each loaded as above, and all with the same tokenizer pieces
// (a qkv::Error naming the first model and piece that differ).
std::vector<LoadedSeq2Seq> load_seq2seq_ensemble(const std::vector<std::string>& paths,
                                                 const LoadOptions& options = {});
std::vector<const Seq2SeqModel*> models_of(const std::vector<LoadedSeq2Seq>& loaded);

// A language model (Kind::language_model) and its tokenizer (characters or SentencePiece).
struct LoadedLanguageModel {
  std::unique_ptr<LanguageModel> model;
  text::LMTokenizer tokenizer;
  // The tokens that end a text (a converted model's "generation": {"eos_token_id"}; none for qkv's
  // own models, which generate on): what decode::GenerateOptions::stop_ids takes.
  std::vector<int32_t> stop_ids;
  nlohmann::json meta;
  std::string path;
};
LoadedLanguageModel load_language_model(const std::string& path, const LoadOptions& options = {});

// An image classifier (Kind::image_classifier): its class names and input shape are its config's.
struct LoadedImageClassifier {
  std::unique_ptr<ImageClassifier> model;
  nlohmann::json meta;
  std::string path;
};
LoadedImageClassifier load_image_classifier(const std::string& path, const LoadOptions& options = {});

// A masked language model (Kind::masked_language_model: BERT) and its tokenizer (a converted
// model's Hugging Face tokenizer: tokenizer.hf() has the [MASK], [CLS] and [SEP] ids).
struct LoadedMaskedLanguageModel {
  std::unique_ptr<MaskedLanguageModel> model;
  text::LMTokenizer tokenizer;
  nlohmann::json meta;
  std::string path;
};
LoadedMaskedLanguageModel load_masked_language_model(const std::string& path, const LoadOptions& options = {});

// The weights decoding reads from `path` with `options`: options.weights where set; otherwise int8
// for a file `qkv quantize` wrote, decoded on the CPU (its matrices are int8 rows: f32 would rebuild
// them as s·W8 in four times the memory), and f32 for any other file or device.
nn::InferenceWeights decoding_weights(const std::string& path, const LoadOptions& options);

// The kind of model a file holds (for commands that serve several kinds); errors as above.
Kind model_file_kind(const std::string& path);
// Any model file, by the loader of its kind: the model (as a Model) and the file's metadata.
struct LoadedModel {
  std::unique_ptr<Model> model;
  nlohmann::json meta;
};
LoadedModel load_any_model(const std::string& path, const LoadOptions& options = {});
// Loads `path` as the loader of its kind does and lets it go: the file's config, tokenizer and
// tensors pass every check loading makes (qkv::Error as above otherwise). For commands that write
// a model file from others (qkv average) and must not write one no command can load.
void check_loadable(const std::string& path);

// The registry's entry for the type a file names (its kind, its builder): its metadata is read,
// not its tensors; errors as above.
const ModelType& model_file_type(const std::string& path);

}  // namespace qkv::models
