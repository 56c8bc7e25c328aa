// A language model qkv trained from scratch ("gpt", "llama": qkv train's lm task) as the Hugging Face
// checkpoint it would have been converted from, so that models/hf_export.h writes it as it writes a
// converted one — its config checked by converting it back, its names by the converter's map:
//
//   "gpt"    GPT2LMHeadModel: nanoGPT's network is GPT-2's (learned positions, pre-LN blocks, a tied
//            head); without biases ("bias": false) its Linear layers and LayerNorms take zero biases,
//            which GPT-2 always has (x W + 0 and γ x̂ + 0 are the same numbers)
//   "llama"  LlamaForCausalLM (its attention_bias: zero biases where the qkv model has some of q/k/v/o's
//            only); Qwen3ForCausalLM with qk_norm, MistralForCausalLM with a sliding window — the
//            classes whose config says what the qkv config does (Gemma's options, a partial rotation,
//            a window with biases have none: refused). Not Qwen2ForCausalLM, whose model type makes
//            transformers 5's AutoTokenizer replace the tokenizer.json's pre-tokenizer with Qwen2's own.
//
// The tokenizer goes with it as tokenizer.json (text::LMTokenizer::to_hf), its special tokens' ids
// in the config. Private to src/models.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv::models::hf {

struct NativeCheckpoint {
  nlohmann::json converted_from;  // {"architecture", "config": config.json} as qkv convert keeps them
  nlohmann::json model;           // the qkv config that config.json converts to: the file's, spelled out
                                  // (GPT: "bias": true; Llama: the head counts and size given,
                                  // q/k/v and o biases both or neither)
  nlohmann::json tokenizer;       // {"type": "hf", "tokenizer_json", "tokenizer_config"}, or null: none
};

// `meta`: the model file's metadata (model_type, model, tokenizer); `where` begins the errors.
NativeCheckpoint native_checkpoint(const nlohmann::json& meta, const std::string& where);

// The checkpoint's name of each parameter of the model `checkpoint.model` describes
// ("h.0.self_attn.in_proj_weight" → "transformer.h.0.attn.c_attn.weight"), in their order.
std::vector<std::string> native_tensor_names(const NativeCheckpoint& checkpoint,
                                             const std::vector<std::string>& parameters);

}  // namespace qkv::models::hf
