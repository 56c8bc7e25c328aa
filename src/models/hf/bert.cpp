// BERT (Hugging Face's BertForMaskedLM, BertModel without the head, BertForSequenceClassification
// and BertForTokenClassification) → qkv's "bert" (nn/bert.h): learned word, position and token-type
// embeddings with a LayerNorm, post-LN encoder layers, and the masked-language-model head whose
// decoder is tied to the word embedding, or a classifier. RoBERTa (below) is the same network.
//
//   [bert.]embeddings.word_embeddings / position_embeddings / token_type_embeddings   the same names
//   [bert.]embeddings.LayerNorm                                   embeddings_norm
//   [bert.]encoder.layer.{i}.attention.self.{query,key,value}     layers.{i}.self_attn.in_proj_* rows 0/1/2
//   ….attention.output.dense / attention.output.LayerNorm         ….self_attn.out_proj / norm1
//   ….intermediate.dense / output.dense / output.LayerNorm        ….linear1 / linear2 / norm2
//   cls.predictions.transform.dense / transform.LayerNorm         transform / transform_norm
//   cls.predictions.bias [V]                                      decoder_bias
//   cls.predictions.decoder.weight (and .bias)                    (the word embedding and the bias again)
//   bert.pooler.dense (a sequence classifier)                      pooler (tanh)
//   classifier                                                    classifier
//   [bert.]pooler.* otherwise, cls.seq_relationship.*, position_ids   (not used: not stored)
//
// Old checkpoints name LayerNorm parameters gamma / beta: read as weight / bias. ALBERT (below): the same
// network with ELECTRA's embeddings and one layer's parameters shared by all.
#include <map>
#include <regex>
#include <set>

#include "architectures.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"

