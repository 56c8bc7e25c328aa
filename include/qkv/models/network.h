// What an nn module must provide to be a model of a kind, and the adapters that make it one.
//
// A new architecture is one file in src/nn/ — a module with a Config and the methods below — and
// one line in src/models/registry.cpp:
//
//   seq2seq<nn::Seq2SeqTransformer>("transformer", "…")      → a Seq2SeqModel
//   language_model<nn::GPT>("gpt", "…")                      → a LanguageModel
//   image_classifier<nn::ConvNet>("convnet", "…")             → an ImageClassifier
//   masked_language_model<nn::Bert>("bert", "…")              → a MaskedLanguageModel
//
// The concepts state the contract; a module that misses a method fails to compile at its
// registration, naming the requirement.
#pragma once

#include <concepts>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/models/model.h"

namespace qkv::models {

// Every architecture: a typed config read from and written to JSON (a field table, io/config.h),
// its width and a one-line description, a constructor from the config, and bf16 weight copies for
// decoding. (Token models add config.vocab_size, classifiers config.num_classes.)
template <class Net>
concept Network = std::derived_from<Net, nn::Module> &&
                  requires(Net& net, const typename Net::Config& config, const nlohmann::json& j) {
                    { Net::Config::from_json(j) } -> std::same_as<typename Net::Config>;
                    { config.to_json() } -> std::same_as<nlohmann::json>;
                    { config.width() } -> std::convertible_to<int64_t>;
                    { config.describe() } -> std::convertible_to<std::string>;
                    { net.config } -> std::convertible_to<typename Net::Config>;
                    requires std::constructible_from<Net, const typename Net::Config&, Generator*>;
                    net.set_inference_weights(nn::InferenceWeights::bf16);
                  };

// A decoder state of the network's own type: rows, length, reorder.
template <class S>
concept NetworkDecoderState = requires(S& s, const std::vector<int64_t>& index) {
  { s.rows() } -> std::convertible_to<int64_t>;
  { s.length() } -> std::convertible_to<int64_t>;
  s.reorder(index, true);
};

// Source → target: Seq2SeqModel's methods, with the network's own decoder state.
template <class Net>
concept Seq2SeqNetwork =
    Network<Net> && NetworkDecoderState<typename Net::DecoderState> &&
    requires(const Net& net, const Tensor& t, const std::vector<int32_t>& tokens, typename Net::DecoderState& state,
             nn::AttentionMaps* maps) {
      { net.config.vocab_size } -> std::convertible_to<int64_t>;
      { net.config.max_len } -> std::convertible_to<int64_t>;
      { net.config.pad_id } -> std::convertible_to<int32_t>;
      { net.config.bos_id } -> std::convertible_to<int32_t>;
      { net.config.eos_id } -> std::convertible_to<int32_t>;
      { net.forward(t, t, maps) } -> std::same_as<Tensor>;
      { net.loss(t, t, t, 0.f) } -> std::same_as<Tensor>;
      { net.start_decoding(t, true) } -> std::same_as<typename Net::DecoderState>;
      { net.step(tokens, state) } -> std::same_as<Tensor>;
    };

// Tokens → next token: LanguageModel's methods, with the network's own decoder state.
template <class Net>
concept LanguageModelNetwork = Network<Net> && NetworkDecoderState<typename Net::DecoderState> &&
                               requires(const Net& net, const Tensor& t, typename Net::DecoderState& state,
                                        nn::AttentionMaps* maps) {
                                 { net.config.vocab_size } -> std::convertible_to<int64_t>;
                                 { net.config.block_size } -> std::convertible_to<int64_t>;
                                 { net.forward(t, maps) } -> std::same_as<Tensor>;
                                 { net.loss(t, t) } -> std::same_as<Tensor>;
                                 { net.start_decoding() } -> std::same_as<typename Net::DecoderState>;
                                 { net.step(t, state) } -> std::same_as<Tensor>;
                               };

// Image → class: ImageClassifier's methods.
template <class Net>
concept ImageClassifierNetwork = Network<Net> && requires(const Net& net, const Tensor& t, nn::AttentionMaps* maps) {
  { net.config.in_channels } -> std::convertible_to<int64_t>;
  { net.config.image_height } -> std::convertible_to<int64_t>;
  { net.config.image_width } -> std::convertible_to<int64_t>;
  { net.config.num_classes } -> std::convertible_to<int64_t>;
  { net.config.class_name(int64_t{0}) } -> std::convertible_to<std::string>;
  { net.forward(t, maps) } -> std::same_as<Tensor>;
  { net.loss(t, t, 0.f) } -> std::same_as<Tensor>;
};

// Tokens → every token, both directions: MaskedLanguageModel's methods.
template <class Net>
concept MaskedLanguageModelNetwork = Network<Net> && requires(const Net& net, const Tensor& t, nn::AttentionMaps* maps) {
  { net.config.vocab_size } -> std::convertible_to<int64_t>;
  { net.config.max_position_embeddings } -> std::convertible_to<int64_t>;
  { net.config.type_vocab_size } -> std::convertible_to<int64_t>;
  { net.config.mlm_head } -> std::convertible_to<bool>;
  { net.encode(t, t, t, maps) } -> std::same_as<Tensor>;
  { net.forward(t, t, t, maps) } -> std::same_as<Tensor>;
  { net.classify(t, t, t, maps) } -> std::same_as<Tensor>;
  { net.mlm_transform(t) } -> std::same_as<Tensor>;
  { net.mlm_decoder() } -> std::same_as<std::pair<Tensor, Tensor>>;
  { net.config.max_tokens() } -> std::convertible_to<int64_t>;
  { net.config.classifier } -> std::convertible_to<nn::BertClassifier>;
};

namespace detail {

// A network's decoder state behind the DecoderState interface.
template <class S>
class StateOf final : public DecoderState {
 public:
  explicit StateOf(S s) : s(std::move(s)) {}
  int64_t rows() const override { return s.rows(); }
  int64_t length() const override { return s.length(); }
  void reorder(const std::vector<int64_t>& index, bool sources_changed) override { s.reorder(index, sources_changed); }
  S s;
};

template <class S>
S& state_of(DecoderState& state, const std::string& type) {
  auto* own = dynamic_cast<StateOf<S>*>(&state);
  QKV_CHECK(own != nullptr, "a ", type, " model was handed the decoder state of another model");
  return own->s;
}

// What every adapter shares: the network, its type name, the Model methods.
template <class Net, class Base>
class Adapter : public Base {
 public:
  Adapter(std::string type, const typename Net::Config& config, Generator* gen)
      : type_(std::move(type)), net_(config, gen) {}
  const std::string& type() const override { return type_; }
  nn::Module& module() override { return net_; }
  const nn::Module& module() const override { return net_; }
  nlohmann::json config_json() const override { return net_.config.to_json(); }
  std::string describe() const override { return net_.config.describe(); }
  int64_t vocab_size() const override {
    if constexpr (requires { net_.config.vocab_size; }) return net_.config.vocab_size;
    else return net_.config.num_classes;
  }
  int64_t width() const override { return net_.config.width(); }
  void set_inference_weights(nn::InferenceWeights w) override { net_.set_inference_weights(w); }
  std::vector<Tensor> int8_only_weights() const override {
    if constexpr (requires { net_.int8_only_weights(); }) return net_.int8_only_weights();
    else return {};
  }
  std::vector<Tensor> int8_file_weights() const override {
    if constexpr (requires { net_.int8_file_weights(); }) return net_.int8_file_weights();
    else return int8_only_weights();
  }
  Net& net() { return net_; }  // the module itself, for code that knows the architecture
  const Net& net() const { return net_; }

