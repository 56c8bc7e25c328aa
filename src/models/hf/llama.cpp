// The Llama family → qkv's "llama" (nn/llama.h): LlamaForCausalLM, and the same block under
// Qwen2ForCausalLM (q/k/v biases), Qwen3ForCausalLM (each query and key head RMS-normalized:
// self_attn.q_norm / k_norm), MistralForCausalLM (a sliding window) and Phi3ForCausalLM (fused
// qkv_proj and gate_up_proj, split by rows; a window when sliding_window is set), whose configs differ
// only in fields and defaults; and Gemma 2 and 3 (Gemma2ForCausalLM, Gemma3ForCausalLM, and the text
// model of Gemma3ForConditionalGeneration), the same class with more options (below).
// Tensor names are Hugging Face's without "model.":
//
//   model.embed_tokens / model.layers.{i}.… / model.norm      embed_tokens / layers.{i}.… / norm
//   lm_head.weight                                             lm_head.weight (untied), none (tied)
//
// RoPE is read from transformers 4's "rope_theta" + "rope_scaling" or transformers 5's
// "rope_parameters" ({"rope_type": "default" | "linear" | "llama3" | "longrope", "rope_theta", "factor",
// …}); the other rope types (dynamic, yarn) are refused by name.
#include <cmath>
#include <regex>
#include <string_view>

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

// longrope's factors: a list of positive numbers
std::vector<double> factors(const nlohmann::json& rope, const char* key) {
  QKV_CHECK(rope.contains(key) && rope[key].is_array(), "longrope needs '", key, "', a list of numbers");
  std::vector<double> f;
  for (const auto& x : rope[key]) {
    QKV_CHECK(x.is_number() && x.get<double>() > 0 && std::isfinite(x.get<double>()), "longrope's ", key, " holds ",
              x.dump().substr(0, 40), ", not a positive number");
    f.push_back(x.get<double>());
  }
  return f;
}