namespace qkv::models::hf {

std::string encoder_activation(const nlohmann::json& c, const char* key) {
  const auto act = field<std::string>(c, key, "gelu");
  if (act == "gelu" || act == "relu") return act;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return "gelu_tanh";
  if (act == "silu" || act == "swish") return "silu";
  throw Error(detail::concat(key, " '", excerpt(act), "' is not supported (gelu, gelu_new, gelu_pytorch_tanh, ",
                             "gelu_fast, relu, silu, swish are)"));
}

void encoder_head_config(const nlohmann::json& c, EncoderHead head, nn::BertPooler pooler, nlohmann::json& out) {
  if (head == EncoderHead::mlm || head == EncoderHead::none) return;
  // id2label {"0": "NEGATIVE", "1": "POSITIVE"} (its keys 0 … n−1); without it num_labels (default 2,
  // transformers' PretrainedConfig) labelled LABEL_i.
  std::vector<std::string> labels;
  if (c.contains("id2label") && !c["id2label"].is_null()) {
    const nlohmann::json& m = c["id2label"];
    QKV_CHECK(m.is_object() && !m.empty() && m.size() <= (1u << 20), "id2label must be an object {\"0\": label, …}");
    labels.resize(m.size());
    for (auto& [key, value] : m.items()) {
      size_t used = 0;
      int64_t i = -1;
      try {
        if (key.size() < 9) i = std::stoll(key, &used);
      } catch (const std::exception&) {
      }
      QKV_CHECK(used == key.size() && !key.empty() && i >= 0 && i < static_cast<int64_t>(m.size()) &&
                    value.is_string() && labels[static_cast<size_t>(i)].empty(),
                "id2label: the entry '", excerpt(key), "' (= ", excerpt(value.dump(), 60),
                ") is not one of the ids 0 … ", m.size() - 1, " with a label");
      labels[static_cast<size_t>(i)] = value.get<std::string>();
      QKV_CHECK(!labels[static_cast<size_t>(i)].empty() && labels[static_cast<size_t>(i)].size() <= 256,
                "id2label: the label of ", i, " is empty or longer than 256 bytes");
    }
  } else {
    const int64_t n = field<int64_t>(c, "num_labels", 2);
    QKV_CHECK(n >= 1 && n <= (1 << 20), "num_labels ", n, " is out of range");
    for (int64_t i = 0; i < n; ++i) labels.push_back("LABEL_" + std::to_string(i));
  }
  if (c.contains("num_labels") && !c["num_labels"].is_null())
    QKV_CHECK(field<int64_t>(c, "num_labels", 0) == static_cast<int64_t>(labels.size()), "num_labels ",
              c["num_labels"].dump(), " differs from id2label's ", labels.size(), " labels");
  const auto problem = field<std::string>(c, "problem_type", "");
  QKV_CHECK(problem.empty() || problem == "single_label_classification" || problem == "multi_label_classification" ||
                problem == "regression",
            "problem_type '", excerpt(problem),
            "' is not one of single_label_classification, "
            "multi_label_classification, regression");
  // a cross-encoder's activation (sentence-transformers ≥ 4: sentence_transformers.activation_fn;
  // before: sbert_ce_default_activation_function)
  std::string activation = field<std::string>(c, "sbert_ce_default_activation_function", "");
  if (c.contains("sentence_transformers") && !c["sentence_transformers"].is_null()) {
    QKV_CHECK(c["sentence_transformers"].is_object(), "sentence_transformers must be an object, got ",
              excerpt(c["sentence_transformers"].dump(), 60));
    activation = field<std::string>(c["sentence_transformers"], "activation_fn", activation);
  }
  if (!activation.empty()) {
    QKV_CHECK(activation == "torch.nn.modules.activation.Sigmoid" || activation == "torch.nn.modules.linear.Identity",
              "the cross-encoder's activation_fn '", excerpt(activation),
              "' is not supported (torch.nn.modules.activation.Sigmoid and torch.nn.modules.linear.Identity are)");
    QKV_CHECK(head == EncoderHead::sequence,
              "sentence_transformers.activation_fn is a cross-encoder's (a sequence classifier's), and this is a token "
              "classifier");
    out["score_activation"] = activation.ends_with("Sigmoid") ? "sigmoid" : "identity";
  }
  out["classifier"] = head == EncoderHead::sequence ? "sequence" : "token";
  out["num_labels"] = labels.size();
  out["labels"] = labels;
  out["problem_type"] = problem.empty() ? "auto" : problem;
  out["pooler"] = head == EncoderHead::sequence ? std::string(enum_name(pooler)) : "none";
}

namespace {

nlohmann::json bert_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  const bool mlm_head = head == EncoderHead::mlm;
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
  const std::string activation = encoder_activation(c, "hidden_act");
  nlohmann::json out = {{"vocab_size", field<int64_t>(c, "vocab_size", 30522)},
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
  encoder_head_config(c, head, nn::BertPooler::tanh, out);
  return out;
}

// "LayerNorm.weight" / "LayerNorm.gamma" → "weight" (and bias / beta); else "".
std::string norm_param(const std::string& rest) {
  if (rest == "weight" || rest == "gamma") return "weight";
  if (rest == "bias" || rest == "beta") return "bias";
  return "";
}

std::optional<HfTensorTarget> bert_map(const std::string& hf_name, EncoderHead head) {
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
  if (head == EncoderHead::sequence && name.starts_with("pooler.dense."))
    return HfTensorTarget{"pooler." + name.substr(13)};  // weight, bias
  if ((head == EncoderHead::sequence || head == EncoderHead::token) &&
      (name == "classifier.weight" || name == "classifier.bias"))
    return HfTensorTarget{name};
  if (name == "embeddings.position_ids" || name.starts_with("pooler.") || name.starts_with("cls.seq_relationship."))
    return HfTensorTarget{""};  // a buffer of positions 0 … n−1; the pooler and the next-sentence head
  return std::nullopt;
}

// RoBERTa: BERT's network under "roberta.", positions counted from pad_token_id + 1, the MLM head
// as lm_head.{dense, layer_norm, bias} (exact GELU, whatever hidden_act says), the sequence
// classifier's dense + tanh as classifier.dense and its output as classifier.out_proj.
nlohmann::json roberta_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  nlohmann::json out = bert_config(c, arch, head);
  const auto pad = field<int64_t>(c, "pad_token_id", 1);
  QKV_CHECK(pad >= 0 && pad + 1 < out["max_position_embeddings"].get<int64_t>(), "pad_token_id ", pad,
            " leaves RoBERTa no position of max_position_embeddings ", out["max_position_embeddings"].dump());
  out["padding_idx"] = pad;
  out["mlm_exact_gelu"] = head == EncoderHead::mlm;
  return out;
}

std::optional<HfTensorTarget> roberta_map(const std::string& hf_name, EncoderHead head) {
  static const std::map<std::string, std::string> heads = {{"lm_head.dense.weight", "transform.weight"},
                                                           {"lm_head.dense.bias", "transform.bias"},
                                                           {"lm_head.layer_norm.weight", "transform_norm.weight"},
                                                           {"lm_head.layer_norm.bias", "transform_norm.bias"},
                                                           {"lm_head.bias", "decoder_bias"},
                                                           {"classifier.dense.weight", "pooler.weight"},
                                                           {"classifier.dense.bias", "pooler.bias"},
                                                           {"classifier.out_proj.weight", "classifier.weight"},
                                                           {"classifier.out_proj.bias", "classifier.bias"}};
  if (hf_name.starts_with("roberta.")) return bert_map("bert." + hf_name.substr(8), EncoderHead::none);
  if (hf_name == "lm_head.decoder.weight" || hf_name == "lm_head.decoder.bias")
    return head == EncoderHead::mlm ? std::optional(HfTensorTarget{""}) : std::nullopt;  // tied; lm_head.bias again
  auto it = heads.find(hf_name);
  if (it == heads.end()) return bert_map(hf_name, head);  // a token classifier's classifier.*; embeddings.position_ids
  const bool mlm = hf_name.starts_with("lm_head.");
  if (mlm != (head == EncoderHead::mlm) || (!mlm && head != EncoderHead::sequence)) return std::nullopt;
  return HfTensorTarget{it->second};
}

// ELECTRA: BERT's network under "electra.", its embeddings of embedding_size LayerNorm'd and then
// projected to hidden_size (embeddings_project, with a bias) where the two differ; the sequence
// classifier's classifier.dense + GELU and classifier.out_proj (RoBERTa's names, GELU for tanh); the
// generator's MLM head as generator_predictions.{dense, LayerNorm} (exact GELU) and generator_lm_head
// (tied to the word embedding, its bias decoder_bias).
nlohmann::json electra_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  static const std::set<std::string> own = {"embedding_size", "summary_type", "summary_use_proj",
                                            "summary_activation", "summary_last_dropout"};
  nlohmann::json bert = nlohmann::json::object();  // the fields BERT's config reads, checked there
  for (auto& [key, value] : c.items())
    if (!own.count(key)) bert[key] = value;
  nlohmann::json out = bert_config(bert, arch, head);
  const auto hidden = out["hidden_size"].get<int64_t>(), embedding = field<int64_t>(c, "embedding_size", hidden);
  QKV_CHECK(embedding >= 1 && embedding <= (1 << 20), "embedding_size ", embedding, " is out of range");
  out["embedding_size"] = embedding == hidden ? 0 : embedding;
  out["project_after_norm"] = true;
  out["mlm_exact_gelu"] = head == EncoderHead::mlm;  // (ElectraGeneratorPredictions: gelu, whatever hidden_act says)
  if (head == EncoderHead::sequence) out["pooler"] = "gelu";  // (ElectraClassificationHead: gelu, not BERT's tanh)
  return out;
}

