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
#include <memory>
#include <string>
#include <vector>

#include "qkv/io/config.h"
#include "qkv/nn/attention_maps.h"
#include "qkv/nn/positional_encoding.h"
#include "qkv/nn/transformer_layer.h"

namespace qkv::nn {

class StaticBatch;
class StaticDecoder;

class TransformerEncoder : public Module {
 public:
  // final_norm = false: no LayerNorm after the last layer (Marian's post-LN models have none).
  TransformerEncoder(const TransformerLayerOptions& opt, int64_t num_layers, Generator* gen = nullptr,
                     bool final_norm = true);
  // src [B, S, E]; src_key_padding_mask [B, S] (true = padding). weights, when given, receives the
  // self-attention weights of each layer, [B, H, S, S].
  Tensor forward(const Tensor& src, const Tensor& src_key_padding_mask = Tensor(),
                 std::vector<Tensor>* weights = nullptr) const;
  // The same with the mask already in qkv's convention (ops/mask.h), e.g. [B, 1, 1, S].
  Tensor forward_masked(const Tensor& src, const Tensor& mask, std::vector<Tensor>* weights = nullptr) const;
  // Decoding's encoder (no tape): src [B, S, E] → [B, S, E], each layer's forward_inference.
  Tensor forward_inference(const Tensor& src, const Tensor& mask) const;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;  // null without a final norm
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& opt, int64_t num_layers, Generator* gen = nullptr,
                     bool final_norm = true);
  Tensor final_norm(const Tensor& x) const { return norm ? norm->forward(x) : x; }
  // tgt [B, T, E] (causal), memory [B, S, E]; weights per layer [B, H, T, T] and [B, H, T, S].
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor(),
                 std::vector<Tensor>* self_weights = nullptr, std::vector<Tensor>* cross_weights = nullptr) const;
  // The same with the memory's mask already in qkv's convention (ops/mask.h), e.g. [B, 1, 1, S].
  Tensor forward_masked(const Tensor& tgt, const Tensor& memory, const Tensor& memory_mask,
                        std::vector<Tensor>* self_weights = nullptr, std::vector<Tensor>* cross_weights = nullptr) const;
  std::vector<std::shared_ptr<TransformerDecoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;
};

class Transformer : public Module {
 public:
  Transformer(const TransformerLayerOptions& opt, int64_t num_encoder_layers, int64_t num_decoder_layers,
              Generator* gen = nullptr, bool final_norm = true);
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

struct Seq2SeqConfig {
  int64_t vocab_size = 8000;  // one joint vocabulary for source and target
  int64_t d_model = 512, nhead = 8, num_encoder_layers = 6, num_decoder_layers = 6, dim_feedforward = 2048;
  float dropout = 0.1f;
  Activation activation = Activation::relu;     // relu (the paper) | gelu | gelu_tanh
  bool norm_first = false;                      // false: post-LN (the paper); true: pre-LN
  Positions positions = Positions::sinusoidal;  // sinusoidal (the paper) | learned
  int64_t max_len = 1024;                       // longest sequence (source, or target with its BOS/EOS)
  int32_t pad_id = 0, bos_id = 2, eos_id = 3;
  // Marian / OPUS-MT (imported by models/hf_convert): no LayerNorm after the last encoder and decoder
  // layers (post-LN), and a bias added to the logits ("final_logits_bias" [1, vocab_size]).
  bool final_norm = true, logits_bias = false;
  bool scale_embedding = true;  // E[ids] · √d_model (§3.4); false: E[ids] (Marian's scale_embedding = false)

  // Named sizes: "base" (the paper's base model: N=6, d_model=512, h=8, d_ff=2048, dropout 0.1),
  // "small" (N=3, 256, 8, 1024: the size trained on this 2-core machine), "tiny" (N=2, 128, 4, 512).
  static Seq2SeqConfig preset(const std::string& name);
  static const io::Fields<Seq2SeqConfig>& fields();  // the keys of "model"; "preset" picks the start
  // {"preset": …, other keys override the preset}; unknown keys and bad values: a clear error.
  static Seq2SeqConfig from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
  TransformerLayerOptions layer_options() const;
  int64_t width() const { return d_model; }  // the model dimension (what inverse_sqrt scales by)
  std::string describe() const;  // "Transformer 3+3 layers, d_model 256, 8 heads, d_ff 1024, vocab 8000"
};


class Seq2SeqTransformer : public Module {
 public:
  using Config = Seq2SeqConfig;

  // What the decoder keeps between steps. Row r of every tensor is one hypothesis.
  //   cached (use_cache, the default): the self-attention caches (growing by one position per step) and
  //     the cross-attention K/V of the memory (computed once)
  //   recomputation (the baseline the cache is measured against): the memory, and each row's tokens so
  //     far, run through the whole decoder at every step
  // and in both, the source's mask in qkv's convention, [rows, 1, 1, S] (true = a real token).
  struct DecoderState {
    bool use_cache = true;
    std::vector<KVCache> self, cross;
    Tensor memory;
    std::vector<std::vector<int32_t>> prefix;
    Tensor memory_mask;
    // With the cache, the source side (cross K/V, memory_mask) holds one row per source sentence and
    // row r decodes for source row_source[r]: beam search's K hypotheses of a sentence share one
    // copy. While the rows come in equal consecutive groups of each source in order (as beam
    // search keeps them) the cross-attention reads the shared copy; any other order expands it to
    // one row per hypothesis, once. Without the cache, every row has its own.
    std::vector<int64_t> row_source;
    // Static decoding (nn/static_decoding.h; on a GPU with graphs unless QKV_CUDA_GRAPHS=0, on the CPU):
    // when set, it holds the rows and the caches, and none of the above is used.
    std::shared_ptr<StaticBatch> fixed;
    int64_t rows() const;
    int64_t length() const;  // tokens fed so far
    // Keeps rows `index` (in that order, repeats allowed), as beam search regroups hypotheses. The
    // source side (cross-attention K/V, memory, mask) is gathered only when `sources_changed` (rows of
    // another source sentence).
    void reorder(const std::vector<int64_t>& index, bool sources_changed = true);
    void group_sources();  // before a step: the source side as the rows read it (see row_source)
  };