// rope_scaling / rope_parameters → the qkv config's rope fields (out: with max_position_embeddings).
void read_rope(const nlohmann::json& c, nlohmann::json& out) {
  nlohmann::json rope = c.contains("rope_parameters") && !c["rope_parameters"].is_null() ? c["rope_parameters"]
                        : c.contains("rope_scaling") && !c["rope_scaling"].is_null() ? c["rope_scaling"]
                                                                                       : nlohmann::json::object();
  QKV_CHECK(rope.is_object(), "rope_scaling / rope_parameters must be an object, got ", rope.dump().substr(0, 60));
  out["rope_theta"] = field<double>(rope, "rope_theta", field<double>(c, "rope_theta", 10000.0));
  const std::string type = field<std::string>(rope, "rope_type", field<std::string>(rope, "type", "default"));
  static const std::vector<std::string> known = {"rope_type",
                                                 "type",
                                                 "rope_theta",
                                                 "factor",
                                                 "low_freq_factor",
                                                 "high_freq_factor",
                                                 "original_max_position_embeddings",
                                                 "partial_rotary_factor",
                                                 "short_factor",
                                                 "long_factor",
                                                 "attention_factor"};
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
  } else if (type == "longrope") {
    // (Hugging Face's _compute_longrope_parameters: factor defaults to the context's growth, the
    // attention factor to √(1 + ln factor / ln original))
    const int64_t original = field<int64_t>(rope, "original_max_position_embeddings",
                                            field<int64_t>(c, "original_max_position_embeddings", 0));
    QKV_CHECK(original >= 2, "longrope needs original_max_position_embeddings (≥ 2), got ", original);
    const double factor = field<double>(
        rope, "factor",
        static_cast<double>(out.at("max_position_embeddings").get<int64_t>()) / static_cast<double>(original));
    QKV_CHECK(factor > 0 && std::isfinite(factor), "longrope's factor ", factor, " must be a positive number");
    out["rope_scaling"] = "longrope";
    out["rope_original_max_position_embeddings"] = original;
    out["rope_short_factor"] = factors(rope, "short_factor");
    out["rope_long_factor"] = factors(rope, "long_factor");
    out["rope_attention_factor"] =
        field<double>(rope, "attention_factor",
                      factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original))));
  } else {
    throw Error(detail::concat("rope type '", type, "' is not supported (default, linear, llama3 and longrope are)"));
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
  if (std::string(f.architecture) == "Phi3ForCausalLM")
    window = field<int64_t>(c, "sliding_window", 0);  // (null: none)
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

// ---- Gemma 2 and Gemma 3 --------------------------------------------------------------------------
//
// Gemma2ForCausalLM and Gemma3ForCausalLM (Gemma 3's 270M and 1B: Gemma3TextConfig, model_type
// gemma3_text) are qkv's Llama with embed_scale, sandwich_norms and a tanh-GELU gate; their RMSNorms
// scale by 1 + w (every *norm.weight is stored as γ = 1 + w); the scores scale by
// 1/√query_pre_attn_scalar; their layers are windowed ("sliding_attention") but for every N-th
// ("full_attention": N = 2 in Gemma 2, 6 in Gemma 3). Gemma 2 soft-caps the attention scores and the
// logits (attn_logit_softcapping, final_logit_softcapping); Gemma 3 normalizes each query and key
// head (qk_norm) and gives its windowed layers their own RoPE base, unscaled. Read from transformers
// 5's layer_types + rope_parameters (Gemma 3: {"full_attention", "sliding_attention"}), or
// transformers 4's sliding_window_pattern + rope_theta / rope_scaling / rope_local_base_freq.
//
// Gemma3ForConditionalGeneration (Gemma 3's 4B, 12B and 27B: text and images) converts to its text
// model, read from text_config and the language model's tensors; its vision tower and projector are
// left out (qkv reads no pictures into a Llama).

enum class Gemma : uint8_t { v2, v3 };

// layer_types → the period N of its full layers (layers N−1, 2N−1, …): 0 when every layer is windowed,
// the layer count when none is; refused when no period describes it.
int64_t gemma_pattern(const nlohmann::json& c, int64_t layers, Gemma version) {
  if (!c.contains("layer_types") || c["layer_types"].is_null()) {
    if (version == Gemma::v2) return 2;  // (Gemma 2's configs before layer_types: every other layer)
    const int64_t n = field<int64_t>(c, "sliding_window_pattern", field<int64_t>(c, "_sliding_window_pattern", 6));
    QKV_CHECK(n >= 1, "sliding_window_pattern ", n, " must be at least 1");
    return n;
  }
  const nlohmann::json& types = c["layer_types"];
  QKV_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == layers, "layer_types must list the ", layers,
            " layers' types");
  int64_t first_full = -1;
  for (int64_t i = 0; i < layers && first_full < 0; ++i)
    if (types[static_cast<size_t>(i)] == "full_attention") first_full = i;
  const int64_t n = first_full < 0 ? 0 : first_full + 1;
  for (int64_t i = 0; i < layers; ++i) {
    const bool full = n > 0 && (i + 1) % n == 0;
    QKV_CHECK(types[static_cast<size_t>(i)] == (full ? "full_attention" : "sliding_attention"), "layer_types ",
              types.dump().substr(0, 80), " is not every N-th layer full and the others sliding (layer ", i, ")");
  }
  return n;
}

// A soft cap: absent → Hugging Face's default, null → none (0), else a positive number.
double softcap_field(const nlohmann::json& c, const char* key, double fallback) {
  if (c.contains(key) && c[key].is_null()) return 0;
  const double cap = field<double>(c, key, fallback);
  QKV_CHECK(cap > 0 && std::isfinite(cap), key, " ", cap, " must be a positive number (or null: none)");
  return cap;
}

