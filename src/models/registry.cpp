// The registry: every model type qkv can train, save, load and decode. Adding an architecture is
// its module in src/nn/ (with the methods models/network.h lists) and one line below.
#include "qkv/models/registry.h"

#include <functional>

#include "qkv/models/network.h"
#include "qkv/nn/bert.h"
#include "qkv/nn/captioner.h"
#include "qkv/nn/convnet.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/modern_bert.h"
#include "qkv/nn/llama.h"
#include "qkv/nn/rnn_seq2seq.h"
#include "qkv/nn/transformer.h"

namespace qkv::models {

namespace {

// A sequence-to-sequence type — image-to-text when its config has an image height (a captioner) —:
// `defaults` fill keys the config leaves out (several types may share one module with different
// defaults), and `check` refuses configs that are not this type.
template <Seq2SeqNetwork Net>
ModelType seq2seq(const char* name, const char* description, nlohmann::json defaults = nlohmann::json::object(),
                  std::function<void(const typename Net::Config&)> check = nullptr) {
  constexpr bool images = requires(const typename Net::Config& c) { c.image_height; };
  return {name, images ? Kind::image_to_text : Kind::seq2seq, description,
          [=](const nlohmann::json& config, Generator* gen) {
            nlohmann::json j = defaults;
            if (config.is_object()) j.update(config);
            else j = config;  // not an object: the config's own parser says so
            const typename Net::Config c = Net::Config::from_json(j);
            if (check) check(c);
            return std::unique_ptr<Model>(new Seq2SeqOf<Net>(name, c, gen));
          }};
}

template <LanguageModelNetwork Net>
ModelType language_model(const char* name, const char* description) {
  return {name, Kind::language_model, description, [name](const nlohmann::json& config, Generator* gen) {
            return std::unique_ptr<Model>(new LanguageModelOf<Net>(name, Net::Config::from_json(config), gen));
          }};
}

template <ImageClassifierNetwork Net>
ModelType image_classifier(const char* name, const char* description) {
  return {name, Kind::image_classifier, description, [name](const nlohmann::json& config, Generator* gen) {
            const typename Net::Config c = Net::Config::from_json(config);
            QKV_CHECK(c.num_classes >= 2, "a ", name, " image classifier needs \"num_classes\" ≥ 2, got ",
                      c.num_classes);
            return std::unique_ptr<Model>(new ImageClassifierOf<Net>(name, c, gen));
          }};
}

template <MaskedLanguageModelNetwork Net>
ModelType masked_language_model(const char* name, const char* description) {
  return {name, Kind::masked_language_model, description, [name](const nlohmann::json& config, Generator* gen) {
            return std::unique_ptr<Model>(new MaskedLanguageModelOf<Net>(name, Net::Config::from_json(config), gen));
          }};
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::seq2seq: return "sequence-to-sequence";
    case Kind::image_to_text: return "image-to-text";
    case Kind::language_model: return "language";
    case Kind::image_classifier: return "image classification";
    case Kind::masked_language_model: return "masked language";
  }
  return "?";
}

const std::vector<ModelType>& model_types() {
  static const std::vector<ModelType> types = {
      seq2seq<nn::Seq2SeqTransformer>("transformer", "the encoder–decoder Transformer of \"Attention Is All You Need\""),
      seq2seq<nn::RNNSeq2Seq>("rnn-encdec", "a GRU encoder–decoder with one context vector (Cho et al. 2014)",
                              {{"attention", "none"}, {"bidirectional_encoder", false}},
                              [](const nn::RNNSeq2SeqConfig& c) {
                                QKV_CHECK(c.attention == nn::RecurrentAttention::none,
                                          "rnn-encdec has no attention (\"attention\": \"none\"); an attention "
                                          "model is an rnn-attention");
                              }),
      seq2seq<nn::RNNSeq2Seq>("rnn-attention",
                              "a bidirectional GRU encoder and a GRU decoder with attention (Bahdanau et al. 2015; "
                              "Luong et al. 2015)",
                              {{"attention", "additive"}}, [](const nn::RNNSeq2SeqConfig& c) {
                                QKV_CHECK(c.attention != nn::RecurrentAttention::none,
                                          "rnn-attention needs an attention (additive, dot or general); without "
                                          "one it is an rnn-encdec");
                              }),
      seq2seq<nn::Captioner>("captioner",
                             "an image captioner: a ConvNet grid, a GRU decoder with additive attention over it "
                             "(Xu et al. 2015, Show, Attend and Tell)"),
      language_model<nn::GPT>("gpt", "a decoder-only Transformer language model (nanoGPT's)"),
      language_model<nn::Llama>("llama", "a Llama-family language model: RMSNorm, rotary positions, SwiGLU, "
                                         "grouped-query attention (Llama 2/3, Qwen2, Mistral)"),
      image_classifier<nn::ConvNet>("convnet",
                                    "a ResNet-style image classifier, optionally with non-local (self-attention) "
                                    "blocks (He et al. 2016; Wang et al. 2018)"),
      masked_language_model<nn::Bert>("bert", "a bidirectional Transformer encoder with a masked-token head "
                                              "(Devlin et al. 2019: BERT)"),
      masked_language_model<nn::ModernBert>("modernbert", "ModernBERT: a pre-LN bidirectional encoder with rotary "
                                                          "positions, a gated MLP and local and global attention "
                                                          "layers (Warner et al. 2024)"),
  };
  return types;
}

const ModelType& model_type(const std::string& name) {
  std::string known;
  for (const ModelType& t : model_types()) {
    if (t.name == name) return t;
    known += (known.empty() ? "" : ", ") + t.name;
  }
  throw Error(qkv::detail::concat("unknown model type \"", name, "\" (known: ", known, ")"));
}

std::unique_ptr<Seq2SeqModel> build_seq2seq(const std::string& type, const nlohmann::json& config, Generator* gen) {
  const ModelType& t = model_type(type);
  QKV_CHECK(t.kind == Kind::seq2seq || t.kind == Kind::image_to_text, "a ", type, " model is a ", kind_name(t.kind),
            " model, not a sequence-to-sequence model");
  return std::unique_ptr<Seq2SeqModel>(static_cast<Seq2SeqModel*>(t.build(config, gen).release()));
}

std::unique_ptr<LanguageModel> build_language_model(const std::string& type, const nlohmann::json& config,
                                                    Generator* gen) {
  const ModelType& t = model_type(type);
  QKV_CHECK(t.kind == Kind::language_model, "a ", type, " model is a ", kind_name(t.kind),
            " model, not a language model");
  return std::unique_ptr<LanguageModel>(static_cast<LanguageModel*>(t.build(config, gen).release()));
}

std::unique_ptr<ImageClassifier> build_image_classifier(const std::string& type, const nlohmann::json& config,
                                                        Generator* gen) {
  const ModelType& t = model_type(type);
  QKV_CHECK(t.kind == Kind::image_classifier, "a ", type, " model is a ", kind_name(t.kind),
            " model, not an image classifier");
  return std::unique_ptr<ImageClassifier>(static_cast<ImageClassifier*>(t.build(config, gen).release()));
}

std::unique_ptr<MaskedLanguageModel> build_masked_language_model(const std::string& type, const nlohmann::json& config,
                                                                Generator* gen) {
  const ModelType& t = model_type(type);
  QKV_CHECK(t.kind == Kind::masked_language_model, "a ", type, " model is a ", kind_name(t.kind),
            " model, not a masked language model");
  return std::unique_ptr<MaskedLanguageModel>(static_cast<MaskedLanguageModel*>(t.build(config, gen).release()));
}

}  // namespace qkv::models
