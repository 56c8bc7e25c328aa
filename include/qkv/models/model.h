// The interfaces every model of a kind implements — what training, decoding, the command line, the
// Python module and a server see of a model, whatever its architecture:
//
//   Model          every kind: its parameters (an nn::Module), its hyper-parameters as a model file
//                  stores them, typed sizes (vocabulary, width), the weights decoding reads
//   Seq2SeqModel   source → target (translation; later image → caption): loss and logits for
//                  training; encode-and-start, step with a cache, reorder the beam, for decoding;
//                  attention maps
//   LanguageModel  tokens → next token (GPT): loss and logits; step with a cache, for generation
//   ImageClassifier  image → class (a ConvNet): loss and logits; attention maps where it attends
//   MaskedLanguageModel  tokens → every token, read in both directions (BERT): hidden states and
//                  the masked-token logits; attention maps
//
// An architecture is an nn module (src/nn/) with the methods listed in models/network.h; one line
// in src/models/registry.cpp makes it a model of its kind, under a type name, for model files and
// configs. Nothing here is specific to any architecture.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/nn/attention_maps.h"
#include "qkv/nn/encoder_heads.h"
#include "qkv/nn/module.h"
#include "qkv/nn/paged_kv_cache.h"

namespace qkv::models {

// What a model does, each kind with its interface below: sequence-to-sequence (a translator) and
// image-to-text (a captioner: its source a picture) are both Seq2SeqModels, told apart by kind.
enum class Kind { seq2seq, image_to_text, language_model, image_classifier, masked_language_model };

// What a decoder keeps between steps (KV caches, recurrent states, …), one row per hypothesis.
// Opaque to the search, which only regroups the rows.
class DecoderState {
 public:
  virtual ~DecoderState() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t length() const = 0;  // tokens fed so far
  // Keeps rows `index` (in that order, repeats allowed). sources_changed: some row now belongs to
  // another source than before (a sentence finished, or the beams were first expanded).
  virtual void reorder(const std::vector<int64_t>& index, bool sources_changed) = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::string& type() const = 0;  // its registry name: "transformer", "gpt"
  virtual Kind kind() const = 0;
  virtual nn::Module& module() = 0;             // the parameters: trained, saved, loaded, averaged
  virtual const nn::Module& module() const = 0;
  virtual nlohmann::json config_json() const = 0;  // the hyper-parameters, as a model file's "model"
  virtual std::string describe() const = 0;        // one line for people: "GPT 4 layers, 4 heads, …"
  virtual int64_t vocab_size() const = 0;  // the output size: tokens of the vocabulary, or classes
  virtual int64_t width() const = 0;  // the model dimension d_model (what inverse_sqrt scales by)
  // Decoding steps read bf16 copies of the weights, or the f32 parameters (after loading them).
  virtual void set_inference_weights(nn::InferenceWeights weights) = 0;
  // The parameters its decoding reads only through int8 rows once set_inference_weights(int8) made
  // them: what a model loaded for int8 decoding from a quantized file holds no f32 values for
  // (models/quantize.h). Empty: this model has no int8-only decoding.
  virtual std::vector<Tensor> int8_only_weights() const { return {}; }
  // What `qkv quantize` stores as int8 rows: int8_only_weights() on every CPU (the translation
  // model's encoder is int8-only on some CPUs and widened to f32 on others).
  virtual std::vector<Tensor> int8_file_weights() const { return int8_only_weights(); }
};

// The image a classifier or a captioner takes: channels × height × width, pixels in [0, 1].
struct ImageShape {
  int64_t channels = 1, height = 0, width = 0;
};

// The token ids a sequence-to-sequence model reserves.
struct SpecialTokens {
  int32_t pad = 0, bos = 2, eos = 3;
};

class Seq2SeqModel : public Model {
 public:
  Kind kind() const override { return Kind::seq2seq; }
  virtual SpecialTokens special_tokens() const = 0;
  virtual int64_t max_len() const = 0;  // longest source, and longest target with its BOS/EOS
  // What the source is: token ids i32 [B, S] (height 0: a translator), or images f32 [B, C, H, W]
  // of this shape, pixels in [0, 1] (a captioner).
  virtual ImageShape source_image() const { return {}; }
  // src i32 [B, S] (padded with pad), tgt_in i32 [B, T] (BOS y₁ … y_{T−1}) → logits [B, T, V];
  // `maps`, when given, receives the attention weights.
  virtual Tensor forward(const Tensor& src, const Tensor& tgt_in, nn::AttentionMaps* maps = nullptr) const = 0;
  // Mean cross-entropy (label smoothing ε) against tgt_out [B, T] (y₁ … EOS), padding ignored.
  virtual Tensor loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out,
                      float label_smoothing = 0.f) const = 0;
  // Decoding (no tape): encode the sources, one row each; then feed one token per row per step and
  // get the log-probabilities of the next, [rows, V]. use_cache = false recomputes everything each
  // step (the baseline a cache is measured against), where the architecture has such a thing.
  virtual std::unique_ptr<DecoderState> start_decoding(const Tensor& src, bool use_cache = true) const = 0;
  virtual Tensor step(const std::vector<int32_t>& tokens, DecoderState& state) const = 0;
};

