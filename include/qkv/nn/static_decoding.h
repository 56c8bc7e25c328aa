// The Transformer translator's decoding with the same shapes every step, so that a GPU can replay a
// step as one CUDA graph (core/cuda.h's Graph) instead of launching its dozens of small kernels one by
// one from the host: a small translation model's beam search on a GPU was launch- and host-bound
// (docs/CUDA.md, "Measured": 322.8 sentences/s, the 16 CPU cores' int8 345.1).
//
// What changes from step to step lives in device tensors that the step reads, written by one copy
// from the host before it: the rows' tokens, the step's position and the indices of SlotStep
// (nn/multihead_attention.h). With graphs the shapes are a bucket's: the rows R rounded up to a
// multiple of 8 (the rows past the real ones decode a dummy token and are never read), the history's
// width to a multiple of 32 positions; without, each step's own. Keys and values live in slots: step
// t's rows write slots base_t … base_t + R − 1, and a hypothesis's past is the list of its positions'
// slots, kept on the host — beam search's regrouping moves no keys on the device, it only permutes those lists (the usual cache
// gathers every layer's keys and values every step: KVCache::reorder). Cross-attention reads each
// source's keys as one page, up to its length (sources are padded at the end).
//
//   x_t = E[y_t] (·√d_model) + PE[t]                         (one embedding lookup each, by device index)
//   each layer: self-attention over the row's slots, cross-attention over its source, FFN
//   log p(· | y_≤t, x) = log_softmax(LN(x_t) Eᵀ (+ b))       [R, V]
//
// A StaticDecoder keeps, for one model, the pools of slots and one graph per bucket across batches
// (a bucket is captured once, the first time a batch reaches it, and replayed by every later batch;
// without graphs the pools go with each batch); it serves one batch at a time (StaticBatch).
// Seq2SeqTransformer::start_decoding hands one out where asked:
//   on a GPU               (unless QKV_CUDA_GRAPHS=0) each bucket's first step runs as usual, is then
//                          captured, and later ones replay it (2.3× the eager steps on an H200, 2026-12-04)
//   QKV_STATIC_DECODING=1  the same steps on any device (without graphs on the CPU, which its tests
//                          check against the usual cache; on a GPU with them unless QKV_CUDA_GRAPHS=0);
//                          another value, the usual cache
// The steps equal the usual cache's up to the order of the attention's sums (paged_attention's kernel
// rather than the dense one).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/cuda.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/ops/tensor.h"

namespace qkv::nn {

class Seq2SeqTransformer;

// Consecutive views of one buffer, in the order taken: a step's device inputs filled by one upload
// (static decoding's, and the decoder-only models' graphs: decode/paged_graphs.h).
class BufferSlices {
 public:
  explicit BufferSlices(const Tensor& buffer) : buffer_(buffer) {}
  Tensor take(int64_t n) {  // the next n elements
    Tensor t = buffer_.slice(0, at_, at_ + n);
    at_ += n;
    return t;
  }
  int64_t taken() const { return at_; }

 private:
  Tensor buffer_;
  int64_t at_ = 0;
};

// Why `model` cannot decode `src` i32 [B, S] this way ("" if it can): a source whose padding is not
// all at its end, one with no token, a model in training mode (dropout) or whose decoder's attention
// has no separate key/value dimension equal to its width. Where it can, `lengths` (if given) receives
// each source's tokens before its padding.
std::string static_decoding_refusal(const Seq2SeqTransformer& model, const Tensor& src,
                                    std::vector<int32_t>* lengths = nullptr);

// Whether the environment asks for static decoding on `device`: QKV_STATIC_DECODING=1 anywhere, unset
// on the CPU and on a GPU unless QKV_CUDA_GRAPHS=0; any other value of QKV_STATIC_DECODING, the usual
// cache. `graphs` says whether with CUDA graphs: on a GPU unless QKV_CUDA_GRAPHS=0 (core/cuda.h's
// graph_use).
bool static_decoding_wanted(Device device, bool* graphs);

class StaticDecoder {
 public:
  StaticDecoder(const Seq2SeqTransformer& model, bool graphs);
  ~StaticDecoder();
  StaticDecoder(const StaticDecoder&) = delete;
  StaticDecoder& operator=(const StaticDecoder&) = delete;

  const Seq2SeqTransformer& model() const { return model_; }
  bool graphs() const { return graphs_; }          // replaying graphs now
  bool graphs_asked() const { return asked_; }     // made to (graphs() turns false if a capture fails)
  // Graphs captured so far, and steps replayed from one (what a benchmark reports).
  int64_t captured() const { return captured_; }
  int64_t replayed() const { return replayed_; }
  // The decoder for one batch: owns_lock() false while it serves another.
  std::unique_lock<std::mutex> claim() { return std::unique_lock<std::mutex>(busy_, std::try_to_lock); }