 protected:
  std::string type_;
  Net net_;
};

}  // namespace detail

template <Seq2SeqNetwork Net>
class Seq2SeqOf final : public detail::Adapter<Net, Seq2SeqModel> {
  using State = typename Net::DecoderState;

 public:
  using detail::Adapter<Net, Seq2SeqModel>::Adapter;
  SpecialTokens special_tokens() const override {
    return {static_cast<int32_t>(this->net_.config.pad_id), static_cast<int32_t>(this->net_.config.bos_id),
            static_cast<int32_t>(this->net_.config.eos_id)};
  }
  int64_t max_len() const override { return this->net_.config.max_len; }
  // a network whose config has an image height reads pictures: a captioner
  Kind kind() const override {
    if constexpr (requires { this->net_.config.image_height; }) return Kind::image_to_text;
    return Kind::seq2seq;
  }
  ImageShape source_image() const override {
    if constexpr (requires { this->net_.config.image_height; }) {
      const auto& c = this->net_.config;
      return {c.in_channels, c.image_height, c.image_width};
    } else {
      return {};
    }
  }
  Tensor forward(const Tensor& src, const Tensor& tgt_in, nn::AttentionMaps* maps) const override {
    return this->net_.forward(src, tgt_in, maps);
  }
  Tensor loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float label_smoothing) const override {
    return this->net_.loss(src, tgt_in, tgt_out, label_smoothing);
  }
  std::unique_ptr<DecoderState> start_decoding(const Tensor& src, bool use_cache) const override {
    return std::make_unique<detail::StateOf<State>>(this->net_.start_decoding(src, use_cache));
  }
  Tensor step(const std::vector<int32_t>& tokens, DecoderState& state) const override {
    return this->net_.step(tokens, detail::state_of<State>(state, this->type_));
  }
};

