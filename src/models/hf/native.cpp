// qkv's own language models as Hugging Face checkpoints (native.h): config.json from the qkv config,
// the names (GPT-2's own list, a Llama's from its parameters), the tokenizer as tokenizer.json.
#include "native.h"

#include <cstdio>
#include <cstdlib>

#include "architectures.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/llama.h"
#include "qkv/text/lm_tokenizer.h"

namespace qkv::models::hf {

namespace {

using json = nlohmann::json;

// A float field as its shortest decimal (1e-05, not the double 9.99999974737875e-06 it widens to):
// what Python writes for the value the user set.
double shortest(float x) {
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  return std::strtod(buf, nullptr);
}

json id_or_null(int32_t id) { return id >= 0 ? json(id) : json(nullptr); }

// GPT-2's config for nanoGPT's: the sizes, the activation (GELU's exact form is GPT-2's "gelu", its
// tanh form "gelu_new"), dropout on the embeddings, the residual branches and the attention weights.
json gpt2_config(const nn::GPTConfig& c, const std::string& where) {
  const char* act = c.activation == nn::Activation::gelu        ? "gelu"
                    : c.activation == nn::Activation::gelu_tanh ? "gelu_new"
                    : c.activation == nn::Activation::relu      ? "relu"
                                                                : nullptr;
  QKV_CHECK(act, where, ": a GPT with the activation silu has no GPT-2 config (gelu, gelu_tanh and relu do)");
  const double dropout = shortest(c.dropout);
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.block_size},
          {"n_embd", c.n_embd},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", c.n_inner > 0 ? json(c.n_inner) : json(nullptr)},
          {"activation_function", act},
          {"resid_pdrop", dropout},
          {"embd_pdrop", dropout},
          {"attn_pdrop", dropout},
          {"layer_norm_epsilon", shortest(c.layer_norm_eps)},
          {"initializer_range", 0.02},
          {"scale_attn_weights", true},
          {"tie_word_embeddings", true},
          {"use_cache", true}};
}

// transformers 4's rope fields (transformers 5 reads them into rope_parameters)
void write_rope(const nn::LlamaConfig& c, json& out) {
  out["rope_theta"] = c.rope_theta;
  switch (c.rope_scaling) {
    case nn::RopeScaling::none:
      out["rope_scaling"] = nullptr;
      break;
    case nn::RopeScaling::linear:
      out["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_factor}};
      break;
    case nn::RopeScaling::llama3:
      out["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", c.rope_factor},
                             {"low_freq_factor", c.rope_low_freq_factor},
                             {"high_freq_factor", c.rope_high_freq_factor},
                             {"original_max_position_embeddings", c.rope_original_max_position_embeddings}};
      break;
    case nn::RopeScaling::longrope:
      out["rope_scaling"] = {{"rope_type", "longrope"},
                             {"short_factor", c.rope_short_factor},
                             {"long_factor", c.rope_long_factor},
                             {"attention_factor", c.rope_attention_factor},
                             {"original_max_position_embeddings", c.rope_original_max_position_embeddings}};
      break;
  }
}

// The class whose config says what the qkv Llama config does, and that config.
json llama_family_config(const nn::LlamaConfig& c, const std::string& where) {
  auto refuse_unless = [&](bool ok, const char* what) {
    QKV_CHECK(ok, where, ": a Llama with ", what,
              " has no Hugging Face class qkv writes (LlamaForCausalLM, Qwen3ForCausalLM and MistralForCausalLM "
              "carry Llamas with biases, per-head query and key norms, a window)");
  };
  refuse_unless(c.hidden_act == nn::LlamaActivation::silu, "a tanh-GELU gate (Gemma's)");
  refuse_unless(!c.embed_scale && !c.sandwich_norms && c.attn_logit_softcapping == 0 &&
                    c.final_logit_softcapping == 0 && c.rope_local_theta == 0 && c.sliding_window_pattern == 0,
                "Gemma's options (embed_scale, sandwich_norms, soft caps, local and global layers)");
  refuse_unless(c.query_pre_attn_scalar == 0 || c.query_pre_attn_scalar == static_cast<double>(c.head_size()),
                "query_pre_attn_scalar ≠ head_dim");
  refuse_unless(c.partial_rotary_factor == 1, "partial_rotary_factor ≠ 1");
  refuse_unless(c.norm == nn::LlamaNorm::rms && c.gated_mlp && !c.parallel_residual && !c.lm_head_bias,
                "GPT-NeoX's or Phi's form (LayerNorms, an ungated MLP, parallel residual, a head bias)");
  // (biases on some of the attention's projections only: the others take zero biases, as GPT-2's do)
  const bool attention_bias = c.qkv_bias || c.o_bias;
  std::string arch, type;
  if (c.qk_norm) {
    refuse_unless(!c.mlp_bias, "qk_norm and MLP biases");
    arch = "Qwen3ForCausalLM", type = "qwen3";
  } else if (c.sliding_window > 0) {
    refuse_unless(!attention_bias && !c.mlp_bias, "a sliding window and biases");
    arch = "MistralForCausalLM", type = "mistral";
  } else {
    arch = "LlamaForCausalLM", type = "llama";
  }
  json out = {{"architectures", {arch}},
              {"model_type", type},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_hidden_layers", c.num_hidden_layers},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.kv_heads()},
              {"head_dim", c.head_size()},
              {"hidden_act", "silu"},
              {"max_position_embeddings", c.block_size},
              {"rms_norm_eps", c.rms_norm_eps},
              {"attention_dropout", shortest(c.dropout)},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"initializer_range", 0.02},
              {"use_cache", true}};
  write_rope(c, out);
  if (type == "llama") out["attention_bias"] = attention_bias, out["mlp_bias"] = c.mlp_bias;
  if (type == "qwen3") {
    out["attention_bias"] = attention_bias;
    out["use_sliding_window"] = c.sliding_window > 0;
    out["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    out["max_window_layers"] = 0;
  }
  if (type == "mistral") out["sliding_window"] = c.sliding_window;
  return out;
}

}  // namespace

