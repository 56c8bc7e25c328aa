// Marian / OPUS-MT (Hugging Face's MarianMTModel) → qkv's "transformer" (nn/transformer.h): the
// same post-LN encoder–decoder with Marian's details switched on — sinusoids laid out in halves,
// no final LayerNorms, a logits bias, SiLU ("swish") feed-forward, one embedding shared by the
// source, the target and the output head, decoding started from the pad token.
//
//   model.shared                                   embedding
//   model.{encoder,decoder}.embed_tokens, lm_head  (the shared embedding again: not stored)
//   model.{encoder,decoder}.embed_positions        (the sinusoids: computed, not stored)
//   model.encoder.layers.{i}.self_attn.{q,k,v}_proj  transformer.encoder.layers.{i}.self_attn.in_proj_* rows 0/1/2
//   ….self_attn.out_proj / fc1 / fc2                 ….self_attn.out_proj / linear1 / linear2
//   ….self_attn_layer_norm / final_layer_norm        ….norm1 / norm2 (encoder), norm1 / norm3 (decoder)
//   model.decoder.layers.{i}.encoder_attn.*          ….multihead_attn.* (and encoder_attn_layer_norm: norm2)
//   final_logits_bias [1, V]                         final_logits_bias
#include <map>
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

nlohmann::json marian_config(const nlohmann::json& c) {
  hf_refuse_unknown_fields(
      c, "MarianMTModel",
      {"vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
       "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "dropout",
       "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop", "max_position_embeddings",
       "scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings", "init_std", "num_hidden_layers",
       "classifier_dropout", "normalize_embedding", "static_position_embeddings", "add_bias_logits",
       "normalize_before", "add_final_layer_norm"});
  const int64_t vocab = field<int64_t>(c, "vocab_size", 58101);
  QKV_CHECK(field<int64_t>(c, "decoder_vocab_size", vocab) == vocab && field(c, "share_encoder_decoder_embeddings", true),
            "a separate target vocabulary (decoder_vocab_size ≠ vocab_size, or share_encoder_decoder_embeddings "
            "= false) is not supported");
  QKV_CHECK(field(c, "tie_word_embeddings", true), "tie_word_embeddings = false is not supported for Marian");
  for (const char* k : {"normalize_embedding", "normalize_before", "add_final_layer_norm", "add_bias_logits"})
    QKV_CHECK(!field(c, k, false), k, " = true is not supported (a Marian model of that form has no converter)");
  QKV_CHECK(field(c, "static_position_embeddings", true), "learned positions (static_position_embeddings = false) "
                                                          "are not supported");
  const int64_t layers_e = field<int64_t>(c, "encoder_layers", 12), layers_d = field<int64_t>(c, "decoder_layers", 12);
  const int64_t heads = field<int64_t>(c, "encoder_attention_heads", 16), ffn = field<int64_t>(c, "encoder_ffn_dim", 4096);
  QKV_CHECK(field<int64_t>(c, "decoder_attention_heads", 16) == heads, "decoder_attention_heads ≠ "
                                                                       "encoder_attention_heads is not supported");
  QKV_CHECK(field<int64_t>(c, "decoder_ffn_dim", 4096) == ffn, "decoder_ffn_dim ≠ encoder_ffn_dim is not supported");
  const auto act = field<std::string>(c, "activation_function", "gelu");
  std::string activation;
  if (act == "swish" || act == "silu") activation = "silu";
  else if (act == "gelu" || act == "relu") activation = act;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh") activation = "gelu_tanh";
  else throw Error(detail::concat("activation_function '", act, "' is not supported (swish, silu, gelu, gelu_new, relu are)"));
  const int64_t pad = field<int64_t>(c, "pad_token_id", vocab - 1);
  return {{"vocab_size", vocab},
          {"d_model", field<int64_t>(c, "d_model", 1024)},
          {"nhead", heads},
          {"num_encoder_layers", layers_e},
          {"num_decoder_layers", layers_d},
          {"dim_feedforward", ffn},
          {"dropout", field<double>(c, "dropout", 0.1)},
          {"activation", activation},
          {"norm_first", false},
          {"positions", "sinusoidal_split"},
          {"max_len", field<int64_t>(c, "max_position_embeddings", 1024)},
          {"pad_id", pad},
          {"bos_id", field<int64_t>(c, "decoder_start_token_id", pad)},
          {"eos_id", field<int64_t>(c, "eos_token_id", 0)},
          {"final_norm", false},
          {"logits_bias", true},
          {"scale_embedding", field(c, "scale_embedding", false)}};
}

