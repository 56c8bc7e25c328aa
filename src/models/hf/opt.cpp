// OPT (Hugging Face's OPTForCausalLM: facebook/opt-125m … opt-66b) → qkv's "gpt": GPT-2's network with
// OPT's sizes — learned positions, pre-LN blocks, a final LayerNorm, a tied output head — its q/k/v
// projections apart, ReLU, and a position table whose first two rows precede position 0 (OPT's
// offset: position t reads row t + 2, the GPT's position_offset).
//
//   model.decoder.embed_tokens                      wte
//   model.decoder.embed_positions  [P + 2, E]       wpe   (position_offset 2)
//   model.decoder.layers.{i}.self_attn.{q,k,v}_proj  h.{i}.self_attn.in_proj_* rows 0/1/2
//   ….self_attn.out_proj / fc1 / fc2                 h.{i}.self_attn.out_proj / linear1 / linear2
//   ….self_attn_layer_norm / final_layer_norm        h.{i}.norm1 / norm2
//   model.decoder.final_layer_norm                  ln_f
//   lm_head.weight                                  (tied to wte: not stored)
//
// OPT-350m's form — post-LN (do_layer_norm_before = false) and embeddings narrower than the model
// (word_embed_proj_dim, project_in / project_out) — and models without biases are refused by name.
#include <map>
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

nlohmann::json opt_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(c, "OPTForCausalLM",
                           {"vocab_size", "hidden_size", "num_hidden_layers", "ffn_dim", "max_position_embeddings",
                            "do_layer_norm_before", "_remove_final_layer_norm", "word_embed_proj_dim", "dropout",
                            "attention_dropout", "num_attention_heads", "activation_function", "layerdrop", "init_std",
                            "enable_bias", "layer_norm_elementwise_affine", "tie_word_embeddings", "prefix"});
  QKV_CHECK(field(c, "do_layer_norm_before", true),
            "do_layer_norm_before = false (OPT-350m's post-LN form) is not "
            "supported");
  QKV_CHECK(!field(c, "_remove_final_layer_norm", false), "_remove_final_layer_norm = true is not supported");
  QKV_CHECK(field(c, "enable_bias", true) && field(c, "layer_norm_elementwise_affine", true),
            "enable_bias = false or layer_norm_elementwise_affine = false is not supported");
  QKV_CHECK(field(c, "tie_word_embeddings", true), "tie_word_embeddings = false is not supported for OPT");
  const int64_t hidden = field<int64_t>(c, "hidden_size", 768);
  QKV_CHECK(field<int64_t>(c, "word_embed_proj_dim", hidden) == hidden,
            "word_embed_proj_dim ≠ hidden_size (embeddings "
            "projected in and out, OPT-350m's) is not "
            "supported");
  const auto act = field<std::string>(c, "activation_function", "relu");
  std::string activation;
  if (act == "relu" || act == "gelu")
    activation = act;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    activation = "gelu_tanh";
  else
    throw Error(detail::concat("activation_function '", act, "' is not supported (relu, gelu, gelu_new are)"));
  return {{"vocab_size", field<int64_t>(c, "vocab_size", 50272)},
          {"block_size", field<int64_t>(c, "max_position_embeddings", 2048)},
          {"n_layer", field<int64_t>(c, "num_hidden_layers", 12)},
          {"n_head", field<int64_t>(c, "num_attention_heads", 12)},
          {"n_embd", hidden},
          {"n_inner", field<int64_t>(c, "ffn_dim", 3072)},
          {"dropout", field<double>(c, "dropout", 0.1)},
          {"bias", true},
          {"activation", activation},
          {"layer_norm_eps", 1e-5},  // (nn.LayerNorm's default: OPT's config has no field for it)
          {"position_offset", 2}};
}

std::optional<HfTensorTarget> opt_map(const std::string& name) {
  static const std::regex layer(R"(^(?:model\.)?decoder\.layers\.(\d+)\.(.+)$)");
  static const std::map<std::string, HfTensorTarget> in_layer = {
      {"self_attn.q_proj.weight", {"self_attn.in_proj_weight", false, false, 0, 3}},
      {"self_attn.k_proj.weight", {"self_attn.in_proj_weight", false, false, 1, 3}},
      {"self_attn.v_proj.weight", {"self_attn.in_proj_weight", false, false, 2, 3}},
      {"self_attn.q_proj.bias", {"self_attn.in_proj_bias", false, false, 0, 3}},
      {"self_attn.k_proj.bias", {"self_attn.in_proj_bias", false, false, 1, 3}},
      {"self_attn.v_proj.bias", {"self_attn.in_proj_bias", false, false, 2, 3}},
      {"self_attn.out_proj.weight", {"self_attn.out_proj.weight"}},
      {"self_attn.out_proj.bias", {"self_attn.out_proj.bias"}},
      {"self_attn_layer_norm.weight", {"norm1.weight"}},
      {"self_attn_layer_norm.bias", {"norm1.bias"}},
      {"final_layer_norm.weight", {"norm2.weight"}},
      {"final_layer_norm.bias", {"norm2.bias"}},
      {"fc1.weight", {"linear1.weight"}},
      {"fc1.bias", {"linear1.bias"}},
      {"fc2.weight", {"linear2.weight"}},
      {"fc2.bias", {"linear2.bias"}},
  };
  static const std::map<std::string, HfTensorTarget> top = {{"decoder.embed_tokens.weight", {"wte.weight"}},
                                                            {"decoder.embed_positions.weight", {"wpe.weight"}},
                                                            {"decoder.final_layer_norm.weight", {"ln_f.weight"}},
                                                            {"decoder.final_layer_norm.bias", {"ln_f.bias"}}};
  std::smatch m;
  if (std::regex_match(name, m, layer)) {
    auto it = in_layer.find(m[2].str());
    if (it == in_layer.end()) return std::nullopt;
    HfTensorTarget t = it->second;
    t.name = "h." + m[1].str() + "." + t.name;
    return t;
  }
  if (name == "lm_head.weight") return HfTensorTarget{""};  // tied to wte (tie_word_embeddings is checked)
  const std::string bare = name.starts_with("model.") ? name.substr(6) : name;
  auto it = top.find(bare);
  if (it == top.end()) return std::nullopt;
  return it->second;
}

}  // namespace

HfArchitecture opt() { return {"OPTForCausalLM", "gpt", opt_config, opt_map}; }

}  // namespace qkv::models::hf