NativeCheckpoint native_checkpoint(const json& meta, const std::string& where) {
  const std::string type = meta.value("model_type", "");
  QKV_CHECK(type == "gpt" || type == "llama", where, " holds a \"", excerpt(type),
            "\" model qkv trained, and no Hugging Face class qkv writes holds one: models converted from a "
            "checkpoint, and the language models qkv trains (\"gpt\", \"llama\"), go back");
  QKV_CHECK(meta.contains("model") && meta["model"].is_object(), where, ": its metadata has no model config");
  NativeCheckpoint out;
  int64_t block_size = 0;
  try {
    if (type == "gpt") {
      nn::GPTConfig c = nn::GPTConfig::from_json(meta["model"]);
      QKV_CHECK(c.position_offset == 0, where, ": a GPT whose positions start ", c.position_offset,
                " rows into its table (position_offset, OPT's) is GPT-2 only with none: an OPT goes back from its "
                "conversion (its converted_from)");
      out.converted_from["config"] = gpt2_config(c, where);
      c.bias = true;
      out.model = c.to_json();
      block_size = c.block_size;
    } else {
      nn::LlamaConfig c = nn::LlamaConfig::from_json(meta["model"]);
      out.converted_from["config"] = llama_family_config(c, where);
      c.num_key_value_heads = c.kv_heads(), c.head_dim = c.head_size();
      c.qkv_bias = c.o_bias = c.qkv_bias || c.o_bias;
      out.model = c.to_json();
      block_size = c.block_size;
    }
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.starts_with(where)) throw;
    throw Error(detail::concat(where, ": its model config: ", message));
  }
  json& config = out.converted_from["config"];
  out.converted_from["architecture"] = config["architectures"][0];
  config["bos_token_id"] = config["eos_token_id"] = nullptr;
  if (meta.contains("tokenizer") && !meta["tokenizer"].is_null()) {
    text::LMTokenizer::HfForm hf;
    try {
      const text::LMTokenizer tokenizer = text::LMTokenizer::from_json(meta["tokenizer"]);
      if (tokenizer.hf()) {  // (a Hugging Face tokenizer already: a converted file whose converted_from went)
        out.tokenizer = meta["tokenizer"];
        return out;
      }
      hf = tokenizer.to_hf(block_size);
    } catch (const Error& e) {
      throw Error(detail::concat(where, ": its tokenizer: ", e.what()));
    }
    config["bos_token_id"] = id_or_null(hf.bos_id), config["eos_token_id"] = id_or_null(hf.eos_id);
    if (hf.pad_id >= 0) config["pad_token_id"] = hf.pad_id;
    out.tokenizer = {
        {"type", "hf"}, {"tokenizer_json", hf.tokenizer_json.dump()}, {"tokenizer_config", hf.tokenizer_config}};
  }
  return out;
}

std::vector<std::string> native_tensor_names(const NativeCheckpoint& checkpoint,
                                             const std::vector<std::string>& parameters) {
  std::vector<std::string> out;
  if (checkpoint.converted_from["architecture"] != "GPT2LMHeadModel") {  // the Llamas: Hugging Face's names
    for (const std::string& p : parameters) out.push_back(p == "lm_head.weight" ? p : "model." + p);
    return out;
  }
  // GPT-2's own names (every parameter is one of them: export_hf checks that each is held)
  return gpt2_tensor_names(checkpoint.model.value("n_layer", int64_t{0}));
}

}  // namespace qkv::models::hf