nlohmann::json gemma_config(const nlohmann::json& c, Gemma version) {
  const bool v3 = version == Gemma::v3;
  const char* arch = v3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM";
  std::vector<std::string> known = {"vocab_size",
                                    "hidden_size",
                                    "intermediate_size",
                                    "num_hidden_layers",
                                    "num_attention_heads",
                                    "num_key_value_heads",
                                    "head_dim",
                                    "hidden_activation",
                                    "hidden_act",
                                    "max_position_embeddings",
                                    "rms_norm_eps",
                                    "tie_word_embeddings",
                                    "rope_parameters",
                                    "rope_theta",
                                    "rope_scaling",
                                    "attention_bias",
                                    "attention_dropout",
                                    "query_pre_attn_scalar",
                                    "sliding_window",
                                    "layer_types",
                                    "final_logit_softcapping",
                                    "attn_logit_softcapping",
                                    "use_bidirectional_attention",
                                    "cache_implementation"};
  if (v3) known.insert(known.end(), {"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"});
  hf_refuse_unknown_fields(c, arch, known);
  for (const char* act : {"hidden_activation", "hidden_act"})
    if (c.contains(act) && !c[act].is_null())
      QKV_CHECK(c[act] == "gelu_pytorch_tanh", act, " ", c[act].dump().substr(0, 40),
                " is not supported (gelu_pytorch_tanh is)");
  QKV_CHECK(!field<bool>(c, "use_bidirectional_attention", false), "use_bidirectional_attention is not supported");
  const int64_t layers = field<int64_t>(c, "num_hidden_layers", 26), head_dim = field<int64_t>(c, "head_dim", 256);
  const double scalar = field<double>(c, "query_pre_attn_scalar", 256.0);
  QKV_CHECK(scalar > 0 && std::isfinite(scalar), "query_pre_attn_scalar ", scalar, " must be a positive number");
  const bool bias = field<bool>(c, "attention_bias", false);
  nlohmann::json out = {
      {"vocab_size", field<int64_t>(c, "vocab_size", v3 ? 262208 : 256000)},
      {"hidden_size", field<int64_t>(c, "hidden_size", 2304)},
      {"intermediate_size", field<int64_t>(c, "intermediate_size", 9216)},
      {"num_hidden_layers", layers},
      {"num_attention_heads", field<int64_t>(c, "num_attention_heads", 8)},
      {"num_key_value_heads", field<int64_t>(c, "num_key_value_heads", 4)},
      {"head_dim", head_dim},
      {"max_position_embeddings", field<int64_t>(c, "max_position_embeddings", v3 ? 131072 : 8192)},
      {"rms_norm_eps", field<double>(c, "rms_norm_eps", 1e-6)},
      {"tie_word_embeddings", field<bool>(c, "tie_word_embeddings", true)},
      {"dropout", field<double>(c, "attention_dropout", 0.0)},
      {"qkv_bias", bias},
      {"o_bias", bias},
      {"qk_norm", v3},
      {"embed_scale", true},
      {"sandwich_norms", true},
      {"hidden_act", "gelu_tanh"},
      // (written only where it differs from head_dim: a model file the scale leaves alone reads as before)
      {"query_pre_attn_scalar", scalar == static_cast<double>(head_dim) ? 0.0 : scalar},
      {"attn_logit_softcapping", softcap_field(c, "attn_logit_softcapping", v3 ? 0 : 50.0)},
      {"final_logit_softcapping", softcap_field(c, "final_logit_softcapping", v3 ? 0 : 30.0)},
  };
  const int64_t pattern = gemma_pattern(c, layers, version);
  out["sliding_window"] = pattern != 1 ? field<int64_t>(c, "sliding_window", 4096) : 0;  // (1: every layer full)
  out["sliding_window_pattern"] = pattern;
  if (!v3) {  // one RoPE for every layer
    read_rope(c, out);
    return out;
  }
  // Gemma 3's RoPE: the full layers' parameters (and scaling), the windowed layers' base
  double local_theta = 10000.0;
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
      c["rope_parameters"].contains("full_attention")) {
    const nlohmann::json& rp = c["rope_parameters"];
    for (auto& [key, value] : rp.items())
      QKV_CHECK(key == "full_attention" || key == "sliding_attention", "rope_parameters: the layer type '", key,
                "' is not one Gemma 3 has");
    read_rope(nlohmann::json{{"rope_parameters", rp["full_attention"]}}, out);
    if (rp.contains("sliding_attention") && !rp["sliding_attention"].is_null()) {
      const nlohmann::json& local = rp["sliding_attention"];
      QKV_CHECK(local.is_object(), "rope_parameters.sliding_attention must be an object");
      const std::string type = field<std::string>(local, "rope_type", field<std::string>(local, "type", "default"));
      QKV_CHECK(type == "default", "rope_parameters.sliding_attention: rope type '", type,
                "' is not supported (default is)");
      for (auto& [key, value] : local.items())
        QKV_CHECK(key == "rope_type" || key == "type" || key == "rope_theta",
                  "rope_parameters.sliding_attention: the field '", key, "' is not supported");
      local_theta = field<double>(local, "rope_theta", 10000.0);
    }
  } else {
    read_rope(c, out);
    local_theta = field<double>(c, "rope_local_base_freq", 10000.0);
  }
  out["rope_local_theta"] = local_theta;
  return out;
}