class LanguageModel : public Model {
 public:
  Kind kind() const override { return Kind::language_model; }
  virtual int64_t block_size() const = 0;  // the longest context it knows positions for
  // The length past which a cache made shorter must be fed again from position 0 (longrope: a longer
  // sequence takes other rotary factors at every position; nn/llama.h); 0: never.
  virtual int64_t refeed_at() const { return 0; }
  // idx i32 [B, T] → logits [B, T, V] (`maps`, when given, receives the self-attention weights:
  // maps->decoder_self, [B, H, T, T] per layer); loss: mean next-token cross-entropy against targets [B, T].
  virtual Tensor forward(const Tensor& idx, nn::AttentionMaps* maps = nullptr) const = 0;
  virtual Tensor loss(const Tensor& idx, const Tensor& targets) const = 0;
  // Generation (no tape): an empty cache; then idx [B, T] at the positions after what it holds →
  // the logits of the last position, [B, V].
  virtual std::unique_ptr<DecoderState> start_decoding() const = 0;
  virtual Tensor step(const Tensor& idx, DecoderState& state) const = 0;
  // Many sequences in one step (continuous batching: decode/batching_generator.h), where the
  // architecture has it (GPT, Llama): a paged KV cache of `pages` pages of `page_size` tokens on
  // `device` (keys and values in `dtype`: f32 or bf16), and ids i32 [T] — the step's tokens
  // (nn/paged_kv_cache.h) — → the logits of each sequence's last token, [sequences, V]. Without it
  // (paged() false) both throw qkv::Error.
  virtual bool paged() const { return false; }
  virtual nn::PagedKVCache make_paged_cache(int64_t pages, int64_t page_size, Device device, DType dtype) const;
  virtual Tensor step_paged(const Tensor& ids, const nn::PagedStep& step, nn::PagedKVCache& cache) const;
};


class ImageClassifier : public Model {
 public:
  Kind kind() const override { return Kind::image_classifier; }
  virtual ImageShape image_shape() const = 0;
  virtual int64_t num_classes() const = 0;
  virtual std::string class_name(int64_t k) const = 0;  // the config's class_names, or "k"
  // images f32 [N, C, H, W] (pixels in [0, 1]) → logits [N, classes]; `maps`, when given, receives
  // the attention weights (maps->image).
  virtual Tensor forward(const Tensor& images, nn::AttentionMaps* maps = nullptr) const = 0;
  // Mean cross-entropy (label smoothing ε) against labels i32 [N].
  virtual Tensor loss(const Tensor& images, const Tensor& labels, float label_smoothing = 0.f) const = 0;
};

// An encoder read in both directions (BERT): no generation, every position sees every other token.
// An encoder's heads and sentence-embedding settings (nn/encoder_heads.h), as its config holds them.
struct EncoderTask {
  nn::BertClassifier classifier = nn::BertClassifier::none;
  std::vector<std::string> labels;  // id2label (num_labels of them) for a classifier
  nn::BertProblem problem_type = nn::BertProblem::auto_;
  nn::BertPooling pooling = nn::BertPooling::unset;  // sentence-transformers' Pooling, where converted
  bool normalize = false;                            // … and its Normalize
  int64_t max_seq_length = 0;                        // … and its max_seq_length (0: max_positions())
  nn::ScoreActivation score_activation = nn::ScoreActivation::unset;  // a cross-encoder's, where converted
};

class MaskedLanguageModel : public Model {
 public:
  Kind kind() const override { return Kind::masked_language_model; }
  virtual int64_t max_positions() const = 0;    // the longest input it knows positions for
  virtual int64_t type_vocab_size() const = 0;  // the token types (segments) it knows
  virtual bool has_mlm_head() const = 0;        // false: an encoder only (hidden states, no token logits)
  virtual EncoderTask task() const = 0;
  // input_ids i32 [B, T]; token_type_ids i32 [B, T] (undefined: all 0); attention_mask i32 [B, T]
  // (1: a token, 0: padding; undefined: none) → the hidden states [B, T, E]; `maps`, when given,
  // receives the self-attention weights (maps->encoder_self, [B, H, T, T] per layer).
  virtual Tensor encode(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                        const Tensor& attention_mask = Tensor(), nn::AttentionMaps* maps = nullptr) const = 0;
  // The same through the masked-language-model head → logits [B, T, V]; without a head: qkv::Error.
  virtual Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                         const Tensor& attention_mask = Tensor(), nn::AttentionMaps* maps = nullptr) const = 0;
  // The same through the classifier → logits [B, L] (a sequence classifier) or [B, T, L] (a token
  // classifier), L = task().labels.size(); without one: qkv::Error.
  virtual Tensor classify(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                          const Tensor& attention_mask = Tensor(), nn::AttentionMaps* maps = nullptr) const = 0;
  // forward's head in two parts, for logits at a few tokens only (masked-language-model training reads
  // the masked ones): the transform of hidden states [..., E] → h [..., E_w], and the decoder (weight
  // [V, E_w] — the word embedding, tied — and bias [V], undefined where there is none): logits = h Wᵀ + b.
  // Without the head: qkv::Error.
  virtual Tensor mlm_transform(const Tensor& hidden) const = 0;
  virtual std::pair<Tensor, Tensor> mlm_decoder() const = 0;
};

}  // namespace qkv::models