std::optional<HfTensorTarget> electra_map(const std::string& hf_name, EncoderHead head) {
  static const std::map<std::string, std::string> heads = {
      {"generator_predictions.dense.weight", "transform.weight"},
      {"generator_predictions.dense.bias", "transform.bias"},
      {"generator_predictions.LayerNorm.weight", "transform_norm.weight"},
      {"generator_predictions.LayerNorm.bias", "transform_norm.bias"},
      {"generator_lm_head.bias", "decoder_bias"}};
  if (hf_name == "electra.embeddings_project.weight" || hf_name == "electra.embeddings_project.bias")
    return HfTensorTarget{"embed_proj." + hf_name.substr(27)};
  if (hf_name.starts_with("electra.")) return bert_map("bert." + hf_name.substr(8), EncoderHead::none);
  if (hf_name == "generator_lm_head.weight")
    return head == EncoderHead::mlm ? std::optional(HfTensorTarget{""}) : std::nullopt;  // tied (checked)
  if (auto it = heads.find(hf_name); it != heads.end())
    return head == EncoderHead::mlm ? std::optional(HfTensorTarget{it->second}) : std::nullopt;
  return roberta_map(hf_name, head == EncoderHead::mlm ? EncoderHead::none : head);  // classifier.*
}

// ALBERT: BERT's layer under ELECTRA's embeddings (embedding_size, LayerNorm'd, then projected up by
// encoder.embedding_hidden_mapping_in), one layer's parameters run num_hidden_layers times
// (encoder.albert_layer_groups.0.albert_layers.0, its names AlbertLayer's), the pooler a plain
// albert.pooler (+ tanh), the MLM head's predictions.{dense, LayerNorm} narrowing to embedding_size
// (hidden_act, as BERT's) and its decoder tied to the word embedding, the bias predictions.bias.
nlohmann::json albert_config(const nlohmann::json& c, const std::string& arch, EncoderHead head) {
  static const std::set<std::string> own = {"embedding_size", "num_hidden_groups", "inner_group_num",
                                            "classifier_dropout_prob"};
  nlohmann::json bert = nlohmann::json::object();  // the fields BERT's config reads, checked there
  for (auto& [key, value] : c.items())
    if (!own.count(key)) bert[key] = value;
  QKV_CHECK(field<int64_t>(c, "num_hidden_groups", 1) == 1, "num_hidden_groups ", c["num_hidden_groups"].dump(),
            " is not supported (1: every layer shares one, as "
            "every released ALBERT)");
  QKV_CHECK(field<int64_t>(c, "inner_group_num", 1) == 1, "inner_group_num ", c["inner_group_num"].dump(),
            " is not supported (1, as every released ALBERT)");
  if (!bert.contains("hidden_act")) bert["hidden_act"] = "gelu_new";  // (AlbertConfig's default)
  nlohmann::json out = bert_config(bert, arch, head);
  const auto hidden = out["hidden_size"].get<int64_t>(), embedding = field<int64_t>(c, "embedding_size", 128);
  QKV_CHECK(embedding >= 1 && embedding <= (1 << 20), "embedding_size ", embedding, " is out of range");
  out["embedding_size"] = embedding == hidden ? 0 : embedding;
  out["project_after_norm"] = true;
  out["shared_layers"] = true;
  return out;
}

