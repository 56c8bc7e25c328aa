#include "qkv/nn/static_decoding.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops.h"

namespace qkv::nn {

namespace {

constexpr int64_t kRowStep = 8;     // a bucket's rows: a multiple of 8
constexpr int64_t kWidthStep = 32;  // its history's width: a multiple of 32 positions

int64_t round_up(int64_t n, int64_t step) { return (n + step - 1) / step * step; }

}  // namespace

bool static_decoding_wanted(Device device, bool* graphs) {
  // a GPU's steps as CUDA graphs unless QKV_CUDA_GRAPHS=0 (2.3× the eager ones on an H200: docs/CUDA.md)
  *graphs = !device.is_cpu() && cuda::graph_use() != cuda::GraphUse::none;
  const char* v = std::getenv("QKV_STATIC_DECODING");
  if (v && *v) {
    if (std::string_view(v) != "1") *graphs = false;  // asked for the usual cache
    return std::string_view(v) == "1";
  }
  // the CPU's default (faster there: docs/BENCHMARKS.md); a GPU's with graphs (without, not timed)
  return device.is_cpu() || *graphs;
}

std::string static_decoding_refusal(const Seq2SeqTransformer& model, const Tensor& src, std::vector<int32_t>* lengths) {
  if (model.is_training()) return "the model is in training mode (its dropout draws at every step)";
  for (const auto& layer : model.transformer->decoder->layers) {
    const MultiheadAttention& a = *layer->self_attn;
    if (a.kdim != a.embed_dim || a.vdim != a.embed_dim || layer->multihead_attn->vdim != layer->multihead_attn->embed_dim)
      return "the decoder's attention has key/value widths other than the model's";
  }
  if (src.dim() != 2 || src.dtype() != DType::i32 || src.size(1) == 0) return "the sources are not an i32 [B, S]";
  const Tensor host = src.to(Device::cpu()).contiguous();
  const int32_t* p = host.data<int32_t>();
  const int64_t B = host.size(0), S = host.size(1);
  const int32_t pad = model.config.pad_id;
  std::vector<int32_t> found;
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    while (n < S && p[b * S + n] != pad) ++n;
    if (n == 0) return detail::concat("source ", b, " has no token before its padding");
    for (int64_t j = n; j < S; ++j)
      if (p[b * S + j] != pad) return detail::concat("source ", b, " has a padding id (", pad, ") before its last token");
    found.push_back(static_cast<int32_t>(n));
  }
  if (lengths) *lengths = std::move(found);
  return "";
}

// ---- the decoder: pools, inputs, graphs ----------------------------------------------------------

StaticDecoder::StaticDecoder(const Seq2SeqTransformer& model, bool graphs)
    : model_(model), asked_(graphs), graphs_(graphs), device_(model.embedding->weight.device()) {
  QKV_CHECK(!graphs || !device_.is_cpu(), "static decoding: CUDA graphs need the model on a GPU, it is on ",
            device_.str());
}

StaticDecoder::~StaticDecoder() = default;

void StaticDecoder::drop_graphs() {
  buckets_.clear();
  pool_.reset();
}

void StaticDecoder::release_pools() {
  drop_graphs();
  self_k_.clear(), self_v_.clear(), cross_k_.clear(), cross_v_.clear();
  source_pages_ = Tensor(), buffer_ = Tensor();
  staging_ = {};
}

void StaticDecoder::reserve_sources(int64_t sources, int64_t source_len) {
  const int64_t have_b = cross_k_.empty() ? 0 : cross_k_[0].size(0), have_s = cross_k_.empty() ? 0 : cross_k_[0].size(2);
  if (sources <= have_b && source_len <= have_s) return;
  const int64_t B = std::max(have_b, round_up(sources, kRowStep)), S = std::max(have_s, round_up(source_len, 16));
  drop_graphs();
  cross_k_.clear(), cross_v_.clear();
  for (const auto& layer : model_.transformer->decoder->layers) {
    const MultiheadAttention& a = *layer->multihead_attn;
    // (not zeroed: a source's keys past its length, like a slot no history names, are never read)
    cross_k_.push_back(Tensor::empty({B, a.num_heads, S, a.head_dim}, DType::f32, device_));
    cross_v_.push_back(Tensor::empty({B, a.num_heads, S, a.head_dim}, DType::f32, device_));
  }
  std::vector<int32_t> pages(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) pages[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  source_pages_ = Tensor::from_ints(pages, {B, 1}).to(device_);
}

void StaticDecoder::reserve_slots(int64_t slots) {
  const int64_t have = self_k_.empty() ? 0 : self_k_[0].size(0);
  if (slots <= have) return;
  const int64_t n = std::max(round_up(slots, 64), 2 * have);  // (doubling: amortized O(1) copies a slot)
  QKV_CHECK(n <= 2147483647, "static decoding: ", n, " slots exceed the i32 indices");
  drop_graphs();
  const auto& layers = model_.transformer->decoder->layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    const MultiheadAttention& a = *layers[l]->self_attn;
    Tensor k = Tensor::empty({n, a.num_heads, 1, a.head_dim}, DType::f32, device_);
    Tensor v = Tensor::empty({n, a.num_heads, 1, a.head_dim}, DType::f32, device_);
    if (have > 0) {  // the batch's slots so far keep their places
      k.slice(0, 0, have).copy_(self_k_[l]);
      v.slice(0, 0, have).copy_(self_v_[l]);
    }
    if (l < self_k_.size()) self_k_[l] = k, self_v_[l] = v;
    else self_k_.push_back(k), self_v_.push_back(v);
  }
}

