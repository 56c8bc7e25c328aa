// qkv model files → Hugging Face model folders: what `qkv export --to hf MODEL DIR` and Python's
// qkv.export_hf do — the way back from hf_convert.h. A model qkv converted from a checkpoint, and any run
// trained from one (`"init_from"`: a classifier fine-tuned with qkv train, pre-training continued with
// "masked_lm", a language model's fine-tune), becomes a folder that transformers' from_pretrained loads
// as the model qkv computes, as save_pretrained would have left it:
//
//   config.json                       the checkpoint's config (its "converted_from"), with the model's
//                                     architecture, labels (id2label, label2id) and dtype
//   model.safetensors                 the weights under the checkpoint's names and layouts (GPT-2's Conv1D
//   (or model-0000i-of-0000n.safetensors  weights [in, out] again, BERT's query/key/value apart, Phi-3's
//    and model.safetensors.index.json)    projections fused, Gemma's norms as w = γ − 1), sharded past
//                                     max_shard_bytes as save_pretrained shards them
//   tokenizer.json, tokenizer_config.json, chat_template.jinja   the tokenizer the file carries, as read
//   source.spm, target.spm, vocab.json                           (Marian's)
//   generation_config.json            the checkpoint's, where it had one
//   modules.json, 1_Pooling/, sentence_bert_config.json, …      a sentence-transformers model's
//
// The names come from the checkpoint (the file's converted_from keeps them); a head qkv put on an
// encoder (convert --head) takes the names transformers gives that head. Every name written is checked
// against the converter's own map (the architecture's map sends it back to the parameter it came
// from), every parameter is written once, and the config is checked the same way: converting the
// folder back must describe the model the file holds (a field that differs is an error naming it;
// dropout rates, which qkv train may change, are the checkpoint's). A language model qkv trained from
// scratch ("gpt", "llama") goes as the class that computes it (GPT2LMHeadModel, LlamaForCausalLM,
// Qwen3ForCausalLM, MistralForCausalLM), described as the checkpoint it would have come from
// (src/models/hf/native.h) and checked the same way, its tokenizer as tokenizer.json
// (text::LMTokenizer::to_hf). What cannot go back is refused by name: another model qkv trained (no
// transformers class holds it), an int8 file (qkv quantize), Gemma 3's
// multimodal checkpoint (its vision tower is not in the file). Nothing is left half-written: the folder
// is written beside its place and renamed into it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/io/safetensors.h"

namespace qkv::models {

struct HfExportOptions {
  io::StoreAs store = io::StoreAs::kF32;     // the weights' dtype: f32 (the file's values exactly), f16, bf16
  uint64_t max_shard_bytes = 5'000'000'000;  // save_pretrained's max_shard_size (5 GB)
  bool force = false;                        // write into a folder that is not empty (its weight files replaced)
};

struct HfExportReport {
  std::string architecture;        // "BertForSequenceClassification"
  std::vector<std::string> files;  // written, relative to the folder, in order
  int64_t tensors = 0;             // the weights written
  uint64_t bytes = 0;              // their bytes
};

// Writes `model_file` as a Hugging Face folder at `out_dir` (created; it must not exist or be empty
// unless options.force). Errors (qkv::Error) name the file and what cannot go back.
HfExportReport export_hf(const std::string& model_file, const std::string& out_dir,
                         const HfExportOptions& options = {});

// "5GB", "500MB", "2GiB", "1000000": bytes (KB, MB, GB are powers of 10 as in transformers; KiB, MiB,
// GiB of 2); anything else, or 0, is a qkv::Error naming `what`.
uint64_t parse_shard_size(const std::string& text, const std::string& what);

}  // namespace qkv::models
