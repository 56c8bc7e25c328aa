// The Llama family → qkv's "llama" (nn/llama.h): LlamaForCausalLM, and the same block under
// Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (each query and key head RMS-normalized:
// self_attn.q_norm / k_norm) and MistralForCausalLM (a sliding window), whose configs differ only in
// fields and defaults. Tensor names are Hugging Face's without "model.":
//
//   model.embed_tokens / model.layers.{i}.… / model.norm      embed_tokens / layers.{i}.… / norm
//   lm_head.weight                                             lm_head.weight (untied), none (tied)
//
// RoPE is read from transformers 4's "rope_theta" + "rope_scaling" or transformers 5's
// "rope_parameters" ({"rope_type": "default" | "linear" | "llama3", "rope_theta", "factor", …});
// the other rope types (dynamic, yarn, longrope) are refused by name.
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

struct Family {
  const char* architecture;
  int64_t vocab_size, intermediate_size, max_position_embeddings, num_key_value_heads;  // HF's defaults (0: = heads)
  bool qkv_bias;  // Qwen2: always
  bool qk_norm;   // Qwen3: always
  int64_t head_dim;                 // HF's default (0: hidden_size / heads)
  std::vector<std::string> fields;  // the family's own config fields, beyond the common ones
};

// rope_scaling / rope_parameters → the qkv config's rope fields.
void read_rope(const nlohmann::json& c, nlohmann::json& out) {
  nlohmann::json rope = c.contains("rope_parameters") && !c["rope_parameters"].is_null() ? c["rope_parameters"]
                        : c.contains("rope_scaling") && !c["rope_scaling"].is_null() ? c["rope_scaling"]
                                                                                       : nlohmann::json::object();
  QKV_CHECK(rope.is_object(), "rope_scaling / rope_parameters must be an object, got ", rope.dump().substr(0, 60));
  out["rope_theta"] = field<double>(rope, "rope_theta", field<double>(c, "rope_theta", 10000.0));
  const std::string type = field<std::string>(rope, "rope_type", field<std::string>(rope, "type", "default"));
  static const std::vector<std::string> known = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                                 "high_freq_factor", "original_max_position_embeddings",
                                                 "partial_rotary_factor"};
  for (auto& [key, value] : rope.items())
    QKV_CHECK(std::find(known.begin(), known.end(), key) != known.end(), "the rope field '", key, "' (= ",
              value.dump().substr(0, 60), ") is not supported");
  if (type == "default") {
    out["rope_scaling"] = "none";
  } else if (type == "linear") {
    out["rope_scaling"] = "linear";
    out["rope_factor"] = field<double>(rope, "factor", 1.0);
  } else if (type == "llama3") {
    out["rope_scaling"] = "llama3";
    out["rope_factor"] = field<double>(rope, "factor", 8.0);
    out["rope_low_freq_factor"] = field<double>(rope, "low_freq_factor", 1.0);
    out["rope_high_freq_factor"] = field<double>(rope, "high_freq_factor", 4.0);
    out["rope_original_max_position_embeddings"] = field<int64_t>(rope, "original_max_position_embeddings", 8192);
  } else {
    throw Error(detail::concat("rope type '", type, "' is not supported (default, linear and llama3 are)"));
  }
  if (rope.contains("partial_rotary_factor")) out["partial_rotary_factor"] = field<double>(rope, "partial_rotary_factor", 1.0);
}

