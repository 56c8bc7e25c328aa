// The model types qkv knows, by name: what a model file's "model_type" and a config's
// "model": {"type": …} refer to. src/models/registry.cpp lists them, one line each.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/rng.h"
#include "qkv/models/model.h"

namespace qkv::models {

struct ModelType {
  std::string name;         // "transformer"
  Kind kind;
  std::string description;  // one line, for `qkv --help` and error messages
  // A fresh model from its hyper-parameters (a model file's "model", or a config's "model" section
  // without "type"); parameters initialized from `gen` (the default generator when null).
  std::function<std::unique_ptr<Model>(const nlohmann::json& config, Generator* gen)> build;
};

// Every registered type, in registration order.
const std::vector<ModelType>& model_types();
// The type called `name`; an unknown name is a qkv::Error listing the known ones.
const ModelType& model_type(const std::string& name);

// A model of the named type, which must be of the kind asked for (a qkv::Error saying what it is
// otherwise); build_seq2seq builds either kind with that interface (sequence-to-sequence, image-to-text).
std::unique_ptr<Seq2SeqModel> build_seq2seq(const std::string& type, const nlohmann::json& config,
                                            Generator* gen = nullptr);
std::unique_ptr<LanguageModel> build_language_model(const std::string& type, const nlohmann::json& config,
                                                    Generator* gen = nullptr);
std::unique_ptr<ImageClassifier> build_image_classifier(const std::string& type, const nlohmann::json& config,
                                                        Generator* gen = nullptr);
std::unique_ptr<MaskedLanguageModel> build_masked_language_model(const std::string& type, const nlohmann::json& config,
                                                                Generator* gen = nullptr);
// "sequence-to-sequence", "image-to-text", "language", "image classification", "masked language":
// for messages.
const char* kind_name(Kind kind);

}  // namespace qkv::models