std::optional<HfTensorTarget> marian_map(const std::string& name) {
  static const std::regex layer(R"(^model\.(encoder|decoder)\.layers\.(\d+)\.(.+)$)");
  static const std::map<std::string, HfTensorTarget> common = {
      {"fc1.weight", {"linear1.weight"}}, {"fc1.bias", {"linear1.bias"}},
      {"fc2.weight", {"linear2.weight"}}, {"fc2.bias", {"linear2.bias"}},
      {"self_attn_layer_norm.weight", {"norm1.weight"}}, {"self_attn_layer_norm.bias", {"norm1.bias"}},
      {"self_attn.out_proj.weight", {"self_attn.out_proj.weight"}}, {"self_attn.out_proj.bias", {"self_attn.out_proj.bias"}},
      {"encoder_attn.out_proj.weight", {"multihead_attn.out_proj.weight"}},
      {"encoder_attn.out_proj.bias", {"multihead_attn.out_proj.bias"}},
      {"encoder_attn_layer_norm.weight", {"norm2.weight"}}, {"encoder_attn_layer_norm.bias", {"norm2.bias"}}};
  static const std::regex proj(R"(^(self_attn|encoder_attn)\.([qkv])_proj\.(weight|bias)$)");
  std::smatch m;
  if (std::regex_match(name, m, layer)) {
    const std::string side = m[1].str(), rest = m[3].str(), prefix = "transformer." + side + ".layers." + m[2].str() + ".";
    if (rest == "final_layer_norm.weight" || rest == "final_layer_norm.bias")  // the FFN's norm: norm2 / norm3
      return HfTensorTarget{prefix + (side == "encoder" ? "norm2." : "norm3.") + rest.substr(17)};
    std::smatch p;
    if (std::regex_match(rest, p, proj)) {
      if (side == "encoder" && p[1].str() == "encoder_attn") return std::nullopt;
      const std::string attn = p[1].str() == "self_attn" ? "self_attn." : "multihead_attn.";
      const int part = p[2].str() == "q" ? 0 : p[2].str() == "k" ? 1 : 2;
      HfTensorTarget t{prefix + attn + (p[3].str() == "weight" ? "in_proj_weight" : "in_proj_bias")};
      t.part = part, t.parts = 3;
      return t;
    }
    auto it = common.find(rest);
    if (it == common.end() || (side == "encoder" && rest.starts_with("encoder_attn"))) return std::nullopt;
    return HfTensorTarget{prefix + it->second.name};
  }
  if (name == "model.shared.weight") return HfTensorTarget{"embedding.weight"};
  if (name == "final_logits_bias") return HfTensorTarget{"final_logits_bias"};
  if (name == "model.encoder.embed_tokens.weight" || name == "model.decoder.embed_tokens.weight" ||
      name == "lm_head.weight" || name == "model.encoder.embed_positions.weight" ||
      name == "model.decoder.embed_positions.weight")
    return HfTensorTarget{""};  // the shared embedding again, or the computed sinusoids
  return std::nullopt;
}

}  // namespace

HfArchitecture marian() { return {"MarianMTModel", "transformer", marian_config, marian_map}; }

}  // namespace qkv::models::hf
