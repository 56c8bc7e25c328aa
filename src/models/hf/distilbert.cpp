// DistilBERT (Hugging Face's DistilBertModel, …ForMaskedLM, …ForSequenceClassification,
// …ForTokenClassification) → qkv's "bert" (nn/bert.h): BERT's network with no token types
// (type_vocab_size 0), LayerNorms at ε = 1e-12, and its own names:
//
//   [distilbert.]embeddings.{word,position}_embeddings / embeddings.LayerNorm     the same / embeddings_norm
//   [distilbert.]transformer.layer.{i}.attention.{q,k,v}_lin     layers.{i}.self_attn.in_proj_* rows 0/1/2
//   ….attention.out_lin / sa_layer_norm                          ….self_attn.out_proj / norm1
//   ….ffn.lin1 / ffn.lin2 / output_layer_norm                    ….linear1 / linear2 / norm2
//   vocab_transform / vocab_layer_norm / vocab_projector.bias    transform / transform_norm / decoder_bias
//   vocab_projector.weight                                       (the word embedding again: tied)
//   pre_classifier (+ ReLU) / classifier                         pooler (relu) / classifier
#include <map>
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

nlohmann::json distilbert_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  hf_refuse_unknown_fields(c, arch,
                           {"vocab_size", "max_position_embeddings", "sinusoidal_pos_embds", "n_layers", "n_heads",
                            "dim", "hidden_dim", "dropout", "attention_dropout", "activation", "qa_dropout",
                            "seq_classif_dropout", "tie_weights_", "tie_word_embeddings"});
  // sinusoidal_pos_embds fills the position embedding with sinusoids, which save_pretrained stores
  // as any other weight: read from the checkpoint either way.
  if (head == EncoderHead::mlm)
    QKV_CHECK(field(c, "tie_word_embeddings", true) && field(c, "tie_weights_", true),
              "tie_word_embeddings = false (an untied vocab_projector) is not supported");
  const std::string activation = encoder_activation(c, "activation");
  nlohmann::json out = {{"vocab_size", field<int64_t>(c, "vocab_size", 30522)},
                        {"hidden_size", field<int64_t>(c, "dim", 768)},
                        {"num_hidden_layers", field<int64_t>(c, "n_layers", 6)},
                        {"num_attention_heads", field<int64_t>(c, "n_heads", 12)},
                        {"intermediate_size", field<int64_t>(c, "hidden_dim", 3072)},
                        {"max_position_embeddings", field<int64_t>(c, "max_position_embeddings", 512)},
                        {"type_vocab_size", 0},
                        {"hidden_act", activation},
                        {"layer_norm_eps", 1e-12},
                        {"dropout", field<double>(c, "dropout", 0.1)},
                        {"mlm_head", head == EncoderHead::mlm}};
  encoder_head_config(c, head, nn::BertPooler::relu, out);
  return out;
}

std::optional<HfTensorTarget> distilbert_map(const std::string& hf_name, EncoderHead head) {
  static const std::regex layer(R"(^transformer\.layer\.(\d+)\.(.+)$)");
  static const std::regex qkv_proj(R"(^attention\.(q|k|v)_lin\.(weight|bias)$)");
  static const std::map<std::string, std::string> in_layer = {{"attention.out_lin.weight", "self_attn.out_proj.weight"},
                                                              {"attention.out_lin.bias", "self_attn.out_proj.bias"},
                                                              {"sa_layer_norm.weight", "norm1.weight"},
                                                              {"sa_layer_norm.bias", "norm1.bias"},
                                                              {"ffn.lin1.weight", "linear1.weight"},
                                                              {"ffn.lin1.bias", "linear1.bias"},
                                                              {"ffn.lin2.weight", "linear2.weight"},
                                                              {"ffn.lin2.bias", "linear2.bias"},
                                                              {"output_layer_norm.weight", "norm2.weight"},
                                                              {"output_layer_norm.bias", "norm2.bias"}};
  static const std::map<std::string, std::string> embeddings = {
      {"embeddings.word_embeddings.weight", "word_embeddings.weight"},
      {"embeddings.position_embeddings.weight", "position_embeddings.weight"},
      {"embeddings.LayerNorm.weight", "embeddings_norm.weight"},
      {"embeddings.LayerNorm.bias", "embeddings_norm.bias"}};
  static const std::map<std::string, std::string> mlm = {{"vocab_transform.weight", "transform.weight"},
                                                         {"vocab_transform.bias", "transform.bias"},
                                                         {"vocab_layer_norm.weight", "transform_norm.weight"},
                                                         {"vocab_layer_norm.bias", "transform_norm.bias"},
                                                         {"vocab_projector.bias", "decoder_bias"}};
  static const std::map<std::string, std::string> sequence = {{"pre_classifier.weight", "pooler.weight"},
                                                              {"pre_classifier.bias", "pooler.bias"},
                                                              {"classifier.weight", "classifier.weight"},
                                                              {"classifier.bias", "classifier.bias"}};
  const std::string name = hf_name.starts_with("distilbert.") ? hf_name.substr(11) : hf_name;
  std::smatch m, p;
  if (std::regex_match(name, m, layer)) {
    const std::string prefix = "layers." + m[1].str() + ".", rest = m[2].str();
    if (std::regex_match(rest, p, qkv_proj)) {
      HfTensorTarget t{prefix + "self_attn." + (p[2].str() == "weight" ? "in_proj_weight" : "in_proj_bias")};
      t.part = p[1].str() == "q" ? 0 : p[1].str() == "k" ? 1 : 2, t.parts = 3;
      return t;
    }
    auto it = in_layer.find(rest);
    if (it == in_layer.end()) return std::nullopt;
    return HfTensorTarget{prefix + it->second};
  }
  if (auto it = embeddings.find(name); it != embeddings.end()) return HfTensorTarget{it->second};
  if (name == "embeddings.position_ids") return HfTensorTarget{""};  // a buffer of positions 0 … n−1
  if (head == EncoderHead::mlm) {
    if (auto it = mlm.find(name); it != mlm.end()) return HfTensorTarget{it->second};
    if (name == "vocab_projector.weight") return HfTensorTarget{""};  // the word embedding (tied, checked)
  }
  if (head == EncoderHead::sequence)
    if (auto it = sequence.find(name); it != sequence.end()) return HfTensorTarget{it->second};
  if (head == EncoderHead::token && (name == "classifier.weight" || name == "classifier.bias"))
    return HfTensorTarget{name};
  return std::nullopt;
}

}  // namespace

HfArchitecture distilbert(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return distilbert_config(c, name, head); },
          [head](const std::string& t) { return distilbert_map(t, head); }};
}

}  // namespace qkv::models::hf