// Gemma3ForConditionalGeneration's config: its text_config as Gemma3ForCausalLM's (the image fields
// read by nobody here, the vision tower's config not at all)
nlohmann::json gemma3_multimodal_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(c, "Gemma3ForConditionalGeneration",
                           {"text_config", "vision_config", "boi_token_index", "eoi_token_index", "image_token_index",
                            "mm_tokens_per_image", "tie_word_embeddings"});
  const nlohmann::json text =
      c.contains("text_config") && !c["text_config"].is_null() ? c["text_config"] : nlohmann::json::object();
  QKV_CHECK(text.is_object(), "text_config must be an object, got ", text.dump().substr(0, 60));
  try {
    nlohmann::json out = gemma_config(text, Gemma::v3);
    // the outer tie_word_embeddings rules where text_config leaves it out (transformers 4's saves)
    if (!text.contains("tie_word_embeddings")) out["tie_word_embeddings"] = field<bool>(c, "tie_word_embeddings", true);
    return out;
  } catch (const Error& e) {
    throw Error(detail::concat("text_config: ", e.what()));
  }
}

// Phi-3's tensor names are Llama's but for two fused projections, split by rows: qkv_proj [(H + 2Hkv)·D, E]
// into q_proj, k_proj, v_proj (HF slices q, k, v off its output in that order), gate_up_proj [2I, E]
// into gate_proj and up_proj (chunk(2): the gate first).
// ---- GPT-NeoX (Pythia) ------------------------------------------------------------------------------
//
// GPTNeoXForCausalLM: qkv's Llama with LayerNorms, an ungated GELU MLP and (use_parallel_residual) the
// attention and the MLP side by side; RoPE on the first rotary_pct of each head, θ from
// rotary_emb_base (transformers 5: rope_parameters' rope_theta and partial_rotary_factor). Its fused
// query_key_value [3E, E] holds each head's q, k and v rows together ([H, 3, D] rows):
//
//   gpt_neox.embed_in / final_layer_norm, embed_out        embed_tokens / norm, lm_head
//   gpt_neox.layers.{i}.input_layernorm, post_attention_layernorm   the same names (γ and β)
//   ….attention.query_key_value (head by head)             self_attn.q_proj, k_proj, v_proj
//   ….attention.dense                                       self_attn.o_proj
//   ….mlp.dense_h_to_4h, dense_4h_to_h                     mlp.up_proj, down_proj

