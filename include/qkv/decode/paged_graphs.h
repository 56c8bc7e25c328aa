// The decoder-only models' decoding steps (GPT, Llama over a paged KV cache: decode/batching_generator.h)
// as CUDA graphs, vLLM's decode graphs: a small model's step on a GPU is dozens of small kernels,
// and launching them one by one from the host costs more than they run (docs/CUDA.md, "Measured").
// A step in which every sequence feeds one token (no prompt chunk) is padded to a bucket of B tokens
// — 1, 2, 4, then multiples of 8 up to the batch's limit — over a block table W pages wide — the
// widest context's pages rounded up to a power of two —, and each (B, W) bucket is captured once, the
// first time a step reaches it, and replayed by every later one. Prefill and chunked steps run as
// usual.
//
// What changes from step to step lives in one i32 device buffer the graph reads, written by one copy
// from the host before each replay:
//
//   ids [B] | positions [B] | seq [B] | seq_len [B] | slots [B] | block_table [B, W] [| rope_rows [B]]
//
// (rope_rows: a longrope model's — nn/llama.h, refeed_at() > 0 — rows of its short and long rotary tables
// stacked, position or rows + position by each sequence's factors: the choice a step makes on the host
// made in the buffer instead, so a bucket's graph serves sequences on either factors.)
//
// A padding token (rows n … B − 1) is token 0 at position 0 that sees no key (seq_len 0: zeros from
// the attention) and writes none (slot −1: paged_kv_write skips it, vLLM's PAD_SLOT_ID); its logits are
// never read, and no row's values depend on another's (activations are quantized per row). Inside a
// graph: no cascade over shared prefixes (its groups are found on the host: each token reads its
// shared pages itself), the paged kernel's split into runs fixed by the bucket's width (runs past a
// token's keys give empty partials), Llama's rotary rows gathered on the device by position.
//
// The graphs share one memory pool (PyTorch's graph_pool_handle, as vLLM captures its buckets):
// they never run at once, and each one's output stays its own.
//
//   BatchingGeneratorOptions::decode_graphs automatic: on a GPU unless QKV_CUDA_GRAPHS=0 (1.4–1.6× the
//   eager steps of GPT-2 small's shape on an H200, 2026-12-04); decode_graphs on: also on the CPU,
//   emulated — every bucketed step run under cuda::EmulatedCapture (a host read inside it is an Error,
//   as a capture's wait would be): what the CPU's tests check of the GPU's steps.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "qkv/core/cuda.h"
#include "qkv/models/model.h"
#include "qkv/nn/paged_kv_cache.h"

namespace qkv::decode {

// Whether decoding steps on `device` are graphs when BatchingGeneratorOptions::decode_graphs is
// automatic: on a GPU unless QKV_CUDA_GRAPHS=0 (core/cuda.h's graph_use).
bool decode_graphs_wanted(Device device);

class PagedDecodeGraphs {
 public:
  enum class Mode : uint8_t { graph, emulated };  // CUDA graphs on a GPU, or the CPU's emulation (above)

  // Buckets for steps of at most max_batch tokens of `model` over `cache` (whose device must be a
  // GPU for Mode::graph).
  PagedDecodeGraphs(const models::LanguageModel& model, nn::PagedKVCache& cache, int64_t max_batch, Mode mode);
  ~PagedDecodeGraphs();
  PagedDecodeGraphs(const PagedDecodeGraphs&) = delete;
  PagedDecodeGraphs& operator=(const PagedDecodeGraphs&) = delete;

  // The bucket sizes a step of n tokens is padded to: the least of 1, 2, 4, 8, 16, 24, … ≥ n, at most
  // max_batch; and a block table's width for `pages` pages: the least power of two ≥ pages, at most
  // `cap` (a sequence's most pages).
  static int64_t bucket_tokens(int64_t n, int64_t max_batch);
  static int64_t bucket_pages(int64_t pages, int64_t cap);

  // Whether a step of these new-token counts is one a bucket holds: every sequence feeds one token,
  // at most max_batch of them.
  bool takes(const std::vector<int64_t>& new_tokens) const;

  // The step of seqs[i] feeding ids[i] (one token each; takes()): plans it as PagedKVCache::plan does
  // (each length advances by one; long_rope[i]: seqs[i] on longrope's long factors, PagedStep::long_rope's
  // flag, empty: none is) and runs or replays its bucket → the logits, [n, V] on the cache's
  // device (a view of the bucket's output: valid until the next step). Mode::graph: a bucket's first step runs as
  // written (and makes what it makes once), is then captured, and later ones replay it; a capture that fails leaves
  // graphs off (graphs() false, why on stderr once) and every later step runs as written.
  Tensor step(const std::vector<nn::PagedSequence*>& seqs, const std::vector<int32_t>& ids,
              const std::vector<uint8_t>& long_rope = {});

  Mode mode() const { return mode_; }
  bool graphs() const { return graphs_; }
  int64_t captured() const { return captured_; }  // graphs captured so far
  int64_t replayed() const { return replayed_; }  // steps replayed from one (or, emulated, run bucketed)

 private:
  // a bucket's device inputs: views of buffer_ (the layout above) as the model's step reads them
  struct Inputs {
    Tensor ids;
    nn::PagedStep step;
    int64_t size = 0;  // i32 values from the buffer's start
  };
  struct Bucket {
    Inputs in;
    std::unique_ptr<cuda::Graph> graph;
    Tensor out;  // the graph's logits, [B, V]
  };
  Inputs inputs(int64_t tokens, int64_t width);
  Tensor run(const Inputs& in) const;  // the model's step on the inputs' values: logits [B, V] on the device

  const models::LanguageModel& model_;
  nn::PagedKVCache& cache_;
  const int64_t max_batch_, width_cap_;
  const Mode mode_;
  bool graphs_;
  Tensor buffer_;                 // i32 on the cache's device: the inputs of the largest bucket
  std::vector<int32_t> staging_;  // the host's values for it
  std::map<std::pair<int64_t, int64_t>, Bucket> buckets_;
  std::shared_ptr<cuda::Stream> pool_;  // the graphs' shared memory pool (its capture stream)
  int64_t captured_ = 0, replayed_ = 0;
};

}  // namespace qkv::decode
