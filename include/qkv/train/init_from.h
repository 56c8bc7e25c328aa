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

#include <string>

#include <nlohmann/json.hpp>

#include "qkv/models/model.h"

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

}  // namespace qkv::train