// The families under LayerNorms (GPT-NeoX, StableLM, Phi): the sizes from config.json with the family's
// defaults, LayerNorms at layer_norm_eps, fine-tuning dropout from `dropout_key`, RoPE (read_rope; the
// rotated share partial_rotary_factor, else `rotary`), and the family's own fields (`form`) on top.
struct LayerNormDefaults {
  int64_t vocab, hidden, intermediate, layers, heads, positions;
  const char* dropout_key;
  double rotary;
};
nlohmann::json layer_norm_family_config(const nlohmann::json& c, const LayerNormDefaults& d,
                                        const nlohmann::json& form) {
  const int64_t heads = field<int64_t>(c, "num_attention_heads", d.heads);
  nlohmann::json out = {
      {"vocab_size", field<int64_t>(c, "vocab_size", d.vocab)},
      {"hidden_size", field<int64_t>(c, "hidden_size", d.hidden)},
      {"intermediate_size", field<int64_t>(c, "intermediate_size", d.intermediate)},
      {"num_hidden_layers", field<int64_t>(c, "num_hidden_layers", d.layers)},
      {"num_attention_heads", heads},
      {"num_key_value_heads", field<int64_t>(c, "num_key_value_heads", heads)},
      {"head_dim", 0},
      {"max_position_embeddings", field<int64_t>(c, "max_position_embeddings", d.positions)},
      {"rms_norm_eps", field<double>(c, "layer_norm_eps", 1e-5)},
      {"tie_word_embeddings", field<bool>(c, "tie_word_embeddings", false)},
      {"dropout", field<double>(c, d.dropout_key, 0.0)},
      {"qk_norm", false},
      {"sliding_window", 0},
      {"norm", "layer"},
  };
  out.update(form);
  read_rope(c, out);
  if (!out.contains("partial_rotary_factor"))
    out["partial_rotary_factor"] = field<double>(c, "partial_rotary_factor", d.rotary);
  return out;
}

// hidden_act as qkv's: exact GELU, or GELU's tanh form (gelu_new, gelu_fast, gelu_pytorch_tanh)
std::string gelu_kind(const nlohmann::json& c, const char* fallback) {
  const auto act = field<std::string>(c, "hidden_act", fallback);
  if (act == "gelu") return "gelu";
  if (act == "gelu_new" || act == "gelu_fast" || act == "gelu_pytorch_tanh") return "gelu_tanh";
  throw Error(detail::concat("hidden_act '", act, "' is not supported (gelu, gelu_new, gelu_fast are)"));
}

nlohmann::json gpt_neox_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(c, "GPTNeoXForCausalLM",
                           {"vocab_size",
                            "hidden_size",
                            "num_hidden_layers",
                            "num_attention_heads",
                            "intermediate_size",
                            "hidden_act",
                            "rotary_pct",
                            "rotary_emb_base",
                            "partial_rotary_factor",
                            "rope_theta",
                            "rope_scaling",
                            "rope_parameters",
                            "attention_dropout",
                            "hidden_dropout",
                            "classifier_dropout",
                            "max_position_embeddings",
                            "layer_norm_eps",
                            "use_parallel_residual",
                            "attention_bias",
                            "tie_word_embeddings",
                            "is_decoder"});
  const bool bias = field<bool>(c, "attention_bias", true);
  // RoPE: transformers 4's rotary_emb_base and rotary_pct, or 5's rope_parameters
  nlohmann::json with_rope = c;
  if (!with_rope.contains("rope_theta")) with_rope["rope_theta"] = field<double>(c, "rotary_emb_base", 10000.0);
  return layer_norm_family_config(
      with_rope, {50432, 6144, 24576, 44, 64, 2048, "hidden_dropout", field<double>(c, "rotary_pct", 0.25)},
      {{"qkv_bias", bias},
       {"o_bias", bias},
       {"mlp_bias", true},
       {"gated_mlp", false},
       {"parallel_residual", field<bool>(c, "use_parallel_residual", true)},
       {"hidden_act", gelu_kind(c, "gelu")}});
}

