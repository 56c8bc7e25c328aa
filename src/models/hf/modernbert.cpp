// ModernBERT (Hugging Face's ModernBertModel, ModernBertForMaskedLM, …ForSequenceClassification,
// …ForTokenClassification, …ForQuestionAnswering: answerdotai/ModernBERT-base and -large, the
// gte-modernbert and modernbert-embed embedders, the rerankers and classifiers fine-tuned from them)
// → qkv's "modernbert" (nn/modern_bert.h). The names are the same without "model.":
//
//   model.embeddings.tok_embeddings / model.embeddings.norm     embeddings.tok_embeddings / embeddings.norm
//   (ModernBertModel: the same names, "model." or not)
//   model.layers.{i}.(attn_norm|attn.Wqkv|attn.Wo|mlp_norm|mlp.Wi|mlp.Wo).*   layers.{i}.…
//   model.final_norm                                            final_norm
//   head.dense / head.norm                                      head.dense / head.norm
//   decoder.bias                                                decoder_bias
//   decoder.weight                                              (the token embedding again: tied)
//   classifier.*                                                classifier.* (QA's start/end logits too)
//
// Both forms of the config are read: transformers ≥ 5's layer_types and rope_parameters
// ({"full_attention": {"rope_theta": …}, "sliding_attention": …}, rope_type "default"), and the
// Hub's 4.x form (global_attn_every_n_layers, global_rope_theta, local_rope_theta).
#include "architectures.h"
#include "qkv/core/message.h"

