// The encoder–decoder Transformer of "Attention Is All You Need" (seeds 003–004), for translation.
//
//   TransformerEncoder:  N encoder layers, then a final LayerNorm (as torch.nn.TransformerEncoder
//                        inside nn.Transformer)
//   TransformerDecoder:  N decoder layers (masked self-attention, cross-attention, FFN), final LayerNorm
//   Transformer:         encoder + decoder, parameter names as torch.nn.Transformer
//                        (encoder.layers.{i}.*, encoder.norm.*, decoder.layers.{i}.*, decoder.norm.*)
//
//   Seq2SeqTransformer, the translation model:
//     x_src = Dropout(E[src] · √d_model + PE)          embeddings scaled by √d_model (§3.4)
//     x_tgt = Dropout(E[tgt_in] · √d_model + PE)       one embedding E shared by source and target
//     memory = Encoder(x_src, src padding mask)
//     logits = Decoder(x_tgt, memory, causal mask, src padding mask) Eᵀ    output projection tied to E
//
// Parameters: embedding.weight [V, d], [pos_embedding.weight [max_len, d] when learned,]
// transformer.* (torch.nn.Transformer's names). The PyTorch equivalent, weight for weight, is in
// tests/golden/make_model_golden.py and docs/ARCHITECTURE.md.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "qkv/nn/positional_encoding.h"
#include "qkv/nn/transformer_layer.h"

namespace qkv::nn {

class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& opt, int64_t num_layers, Generator* gen = nullptr);
  // src [B, S, E]; src_key_padding_mask [B, S] (true = padding). weights, when given, receives the
  // self-attention weights of each layer, [B, H, S, S].
  Tensor forward(const Tensor& src, const Tensor& src_key_padding_mask = Tensor(),
                 std::vector<Tensor>* weights = nullptr) const;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& opt, int64_t num_layers, Generator* gen = nullptr);
  // tgt [B, T, E] (causal), memory [B, S, E]; weights per layer [B, H, T, T] and [B, H, T, S].
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor(),
                 std::vector<Tensor>* self_weights = nullptr, std::vector<Tensor>* cross_weights = nullptr) const;
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;
};

class Transformer : public Module {
 public:
  Transformer(const TransformerLayerOptions& opt, int64_t num_encoder_layers, int64_t num_decoder_layers,
              Generator* gen = nullptr);
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

struct Seq2SeqConfig {
  int64_t vocab_size = 8000;  // one joint vocabulary for source and target
  int64_t d_model = 512, nhead = 8, num_encoder_layers = 6, num_decoder_layers = 6, dim_feedforward = 2048;
  float dropout = 0.1f;
  std::string activation = "relu";   // "relu" (the paper) | "gelu"
  bool norm_first = false;           // false: post-LN (the paper); true: pre-LN
  std::string positions = "sinusoidal";  // "sinusoidal" (the paper) | "learned"
  int64_t max_len = 1024;            // longest sequence (source, or target with its BOS/EOS)
  int32_t pad_id = 0, bos_id = 2, eos_id = 3;

  // Named sizes: "base" (the paper's base model: N=6, d_model=512, h=8, d_ff=2048, dropout 0.1),
  // "small" (N=3, 256, 8, 1024: the size trained on this 2-core machine), "tiny" (N=2, 128, 4, 512).
  static Seq2SeqConfig preset(const std::string& name);
  // {"preset": …, other keys override the preset}; unknown keys and bad values: a clear error.
  static Seq2SeqConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  TransformerLayerOptions layer_options() const;
};

// Attention weights of one forward pass, per layer: [B, H, L, S] each.
struct AttentionMaps {
  std::vector<Tensor> encoder_self, decoder_self, cross;
};

// What the decoder keeps between steps: the self-attention caches (growing by one position per
// step), the cross-attention K/V of the memory (computed once), and the source padding mask.
// Row r of every tensor is one hypothesis.
struct DecoderState {
  std::vector<KVCache> self, cross;
  Tensor memory_key_padding_mask;  // [rows, S] bool
  int64_t rows() const { return memory_key_padding_mask.defined() ? memory_key_padding_mask.size(0) : 0; }
  // Keeps rows `index` (in that order, repeats allowed), as beam search regroups hypotheses. The
  // cross-attention K/V are gathered only when `sources_changed` (rows of another source sentence).
  void reorder(const std::vector<int64_t>& index, bool sources_changed = true);
};

// Rows `index` of t along dim 0 (in that order, repeats allowed), any dtype, no tape: decoding
// regroups its per-hypothesis tensors (memory, padding masks) with it.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& index);

class Seq2SeqTransformer : public Module {
 public:
  explicit Seq2SeqTransformer(const Seq2SeqConfig& config, Generator* gen = nullptr);

  // src i32 [B, S], tgt_in i32 [B, T] (BOS y₁ … y_{T−1}, padded with pad_id) → logits [B, T, V].
  Tensor forward(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps = nullptr) const;
  // Mean cross-entropy (label smoothing ε) of forward(src, tgt_in) against tgt_out [B, T] (y₁ … EOS),
  // padding positions ignored.
  Tensor loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float label_smoothing = 0.f) const;

  // The encoder alone: memory [B, S, d_model] and the padding mask [B, S] it was computed with.
  Tensor encode(const Tensor& src, Tensor* src_key_padding_mask_out = nullptr,
                std::vector<Tensor>* weights = nullptr) const;
  // Decoding without recomputation (no tape): start from the memory, then feed one token per row per
  // step; step() returns the log-probabilities of the next token, [rows, V].
  DecoderState start_decoding(const Tensor& memory, const Tensor& src_key_padding_mask) const;
  Tensor step(const std::vector<int32_t>& tokens, DecoderState& state) const;
  // bf16 weight copies for decoding steps (see GPT::set_inference_dtype).
  void set_inference_dtype(DType dtype);

  // true where ids == pad_id, [B, S] bool.
  Tensor padding_mask(const Tensor& ids) const;
  // x = Dropout(E[ids] · √d_model + PE[pos0 …]): ids [B, L] → [B, L, d_model]
  Tensor embed(const Tensor& ids, int64_t pos0) const;

  Seq2SeqConfig config;
  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Transformer> transformer;
  Tensor embedding_bf16;

 private:
  Generator* gen_;
};

}  // namespace qkv::nn