template <LanguageModelNetwork Net>
class LanguageModelOf final : public detail::Adapter<Net, LanguageModel> {
  using State = typename Net::DecoderState;

 public:
  using detail::Adapter<Net, LanguageModel>::Adapter;
  int64_t block_size() const override { return this->net_.config.block_size; }
  int64_t refeed_at() const override {
    if constexpr (requires(const Net& n) {
                    { n.refeed_at() } -> std::convertible_to<int64_t>;
                  })
      return this->net_.refeed_at();
    return 0;
  }
  Tensor forward(const Tensor& idx, nn::AttentionMaps* maps = nullptr) const override {
    return this->net_.forward(idx, maps);
  }
  Tensor loss(const Tensor& idx, const Tensor& targets) const override { return this->net_.loss(idx, targets); }
  std::unique_ptr<DecoderState> start_decoding() const override {
    return std::make_unique<detail::StateOf<State>>(this->net_.start_decoding());
  }
  Tensor step(const Tensor& idx, DecoderState& state) const override {
    return this->net_.step(idx, detail::state_of<State>(state, this->type_));
  }
  static constexpr bool kPaged = requires(const Net& n, const Tensor& t, const nn::PagedStep& s, nn::PagedKVCache& c) {
    { n.make_paged_cache(int64_t{1}, int64_t{1}, Device::cpu(), DType::f32) } -> std::same_as<nn::PagedKVCache>;
    { n.step_paged(t, s, c) } -> std::same_as<Tensor>;
  };
  bool paged() const override { return kPaged; }
  nn::PagedKVCache make_paged_cache(int64_t pages, int64_t page_size, Device device, DType dtype) const override {
    if constexpr (kPaged) return this->net_.make_paged_cache(pages, page_size, device, dtype);
    else return LanguageModel::make_paged_cache(pages, page_size, device, dtype);
  }
  Tensor step_paged(const Tensor& ids, const nn::PagedStep& step, nn::PagedKVCache& cache) const override {
    if constexpr (kPaged) return this->net_.step_paged(ids, step, cache);
    else return LanguageModel::step_paged(ids, step, cache);
  }
};

template <ImageClassifierNetwork Net>
class ImageClassifierOf final : public detail::Adapter<Net, ImageClassifier> {
 public:
  using detail::Adapter<Net, ImageClassifier>::Adapter;
  ImageShape image_shape() const override {
    return {this->net_.config.in_channels, this->net_.config.image_height, this->net_.config.image_width};
  }
  int64_t num_classes() const override { return this->net_.config.num_classes; }
  std::string class_name(int64_t k) const override { return this->net_.config.class_name(k); }
  Tensor forward(const Tensor& images, nn::AttentionMaps* maps) const override {
    return this->net_.forward(images, maps);
  }
  Tensor loss(const Tensor& images, const Tensor& labels, float label_smoothing) const override {
    return this->net_.loss(images, labels, label_smoothing);
  }
};

template <MaskedLanguageModelNetwork Net>
class MaskedLanguageModelOf final : public detail::Adapter<Net, MaskedLanguageModel> {
 public:
  using detail::Adapter<Net, MaskedLanguageModel>::Adapter;
  int64_t max_positions() const override { return this->net_.config.max_tokens(); }
  int64_t type_vocab_size() const override { return this->net_.config.type_vocab_size; }
  bool has_mlm_head() const override { return this->net_.config.mlm_head; }
  Tensor encode(const Tensor& ids, const Tensor& types, const Tensor& mask, nn::AttentionMaps* maps) const override {
    return this->net_.encode(ids, types, mask, maps);
  }
  Tensor forward(const Tensor& ids, const Tensor& types, const Tensor& mask, nn::AttentionMaps* maps) const override {
    return this->net_.forward(ids, types, mask, maps);
  }
  Tensor classify(const Tensor& ids, const Tensor& types, const Tensor& mask, nn::AttentionMaps* maps) const override {
    return this->net_.classify(ids, types, mask, maps);
  }
  Tensor mlm_transform(const Tensor& hidden) const override { return this->net_.mlm_transform(hidden); }
  std::pair<Tensor, Tensor> mlm_decoder() const override { return this->net_.mlm_decoder(); }
  EncoderTask task() const override {
    const auto& c = this->net_.config;
    return {c.classifier, c.labels, c.problem_type, c.pooling, c.normalize, c.max_seq_length, c.score_activation};
  }
};

}  // namespace qkv::models