nlohmann::json llama_config(const Family& f, const nlohmann::json& c) {
  std::vector<std::string> known = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
                                    "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
                                    "rope_parameters", "attention_dropout", "tie_word_embeddings",
                                    "partial_rotary_factor"};
  known.insert(known.end(), f.fields.begin(), f.fields.end());
  hf_refuse_unknown_fields(c, f.architecture, known);
  const auto act = field<std::string>(c, "hidden_act", "silu");
  QKV_CHECK(act == "silu", "hidden_act '", act, "' is not supported (silu is)");
  QKV_CHECK(field<int64_t>(c, "pretraining_tp", 1) == 1, "pretraining_tp ≠ 1 is not supported");
  const int64_t heads = field<int64_t>(c, "num_attention_heads", 32), hidden = field<int64_t>(c, "hidden_size", 4096);
  nlohmann::json out = {
      {"vocab_size", field<int64_t>(c, "vocab_size", f.vocab_size)},
      {"hidden_size", hidden},
      {"intermediate_size", field<int64_t>(c, "intermediate_size", f.intermediate_size)},
      {"num_hidden_layers", field<int64_t>(c, "num_hidden_layers", 32)},
      {"num_attention_heads", heads},
      {"num_key_value_heads",
       field<int64_t>(c, "num_key_value_heads", f.num_key_value_heads ? f.num_key_value_heads : heads)},
      {"head_dim", field<int64_t>(c, "head_dim", f.head_dim)},
      {"max_position_embeddings", field<int64_t>(c, "max_position_embeddings", f.max_position_embeddings)},
      {"rms_norm_eps", field<double>(c, "rms_norm_eps", 1e-6)},
      {"tie_word_embeddings", field<bool>(c, "tie_word_embeddings", false)},
      {"dropout", field<double>(c, "attention_dropout", 0.0)},
      {"partial_rotary_factor", field<double>(c, "partial_rotary_factor", 1.0)},
  };
  read_rope(c, out);
  const bool attention_bias = field<bool>(c, "attention_bias", false);
  out["qkv_bias"] = f.qkv_bias || attention_bias;
  out["qk_norm"] = f.qk_norm;
  out["o_bias"] = attention_bias;
  out["mlp_bias"] = field<bool>(c, "mlp_bias", false);
  // Mistral: a window on every layer; Qwen2 and Qwen3: only with use_sliding_window, and then only on the
  // layers from max_window_layers on (refused: qkv has one window for all layers).
  int64_t window = 0;
  if (std::string(f.architecture) == "MistralForCausalLM") window = field<int64_t>(c, "sliding_window", 4096);
  if (field<bool>(c, "use_sliding_window", false)) {
    window = field<int64_t>(c, "sliding_window", 4096);
    QKV_CHECK(field<int64_t>(c, "max_window_layers", 28) == 0, "use_sliding_window with max_window_layers > 0 (a "
                                                                 "window on some layers only) is not supported");
  }
  if (c.contains("layer_types") && c["layer_types"].is_array())
    for (const auto& t : c["layer_types"])
      QKV_CHECK(t == (window > 0 ? "sliding_attention" : "full_attention"), "layer_types mixing full and sliding "
                                                                             "attention is not supported");
  out["sliding_window"] = window;
  return out;
}

std::optional<HfTensorTarget> llama_map(const std::string& name) {
  static const std::regex layer(
      R"(^model\.layers\.(\d+)\.(self_attn\.[qkvo]_proj\.(weight|bias)|self_attn\.[qk]_norm\.weight|mlp\.(gate|up|down)_proj\.(weight|bias)|(input|post_attention)_layernorm\.weight)$)");
  static const std::regex rotary(R"(^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$)");
  std::smatch m;
  if (std::regex_match(name, m, layer)) return HfTensorTarget{"layers." + m[1].str() + "." + m[2].str()};
  if (std::regex_match(name, rotary)) return HfTensorTarget{""};  // old checkpoints' computed buffer
  if (name == "model.embed_tokens.weight") return HfTensorTarget{"embed_tokens.weight"};
  if (name == "model.norm.weight") return HfTensorTarget{"norm.weight"};
  if (name == "lm_head.weight") return HfTensorTarget{"lm_head.weight", false, /*tied_copy=*/true};
  return std::nullopt;
}

HfArchitecture make(Family f) {
  return {f.architecture, "llama", [f](const nlohmann::json& c) { return llama_config(f, c); }, llama_map};
}

}  // namespace

HfArchitecture llama() {
  return make(
      {"LlamaForCausalLM", 32000, 11008, 2048, 0, false, false, 0, {"attention_bias", "mlp_bias", "pretraining_tp"}});
}
HfArchitecture qwen2() {
  return make({"Qwen2ForCausalLM",
               151936,
               22016,
               32768,
               32,
               true,
               false,
               0,
               {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"}});
}
HfArchitecture qwen3() {
  return make({"Qwen3ForCausalLM",
               151936,
               22016,
               32768,
               32,
               false,
               true,
               128,
               {"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"}});
}
HfArchitecture mistral() {
  return make({"MistralForCausalLM", 32000, 14336, 131072, 8, false, false, 0, {"sliding_window", "layer_types"}});
}

}  // namespace qkv::models::hf
