// BERT (Hugging Face's BertForMaskedLM, and BertModel without the head) → qkv's "bert" (nn/bert.h):
// learned word, position and token-type embeddings with a LayerNorm, post-LN encoder layers, and
// the masked-language-model head whose decoder is tied to the word embedding.
//
//   [bert.]embeddings.word_embeddings / position_embeddings / token_type_embeddings   the same names
//   [bert.]embeddings.LayerNorm                                   embeddings_norm
//   [bert.]encoder.layer.{i}.attention.self.{query,key,value}     layers.{i}.self_attn.in_proj_* rows 0/1/2
//   ….attention.output.dense / attention.output.LayerNorm         ….self_attn.out_proj / norm1
//   ….intermediate.dense / output.dense / output.LayerNorm        ….linear1 / linear2 / norm2
//   cls.predictions.transform.dense / transform.LayerNorm         transform / transform_norm
//   cls.predictions.bias [V]                                      decoder_bias
//   cls.predictions.decoder.weight (and .bias)                    (the word embedding and the bias again)
//   [bert.]pooler.*, cls.seq_relationship.*, position_ids         (not used by fill-mask: not stored)
//
// Old checkpoints name LayerNorm parameters gamma / beta: read as weight / bias.
#include <map>
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

nlohmann::json bert_config(const nlohmann::json& c, const std::string& arch, bool mlm_head) {
  hf_refuse_unknown_fields(
      c, arch,
      {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
       "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
       "layer_norm_eps", "position_embedding_type", "classifier_dropout", "add_cross_attention",
       "tie_word_embeddings", "is_decoder", "directionality", "pooler_fc_size", "pooler_num_attention_heads",
       "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type"});
  // Fields whose other values change the network.
  const auto positions = field<std::string>(c, "position_embedding_type", "absolute");
  QKV_CHECK(positions == "absolute", "position_embedding_type '", positions,
            "' is not supported (absolute, the learned positions, is)");
  QKV_CHECK(!field(c, "is_decoder", false), "is_decoder = true (a causal BERT) is not supported");
  QKV_CHECK(!field(c, "add_cross_attention", false), "add_cross_attention = true is not supported");
  if (mlm_head)
    QKV_CHECK(field(c, "tie_word_embeddings", true), "tie_word_embeddings = false (an untied MLM decoder) is not "
                                                     "supported");
  const auto act = field<std::string>(c, "hidden_act", "gelu");
  std::string activation;
  if (act == "gelu" || act == "relu") activation = act;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") activation = "gelu_tanh";
  else if (act == "silu" || act == "swish") activation = "silu";
  else throw Error(detail::concat("hidden_act '", act, "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, ",
                                  "gelu_fast, relu, silu, swish are)"));
  return {{"vocab_size", field<int64_t>(c, "vocab_size", 30522)},
          {"hidden_size", field<int64_t>(c, "hidden_size", 768)},
          {"num_hidden_layers", field<int64_t>(c, "num_hidden_layers", 12)},
          {"num_attention_heads", field<int64_t>(c, "num_attention_heads", 12)},
          {"intermediate_size", field<int64_t>(c, "intermediate_size", 3072)},
          {"max_position_embeddings", field<int64_t>(c, "max_position_embeddings", 512)},
          {"type_vocab_size", field<int64_t>(c, "type_vocab_size", 2)},
          {"hidden_act", activation},
          {"layer_norm_eps", field<double>(c, "layer_norm_eps", 1e-12)},
          {"dropout", field<double>(c, "hidden_dropout_prob", 0.1)},
          {"mlm_head", mlm_head}};
}

// "LayerNorm.weight" / "LayerNorm.gamma" → "weight" (and bias / beta); else "".
std::string norm_param(const std::string& rest) {
  if (rest == "weight" || rest == "gamma") return "weight";
  if (rest == "bias" || rest == "beta") return "bias";
  return "";
}

std::optional<HfTensorTarget> bert_map(const std::string& hf_name) {
  static const std::regex layer(R"(^encoder\.layer\.(\d+)\.(.+)$)");
  static const std::regex qkv_proj(R"(^attention\.self\.(query|key|value)\.(weight|bias)$)");
  static const std::regex norm(R"(^(.*)LayerNorm\.(weight|bias|gamma|beta)$)");
  static const std::map<std::string, std::string> in_layer = {
      {"attention.output.dense.weight", "self_attn.out_proj.weight"},
      {"attention.output.dense.bias", "self_attn.out_proj.bias"},
      {"intermediate.dense.weight", "linear1.weight"}, {"intermediate.dense.bias", "linear1.bias"},
      {"output.dense.weight", "linear2.weight"}, {"output.dense.bias", "linear2.bias"}};
  static const std::map<std::string, std::string> layer_norms = {{"attention.output.", "norm1."}, {"output.", "norm2."}};
  static const std::map<std::string, std::string> top = {
      {"embeddings.word_embeddings.weight", "word_embeddings.weight"},
      {"embeddings.position_embeddings.weight", "position_embeddings.weight"},
      {"embeddings.token_type_embeddings.weight", "token_type_embeddings.weight"},
      {"cls.predictions.transform.dense.weight", "transform.weight"},
      {"cls.predictions.transform.dense.bias", "transform.bias"},
      {"cls.predictions.bias", "decoder_bias"}};
  const std::string name = hf_name.starts_with("bert.") ? hf_name.substr(5) : hf_name;
  std::smatch m, p;
  if (std::regex_match(name, m, layer)) {
    const std::string prefix = "layers." + m[1].str() + ".", rest = m[2].str();
    if (std::regex_match(rest, p, qkv_proj)) {
      HfTensorTarget t{prefix + "self_attn." + (p[2].str() == "weight" ? "in_proj_weight" : "in_proj_bias")};
      t.part = p[1].str() == "query" ? 0 : p[1].str() == "key" ? 1 : 2, t.parts = 3;
      return t;
    }
    if (std::regex_match(rest, p, norm)) {
      auto it = layer_norms.find(p[1].str());
      if (it == layer_norms.end()) return std::nullopt;
      return HfTensorTarget{prefix + it->second + norm_param(p[2].str())};
    }
    auto it = in_layer.find(rest);
    if (it == in_layer.end()) return std::nullopt;
    return HfTensorTarget{prefix + it->second};
  }
  if (std::regex_match(name, p, norm)) {
    if (p[1].str() == "embeddings.") return HfTensorTarget{"embeddings_norm." + norm_param(p[2].str())};
    if (p[1].str() == "cls.predictions.transform.") return HfTensorTarget{"transform_norm." + norm_param(p[2].str())};
    return std::nullopt;
  }
  if (auto it = top.find(name); it != top.end()) return HfTensorTarget{it->second};
  if (name == "cls.predictions.decoder.weight" || name == "cls.predictions.decoder.bias")
    return HfTensorTarget{""};  // the word embedding (tie_word_embeddings is checked) and cls.predictions.bias again
  if (name == "embeddings.position_ids" || name.starts_with("pooler.") || name.starts_with("cls.seq_relationship."))
    return HfTensorTarget{""};  // a buffer of positions 0 … n−1; the pooler and the next-sentence head
  return std::nullopt;
}

}  // namespace

HfArchitecture bert_for_masked_lm() {
  return {"BertForMaskedLM", "bert", [](const nlohmann::json& c) { return bert_config(c, "BertForMaskedLM", true); },
          bert_map};
}
HfArchitecture bert_model() {
  return {"BertModel", "bert", [](const nlohmann::json& c) { return bert_config(c, "BertModel", false); }, bert_map};
}

}  // namespace qkv::models::hf
