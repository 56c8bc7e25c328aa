// The Hugging Face architectures qkv converts, one file each (models/hf_convert.h lists them in
// hf_architectures()). Private to src/models.
#pragma once

#include <string>

#include "qkv/core/error.h"

#include <nlohmann/json.hpp>

#include "qkv/models/hf_convert.h"

namespace qkv::models::hf {

HfArchitecture gpt2();     // GPT2LMHeadModel → "gpt"
HfArchitecture llama();    // LlamaForCausalLM → "llama"
HfArchitecture qwen2();    // Qwen2ForCausalLM → "llama"
HfArchitecture mistral();  // MistralForCausalLM → "llama"
HfArchitecture marian();   // MarianMTModel → "transformer"
HfArchitecture bert_for_masked_lm();  // BertForMaskedLM → "bert"
HfArchitecture bert_model();          // BertModel → "bert" without the MLM head

// config[key] when present and not null, else `fallback` (Hugging Face's default for a field that
// save_pretrained left out because it equals the default).
template <class T>
T field(const nlohmann::json& config, const char* key, T fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(detail::concat("the field '", key, "' (= ", it->dump().substr(0, 60), ") has the wrong type"));
  }
}

}  // namespace qkv::models::hf
