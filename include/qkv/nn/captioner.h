// Show, Attend and Tell (Xu et al. 2015; seed 004's "Image Captioning with RNNs and Attention"): a
// ConvNet turns the image into a grid of L feature vectors a_j; a GRU writes the caption one word at
// a time, and before each word it looks at a different part of the picture.
//
//   encoder:   a = ConvNet trunk (nn/convnet.h, no head)           [B, D, h, w] → [B, L = h·w, D]
//              (+ P, a learned [L, D] embedding of the cells, with "grid_positions": where an item
//              is must then not be inferred from the features alone; captions here say where)
//   init:      s_0 = tanh(W_init ā),  ā = (1/L) Σ_j a_j             the mean feature
//   attention: e_tj = vᵀ tanh(W s_{t−1} + U a_j),  α_t = softmax_j(e_t),  z_t = Σ_j α_tj a_j
//   gate:      β_t = σ(w_β · s_{t−1} + b_β),  ẑ_t = β_t z_t          (the paper's §4.2.1 "gating scalar")
//   decoder:   s_t = GRU([E y_{t−1}; ẑ_t], s_{t−1})
//   output:    logits_t = tanh(W_r [E y_{t−1}; s_t; ẑ_t]) Eᵀ         (deep output, tied to the embedding)
//
// The no-attention baseline ("attention": "none") feeds the mean feature ā at every step in place of
// ẑ_t: the same sizes, one context for the whole caption (the captioner's "single context vector").
//
// Training adds the doubly stochastic regularisation (§4.2.1), which asks every grid cell to be
// looked at about once over the caption:
//   loss = CE + λ · mean_{b, j} (1 − Σ_t α_btj)²        (t over the caption's real words)
// (the mean over the L cells is the paper's sum / L, the form PyTorch re-implementations use, so λ
// does not depend on the grid's size).
//
// Decoding goes through the same step interface as the translators (decode/search.h): the cache is
// the decoder state and the grid with its projected keys, computed once per image.
//
// Parameters: encoder.* (nn::ConvNet names), positions [L, D] (grid_positions), embedding.weight, init.* (W_init), attention.*
// (nn::Alignment), gate.* (w_β), decoder.* (nn::GRU), readout.* (W_r).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "qkv/io/config.h"
#include "qkv/nn/alignment.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/convnet.h"
#include "qkv/nn/embedding.h"
#include "qkv/nn/prefixes.h"
#include "qkv/nn/rnn.h"

namespace qkv::nn {

enum class CaptionAttention : uint8_t { none, additive };
constexpr EnumTable<CaptionAttention, 2> enum_table(CaptionAttention) {
  return {"caption attention", {{{CaptionAttention::none, "none"}, {CaptionAttention::additive, "additive"}}}};
}

struct CaptionerConfig {
  // the image and the encoder (a ConvNet trunk: stem at full resolution, each later stage halves it)
  int64_t in_channels = 1, image_height = 96, image_width = 96;
  std::vector<int64_t> channels = {16, 32, 64, 128};  // 96 × 96 → a 12 × 12 grid of 128-vectors
  std::vector<int64_t> blocks = {1, 1, 1, 1};
  std::vector<double> mean = {0.07}, std = {0.2};     // a scene is mostly black background
  bool grid_positions = false;  // add a learned embedding of each grid cell to its feature
  // the decoder
  int64_t vocab_size = 64;
  int64_t embedding_dim = 128, hidden_size = 256;
  int64_t attention_dim = 0;  // width of W s + U a (0: hidden_size)
  CaptionAttention attention = CaptionAttention::additive;
  bool gate = true;                 // β_t
  double doubly_stochastic = 1.0;   // λ (0: off)
  float dropout = 0.3f;             // on embeddings and before the output layer
  int64_t max_len = 40;             // longest caption decoded, BOS/EOS included
  int32_t pad_id = 0, bos_id = 2, eos_id = 3;