// The buffer's layout for a bucket: tokens [R] | position [1] | slots [R] | rows [R] | history [R, C] |
// self_len [R] | source [R] | source_len [R].
StaticDecoder::Inputs StaticDecoder::inputs(int64_t rows, int64_t width) {
  const int64_t R = rows, size = R * (6 + width) + 1;
  if (!buffer_.defined() || buffer_.numel() < size) {  // (grows: every graph read the old one)
    drop_graphs();
    buffer_ = Tensor::zeros({std::max<int64_t>(size, buffer_.defined() ? 2 * buffer_.numel() : 0)}, DType::i32, device_);
  }
  Inputs in;
  BufferSlices slices(buffer_);
  auto take = [&](int64_t n) { return slices.take(n); };
  in.tokens = take(R).view({R, 1});
  in.position = take(1).view({1, 1});
  in.step.slots = take(R);
  in.step.rows = take(R);
  in.step.history = take(R * width).view({R, width});
  in.step.self_len = take(R);
  in.step.source = take(R);
  in.step.source_len = take(R);
  in.step.sources = source_pages_;
  in.size = slices.taken();
  return in;
}

Tensor StaticDecoder::run(const Inputs& in) const {
  NoGradGuard no_grad;
  const Seq2SeqTransformer& m = model_;
  // x = E[y] (·√d_model) + PE[t]: [R, 1, E] + [1, 1, E], as Seq2SeqTransformer::embed
  Tensor x = embedding_inference(in.tokens, m.embedding->weight, m.embedding_inference);
  if (m.config.scale_embedding) x = mul(x, std::sqrt(static_cast<float>(m.config.d_model)));
  x = x + embedding(in.position, m.pos->weight);
  const auto& layers = m.transformer->decoder->layers;
  for (size_t l = 0; l < layers.size(); ++l)
    x = layers[l]->forward_slots(x, self_k_[l], self_v_[l], cross_k_[l], cross_v_[l], in.step);
  const Tensor h = m.transformer->decoder->final_norm(x.select(1, 0));  // [R, E]
  const Tensor b = m.final_logits_bias.defined() ? m.final_logits_bias.view({m.config.vocab_size}) : Tensor();
  return linear_log_softmax_inference(h, m.embedding->weight, m.embedding_inference, b);  // [R, V]
}

Tensor StaticDecoder::step(const Inputs& in, int64_t rows, int64_t width) {
  if (!graphs_) return run(in);  // (no bucket to keep: the shapes are the step's own)
  auto it = buckets_.find({rows, width});
  if (it == buckets_.end()) it = buckets_.emplace(std::pair{rows, width}, Bucket{in, nullptr, Tensor()}).first;
  Bucket& b = it->second;
  if (b.graph) {
    b.graph->replay();
    ++replayed_;
    return b.out;
  }
  Tensor out = run(b.in);  // the first step of a bucket runs as written (and makes what it makes once)
  if (!graphs_) return out;
  Tensor captured;
  if (!pool_) pool_ = std::make_shared<cuda::Stream>(device_.index);
  b.graph = cuda::capture_or_explain(pool_, device_.index, [&] { captured = run(b.in); }, "decoding");
  if (b.graph) b.out = captured, ++captured_;
  else graphs_ = false;  // decode on without graphs (capture_or_explain said why)
  return out;
}

// ---- a batch --------------------------------------------------------------------------------------

