// GPT-2 (Hugging Face's GPT2LMHeadModel) → qkv's "gpt": the same network — learned positions,
// pre-LN blocks, a tied output head — with biases, tanh GELU ("gelu_new") and GPT-2's sizes.
//
//   transformer.wte / wpe                          wte / wpe
//   transformer.h.{i}.ln_1, ln_2                   h.{i}.norm1, norm2
//   transformer.h.{i}.attn.c_attn   [E, 3E]        h.{i}.self_attn.in_proj_weight  [3E, E]  (Conv1D: transposed)
//   transformer.h.{i}.attn.c_proj   [E, E]         h.{i}.self_attn.out_proj        [E, E]   (transposed)
//   transformer.h.{i}.mlp.c_fc      [E, 4E]        h.{i}.linear1                   [4E, E]  (transposed)
//   transformer.h.{i}.mlp.c_proj    [4E, E]        h.{i}.linear2                   [E, 4E]  (transposed)
//   transformer.ln_f                               ln_f
//   lm_head.weight                                 (tied to wte: not stored)
//
// Conv1D computes y = x W + b with W [in, out]; Linear computes y = x Wᵀ + b with W [out, in].
#include <map>
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

nlohmann::json gpt2_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(c, "GPT2LMHeadModel",
                           {"vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "n_inner",
                            "activation_function", "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon",
                            "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                            "summary_first_dropout", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                            "reorder_and_upcast_attn", "add_cross_attention", "tie_word_embeddings"});
  // Fields whose other values change the network.
  QKV_CHECK(field(c, "scale_attn_weights", true), "scale_attn_weights = false (unscaled attention) is not supported");
  QKV_CHECK(!field(c, "scale_attn_by_inverse_layer_idx", false),
            "scale_attn_by_inverse_layer_idx = true is not supported");
  QKV_CHECK(!field(c, "add_cross_attention", false), "add_cross_attention = true (a GPT-2 decoder of an "
                                                      "encoder–decoder) is not supported");
  QKV_CHECK(field(c, "tie_word_embeddings", true), "tie_word_embeddings = false is not supported for GPT-2");
  const auto act = field<std::string>(c, "activation_function", "gelu_new");
  std::string activation;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") activation = "gelu_tanh";
  else if (act == "gelu" || act == "relu") activation = act;
  else throw Error(detail::concat("activation_function '", act, "' is not supported (gelu_new, gelu_pytorch_tanh, ",
                                  "gelu_fast, gelu, relu are)"));
  const int64_t n_positions = field<int64_t>(c, "n_positions", 1024);
  if (c.contains("n_ctx"))
    QKV_CHECK(field<int64_t>(c, "n_ctx", n_positions) == n_positions, "n_ctx ", c["n_ctx"].dump(),
              " differs from n_positions ", n_positions);
  return {{"vocab_size", field<int64_t>(c, "vocab_size", 50257)},
          {"block_size", n_positions},
          {"n_layer", field<int64_t>(c, "n_layer", 12)},
          {"n_head", field<int64_t>(c, "n_head", 12)},
          {"n_embd", field<int64_t>(c, "n_embd", 768)},
          {"n_inner", field<int64_t>(c, "n_inner", 0)},
          {"dropout", field<double>(c, "resid_pdrop", 0.1)},
          {"bias", true},
          {"activation", activation},
          {"layer_norm_eps", field<double>(c, "layer_norm_epsilon", 1e-5)},
          {"position_offset", 0}};
}

// A block's tensors (under transformer.h.{i}.) and the model's others, as GPT-2 names them → qkv's.
const std::map<std::string, HfTensorTarget>& block_tensors() {
  static const std::map<std::string, HfTensorTarget> in_block = {
      {"ln_1.weight", {"norm1.weight"}},
      {"ln_1.bias", {"norm1.bias"}},
      {"ln_2.weight", {"norm2.weight"}},
      {"ln_2.bias", {"norm2.bias"}},
      {"attn.c_attn.weight", {"self_attn.in_proj_weight", true}},
      {"attn.c_attn.bias", {"self_attn.in_proj_bias"}},
      {"attn.c_proj.weight", {"self_attn.out_proj.weight", true}},
      {"attn.c_proj.bias", {"self_attn.out_proj.bias"}},
      {"mlp.c_fc.weight", {"linear1.weight", true}},
      {"mlp.c_fc.bias", {"linear1.bias"}},
      {"mlp.c_proj.weight", {"linear2.weight", true}},
      {"mlp.c_proj.bias", {"linear2.bias"}},
      {"attn.bias", {""}},         // old checkpoints' causal-mask buffer
      {"attn.masked_bias", {""}},  // and its fill value
  };
  return in_block;
}
const std::map<std::string, HfTensorTarget>& top_tensors() {
  static const std::map<std::string, HfTensorTarget> top = {
      {"wte.weight", {"wte.weight"}}, {"wpe.weight", {"wpe.weight"}},
      {"ln_f.weight", {"ln_f.weight"}}, {"ln_f.bias", {"ln_f.bias"}}};
  return top;
}

std::optional<HfTensorTarget> gpt2_map(const std::string& name) {
  static const std::regex block(R"(^(?:transformer\.)?h\.(\d+)\.(.+)$)");
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    auto it = block_tensors().find(m[2].str());
    if (it == block_tensors().end()) return std::nullopt;
    HfTensorTarget t = it->second;
    if (!t.name.empty()) t.name = "h." + m[1].str() + "." + t.name;
    return t;
  }
  if (name == "lm_head.weight") return HfTensorTarget{""};  // tied to wte (tie_word_embeddings is checked)
  const std::string bare = name.starts_with("transformer.") ? name.substr(12) : name;
  auto it = top_tensors().find(bare);
  if (it == top_tensors().end()) return std::nullopt;
  return it->second;
}

}  // namespace

HfArchitecture gpt2() { return {"GPT2LMHeadModel", "gpt", gpt2_config, gpt2_map}; }

std::vector<std::string> gpt2_tensor_names(int64_t layers) {
  std::vector<std::string> out;
  for (const auto& [name, target] : top_tensors()) out.push_back("transformer." + name);
  for (int64_t i = 0; i < layers; ++i)
    for (const auto& [name, target] : block_tensors())
      if (!target.name.empty()) out.push_back("transformer.h." + std::to_string(i) + "." + name);
  return out;
}

}  // namespace qkv::models::hf