std::optional<HfTensorTarget> gpt_neox_map(const std::string& name) {
  static const std::regex layer(R"(^gpt_neox\.layers\.(\d+)\.(.+)$)");
  std::smatch m;
  if (std::regex_match(name, m, layer)) {
    const std::string at = "layers." + m[1].str() + ".", rest = m[2].str();
    if (rest == "attention.query_key_value.weight" || rest == "attention.query_key_value.bias") {
      const std::string leaf = rest.substr(rest.rfind('.'));
      HfTensorTarget t;
      t.rows_of = {at + "self_attn.q_proj" + leaf, at + "self_attn.k_proj" + leaf, at + "self_attn.v_proj" + leaf};
      t.head_groups = -1;  // (each head's q, k, v rows together: the model's heads)
      return t;
    }
    static const std::map<std::string, std::string> in_layer = {
        {"input_layernorm.weight", "input_layernorm.weight"},
        {"input_layernorm.bias", "input_layernorm.bias"},
        {"post_attention_layernorm.weight", "post_attention_layernorm.weight"},
        {"post_attention_layernorm.bias", "post_attention_layernorm.bias"},
        {"attention.dense.weight", "self_attn.o_proj.weight"},
        {"attention.dense.bias", "self_attn.o_proj.bias"},
        {"mlp.dense_h_to_4h.weight", "mlp.up_proj.weight"},
        {"mlp.dense_h_to_4h.bias", "mlp.up_proj.bias"},
        {"mlp.dense_4h_to_h.weight", "mlp.down_proj.weight"},
        {"mlp.dense_4h_to_h.bias", "mlp.down_proj.bias"},
    };
    if (auto it = in_layer.find(rest); it != in_layer.end()) return HfTensorTarget{at + it->second};
    if (rest == "attention.bias" || rest == "attention.masked_bias" || rest == "attention.rotary_emb.inv_freq")
      return HfTensorTarget{""};  // old checkpoints' buffers
    return std::nullopt;
  }
  if (name == "gpt_neox.embed_in.weight") return HfTensorTarget{"embed_tokens.weight"};
  if (name == "gpt_neox.final_layer_norm.weight") return HfTensorTarget{"norm.weight"};
  if (name == "gpt_neox.final_layer_norm.bias") return HfTensorTarget{"norm.bias"};
  if (name == "embed_out.weight") return HfTensorTarget{"lm_head.weight", false, /*tied_copy=*/true};
  return std::nullopt;
}

// ---- StableLM ---------------------------------------------------------------------------------------
//
// StableLmForCausalLM (StableLM 2, StableLM-3B-4E1T, Zephyr): Llama's names and gated SiLU MLP under
// LayerNorms (γ and β: input_layernorm, post_attention_layernorm, model.norm), q/k/v biases with
// use_qkv_bias, RoPE on the first partial_rotary_factor of each head. The parallel form (one norm
// feeding both branches) and per-head q/k LayerNorms (qk_layernorm) are refused.

nlohmann::json stablelm_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(
      c, "StableLmForCausalLM",
      {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
       "num_key_value_heads", "hidden_act", "max_position_embeddings", "layer_norm_eps", "rope_theta", "rope_scaling",
       "rope_parameters", "partial_rotary_factor", "use_qkv_bias", "qk_layernorm", "use_parallel_residual",
       "hidden_dropout", "attention_dropout", "tie_word_embeddings"});
  QKV_CHECK(!field(c, "use_parallel_residual", false),
            "use_parallel_residual = true (one norm before both branches) is not supported for StableLM");
  QKV_CHECK(!field(c, "qk_layernorm", false), "qk_layernorm = true (per-head LayerNorms) is not supported");
  const auto act = field<std::string>(c, "hidden_act", "silu");
  QKV_CHECK(act == "silu", "hidden_act '", act, "' is not supported (silu is)");
  return layer_norm_family_config(c, {50304, 2560, 6912, 32, 32, 4096, "hidden_dropout", 0.25},
                                  {{"qkv_bias", field<bool>(c, "use_qkv_bias", false)},
                                   {"o_bias", false},
                                   {"mlp_bias", false},
                                   {"gated_mlp", true},
                                   {"parallel_residual", false},
                                   {"hidden_act", "silu"}});
}

std::optional<HfTensorTarget> stablelm_map(const std::string& name) {
  static const std::regex norm_bias(R"(^model\.layers\.(\d+)\.(input|post_attention)_layernorm\.bias$)");
  std::smatch m;
  if (std::regex_match(name, m, norm_bias))
    return HfTensorTarget{"layers." + m[1].str() + "." + m[2].str() + "_layernorm.bias"};
  if (name == "model.norm.bias") return HfTensorTarget{"norm.bias"};
  return llama_map(name);
}