  explicit Seq2SeqTransformer(const Seq2SeqConfig& config, Generator* gen = nullptr);

  // src i32 [B, S], tgt_in i32 [B, T] (BOS y₁ … y_{T−1}, padded with pad_id) → logits [B, T, V].
  Tensor forward(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps = nullptr) const;
  // Mean cross-entropy (label smoothing ε) of forward(src, tgt_in) against tgt_out [B, T] (y₁ … EOS),
  // padding positions ignored; the output product and the loss a chunk of rows at a time (ops/loss.h's
  // linear_cross_entropy: never the [B·T, V] logits).
  Tensor loss(const Tensor& src, const Tensor& tgt_in, const Tensor& tgt_out, float label_smoothing = 0.f) const;

  // The encoder alone: memory [B, S, d_model] and the source mask it was computed with, [B, 1, 1, S]
  // (qkv's convention: true = a real token), which the decoder's cross-attention reads too.
  struct Encoded {
    Tensor memory, mask;
  };
  // inference: decoding's encoder (embed's `inference`), no tape.
  Encoded encode(const Tensor& src, std::vector<Tensor>* weights = nullptr, bool inference = false) const;
  // Decoding (no tape): encode the sources, then feed one token per row per step; step() returns
  // the log-probabilities of the next token, [rows, V]. use_cache = false recomputes the decoder
  // over each row's whole prefix every step instead (it chooses the same tokens).
  // Where the environment asks for static decoding (nn/static_decoding.h) and the model and sources
  // allow it, the cached state is a StaticBatch's: the same steps with the same shapes every step.
  DecoderState start_decoding(const Tensor& src, bool use_cache = true) const;
  // Static decoding by request (with CUDA graphs: `graphs`, the model on a GPU); a qkv::Error where
  // static_decoding_refusal says why not. Batches one after another share its pools and graphs;
  // while one decodes, another gets pools of its own.
  DecoderState start_static_decoding(const Tensor& src, bool graphs = false) const;
  Tensor step(const std::vector<int32_t>& tokens, DecoderState& state) const;
  // Weight copies for decoding (see GPT::set_inference_weights): the decoder's matrices and the
  // shared embedding (for the output projection and, int8, the lookup). The encoder's matrices take
  // int8 rows too where the CPU's int8 products read 8-bit activations (int8_activation_bits() ==
  // 8: VNNI or AMX); elsewhere the encoder reads its f32 weights (7-bit activations there cost
  // BLEU: docs/BENCHMARKS.md).
  void set_inference_weights(InferenceWeights weights);
  bool int8_encoder() const { return int8_encoder_; }
  // The parameters decoding reads only through their int8 rows once set_inference_weights(int8)
  // made them (the decoder's matrices, the embedding, and the encoder's where int8_encoder()): what a
  // model loaded from a quantized file holds no f32 values for.
  std::vector<Tensor> int8_only_weights() const;
  // What `qkv quantize` stores as int8 rows: the above with the encoder's matrices, whatever this
  // CPU does (the file is the same everywhere; a CPU whose encoder reads f32 widens those rows).
  std::vector<Tensor> int8_file_weights() const;

  // The source mask in qkv's convention: [B, 1, 1, S], true where src ≠ pad_id (computed once, read
  // by every encoder layer and every cross-attention).
  Tensor source_mask(const Tensor& src) const;
  // x = Dropout(E[ids] · √d_model + PE[pos0 …]): ids [B, L] → [B, L, d_model]. inference (decoding,
  // no tape): E's rows from embedding_inference (its int8 rows, when it has them).
  Tensor embed(const Tensor& ids, int64_t pos0, bool inference = false) const;

  Seq2SeqConfig config;
  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<PositionalEncoding> pos;
  std::shared_ptr<Transformer> transformer;
  InferenceWeight embedding_inference;
  Tensor final_logits_bias;  // [1, vocab_size] with config.logits_bias; undefined otherwise

 private:
  // logits = h Eᵀ (+ final_logits_bias)
  Tensor logits(const Tensor& h, bool inference) const;
  // The decoder's output h [B, T, E] for teacher-forced targets (forward's logits before the product)
  Tensor decoded(const Tensor& src, const Tensor& tgt_in, AttentionMaps* maps) const;
  std::vector<Tensor> int8_weights(bool encoder) const;
  Generator* gen_;
  bool int8_encoder_ = false;
  // Static decoding's pools and graphs, made on first use (and made anew for a copy of the model).
  mutable std::shared_ptr<StaticDecoder> static_decoder_;
};

}  // namespace qkv::nn