namespace qkv::models::hf {

namespace {

// The rope base of `type` ("full_attention" / "sliding_attention") from rope_parameters, else the 4.x
// field `old_key`, else `fallback`; a scaled rope_type is refused.
double rope_theta(const nlohmann::json& c, const char* type, const char* old_key, double fallback) {
  double theta = field<double>(c, old_key, fallback);
  if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
    const nlohmann::json& r = c["rope_parameters"];
    QKV_CHECK(r.is_object(), "rope_parameters must be an object, got ", excerpt(r.dump(), 60));
    if (r.contains(type) && !r[type].is_null()) {
      const nlohmann::json& t = r[type];
      QKV_CHECK(t.is_object(), "rope_parameters.", type, " must be an object, got ", excerpt(t.dump(), 60));
      for (auto& [key, value] : t.items())
        QKV_CHECK(key == "rope_type" || key == "rope_theta", "rope_parameters.", type, ": the field '", excerpt(key),
                  "' is not supported (rope_type default and rope_theta are)");
      const auto kind = field<std::string>(t, "rope_type", "default");
      QKV_CHECK(kind == "default", "rope_parameters.", type, ".rope_type '", excerpt(kind),
                "' is not supported (default is)");
      theta = field<double>(t, "rope_theta", theta);
    }
  }
  QKV_CHECK(theta >= 1 && theta <= 1e30, "the ", type, " layers' rope_theta ", theta, " is out of range");
  return theta;
}

nlohmann::json modernbert_config(const nlohmann::json& c, const std::string& arch, EncoderHead head, bool span) {
  hf_refuse_unknown_fields(
      c, arch,
      {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
       "hidden_activation", "max_position_embeddings", "initializer_cutoff_factor", "norm_eps", "norm_bias",
       "cls_token_id", "attention_bias", "attention_dropout", "layer_types", "rope_parameters", "local_attention",
       "embedding_dropout", "mlp_bias", "mlp_dropout", "decoder_bias", "classifier_pooling", "classifier_dropout",
       "classifier_bias", "classifier_activation", "deterministic_flash_attn", "sparse_prediction",
       "sparse_pred_ignore_index", "tie_word_embeddings", "global_attn_every_n_layers", "global_rope_theta",
       "local_rope_theta", "reference_compile", "repad_logits_with_grad",
       // (in the Hub's configs, read by no ModernBERT code)
       "layer_norm_eps", "position_embedding_type"});
  if (head == EncoderHead::mlm)
    QKV_CHECK(field(c, "tie_word_embeddings", true),
              "tie_word_embeddings = false (an untied MLM decoder) is not "
              "supported");
  const auto pooling = field<std::string>(c, "classifier_pooling", "cls");
  QKV_CHECK(pooling == "cls" || pooling == "mean", "classifier_pooling '", excerpt(pooling),
            "' is not supported (cls and mean are)");
  const auto layers = field<int64_t>(c, "num_hidden_layers", 22);
  const auto every = field<int64_t>(c, "global_attn_every_n_layers", 3);
  QKV_CHECK(every >= 1, "global_attn_every_n_layers ", every, " must be at least 1");
  nlohmann::json types = nlohmann::json::array();
  if (c.contains("layer_types") && !c["layer_types"].is_null()) {
    types = c["layer_types"];
    QKV_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == layers, "layer_types must list ", layers,
              " layers, got ", excerpt(types.dump(), 60));
  }
  nlohmann::json out = {{"vocab_size", field<int64_t>(c, "vocab_size", 50368)},
                        {"hidden_size", field<int64_t>(c, "hidden_size", 768)},
                        {"intermediate_size", field<int64_t>(c, "intermediate_size", 1152)},
                        {"num_hidden_layers", layers},
                        {"num_attention_heads", field<int64_t>(c, "num_attention_heads", 12)},
                        {"max_position_embeddings", field<int64_t>(c, "max_position_embeddings", 8192)},
                        {"hidden_activation", encoder_activation(c, "hidden_activation")},
                        {"norm_eps", field<double>(c, "norm_eps", 1e-5)},
                        {"norm_bias", field(c, "norm_bias", false)},
                        {"attention_bias", field(c, "attention_bias", false)},
                        {"mlp_bias", field(c, "mlp_bias", false)},
                        {"local_attention", field<int64_t>(c, "local_attention", 128)},
                        {"global_attn_every_n_layers", every},
                        {"layer_types", types},
                        {"global_rope_theta", rope_theta(c, "full_attention", "global_rope_theta", 160000)},
                        {"local_rope_theta", rope_theta(c, "sliding_attention", "local_rope_theta", 10000)},
                        {"dropout", field<double>(c, "mlp_dropout", 0.0)},
                        {"mlm_head", head == EncoderHead::mlm},
                        {"decoder_bias", field(c, "decoder_bias", true)},
                        {"classifier_activation", encoder_activation(c, "classifier_activation")},
                        {"classifier_bias", field(c, "classifier_bias", false)},
                        {"classifier_pooling", pooling}};
  encoder_head_config(c, head, nn::BertPooler::none, out);
  out.erase("pooler");  // (the prediction head is ModernBERT's own)
  if (span) {
    QKV_CHECK(out.value("num_labels", int64_t{0}) == 2, arch,
              ": a question-answering head has 2 outputs (start, end); the config gives ",
              out.value("num_labels", int64_t{0}), " labels");
    out["classifier"] = "span", out["labels"] = {"start", "end"}, out["problem_type"] = "auto";
  }
  return out;
}

// (a ModernBertModel's names have no "model." before them: its base is the whole checkpoint)
std::optional<HfTensorTarget> modernbert_map(const std::string& hf_name, EncoderHead head) {
  const bool base = head == EncoderHead::none || hf_name.starts_with("model.");
  const std::string name = hf_name.starts_with("model.") ? hf_name.substr(6) : hf_name;
  if (base) {
    if (name.starts_with("embeddings.") || name.starts_with("layers.") || name.starts_with("final_norm."))
      return HfTensorTarget{name};  // (a name the model lacks is refused by the conversion, naming it)
    return std::nullopt;
  }
  if (hf_name.starts_with("head.")) return HfTensorTarget{hf_name};
  if (head == EncoderHead::mlm) {
    if (hf_name == "decoder.bias") return HfTensorTarget{"decoder_bias"};
    if (hf_name == "decoder.weight") return HfTensorTarget{""};  // the token embedding (tie_word_embeddings checked)
    return std::nullopt;
  }
  if (hf_name == "classifier.weight" || hf_name == "classifier.bias") return HfTensorTarget{hf_name};
  return std::nullopt;
}

}  // namespace

HfArchitecture modernbert(const std::string& name, EncoderHead head, bool span) {
  return {name, "modernbert",
          [name, head, span](const nlohmann::json& c) { return modernbert_config(c, name, head, span); },
          [head](const std::string& t) { return modernbert_map(t, head); }};
}

}  // namespace qkv::models::hf