StaticBatch::StaticBatch(std::shared_ptr<StaticDecoder> decoder, std::unique_lock<std::mutex> hold, const Tensor& src)
    : decoder_(std::move(decoder)), hold_(std::move(hold)) {
  QKV_CHECK(hold_.owns_lock(), "static decoding: the decoder is decoding another batch");
  const Seq2SeqTransformer& m = decoder_->model();
  const std::string refused = static_decoding_refusal(m, src, &source_len_);  // (and each source's length)
  QKV_CHECK(refused.empty(), "static decoding: ", refused);
  NoGradGuard no_grad;
  const int64_t B = src.size(0), S = src.size(1);
  for (int64_t b = 0; b < B; ++b) row_source_.push_back(static_cast<int32_t>(b));
  history_.assign(static_cast<size_t>(B), {});
  // the encoder, then each layer's cross-attention keys and values into the sources' pages
  StaticDecoder& d = *decoder_;
  d.reserve_sources(B, S);
  const Seq2SeqTransformer::Encoded e = m.encode(src, nullptr, /*inference=*/true);
  const auto& layers = m.transformer->decoder->layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    const KVCache kv = layers[l]->multihead_attn->project_kv(e.memory, e.memory);  // [B, H, S, D]
    d.cross_k_[l].slice(0, 0, B).slice(2, 0, S).copy_(kv.keys());
    d.cross_v_[l].slice(0, 0, B).slice(2, 0, S).copy_(kv.values());
  }
}

StaticBatch::~StaticBatch() {
  if (!decoder_->graphs()) decoder_->release_pools();  // (still held: hold_ goes after this)
}

void StaticBatch::reorder(const std::vector<int64_t>& index) {
  std::vector<int32_t> rs;
  std::vector<std::vector<int32_t>> hs;
  for (int64_t i : index) {
    QKV_CHECK(0 <= i && i < rows(), "DecoderState::reorder: row ", i, " of ", rows());
    rs.push_back(row_source_[static_cast<size_t>(i)]);
    hs.push_back(history_[static_cast<size_t>(i)]);
  }
  row_source_ = std::move(rs), history_ = std::move(hs);
}

Tensor StaticBatch::step(const std::vector<int32_t>& tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  QKV_CHECK(n == rows() && n > 0, "Transformer::step: ", n, " tokens for ", rows(), " decoder rows");
  StaticDecoder& d = *decoder_;
  const Seq2SeqTransformer& m = d.model();
  const int64_t t = length_;
  QKV_CHECK(t < m.config.max_len, "positions ", t, " … ", t, " exceed the model's max_len ", m.config.max_len,
            " (a sequence of ", t + 1, " tokens is too long)");
  // a graph's bucket; without graphs the step's own sizes (padded rows would be work for nothing)
  const bool bucket = d.graphs() || buckets_;
  const int64_t R = bucket ? round_up(n, kRowStep) : n, C = bucket ? round_up(t + 1, kWidthStep) : t + 1;
  d.reserve_slots(next_slot_ + R);
  const StaticDecoder::Inputs in = d.inputs(R, C);
  // the host's values, in the layout of StaticDecoder::inputs
  std::vector<int32_t>& v = d.staging_;
  v.assign(static_cast<size_t>(in.size), 0);
  int32_t* tok = v.data();
  int32_t* pos = tok + R;
  int32_t* slots = pos + 1;
  int32_t* row = slots + R;
  int32_t* hist = row + R;
  int32_t* self_len = hist + R * C;
  int32_t* source = self_len + R;
  int32_t* source_len = source + R;
  *pos = static_cast<int32_t>(t);
  for (int64_t r = 0; r < R; ++r) {
    const bool real = r < n;
    const auto slot = static_cast<int32_t>(next_slot_ + r);
    tok[r] = real ? tokens[static_cast<size_t>(r)] : tokens[0];  // (a dummy row: any valid token)
    QKV_CHECK(tok[r] >= 0 && tok[r] < m.config.vocab_size, "Transformer::step: token ", tok[r], " of row ", r,
              " is outside the vocabulary of ", m.config.vocab_size);
    slots[r] = slot;
    row[r] = static_cast<int32_t>(r);
    int32_t* h = hist + r * C;
    if (real) {
      const std::vector<int32_t>& past = history_[static_cast<size_t>(r)];
      std::copy(past.begin(), past.end(), h);
      h[past.size()] = slot;
      self_len[r] = static_cast<int32_t>(past.size() + 1);
    } else {
      h[0] = slot, self_len[r] = 1;
    }
    source[r] = row_source_[static_cast<size_t>(real ? r : 0)];
    source_len[r] = source_len_[static_cast<size_t>(source[r])];
  }
  d.buffer_.slice(0, 0, in.size).copy_(Tensor::from_blob(v.data(), {in.size}, DType::i32));  // (one upload)
  Tensor out = d.step(in, R, C);
  for (int64_t r = 0; r < n; ++r) history_[static_cast<size_t>(r)].push_back(slots[r]);
  next_slot_ += R, ++length_;
  return R == n ? out : out.slice(0, 0, n);
}

}  // namespace qkv::nn
