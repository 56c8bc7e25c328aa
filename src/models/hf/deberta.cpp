// DeBERTa v2 and v3 (Hugging Face's DebertaV2Model, DebertaV2ForMaskedLM, …ForSequenceClassification,
// …ForTokenClassification — deberta-v3-base/large and the NLI, zero-shot, reranking and
// prompt-injection classifiers fine-tuned from them) → qkv's "bert" (nn/bert.h): BERT's post-LN
// layers whose attention scores add DeBERTa's content→position and position→content terms
// (nn/disentangled_attention.h) over relative embeddings shared by the layers. Its names, mapped to
// BERT's and from there to qkv's:
//
//   [deberta.]encoder.layer.{i}.attention.self.{query,key,value}_proj   ….attention.self.{query,key,value}
//   [deberta.]encoder.rel_embeddings / encoder.LayerNorm                rel_embeddings / rel_embeddings_norm
//   [deberta.]embeddings.embed_proj                                     embed_proj
//   pooler.dense (ContextPooler: dense, then pooler_hidden_act)         pooler
//   embeddings.*, ….attention.output.*, intermediate.*, output.*, cls.predictions.*, classifier.*   as BERT's
//   mask_predictions.* (the pre-training's replaced-token head)           (not used: not stored)
//
// Refused, each by name: share_att_key false (separate position projections), conv_kernel_size > 0
// (deberta-v2-xlarge's convolution beside the first layer), legacy false (the enhanced MLM head),
// attention_head_size other than hidden_size / heads, a pooler wider or narrower than the model.
#include <regex>
#include <sstream>

#include "architectures.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"

namespace qkv::models::hf {

namespace {

// "p2c|c2p" → {"p2c", "c2p"}: split at '|', each stripped of spaces and lower-cased (DebertaV2Config's
// reading of pos_att_type and norm_rel_ebd)
std::vector<std::string> bar_separated(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, '|');) {
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    for (char& ch : part) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out.push_back(part);
  }
  return out;
}

// pos_att_type: ["p2c", "c2p"], "p2c|c2p" (the original configs, any case), or null (neither) → {c2p, p2c}
std::pair<bool, bool> position_terms(const nlohmann::json& c) {
  std::vector<std::string> terms;
  if (c.contains("pos_att_type") && !c["pos_att_type"].is_null()) {
    const nlohmann::json& t = c["pos_att_type"];
    if (t.is_string()) {
      terms = bar_separated(t.get<std::string>());
    } else {
      QKV_CHECK(t.is_array() && t.size() <= 8,
                "pos_att_type must be a list of \"c2p\" and \"p2c\" or a string "
                "\"p2c|c2p\", got ",
                excerpt(t.dump(), 60));
      for (const auto& x : t) {
        QKV_CHECK(x.is_string(), "pos_att_type holds ", excerpt(x.dump(), 60), ", not a string");
        terms.push_back(x.get<std::string>());  // (a list's are read as they are)
      }
    }
  }
  bool c2p = false, p2c = false;
  for (const std::string& t : terms) {
    QKV_CHECK(t == "c2p" || t == "p2c", "pos_att_type '", excerpt(t),
              "' is not supported (c2p and p2c are; DeBERTa v1's p2p is not)");
    (t == "c2p" ? c2p : p2c) = true;
  }
  return {c2p, p2c};
}

