// MPNet (Song et al. 2020; Hugging Face's MPNetModel, MPNetForMaskedLM, MPNetForSequenceClassification,
// MPNetForTokenClassification — all-mpnet-base-v2 and most sentence-transformers models after it)
// → qkv's "bert" (nn/bert.h): RoBERTa's network (positions from pad_token_id + 1, no token types,
// the same heads) with a relative position bias in every layer's attention scores (T5's buckets,
// one table [relative_attention_num_buckets, heads] shared by the layers). Its own names, mapped to
// RoBERTa's and from there to qkv's:
//
//   [mpnet.]encoder.layer.{i}.attention.attn.{q,k,v}    ….attention.self.{query,key,value} (in_proj rows 0/1/2)
//   [mpnet.]encoder.layer.{i}.attention.attn.o          ….attention.output.dense (self_attn.out_proj)
//   [mpnet.]encoder.layer.{i}.attention.LayerNorm       ….attention.output.LayerNorm (norm1)
//   [mpnet.]encoder.relative_attention_bias             relative_attention_bias
//   embeddings.*, intermediate.*, output.*, lm_head.*, classifier.*, pooler.*   as RoBERTa's
#include <regex>

#include "architectures.h"
#include "qkv/core/error.h"

namespace qkv::models::hf {

namespace {

nlohmann::json mpnet_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  hf_refuse_unknown_fields(
      c, arch,
      {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
       "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "layer_norm_eps",
       "relative_attention_num_buckets", "classifier_dropout", "tie_word_embeddings"});
  if (head == EncoderHead::mlm)
    QKV_CHECK(field(c, "tie_word_embeddings", true),
              "tie_word_embeddings = false (an untied MLM decoder) is not "
              "supported");
  const auto positions = field<int64_t>(c, "max_position_embeddings", 514);
  const auto pad = field<int64_t>(c, "pad_token_id", 1);
  QKV_CHECK(pad >= 0 && pad + 1 < positions, "pad_token_id ", pad,
            " leaves MPNet no position of max_position_embeddings ", positions);
  const auto buckets = field<int64_t>(c, "relative_attention_num_buckets", 32);
  QKV_CHECK(buckets >= 2 && buckets <= (1 << 16) && buckets % 2 == 0, "relative_attention_num_buckets ", buckets,
            " must be even, from 2 to 65536");
  nlohmann::json out = {{"vocab_size", field<int64_t>(c, "vocab_size", 30527)},
                        {"hidden_size", field<int64_t>(c, "hidden_size", 768)},
                        {"num_hidden_layers", field<int64_t>(c, "num_hidden_layers", 12)},
                        {"num_attention_heads", field<int64_t>(c, "num_attention_heads", 12)},
                        {"intermediate_size", field<int64_t>(c, "intermediate_size", 3072)},
                        {"max_position_embeddings", positions},
                        {"type_vocab_size", 0},
                        {"hidden_act", encoder_activation(c, "hidden_act")},
                        {"layer_norm_eps", field<double>(c, "layer_norm_eps", 1e-12)},
                        {"dropout", field<double>(c, "hidden_dropout_prob", 0.1)},
                        {"mlm_head", head == EncoderHead::mlm},
                        {"mlm_exact_gelu", head == EncoderHead::mlm},  // (MPNetLMHead: gelu, whatever hidden_act says)
                        {"padding_idx", pad},
                        {"relative_attention_num_buckets", buckets},
                        {"relative_attention_max_distance", 128}};  // (MPNetEncoder's, fixed)
  encoder_head_config(c, head, nn::BertPooler::tanh, out);
  return out;
}

std::optional<HfTensorTarget> mpnet_map(const std::string& hf_name, EncoderHead head) {
  static const std::regex attn(R"(^encoder\.layer\.(\d+)\.attention\.(attn\.([qkvo])|LayerNorm)\.(weight|bias)$)");
  const std::string name = hf_name.starts_with("mpnet.") ? hf_name.substr(6) : hf_name;
  if (name == "encoder.relative_attention_bias.weight") return HfTensorTarget{"relative_attention_bias.weight"};
  std::smatch m;
  if (std::regex_match(name, m, attn)) {
    const std::string layer = "roberta.encoder.layer." + m[1].str() + ".attention.";
    const std::string which = m[3].str();
    const std::string part = which.empty()  ? "output.LayerNorm"
                             : which == "q" ? "self.query"
                             : which == "k" ? "self.key"
                             : which == "v" ? "self.value"
                                            : "output.dense";
    return roberta_tensor_target(layer + part + "." + m[4].str(), head);
  }
  if (name.starts_with("embeddings.") || name.starts_with("encoder.") || name.starts_with("pooler."))
    return roberta_tensor_target("roberta." + name, head);
  return roberta_tensor_target(name, head);  // lm_head.*, classifier.*
}

}  // namespace

HfArchitecture mpnet(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return mpnet_config(c, name, head); },
          [head](const std::string& t) { return mpnet_map(t, head); }};
}

}  // namespace qkv::models::hf
