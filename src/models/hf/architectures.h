// The Hugging Face architectures qkv converts, one file each (models/hf_convert.h lists them in
// hf_architectures()). Private to src/models.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "qkv/core/error.h"

#include <nlohmann/json.hpp>

#include "qkv/models/hf_convert.h"
#include "qkv/nn/encoder_heads.h"

namespace qkv::models::hf {

HfArchitecture gpt2();     // GPT2LMHeadModel → "gpt"
// The tensors save_pretrained writes for a GPT2LMHeadModel of `layers` blocks (biases included; the tied
// lm_head and the buffers not), as gpt2()'s map reads them.
std::vector<std::string> gpt2_tensor_names(int64_t layers);
HfArchitecture opt();      // OPTForCausalLM → "gpt" (position_offset 2)
HfArchitecture llama();    // LlamaForCausalLM → "llama"
HfArchitecture qwen2();    // Qwen2ForCausalLM → "llama"
HfArchitecture qwen3();    // Qwen3ForCausalLM → "llama" (qk_norm)
HfArchitecture mistral();  // MistralForCausalLM → "llama"
HfArchitecture phi3();     // Phi3ForCausalLM → "llama" (fused projections split)
HfArchitecture gpt_neox();  // GPTNeoXForCausalLM → "llama" (LayerNorms, an ungated MLP, parallel residual)
HfArchitecture stablelm();  // StableLmForCausalLM → "llama" (LayerNorms, partial rotation)
HfArchitecture phi();       // PhiForCausalLM → "llama" (parallel branches after one LayerNorm, a head bias)
HfArchitecture gemma2();   // Gemma2ForCausalLM → "llama" (sandwich norms, GeGLU, soft caps, local and global layers)
HfArchitecture gemma3();   // Gemma3ForCausalLM → "llama" (sandwich norms, GeGLU, qk_norm, local and global layers)
HfArchitecture gemma3_multimodal();  // Gemma3ForConditionalGeneration → "llama" (its text model)
HfArchitecture marian();   // MarianMTModel → "transformer"
// The encoders (BERT's family → "bert"): which head the architecture carries.
enum class EncoderHead { none, mlm, sequence, token };
// BertModel (none), BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification
HfArchitecture bert(const std::string& name, EncoderHead head);
// DistilBertModel, DistilBertForMaskedLM, …ForSequenceClassification, …ForTokenClassification
HfArchitecture distilbert(const std::string& name, EncoderHead head);
// RobertaModel, RobertaForMaskedLM, …ForSequenceClassification, …ForTokenClassification; and
// XLM-RoBERTa's four (the same network and names, a SentencePiece Unigram vocabulary)
HfArchitecture roberta(const std::string& name, EncoderHead head);
// MPNetModel, MPNetForMaskedLM, …ForSequenceClassification, …ForTokenClassification (RoBERTa's
// network with a relative position bias)
HfArchitecture mpnet(const std::string& name, EncoderHead head);
// ElectraModel, ElectraForMaskedLM (the generator), …ForSequenceClassification, …ForTokenClassification
// (BERT's layers under narrower embeddings projected up)
HfArchitecture electra(const std::string& name, EncoderHead head);
// AlbertModel, AlbertForMaskedLM, …ForSequenceClassification, …ForTokenClassification (BERT's layer, one
// set of parameters for all, under ELECTRA's narrower embeddings)
HfArchitecture albert(const std::string& name, EncoderHead head);
// DebertaV2Model, DebertaV2ForMaskedLM, …ForSequenceClassification, …ForTokenClassification (DeBERTa v2
// and v3: BERT's layers with disentangled attention)
HfArchitecture deberta_v2(const std::string& name, EncoderHead head);
// ModernBertModel, ModernBertForMaskedLM, …ForSequenceClassification, …ForTokenClassification, and with
// `span` …ForQuestionAnswering (head token: its classifier the start and end logits) → "modernbert"
HfArchitecture modernbert(const std::string& name, EncoderHead head, bool span = false);
// BertForQuestionAnswering, …: the architecture's token classifier (made under the question-answering
// name) with the checkpoint's qa_outputs as its span head (question_answering.cpp).
HfArchitecture question_answering(const HfArchitecture& token_classifier);
// BertForMultipleChoice, …: the architecture's sequence classifier (made under the multiple-choice name)
// with one output, the score of a (context, choice) pair (multiple_choice.cpp).
HfArchitecture multiple_choice(const HfArchitecture& sequence_classifier);
// BERT's tensor names ("bert.encoder.layer.0.attention.self.query.weight", "cls.predictions.bias",
// "classifier.weight", …) → qkv's bert parameter (deberta.cpp maps its names onto them).
std::optional<HfTensorTarget> bert_tensor_target(const std::string& hf_name, EncoderHead head);
// RoBERTa's tensor names ("roberta.encoder.layer.0.attention.self.query.weight", "lm_head.bias",
// "classifier.out_proj.weight", …) → qkv's bert parameter (mpnet.cpp maps its names onto them).
std::optional<HfTensorTarget> roberta_tensor_target(const std::string& hf_name, EncoderHead head);
// An encoder's activation field (BERT's hidden_act, DistilBERT's activation) as qkv's activation name:
// gelu, relu, gelu_tanh (gelu_new, gelu_pytorch_tanh, gelu_fast), silu (swish); others refused.
std::string encoder_activation(const nlohmann::json& hf_config, const char* key);
// A classifier's part of the qkv config from config.json (id2label or num_labels, problem_type;
// `pooler` for a sequence classifier's dense layer), added to `out`; nothing for none or mlm.
void encoder_head_config(const nlohmann::json& hf_config, EncoderHead head, nn::BertPooler pooler, nlohmann::json& out);

// The parameters of an encoder's head that a new head (convert --head) may leave for initialization:
// the classifier, the pooler, ModernBERT's head (where a bare ModernBertModel has none).
inline bool new_head_parameter(const std::string& name) {
  return name.starts_with("classifier.") || name.starts_with("pooler.") || name.starts_with("head.");
}

// config[key] when present and not null, else `fallback` (Hugging Face's default for a field that
// save_pretrained left out because it equals the default). An integer field takes an integer that T
// holds — not 4096.5, nor 1e300, whose conversion would truncate it or be undefined —, a bool field
// true or false, a floating-point field any number, a string field a string.
[[noreturn]] inline void refuse_field(const char* key, const nlohmann::json& value, const char* expected) {
  throw Error(detail::concat("the field '", key, "' (= ", value.dump().substr(0, 60), ") has the wrong type: expected ",
                             expected));
}
template <class T>
T field(const nlohmann::json& config, const char* key, T fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  auto refuse = [&](const char* expected) { refuse_field(key, *it, expected); };
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) refuse("true or false");
  } else if constexpr (std::is_integral_v<T>) {
    using limits = std::numeric_limits<T>;
    if (!it->is_number_integer()) refuse("an integer");
    const bool fits = it->is_number_unsigned() ? it->template get<uint64_t>() <= static_cast<uint64_t>(limits::max())
                                               : it->template get<int64_t>() >= static_cast<int64_t>(limits::min()) &&
                                                     it->template get<int64_t>() <= static_cast<int64_t>(limits::max());
    if (!fits) refuse("an integer in range");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) refuse("a number");
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) refuse("a string");
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    refuse_field(key, *it, "another type");
  }
}

}  // namespace qkv::models::hf
