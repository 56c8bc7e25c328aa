// Recurrent translators: the models attention was invented in (seeds 000, 001, 003, 004).
//
// An encoder GRU reads the source; a decoder GRU writes the target one token at a time, fed its
// previous token. What the decoder knows of the source is the question:
//
//   no attention (Sutskever et al. 2014; Cho et al. 2014 — "rnn-encdec"): one context vector, the
//   encoder's final state z:
//       s_0 = z,  s_i = GRU([E y_{i−1}; z], s_{i−1}),  o_i = [E y_{i−1}; s_i; z]
//
//   additive attention (Bahdanau et al. 2015, RNNsearch — "rnn-attention"): a bidirectional encoder,
//   and at every step a fresh context c_i from an alignment over all encoder states h_j:
//       e_ij = vᵀ tanh(W s_{i−1} + U h_j),  a_i = softmax(e_i),  c_i = Σ_j a_ij h_j
//       s_i = GRU([E y_{i−1}; c_i], s_{i−1}),  o_i = [E y_{i−1}; s_i; c_i]
//       s_0 = tanh(W_s [h→_S; h←_1])
//
//   multiplicative attention (Luong et al. 2015, "general" or "dot" scores), optionally with input
//   feeding (h̃_{i−1} joins the decoder's input):
//       s_i = GRU([E y_{i−1}; h̃_{i−1}], s_{i−1}),  a_i = softmax(s_iᵀ W_a h_j),  c_i = Σ_j a_ij h_j
//       o_i = h̃_i = tanh(W_c [c_i; s_i])
//
//   and in every variant a deep output (Bahdanau's readout) tied to the embedding, as the Transformer's
//   output projection is:   logits_i = tanh(W_r o_i) Eᵀ
//   (W_r maps o_i to the embedding width: the vocabulary product is E·V, not |o_i|·V wide)
//
// Teacher forcing in training (the whole target at once where the maths allows: without attention
// and in Luong's model without input feeding, the decoder GRU runs over every step in one fused
// scan); greedy and beam search through the same step interface as the Transformer, the "cache"
// being the decoder state and the encoder states with their projected keys, computed once per
// sentence. Source and target share one embedding (one joint vocabulary).
//
// Parameters: embedding.weight, encoder.* (nn::GRU names), bridge.* (s_0), decoder.*, attention.*
// (nn::Alignment), combine.* (Luong's W_c), readout.* (W_r).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qkv/io/config.h"
#include "qkv/nn/alignment.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/prefixes.h"
#include "qkv/nn/rnn.h"

namespace qkv::nn {

enum class RecurrentAttention : uint8_t { none, additive, dot, general };
constexpr EnumTable<RecurrentAttention, 4> enum_table(RecurrentAttention) {
  return {"recurrent attention",
          {{{RecurrentAttention::none, "none"}, {RecurrentAttention::additive, "additive"},
            {RecurrentAttention::dot, "dot"}, {RecurrentAttention::general, "general"}}}};
}

struct RNNSeq2SeqConfig {
  int64_t vocab_size = 8000;  // one joint vocabulary for source and target
  int64_t embedding_dim = 256, hidden_size = 512;
  int64_t encoder_layers = 1, decoder_layers = 1;
  bool bidirectional_encoder = true;  // rnn-encdec: false
  RecurrentAttention attention = RecurrentAttention::additive;
  int64_t attention_dim = 0;   // additive scores: the width of W s + U h (0: hidden_size)
  bool input_feeding = false;  // Luong: h̃_{i−1} joins the decoder's input
  // Luong's scores (dot, general) ÷ √hidden_size. Unscaled, the scores of 512-wide GRU states start
  // with a spread of ~6, the softmax saturates at once (one source word at 100%) and the alignment
  // freezes one word behind (docs/RESULTS.md); false gives the paper's unscaled score.
  bool scaled_score = true;
  float dropout = 0.3f;        // on embeddings, between layers, and before the output layer
  int64_t max_len = 256;       // longest sequence decoded (source, or target with its BOS/EOS)
  int32_t pad_id = 0, bos_id = 2, eos_id = 3;

  static const io::Fields<RNNSeq2SeqConfig>& fields();
  static RNNSeq2SeqConfig from_json(const nlohmann::json& j);  // fields() plus consistency checks
  nlohmann::json to_json() const { return fields().to_json(*this); }
  int64_t width() const { return hidden_size; }
  std::string describe() const;
  int64_t encoder_width() const { return (bidirectional_encoder ? 2 : 1) * hidden_size; }  // h_j
};

class RNNSeq2Seq : public Module {
 public:
  using Config = RNNSeq2SeqConfig;

  // What the decoder keeps between steps; row r of every tensor is one hypothesis.
  struct DecoderState {
    bool use_cache = true;
    Tensor s;            // [L, rows, H] the decoder GRU's state
    Tensor feed;         // [rows, H]: z (no attention) or h̃_{i−1} (input feeding); else undefined
    Tensor memory;       // [rows, S, K] encoder states h_j
    Tensor keys;         // [rows, S, ·] their projection for the scores
    Tensor mask;         // [rows, 1, S] true at real source tokens
    int64_t fed = 0;     // tokens fed so far
    Tensor src;                                 // recomputation (use_cache = false): the sources
    Prefixes prefix;                            // … and each row's tokens so far
    int64_t rows() const;
    int64_t length() const { return fed; }
    void reorder(const std::vector<int64_t>& index, bool sources_changed = true);
  };

  explicit RNNSeq2Seq(const RNNSeq2SeqConfig& config, Generator* gen = nullptr);

  // src i32 [B, S] (padded with pad_id), tgt_in i32 [B, T] (BOS y₁ … y_{T−1}) → logits [B, T, V];
  // maps->cross receives the alignment weights [B, 1, T, S] (one layer, one head).
  Tensor forward(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps = nullptr) const;
  Tensor loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float label_smoothing = 0.f) const;

  DecoderState start_decoding(const Tensor& src, bool use_cache = true) const;
  Tensor step(const std::vector<int32_t>& tokens, DecoderState& state) const;  // log-probabilities [rows, V]
  void set_inference_weights(InferenceWeights weights);

  Config config;
  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<GRU> encoder, decoder;
  std::shared_ptr<Linear> bridge;    // s_0 = tanh(W_s [h→; h←]) (attention models)
  std::shared_ptr<Alignment> attention;
  std::shared_ptr<Linear> combine;   // Luong: h̃ = tanh(W_c [c; s])
  std::shared_ptr<Linear> readout;   // W_r: o_i → the embedding width
  InferenceWeight embedding_inference;             // what decoding reads for Eᵀ (set_inference_weights)

 private:
  struct Encoded {
    Tensor memory, mask, keys, s0, z;  // z: the context vector (no attention)
  };
  Encoded encode(const Tensor& src) const;
  Device device() const { return embedding->weight.device(); }  // where the weights are (ids follow)
  // One decoder step for every row: e [B, E] (the embedded previous tokens, dropout applied), the
  // state in `s`/`feed` updated in place; returns o_i [B, ·] and the alignment weights [B, S]
  // (undefined without attention).
  Tensor decode_step(const Tensor& e, const Encoded& enc, Tensor& s, Tensor& feed, Tensor* weights) const;
  Generator* gen_;
};

}  // namespace qkv::nn