std::optional<HfTensorTarget> albert_map(const std::string& hf_name, EncoderHead head) {
  static const std::string layer = "encoder.albert_layer_groups.0.albert_layers.0.";
  static const std::regex qkv_proj(R"(^attention\.(query|key|value)\.(weight|bias)$)");
  static const std::map<std::string, std::string> in_layer = {{"attention.dense.weight", "self_attn.out_proj.weight"},
                                                              {"attention.dense.bias", "self_attn.out_proj.bias"},
                                                              {"attention.LayerNorm.weight", "norm1.weight"},
                                                              {"attention.LayerNorm.bias", "norm1.bias"},
                                                              {"ffn.weight", "linear1.weight"},
                                                              {"ffn.bias", "linear1.bias"},
                                                              {"ffn_output.weight", "linear2.weight"},
                                                              {"ffn_output.bias", "linear2.bias"},
                                                              {"full_layer_layer_norm.weight", "norm2.weight"},
                                                              {"full_layer_layer_norm.bias", "norm2.bias"}};
  static const std::map<std::string, std::string> mlm = {{"predictions.dense.weight", "transform.weight"},
                                                         {"predictions.dense.bias", "transform.bias"},
                                                         {"predictions.LayerNorm.weight", "transform_norm.weight"},
                                                         {"predictions.LayerNorm.bias", "transform_norm.bias"},
                                                         {"predictions.bias", "decoder_bias"}};
  const std::string name = hf_name.starts_with("albert.") ? hf_name.substr(7) : hf_name;
  if (name.starts_with(layer)) {
    const std::string rest = name.substr(layer.size());
    std::smatch p;
    if (std::regex_match(rest, p, qkv_proj)) {
      HfTensorTarget t{std::string("layers.0.self_attn.") +
                       (p[2].str() == "weight" ? "in_proj_weight" : "in_proj_bias")};
      t.part = p[1].str() == "query" ? 0 : p[1].str() == "key" ? 1 : 2, t.parts = 3;
      return t;
    }
    auto it = in_layer.find(rest);
    if (it == in_layer.end()) return std::nullopt;
    return HfTensorTarget{"layers.0." + it->second};
  }
  if (name == "encoder.embedding_hidden_mapping_in.weight" || name == "encoder.embedding_hidden_mapping_in.bias")
    return HfTensorTarget{"embed_proj." + name.substr(36)};
  if (name == "pooler.weight" || name == "pooler.bias")  // (AlbertModel's pooler: read by a sequence classifier)
    return HfTensorTarget{head == EncoderHead::sequence ? "pooler." + name.substr(7) : ""};
  if (auto it = mlm.find(name); it != mlm.end())
    return head == EncoderHead::mlm ? std::optional(HfTensorTarget{it->second}) : std::nullopt;
  if (name == "predictions.decoder.weight" || name == "predictions.decoder.bias")
    return head == EncoderHead::mlm ? std::optional(HfTensorTarget{""}) : std::nullopt;  // tied; predictions.bias
  if (name.starts_with("encoder.")) return std::nullopt;
  return bert_map(name, head);  // the embeddings, classifier.*
}

}  // namespace

HfArchitecture albert(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return albert_config(c, name, head); },
          [head](const std::string& t) { return albert_map(t, head); }};
}

HfArchitecture electra(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return electra_config(c, name, head); },
          [head](const std::string& t) { return electra_map(t, head); }};
}

std::optional<HfTensorTarget> bert_tensor_target(const std::string& hf_name, EncoderHead head) {
  return bert_map(hf_name, head);
}

std::optional<HfTensorTarget> roberta_tensor_target(const std::string& hf_name, EncoderHead head) {
  return roberta_map(hf_name, head);
}

HfArchitecture roberta(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return roberta_config(c, name, head); },
          [head](const std::string& t) { return roberta_map(t, head); }};
}

HfArchitecture bert(const std::string& name, EncoderHead head) {
  return {name, "bert", [name, head](const nlohmann::json& c) { return bert_config(c, name, head); },
          [head](const std::string& t) { return bert_map(t, head); }};
}

}  // namespace qkv::models::hf