nlohmann::json deberta_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  hf_refuse_unknown_fields(c, arch,
                           {"vocab_size",
                            "hidden_size",
                            "num_hidden_layers",
                            "num_attention_heads",
                            "intermediate_size",
                            "hidden_act",
                            "hidden_dropout_prob",
                            "attention_probs_dropout_prob",
                            "max_position_embeddings",
                            "type_vocab_size",
                            "layer_norm_eps",
                            "relative_attention",
                            "max_relative_positions",
                            "position_biased_input",
                            "pos_att_type",
                            "position_buckets",
                            "share_att_key",
                            "norm_rel_ebd",
                            "embedding_size",
                            "pooler_hidden_size",
                            "pooler_dropout",
                            "pooler_hidden_act",
                            "legacy",
                            "tie_word_embeddings",
                            "cls_dropout",
                            "conv_kernel_size",
                            "conv_act",
                            "conv_groups",
                            "attention_head_size"});
  const auto hidden = field<int64_t>(c, "hidden_size", 1536), heads = field<int64_t>(c, "num_attention_heads", 24);
  const auto positions = field<int64_t>(c, "max_position_embeddings", 512);
  QKV_CHECK(hidden >= 1 && heads >= 1 && hidden % heads == 0, "hidden_size ", hidden,
            " must be a positive multiple of num_attention_heads ", heads);
  QKV_CHECK(positions >= 1 && positions <= (1 << 24), "max_position_embeddings ", positions, " is out of range");
  QKV_CHECK(field<int64_t>(c, "attention_head_size", hidden / heads) == hidden / heads, "attention_head_size ",
            c["attention_head_size"].dump(), " is not hidden_size / num_attention_heads (", hidden / heads,
            "): not supported");
  QKV_CHECK(field<int64_t>(c, "conv_kernel_size", 0) <= 0, "conv_kernel_size ", c["conv_kernel_size"].dump(),
            " (deberta-v2-xlarge's convolution beside the first layer) is not supported");
  QKV_CHECK(field<int64_t>(c, "pooler_hidden_size", hidden) == hidden, "pooler_hidden_size ",
            c["pooler_hidden_size"].dump(), " differs from hidden_size ", hidden, " (the classifier reads ", hidden,
            " values): not supported");
  const auto embedding = field<int64_t>(c, "embedding_size", hidden);
  QKV_CHECK(embedding >= 1 && embedding <= (1 << 20), "embedding_size ", embedding, " is out of range");
  const auto [c2p, p2c] = position_terms(c);
  nlohmann::json out = {{"vocab_size", field<int64_t>(c, "vocab_size", 128100)},
                        {"hidden_size", hidden},
                        {"num_hidden_layers", field<int64_t>(c, "num_hidden_layers", 24)},
                        {"num_attention_heads", heads},
                        {"intermediate_size", field<int64_t>(c, "intermediate_size", 6144)},
                        {"max_position_embeddings", positions},
                        {"type_vocab_size", field<int64_t>(c, "type_vocab_size", 0)},
                        {"hidden_act", encoder_activation(c, "hidden_act")},
                        {"layer_norm_eps", field<double>(c, "layer_norm_eps", 1e-7)},
                        {"dropout", field<double>(c, "hidden_dropout_prob", 0.1)},
                        {"mlm_head", head == EncoderHead::mlm},
                        {"embedding_size", embedding == hidden ? 0 : embedding},
                        {"absolute_positions", field(c, "position_biased_input", true)}};
  if (field(c, "relative_attention", false)) {
    QKV_CHECK(field(c, "share_att_key", false),
              "share_att_key = false (position projections of their own, pos_key_proj and pos_query_proj) is not "
              "supported; DeBERTa v3's and v2's released configs share the attention's");
    auto max_relative = field<int64_t>(c, "max_relative_positions", -1);
    if (max_relative < 1) max_relative = positions;  // (transformers': max_position_embeddings)
    const auto buckets = field<int64_t>(c, "position_buckets", -1);
    QKV_CHECK(max_relative <= (1 << 16) && buckets <= (1 << 16), "max_relative_positions ", max_relative,
              " / position_buckets ", buckets, " are out of range (at most 65536)");
    QKV_CHECK(buckets <= 0 || (buckets >= 4 && max_relative - 1 > buckets / 2), "position_buckets ", buckets,
              " needs at least 4 and max_relative_positions ", max_relative, " more than half of it + 1");
    bool norm = false;
    for (const std::string& part : bar_separated(field<std::string>(c, "norm_rel_ebd", "none"))) {
      QKV_CHECK(part == "layer_norm" || part == "none", "norm_rel_ebd '", excerpt(part),
                "' is not supported (layer_norm and none are)");
      norm = norm || part == "layer_norm";
    }
    out["relative_span"] = buckets > 0 ? buckets : max_relative;
    out["position_buckets"] = buckets > 0 ? buckets : 0;
    out["max_relative_positions"] = max_relative;
    out["c2p"] = c2p, out["p2c"] = p2c;
    out["norm_relative_embeddings"] = norm;
  } else {
    // transformers still divides the scores by √(D·(1 + |pos_att_type|)) there, with no position terms
    QKV_CHECK(!c2p && !p2c,
              "pos_att_type without relative_attention (scores scaled for position terms that are not "
              "there) is not supported");
  }
  if (head == EncoderHead::mlm) {
    QKV_CHECK(field(c, "legacy", true),
              "legacy = false (DeBERTa's enhanced MLM head, lm_predictions) is not supported");
    QKV_CHECK(field(c, "tie_word_embeddings", true),
              "tie_word_embeddings = false (an untied MLM decoder) is not supported");
  }
  const auto pooler_act = field<std::string>(c, "pooler_hidden_act", "gelu");
  QKV_CHECK(pooler_act == "gelu" || pooler_act == "tanh" || pooler_act == "relu", "pooler_hidden_act '",
            excerpt(pooler_act), "' is not supported (gelu, tanh, relu are)");
  encoder_head_config(c, head,
                      pooler_act == "gelu"   ? nn::BertPooler::gelu
                      : pooler_act == "tanh" ? nn::BertPooler::tanh
                                             : nn::BertPooler::relu,
                      out);
  return out;
}

std::optional<HfTensorTarget> deberta_map(const std::string& hf_name, EncoderHead head) {
  static const std::regex projection(
      R"(^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)_proj\.(weight|bias)$)");
  const std::string name = hf_name.starts_with("deberta.") ? hf_name.substr(8) : hf_name;
  if (name == "encoder.rel_embeddings.weight") return HfTensorTarget{"rel_embeddings.weight"};
  if (name == "encoder.LayerNorm.weight" || name == "encoder.LayerNorm.bias")
    return HfTensorTarget{"rel_embeddings_norm." + name.substr(18)};
  if (name == "embeddings.embed_proj.weight") return HfTensorTarget{"embed_proj.weight"};
  if (name.starts_with("mask_predictions.")) return HfTensorTarget{""};  // (pre-training's, ignored by transformers)
  std::smatch m;
  if (std::regex_match(name, m, projection))
    return bert_tensor_target("encoder.layer." + m[1].str() + ".attention.self." + m[2].str() + "." + m[3].str(), head);
  return bert_tensor_target(name, head);  // embeddings.*, the layers' other parts, cls.*, pooler.*, classifier.*
}

}  // namespace

HfArchitecture deberta_v2(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return deberta_config(c, name, head); },
          [head](const std::string& t) { return deberta_map(t, head); }};
}

}  // namespace qkv::models::hf