// ---- Phi (1, 1.5, 2) --------------------------------------------------------------------------------
//
// PhiForCausalLM: GPT-NeoX's parallel layer with one LayerNorm before both branches (shared_norm),
// q/k/v and dense with biases, an ungated tanh-GELU MLP (fc1, fc2), RoPE on the first
// partial_rotary_factor (default 0.5) of each head, a final LayerNorm and an output head with a bias:
//
//   model.embed_tokens, model.final_layernorm, lm_head (weight and bias)   embed_tokens, norm, lm_head
//   model.layers.{i}.input_layernorm                                       the same (γ and β)
//   ….self_attn.{q,k,v}_proj, self_attn.dense                             self_attn.{q,k,v}_proj, o_proj
//   ….mlp.fc1, mlp.fc2                                                     mlp.up_proj, down_proj
// Per-head q/k LayerNorms (qk_layernorm) are refused.

nlohmann::json phi_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(
      c, "PhiForCausalLM",
      {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
       "num_key_value_heads", "resid_pdrop", "embd_pdrop", "attention_dropout", "hidden_act", "max_position_embeddings",
       "layer_norm_eps", "tie_word_embeddings", "rope_theta", "rope_scaling", "rope_parameters",
       "partial_rotary_factor", "qk_layernorm"});
  QKV_CHECK(!field(c, "qk_layernorm", false), "qk_layernorm = true (per-head LayerNorms) is not supported");
  QKV_CHECK(!field(c, "tie_word_embeddings", false), "tie_word_embeddings = true is not supported for Phi");
  return layer_norm_family_config(c, {51200, 2048, 8192, 24, 32, 2048, "resid_pdrop", 0.5},
                                  {{"qkv_bias", true},
                                   {"o_bias", true},
                                   {"mlp_bias", true},
                                   {"gated_mlp", false},
                                   {"parallel_residual", true},
                                   {"shared_norm", true},
                                   {"lm_head_bias", true},
                                   {"hidden_act", gelu_kind(c, "gelu_new")}});
}

std::optional<HfTensorTarget> phi_map(const std::string& name) {
  static const std::regex layer(R"(^model\.layers\.(\d+)\.(.+)$)");
  static const std::map<std::string, std::string> in_layer = {
      {"input_layernorm.weight", "input_layernorm.weight"},
      {"input_layernorm.bias", "input_layernorm.bias"},
      {"self_attn.q_proj.weight", "self_attn.q_proj.weight"},
      {"self_attn.q_proj.bias", "self_attn.q_proj.bias"},
      {"self_attn.k_proj.weight", "self_attn.k_proj.weight"},
      {"self_attn.k_proj.bias", "self_attn.k_proj.bias"},
      {"self_attn.v_proj.weight", "self_attn.v_proj.weight"},
      {"self_attn.v_proj.bias", "self_attn.v_proj.bias"},
      {"self_attn.dense.weight", "self_attn.o_proj.weight"},
      {"self_attn.dense.bias", "self_attn.o_proj.bias"},
      {"mlp.fc1.weight", "mlp.up_proj.weight"},
      {"mlp.fc1.bias", "mlp.up_proj.bias"},
      {"mlp.fc2.weight", "mlp.down_proj.weight"},
      {"mlp.fc2.bias", "mlp.down_proj.bias"},
  };
  std::smatch m;
  if (std::regex_match(name, m, layer)) {
    auto it = in_layer.find(m[2].str());
    if (it != in_layer.end()) return HfTensorTarget{"layers." + m[1].str() + "." + it->second};
    if (m[2] == "self_attn.rotary_emb.inv_freq") return HfTensorTarget{""};  // (an old buffer)
    return std::nullopt;
  }
  if (name == "model.embed_tokens.weight") return HfTensorTarget{"embed_tokens.weight"};
  if (name == "model.final_layernorm.weight") return HfTensorTarget{"norm.weight"};
  if (name == "model.final_layernorm.bias") return HfTensorTarget{"norm.bias"};
  if (name == "lm_head.weight" || name == "lm_head.bias") return HfTensorTarget{name};
  return std::nullopt;
}

