#include "qkv/decode/paged_graphs.h"

#include <algorithm>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/static_decoding.h"  // BufferSlices

namespace qkv::decode {

bool decode_graphs_wanted(Device device) { return !device.is_cpu() && cuda::graph_use() != cuda::GraphUse::none; }

int64_t PagedDecodeGraphs::bucket_tokens(int64_t n, int64_t max_batch) {
  int64_t b = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : (n + 7) / 8 * 8;  // vLLM's 1, 2, 4, 8, 16, 24, …
  return std::min(b, std::max(n, max_batch));
}

int64_t PagedDecodeGraphs::bucket_pages(int64_t pages, int64_t cap) {
  int64_t w = 1;
  while (w < pages) w *= 2;
  return std::min(w, std::max(pages, cap));
}

PagedDecodeGraphs::PagedDecodeGraphs(const models::LanguageModel& model, nn::PagedKVCache& cache, int64_t max_batch, Mode mode)
    : model_(model),
      cache_(cache),
      max_batch_(max_batch),
      width_cap_(cache.pages_for(model.block_size())),
      mode_(mode),
      graphs_(mode == Mode::graph) {
  QKV_CHECK(max_batch >= 1, "PagedDecodeGraphs: max_batch must be ≥ 1, got ", max_batch);
  QKV_CHECK(mode == Mode::emulated || !cache.device().is_cpu(), "PagedDecodeGraphs: CUDA graphs need a GPU's cache; the CPU's ",
            "steps are emulated (Mode::emulated)");
  // the largest bucket's inputs, made once: a graph reads the buffer it was captured with
  const int64_t size = max_batch * (5 + width_cap_ + (model.refeed_at() > 0 ? 1 : 0));
  QKV_CHECK(size <= 2147483647, "PagedDecodeGraphs: ", max_batch, " tokens over ", width_cap_,
            " pages each exceed one buffer's i32 indices");
  buffer_ = Tensor::zeros({size}, DType::i32, cache.device());
  if (mode == Mode::graph) pool_ = std::make_shared<cuda::Stream>(cache.device().index);
}

PagedDecodeGraphs::~PagedDecodeGraphs() = default;

bool PagedDecodeGraphs::takes(const std::vector<int64_t>& new_tokens) const {
  return !new_tokens.empty() && static_cast<int64_t>(new_tokens.size()) <= max_batch_ &&
         std::all_of(new_tokens.begin(), new_tokens.end(), [](int64_t n) { return n == 1; });
}

// The buffer's layout for B tokens over W pages: ids | positions | seq | seq_len | slots | block_table [B, W].
PagedDecodeGraphs::Inputs PagedDecodeGraphs::inputs(int64_t tokens, int64_t width) {
  const int64_t B = tokens, W = width;
  Inputs in;
  nn::BufferSlices slices(buffer_);
  auto take = [&](int64_t n) { return slices.take(n); };
  in.ids = take(B);
  nn::PagedStep& s = in.step;
  s.positions = take(B);
  s.seq = take(B);
  s.seq_len = take(B);
  s.paged_len = s.seq_len;  // (decoding tokens only: each reads its keys through the pages)
  s.slots = take(B);
  s.block_table = take(B * W).view({B, W});
  s.page_size = cache_.page_size();
  // positions stay below the bucket's widest context: what the tables a step reads (Llama's rotary
  // angles) must cover when the graph is captured
  s.positions_below = std::min(W * cache_.page_size(), model_.block_size());
  if (model_.refeed_at() > 0) s.rope_rows = take(B);    // (longrope: the stacked tables' rows)
  for (int64_t t = 0; t < B; ++t) s.last.push_back(t);  // (every token's logits: no gather)
  // (no host block table: no cascade inside a graph)
  in.size = slices.taken();
  return in;
}

Tensor PagedDecodeGraphs::run(const Inputs& in) const {
  NoGradGuard no_grad;
  return model_.step_paged(in.ids, in.step, cache_);  // [B, V]
}

Tensor PagedDecodeGraphs::step(const std::vector<nn::PagedSequence*>& seqs, const std::vector<int32_t>& ids,
                               const std::vector<uint8_t>& long_rope) {
  const auto n = static_cast<int64_t>(seqs.size());
  QKV_CHECK(takes(std::vector<int64_t>(seqs.size(), 1)) && ids.size() == seqs.size() &&
                (long_rope.empty() || long_rope.size() == seqs.size()),
            "PagedDecodeGraphs::step: ", n, " sequences, ", ids.size(), " tokens (one each, at most ", max_batch_,
            ") and ", long_rope.size(), " longrope flags");
  const int64_t P = cache_.page_size();
  int64_t widest = 1;
  for (int64_t i = 0; i < n; ++i) {
    const nn::PagedSequence& s = *seqs[static_cast<size_t>(i)];
    QKV_CHECK(cache_.pages_for(s.length + 1) <= static_cast<int64_t>(s.pages.size()), "PagedDecodeGraphs::step: sequence ",
              i, " of ", s.length, " tokens holds ", s.pages.size(), " pages, too few for one more (reserve them first)");
    widest = std::max(widest, cache_.pages_for(s.length + 1));
  }
  const int64_t B = bucket_tokens(n, max_batch_), W = bucket_pages(widest, width_cap_);
  auto it = buckets_.find({B, W});
  if (it == buckets_.end()) it = buckets_.emplace(std::pair{B, W}, Bucket{inputs(B, W), nullptr, Tensor()}).first;
  Bucket& b = it->second;
  // the host's values, in the layout of inputs(): padding tokens (rows n … B − 1) are token 0 at
  // position 0 that sees no key and writes none
  staging_.assign(static_cast<size_t>(b.in.size), 0);
  int32_t* tok = staging_.data();
  int32_t* pos = tok + B;
  int32_t* row = pos + B;
  int32_t* len = row + B;
  int32_t* slot = len + B;
  int32_t* table = slot + B;
  int32_t* rope_row = b.in.step.rope_rows.defined() ? table + B * W : nullptr;
  std::fill(table, table + B * W, -1);
  b.in.step.host_positions.assign(static_cast<size_t>(B), 0);
  b.in.step.long_rope.assign(rope_row ? static_cast<size_t>(B) : 0, 0);
  for (int64_t t = 0; t < B; ++t) {
    row[t] = static_cast<int32_t>(t);
    if (t >= n) {
      slot[t] = -1;
      continue;
    }
    const nn::PagedSequence& s = *seqs[static_cast<size_t>(t)];
    const int64_t j = s.length;  // the new token's position
    tok[t] = ids[static_cast<size_t>(t)];
    pos[t] = static_cast<int32_t>(j);
    len[t] = static_cast<int32_t>(j + 1);
    slot[t] = static_cast<int32_t>(s.pages[static_cast<size_t>(j / P)] * P + j % P);
    const int64_t pages = std::min<int64_t>(W, static_cast<int64_t>(s.pages.size()));
    std::copy(s.pages.begin(), s.pages.begin() + pages, table + t * W);
    b.in.step.host_positions[static_cast<size_t>(t)] = static_cast<int32_t>(j);
    if (rope_row) {  // the row of the stacked tables: the short one's j, or the long one's below + j
      const bool is_long = !long_rope.empty() && long_rope[static_cast<size_t>(t)];
      b.in.step.long_rope[static_cast<size_t>(t)] = is_long;
      rope_row[t] = static_cast<int32_t>((is_long ? b.in.step.positions_below : 0) + j);
    }
  }
  buffer_.slice(0, 0, b.in.size).copy_(Tensor::from_blob(staging_.data(), {b.in.size}, DType::i32));  // (one upload)
  for (nn::PagedSequence* s : seqs) ++s->length;  // (the step writes their slots)

  Tensor out;
  if (mode_ == Mode::emulated) {  // the step as a graph holds it, its host reads refused
    cuda::EmulatedCapture recording;
    out = run(b.in);
    ++replayed_;
  } else if (b.graph) {
    b.graph->replay();
    out = b.out;
    ++replayed_;
  } else {
    out = run(b.in);  // the bucket's first step runs as written (and makes what it makes once)
    if (graphs_) {
      Tensor captured;
      b.graph = cuda::capture_or_explain(pool_, cache_.device().index, [&] { captured = run(b.in); }, "decoding");
      if (b.graph) b.out = captured, ++captured_;
      else graphs_ = false;  // decode on without graphs (capture_or_explain said why)
    }
  }
  return out.slice(0, 0, n);
}

}  // namespace qkv::decode