  // A step's device inputs for a bucket of `rows` rows and `width` positions: views of one i32 buffer.
  struct Inputs {
    Tensor tokens;    // [rows, 1]
    Tensor position;  // [1, 1]
    SlotStep step;
    int64_t size = 0;  // i32 values, from the buffer's start
  };

 private:
  friend class StaticBatch;
  // Room for a batch of `sources` sources of `source_len` tokens; every graph goes if the pools move.
  void reserve_sources(int64_t sources, int64_t source_len);
  // Room for `slots` self-attention slots (the old ones kept); every graph goes if the pools move.
  void reserve_slots(int64_t slots);
  Inputs inputs(int64_t rows, int64_t width);
  // The step on the inputs' values: log-probabilities [rows, V] (no host value read).
  Tensor run(const Inputs& in) const;
  // The step on `in` (inputs(rows, width)) after the host's values were copied into it: run, or
  // replay the bucket's graph (capturing it the first time, after running it).
  Tensor step(const Inputs& in, int64_t rows, int64_t width);
  void drop_graphs();
  // Without graphs, the pools go when a batch ends (the next one makes its own, sized by its own
  // need): memory is what the batch decoding now holds, as with the usual cache.
  void release_pools();

  struct Bucket {
    Inputs in;
    std::unique_ptr<cuda::Graph> graph;
    Tensor out;  // the graph's result: [rows, V]
  };

  const Seq2SeqTransformer& model_;
  const bool asked_;
  bool graphs_;
  Device device_;
  std::mutex busy_;
  std::vector<Tensor> self_k_, self_v_;    // per layer: [slots, H, 1, D]
  std::vector<Tensor> cross_k_, cross_v_;  // per layer: [sources, H, source_len, D]
  Tensor source_pages_;                    // i32 [sources, 1]: 0 … sources − 1
  Tensor buffer_;                          // i32: the inputs of every bucket (one at a time)
  std::vector<int32_t> staging_;           // the host's values for it
  // the buckets' graphs' one memory pool (as PagedDecodeGraphs'): their temporaries are reused from
  // bucket to bucket — replays run one at a time, and each reads only its inputs and writes its `out`,
  // which stays its own (live) — so memory is the largest bucket's, not the sum over buckets; a new
  // pool with the next graphs after drop_graphs (the old one's blocks then go back to the cache)
  std::shared_ptr<cuda::Stream> pool_;
  std::map<std::pair<int64_t, int64_t>, Bucket> buckets_;
  int64_t captured_ = 0, replayed_ = 0;
};

// One batch's decoding through a StaticDecoder: the host's bookkeeping of rows, their sources and
// their histories (Seq2SeqTransformer::DecoderState holds it when static decoding is on).
class StaticBatch {
 public:
  // Encodes src i32 [B, S] into the decoder's cross-attention pages; rows 0 … B−1 decode source r.
  // Holds the decoder for its lifetime (`hold`: its claim(), which must own the lock).
  StaticBatch(std::shared_ptr<StaticDecoder> decoder, std::unique_lock<std::mutex> hold, const Tensor& src);
  ~StaticBatch();
  StaticBatch(const StaticBatch&) = delete;
  StaticBatch& operator=(const StaticBatch&) = delete;

  int64_t rows() const { return static_cast<int64_t>(row_source_.size()); }
  int64_t length() const { return length_; }
  // Keeps rows `index` (in that order, repeats allowed): the host's lists follow, nothing moves on
  // the device.
  void reorder(const std::vector<int64_t>& index);
  // Feeds tokens[r] to row r → log p of the next token, [rows, V], valid until the next step.
  Tensor step(const std::vector<int32_t>& tokens);
  const StaticDecoder& decoder() const { return *decoder_; }
  // The steps in a graph's buckets (dummy rows, wide histories) even without graphs: what the CPU's
  // tests check of the GPU's shapes.
  void use_buckets() { buckets_ = true; }

 private:
  std::shared_ptr<StaticDecoder> decoder_;
  std::unique_lock<std::mutex> hold_;
  std::vector<int32_t> source_len_;           // per source: its tokens before the padding
  std::vector<int32_t> row_source_;           // per row: its source
  std::vector<std::vector<int32_t>> history_;  // per row: its positions' slots
  int64_t length_ = 0, next_slot_ = 0;
  bool buckets_ = false;
};

}  // namespace qkv::nn