std::optional<HfTensorTarget> phi3_map(const std::string& name) {
  static const std::regex fused(R"(^model\.layers\.(\d+)\.(self_attn\.qkv_proj|mlp\.gate_up_proj)\.weight$)");
  std::smatch m;
  if (std::regex_match(name, m, fused)) {
    const std::string at = "layers." + m[1].str() + ".";
    HfTensorTarget t;
    t.rows_of = m[2] == "self_attn.qkv_proj"
                    ? std::vector<std::string>{at + "self_attn.q_proj.weight", at + "self_attn.k_proj.weight",
                                               at + "self_attn.v_proj.weight"}
                    : std::vector<std::string>{at + "mlp.gate_proj.weight", at + "mlp.up_proj.weight"};
    return t;
  }
  return llama_map(name);  // (an unfused q_proj or gate_proj beside the fused one: "both fill", as any)
}

// Gemma's tensor names are Llama's plus the sandwich's norms; every RMSNorm's w becomes γ = 1 + w.
std::optional<HfTensorTarget> gemma_map(const std::string& name) {
  static const std::regex norm(
      R"(^model\.layers\.(\d+)\.((input|post_attention|pre_feedforward|post_feedforward)_layernorm\.weight|self_attn\.[qk]_norm\.weight)$)");
  std::smatch m;
  if (std::regex_match(name, m, norm))
    return HfTensorTarget{"layers." + m[1].str() + "." + m[2].str(), false, false, 0, 1, true};
  if (name == "model.norm.weight") return HfTensorTarget{"norm.weight", false, false, 0, 1, true};
  return llama_map(name);
}

// Gemma3ForConditionalGeneration's tensors: the language model's under model.language_model. (and
// lm_head.weight) — transformers 4's saves: language_model.model. and language_model.lm_head.weight —
// read as Gemma3ForCausalLM's; the vision tower's and the projector's left out.
std::optional<HfTensorTarget> gemma3_multimodal_map(const std::string& name) {
  for (const char* prefix : {"model.language_model.", "language_model.model."})
    if (name.starts_with(prefix)) return gemma_map("model." + name.substr(std::string_view(prefix).size()));
  if (name == "lm_head.weight" || name == "language_model.lm_head.weight") return gemma_map("lm_head.weight");
  for (const char* prefix :
       {"model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector."})
    if (name.starts_with(prefix)) return HfTensorTarget{""};
  return std::nullopt;
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
HfArchitecture gemma2() {
  return {"Gemma2ForCausalLM", "llama", [](const nlohmann::json& c) { return gemma_config(c, Gemma::v2); }, gemma_map};
}
HfArchitecture gemma3() {
  return {"Gemma3ForCausalLM", "llama", [](const nlohmann::json& c) { return gemma_config(c, Gemma::v3); }, gemma_map};
}
HfArchitecture gemma3_multimodal() {
  return {"Gemma3ForConditionalGeneration", "llama", gemma3_multimodal_config, gemma3_multimodal_map};
}
HfArchitecture phi() { return {"PhiForCausalLM", "llama", phi_config, phi_map}; }
HfArchitecture stablelm() { return {"StableLmForCausalLM", "llama", stablelm_config, stablelm_map}; }
HfArchitecture gpt_neox() { return {"GPTNeoXForCausalLM", "llama", gpt_neox_config, gpt_neox_map}; }
HfArchitecture phi3() {
  const Family f{"Phi3ForCausalLM",
                 32064,
                 8192,
                 4096,
                 0,
                 false,
                 false,
                 0,
                 {"sliding_window", "original_max_position_embeddings", "resid_pdrop", "embd_pdrop"}};
  return {f.architecture, "llama", [f](const nlohmann::json& c) { return llama_config(f, c); }, phi3_map};
}
HfArchitecture mistral() {
  return make({"MistralForCausalLM", 32000, 14336, 131072, 8, false, false, 0, {"sliding_window", "layer_types"}});
}

}  // namespace qkv::models::hf