  static const io::Fields<CaptionerConfig>& fields();
  static CaptionerConfig from_json(const nlohmann::json& j);  // fields() plus consistency checks
  nlohmann::json to_json() const { return fields().to_json(*this); }
  int64_t width() const { return hidden_size; }
  std::string describe() const;
  ConvNetConfig encoder_config() const;  // the trunk's ConvNet config (num_classes 0: no head)
  int64_t feature_dim() const { return channels.back(); }  // D
  // the grid: the image halved once per stage after the first (rounding as a stride-2 conv does)
  std::array<int64_t, 2> grid() const;
};

class Captioner : public Module {
 public:
  using Config = CaptionerConfig;

  // What the decoder keeps between steps; row r of every tensor is one hypothesis.
  struct DecoderState {
    bool use_cache = true;
    Tensor s;       // [1, rows, H] the GRU's state
    Tensor memory;  // [rows, L, D] the grid
    Tensor keys;    // [rows, L, A] its projection for the scores (attention)
    Tensor mean;    // [rows, D] ā
    int64_t fed = 0;
    Tensor images;    // recomputation (use_cache = false): the images
    Prefixes prefix;  // … and each row's tokens so far
    int64_t rows() const { return use_cache ? s.size(1) : images.size(0); }
    int64_t length() const { return fed; }
    void reorder(const std::vector<int64_t>& index, bool sources_changed = true);
  };

  explicit Captioner(const CaptionerConfig& config, Generator* gen = nullptr);

  // images f32 [B, C, H, W] (pixels in [0, 1]), tgt_in i32 [B, T] (BOS y₁ … y_{T−1}) → logits
  // [B, T, V]; maps->cross receives α [B, 1, T, L] (one layer, one head) and maps->image_grids the
  // grid {h, w, h, w}.
  Tensor forward(const Tensor& images, const Tensor& tgt_in, AttentionMaps* maps = nullptr) const;
  // CE (label smoothing ε, padding ignored) + λ · mean_{b,j} (1 − Σ_t α_btj)².
  Tensor loss(const Tensor& images, const Tensor& tgt_in, const Tensor& tgt_out, float label_smoothing = 0.f) const;
  // The regulariser alone, from α [B, T, L] and the real-word mask [B, T] (f32 1/0): what loss adds.
  static Tensor doubly_stochastic_penalty(const Tensor& alpha, const Tensor& real);

  DecoderState start_decoding(const Tensor& images, bool use_cache = true) const;
  Tensor step(const std::vector<int32_t>& tokens, DecoderState& state) const;  // log-probabilities [rows, V]
  void set_inference_weights(InferenceWeights weights);

  Config config;
  std::shared_ptr<ConvNet> encoder;
  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<Linear> init;      // W_init: ā → s_0
  std::shared_ptr<Alignment> attention;
  std::shared_ptr<Linear> gate;      // w_β (attention with gate)
  std::shared_ptr<GRU> decoder;
  std::shared_ptr<Linear> readout;   // W_r: [e; s; ẑ] → the embedding width
  Tensor positions;                  // P [L, D] (grid_positions)
  InferenceWeight embedding_inference;             // what decoding reads for Eᵀ (set_inference_weights)

 private:
  struct Encoded {
    Tensor memory, keys, mean, s0;
  };
  Encoded encode(const Tensor& images) const;
  Device device() const { return embedding->weight.device(); }  // where the weights are (inputs follow)
  // One step for every row: e [B, E] the embedded previous tokens; s [1, B, H] updated in place;
  // returns the output layer's input [B, E + H + D] and α_t [B, L] (undefined without attention).
  Tensor decode_step(const Tensor& e, const Encoded& enc, Tensor& s, Tensor* alpha) const;
  // logits [B, T, V] and α [B, T, L] (undefined without attention), with the tape
  std::pair<Tensor, Tensor> run(const Tensor& images, const Tensor& tgt_in) const;
  Generator* gen_;
};

}  // namespace qkv::nn
