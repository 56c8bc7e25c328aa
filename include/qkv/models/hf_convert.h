// Hugging Face model folders → qkv model files: what `qkv convert --from hf DIR -o MODEL` and Python's
// qkv.convert do. A folder as `save_pretrained` / `huggingface-cli download` leave it:
//
//   config.json                         "architectures": ["GPT2LMHeadModel"], the hyper-parameters
//   model.safetensors                   the weights (f32, f16 or bf16), or, for a sharded checkpoint,
//   model.safetensors.index.json        {"weight_map": {tensor → shard file}} and the shards
//   tokenizer.json, tokenizer_config.json …   the tokenizer (stored inside the qkv file as it is)
//
// Each supported architecture is one entry of hf_architectures() (src/models/hf/<name>.cpp): how its
// config becomes a qkv model type and config, and how its tensor names (and layouts: GPT-2's Conv1D
// weights are [in, out], qkv's Linear weights [out, in]) become the qkv model's parameters. A config
// field the architecture does not know is refused by name, never ignored; a tensor that maps to no
// parameter, a parameter no tensor fills, or a shape that differs is an error naming the file, the
// tensor and both shapes. Nothing is written unless the whole conversion holds.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"

namespace qkv::models {

// A Hugging Face model folder, opened and checked: its config and where each tensor lives.
struct HfFolder {
  std::string dir;
  nlohmann::json config;                 // config.json
  std::string architecture;              // config["architectures"][0]
  std::vector<std::string> shards;       // the safetensors files, paths inside dir
  std::string tokenizer_json;            // tokenizer.json's text ("" when the folder has none)
  nlohmann::json tokenizer_config;       // tokenizer_config.json (null when absent)
  std::string chat_template;             // chat_template.jinja's text, or chat_template.json's ("" when neither)
  // Marian's tokenizer files (all three or none): the SentencePiece models' bytes, vocab.json's text.
  std::string source_spm, target_spm, vocab_json;
};
// A missing folder or config.json, weights only as pytorch_model.bin (with how to re-save them as
// safetensors), an index naming a shard outside the folder or missing: a qkv::Error naming the path.
HfFolder open_hf_folder(const std::string& dir);

// Where a Hugging Face tensor goes in the qkv model.
struct HfTensorTarget {
  std::string name;        // the qkv parameter; "" : the tensor is known and not needed (a tied copy, a buffer)
  bool transpose = false;  // a [in, out] Conv1D weight becoming a [out, in] Linear weight
  bool tied_copy = false;  // an output head a tied model does not have (lm_head.weight): skipped then
  // One of `parts` equal row blocks of the parameter: separate q/k/v projections (Marian, BERT)
  // filling a fused in_proj_weight [3E, E] — block `part` is rows part·E … (part+1)·E − 1.
  int part = 0, parts = 1;
  bool plus_one = false;  // a Gemma RMSNorm's w, which scales by 1 + w: stored as γ = 1 + w (f32)
  // A fused projection (a weight or a bias) split by rows into several parameters, in order, each
  // taking its own row count (Phi-3's qkv_proj → q_proj, k_proj, v_proj; gate_up_proj → gate_proj,
  // up_proj); `name` is then unused.
  std::vector<std::string> rows_of = {};
  // With rows_of: the fused rows come head by head — [heads, parts, D] rows, GPT-NeoX's query_key_value
  // (each head's q, k and v rows together) — rather than part after part; 0: part after part; −1 (what
  // a map says, knowing no config): the model's heads, which HfArchitecture::target fills in.
  int64_t head_groups = 0;
};

// One supported architecture.
struct HfArchitecture {
  std::string name;        // config.json's architectures[0]: "GPT2LMHeadModel"
  std::string model_type;  // the qkv registry type it becomes: "gpt"
  // config.json → the qkv model's config; refuses (qkv::Error) a field or value qkv does not support,
  // naming it.
  std::function<nlohmann::json(const nlohmann::json& hf_config)> config;
  // A tensor name of the checkpoint → its target; nullopt: a name this architecture does not have.
  std::function<std::optional<HfTensorTarget>(const std::string& hf_name)> map;
  // map(hf_name) for the model of the qkv config `config`: a head_groups of −1 made its
  // num_attention_heads (a config without them: a qkv::Error).
  std::optional<HfTensorTarget> target(const std::string& hf_name, const nlohmann::json& config) const;
};
const std::vector<HfArchitecture>& hf_architectures();
// The entry for `name`; an unknown architecture is a qkv::Error listing the supported ones.
const HfArchitecture& hf_architecture(const std::string& name);

// The config fields every architecture may carry without changing what the model computes (ids,
// dropout rates for training, bookkeeping): read by none of the converters and not refused.
bool hf_field_is_bookkeeping(const std::string& key);
// Refuses any key of `hf_config` that is neither in `known` nor bookkeeping: "config.json: field
// 'x' (= value) is not supported for ARCH; qkv supports …".
void hf_refuse_unknown_fields(const nlohmann::json& hf_config, const std::string& architecture,
                              const std::vector<std::string>& known);

struct HfConvertOptions {
  io::StoreAs store = io::StoreAs::kF32;  // the stored weights' dtype (f32, f16, bf16)
  // A new head on an encoder's checkpoint, as transformers' AutoModelForSequenceClassification /
  // …ForTokenClassification.from_pretrained(folder, id2label=…) puts one there: "sequence" or "token"
  // converts the folder (BertForMaskedLM, RobertaModel, ElectraForPreTraining, a classifier of other
  // labels, …) as <Family>ForSequenceClassification / …ForTokenClassification with `labels`
  // (id2label; at least one), the encoder's weights from the checkpoint, and the parameters the
  // checkpoint has no tensor for — the classifier, and the pooler where it has none — drawn as
  // transformers draws them (N(0, initializer_range), biases 0) from `seed`. The checkpoint's other
  // heads' tensors (cls.*, lm_head.*, …) are left out and counted in `unused_tensors`; an encoder
  // tensor with no place is still an error. "span" makes it <Family>ForQuestionAnswering (no labels: the
  // qa_outputs' two, an answer's start and end), as AutoModelForQuestionAnswering.from_pretrained(folder)
  // does; "choice" <Family>ForMultipleChoice (no labels: one score a (context, choice) pair), as
  // AutoModelForMultipleChoice does. "" keeps the checkpoint's own architecture.
  std::string head;
  std::vector<std::string> labels;
  std::string problem_type;  // "" (transformers' default) or single_label_classification, multi_label_…, regression
  uint64_t seed = 0;
};

// What a conversion with a new head (HfConvertOptions::head) did, for the user: transformers' "Some
// weights of … were not initialized from the model checkpoint" and "… were not used".
struct HfHeadReport {
  std::string architecture;              // the one converted to: "BertForSequenceClassification"
  std::vector<std::string> initialized;  // qkv parameters newly drawn: "classifier.weight", …
  std::vector<std::string> unused;       // checkpoint tensors left out: "cls.predictions.bias", …
};

// Converts the folder to a qkv model file at `out` (written atomically) with its tokenizer inside,
// and returns the file's metadata. The model is built with the registry and loaded tensor by tensor
// (the checkpoint's tensors are never all held at once), then saved.
//
// `dir` may instead be a qkv model file of an encoder that qkv convert made, or a run trained from one
// (a masked_lm run's model.safetensors: continued pre-training, then a classifier): with options.head it
// gets a new head as its Hugging Face checkpoint would (the architecture and config.json its
// "converted_from" metadata keeps), the encoder's weights its own — what from_pretrained(run_mlm.py's
// output, num_labels=…) does. The file's other heads' tensors (the MLM head's transform.*,
// transform_norm.*, decoder_bias; an old classifier of other labels) are left out and reported; a
// file with no converted_from, of another kind, or without options.head: a qkv::Error naming it.
nlohmann::json convert_hf(const std::string& dir, const std::string& out, const HfConvertOptions& options = {},
                          HfHeadReport* report = nullptr);

}  // namespace qkv::models
