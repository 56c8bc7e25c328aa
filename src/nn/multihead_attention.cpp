#include "qkv/nn/multihead_attention.h"

#include <cstring>

#include <algorithm>
#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/allocator.h"
#include "qkv/core/parallel.h"
#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

MultiheadAttention::MultiheadAttention(int64_t E, int64_t H, float p, bool bias, int64_t kd, int64_t vd, bool bf,
                                       Generator* gen)
    : embed_dim(E), num_heads(H), head_dim(H > 0 ? E / H : 0), kdim(kd ? kd : E), vdim(vd ? vd : E), dropout(p),
      batch_first(bf), gen_(gen) {
  QKV_CHECK(E > 0 && H > 0 && E % H == 0, "MultiheadAttention: embed_dim ", E, " must be divisible by num_heads ", H);
  Generator& g = gen ? *gen : default_generator();
  if (kdim == E && vdim == E) {
    in_proj_weight = Tensor::empty({3 * E, E});
    init::xavier_uniform_(in_proj_weight, g);
    in_proj_weight = register_parameter("in_proj_weight", in_proj_weight);
  } else {
    q_proj_weight = Tensor::empty({E, E});
    k_proj_weight = Tensor::empty({E, kdim});
    v_proj_weight = Tensor::empty({E, vdim});
    for (Tensor* w : {&q_proj_weight, &k_proj_weight, &v_proj_weight}) init::xavier_uniform_(*w, g);
    q_proj_weight = register_parameter("q_proj_weight", q_proj_weight);
    k_proj_weight = register_parameter("k_proj_weight", k_proj_weight);
    v_proj_weight = register_parameter("v_proj_weight", v_proj_weight);
  }
  if (bias) in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * E}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, bias, &g));
  if (bias) out_proj->bias.detach().fill_(0.f);
}

// nn.MultiheadAttention's masks → one mask in qkv's convention (ops/mask.h), after checking their
// shapes: attn_mask [L, S] or [B·H, L, S], key_padding_mask [B, S].
Tensor mha_attention_mask(const Tensor& attn_mask, const Tensor& kpm, int64_t B, int64_t H, int64_t L, int64_t S) {
  Tensor am, pm;
  if (attn_mask.defined()) {
    if (attn_mask.dim() == 2) {
      QKV_CHECK(attn_mask.size(0) == L && attn_mask.size(1) == S, "MultiheadAttention: attn_mask ",
                shape_str(attn_mask.shape()), " should be [", L, ",", S, "]");
      am = attn_mask;
    } else {
      QKV_CHECK(attn_mask.dim() == 3 && attn_mask.size(0) == B * H && attn_mask.size(1) == L && attn_mask.size(2) == S,
                "MultiheadAttention: attn_mask ", shape_str(attn_mask.shape()), " should be [", L, ",", S, "] or [",
                B * H, ",", L, ",", S, "]");
      am = attn_mask.reshape({B, H, L, S});
    }
  }
  if (kpm.defined()) {
    QKV_CHECK(kpm.dim() == 2 && kpm.size(0) == B && kpm.size(1) == S, "MultiheadAttention: key_padding_mask ",
              shape_str(kpm.shape()), " should be [", B, ",", S, "]");
    pm = kpm.dtype() == DType::boolean ? attention_mask_from_padding(kpm) : kpm.reshape({B, 1, 1, S});
  }
  return merge_attention_masks(attention_mask_from_mha(am), pm);
}

MultiheadAttention::Output MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const Tensor& key_padding_mask, bool need_weights,
                                                       const Tensor& attn_mask, bool average_attn_weights,
                                                       bool is_causal) const {
  QKV_CHECK(query.dim() == 2 || query.dim() == 3, "MultiheadAttention: query must be [L, E] or 3-D, got ",
            shape_str(query.shape()));
  QKV_CHECK(key.dim() == query.dim(), "MultiheadAttention: query ", shape_str(query.shape()), " and key ",
            shape_str(key.shape()), " differ in rank");
  const bool batched = query.dim() == 3;
  const int64_t B = batched ? query.size(batch_first ? 0 : 1) : 1, L = query.size(batched && batch_first ? 1 : 0),
                S = key.size(batched && batch_first ? 1 : 0);
  const Tensor kpm = batched || !key_padding_mask.defined() ? key_padding_mask : key_padding_mask.unsqueeze(0);
  return forward_masked(query, key, value, mha_attention_mask(attn_mask, kpm, B, num_heads, L, S), need_weights,
                        average_attn_weights, is_causal);
}

MultiheadAttention::Output MultiheadAttention::forward_masked(const Tensor& query, const Tensor& key,
                                                              const Tensor& value, const Tensor& mask,
                                                              bool need_weights, bool average_attn_weights,
                                                              bool is_causal, const ScoreTerm* term) const {
  const int64_t E = embed_dim, H = num_heads, D = head_dim;
  QKV_CHECK(query.dim() == 2 || query.dim() == 3, "MultiheadAttention: query must be [L, E] or 3-D, got ",
            shape_str(query.shape()));
  QKV_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), "MultiheadAttention: query ",
            shape_str(query.shape()), ", key ", shape_str(key.shape()), " and value ", shape_str(value.shape()),
            " differ in rank");
  const bool batched = query.dim() == 3;
  // Everything below works on [B, L, E].
  auto to_ble = [&](const Tensor& t) {
    if (!batched) return t.unsqueeze(0);
    return batch_first ? t : t.transpose(0, 1);
  };
  Tensor q = to_ble(query), k = to_ble(key), v = to_ble(value);
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1);
  QKV_CHECK(q.size(2) == E, "MultiheadAttention: query ", shape_str(query.shape()), " has feature size ", q.size(2),
            ", expected embed_dim ", E);
  QKV_CHECK(k.size(2) == kdim && v.size(2) == vdim, "MultiheadAttention: key ", shape_str(key.shape()), " / value ",
            shape_str(value.shape()), " should have feature sizes kdim ", kdim, " / vdim ", vdim);
  QKV_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == S, "MultiheadAttention: query ", shape_str(query.shape()),
            ", key ", shape_str(key.shape()), ", value ", shape_str(value.shape()),
            " disagree in batch size or key/value length");

  // Q = query W_Qᵀ + b_Q, K = key W_Kᵀ + b_K, V = value W_Vᵀ + b_V
  Tensor Q, K, V;
  if (in_proj_weight.defined() && query.same(key) && key.same(value)) {
    std::vector<Tensor> qkv = chunk(linear(q, in_proj_weight, in_proj_bias), 3, -1);  // one GEMM for all three
    Q = qkv[0], K = qkv[1], V = qkv[2];
  } else if (in_proj_weight.defined()) {
    // W_Q, W_K, W_V (and their biases) as one split of in_proj_*: the backward gathers their three
    // gradients into one buffer, where three slices would each zero-fill a copy of the whole matrix
    // and then be summed
    const std::vector<Tensor> w = split(in_proj_weight, E, 0),
                              b = in_proj_bias.defined() ? split(in_proj_bias, E, 0) : std::vector<Tensor>(3);
    Q = linear(q, w[0], b[0]), K = linear(k, w[1], b[1]), V = linear(v, w[2], b[2]);
  } else {
    Q = project(q, 0, false), K = project(k, 1, false), V = project(v, 2, false);
  }
  // Split heads: [B, L, E] → [B, H, L, D] (views)
  Tensor Qh = Q.view({B, L, H, D}).transpose(1, 2);
  Tensor Kh = K.view({B, S, H, D}).transpose(1, 2);
  Tensor Vh = V.view({B, S, H, D}).transpose(1, 2);

  AttentionOptions opt;
  opt.attn_mask = mask;
  if (term) {  // scores = scale · Q Kᵀ + add(Q, K) + mask
    QKV_CHECK(L == S, "MultiheadAttention: a score term is self-attention's (query ", shape_str(query.shape()),
              ", key ", shape_str(key.shape()), ")");
    opt.attn_mask = merge_attention_masks(mask, term->add(Qh, Kh));
    opt.scale = term->scale;
  }
  opt.is_causal = is_causal;
  opt.dropout_p = is_training() ? dropout : 0.f;
  opt.generator = gen_;
  Output res;
  Tensor attn;
  if (need_weights) {
    AttentionResult r = scaled_dot_product_attention_with_weights(Qh, Kh, Vh, opt);
    attn = r.output;
    res.weights = average_attn_weights ? mean(r.weights, {1}) : r.weights;
    if (!batched) res.weights = res.weights.squeeze(0);
  } else {
    attn = scaled_dot_product_attention(Qh, Kh, Vh, opt);
  }
  // Concat(head_1..head_h) W_Oᵀ + b_O
  Tensor out = out_proj->forward(attn.transpose(1, 2).reshape({B, L, E}));
  if (!batched) {
    res.output = out.squeeze(0);
  } else {
    res.output = batch_first ? out : out.transpose(0, 1);
  }
  return res;
}

// ---- decoding --------------------------------------------------------------------------------

void KVCache::reorder(const std::vector<int64_t>& index) {
  if (!k.defined()) return;
  const int64_t B = k.size(0), n = static_cast<int64_t>(index.size());
  for (int64_t r : index) QKV_CHECK(r >= 0 && r < B, "KVCache::reorder: index ", r, " out of range for batch ", B);
  const auto plain = [](const Tensor& t) {
    return t.is_contiguous() && t.device().type == DeviceType::cpu && (t.dtype() == DType::f32 || t.dtype() == DType::bf16);
  };
  if (n <= B && plain(k) && plain(v)) {
    // In place (beam search's every step): row i takes row index[i]; rows that keep their place are
    // not touched, a source that is also overwritten is set aside first, and a batch that shrinks
    // (finished sentences dropped) keeps its storage as a view of its first n rows.
    auto move_rows = [&](Tensor& t) {
      const int64_t H = t.size(1), cap = t.size(2), D = t.size(3);
      const size_t esz = dtype_size(t.dtype()), head = static_cast<size_t>(cap * D) * esz,
                   used = static_cast<size_t>(length * D) * esz;
      char* base = t.dtype() == DType::bf16 ? reinterpret_cast<char*>(t.data<bf16>()) : reinterpret_cast<char*>(t.data<float>());
      auto row = [&](int64_t r) { return base + static_cast<size_t>(r * H) * head; };
      std::vector<char> aside;
      std::vector<int64_t> aside_at(static_cast<size_t>(B), -1);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t src = index[static_cast<size_t>(i)];
        if (src == i || aside_at[static_cast<size_t>(src)] >= 0) continue;
        if (src < n && index[static_cast<size_t>(src)] != src) {  // src is overwritten too: keep a copy
          aside_at[static_cast<size_t>(src)] = static_cast<int64_t>(aside.size());
          aside.resize(aside.size() + static_cast<size_t>(H) * used);
          for (int64_t h = 0; h < H; ++h)
            std::memcpy(aside.data() + aside_at[static_cast<size_t>(src)] + static_cast<size_t>(h) * used,
                        row(src) + static_cast<size_t>(h) * head, used);
        }
      }
      // (rows in parallel: a row read in place is one that is never written — the others were set
      // aside — so no row is both read and written here; on one thread this was 8 % of a 2-thread
      // beam search's main thread, its second thread idle)
      parallel_for(n, 8, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t src = index[static_cast<size_t>(i)];
          if (src == i) continue;
          for (int64_t h = 0; h < H; ++h) {
            const char* from = aside_at[static_cast<size_t>(src)] >= 0
                                   ? aside.data() + aside_at[static_cast<size_t>(src)] + static_cast<size_t>(h) * used
                                   : row(src) + static_cast<size_t>(h) * head;
            std::memcpy(row(i) + static_cast<size_t>(h) * head, from, used);
          }
        }
      });
      if (n < B) t = t.slice(0, 0, n);
    };
    move_rows(k);
    move_rows(v);
    return;
  }
  // More rows than before (a batch expanded into beams), caches on a GPU, or views: new storage of
  // the same capacity, row i = row index[i], in one gather per tensor (on a GPU: one launch each, not
  // one copy per row — 2·n a layer and step, the beam's launch-bound cost).
  k = index_select(k, 0, index), v = index_select(v, 0, index);
}

namespace {

// Makes room for `extra` more positions when full (on `device`, the keys'): the capacity grows by a
// quarter, at least 16 positions, rounded up to 16. Copies stay amortized O(1) a position, and what
// a batch holds beyond its longest hypothesis — and the new part while one layer's old and new
// caches stand side by side — is at most a quarter of the cache, not all of it (doubling).
void grow(KVCache& c, int64_t B, int64_t H, int64_t D, int64_t Dv, int64_t extra, Device device) {
  if (c.k.defined()) {
    QKV_CHECK(c.k.size(0) == B && c.k.size(1) == H && c.k.size(3) == D, "KVCache: cache ", shape_str(c.k.shape()),
              " does not match batch ", B, ", heads ", H, ", head_dim ", D);
    if (c.length + extra <= c.capacity()) return;
  }
  const int64_t cap = (std::max(c.length + extra, c.capacity() + std::max<int64_t>(16, c.capacity() / 4)) + 15) / 16 * 16;
  Tensor k = Tensor::empty({B, H, cap, D}, DType::f32, device), v = Tensor::empty({B, H, cap, Dv}, DType::f32, device);
  if (c.length > 0) {
    k.slice(2, 0, c.length).copy_(c.keys());
    v.slice(2, 0, c.length).copy_(c.values());
  }
  UncachedFrees outgrown;  // the old caches' blocks (no step asks for their size again) leave at once
  c.k = k, c.v = v;
}

}  // namespace

void KVCache::append(const Tensor& new_k, const Tensor& new_v) {
  QKV_CHECK(new_k.dim() == 4 && new_v.dim() == 4 && new_k.size(2) == new_v.size(2), "KVCache::append: k ",
            shape_str(new_k.shape()), " / v ", shape_str(new_v.shape()), " should be [B, H, T, D]");
  const int64_t T = new_k.size(2);
  grow(*this, new_k.size(0), new_k.size(1), new_k.size(3), new_v.size(3), T, new_k.device());
  k.slice(2, length, length + T).copy_(new_k);
  v.slice(2, length, length + T).copy_(new_v);
  length += T;
}

void MultiheadAttention::set_inference_weights(InferenceWeights weights) {
  out_proj->set_inference_weights(weights);
  in_proj_inference = in_proj_weight.defined() ? InferenceWeight(in_proj_weight, weights) : InferenceWeight();
  for (int i = 0; i < 3; ++i)
    in_proj_slices[static_cast<size_t>(i)] =
        in_proj_weight.defined() ? in_proj_inference.slice_rows(i * embed_dim, (i + 1) * embed_dim) : InferenceWeight();
}

Tensor MultiheadAttention::project(const Tensor& x, int i, bool inference) const {
  const int64_t E = embed_dim;
  Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, i * E, (i + 1) * E) : Tensor();
  if (!in_proj_weight.defined()) return linear(x, i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight, b);
  Tensor w = in_proj_weight.slice(0, i * E, (i + 1) * E);
  if (inference) return linear_inference(x, w, in_proj_slices[static_cast<size_t>(i)], b);
  return linear(x, w, b);
}

// Q, K, V = x W_{Q,K,V}ᵀ + b of self-attention while decoding: x [B, T, E] → [B, T, E] each (one
// product where the projections are fused).
std::array<Tensor, 3> MultiheadAttention::self_projections(const Tensor& x) const {
  if (!in_proj_weight.defined()) return {project(x, 0, true), project(x, 1, true), project(x, 2, true)};
  std::vector<Tensor> qkv = chunk(linear_inference(x, in_proj_weight, in_proj_inference, in_proj_bias), 3, -1);
  return {qkv[0], qkv[1], qkv[2]};
}

// Concat(head_1..head_h) W_Oᵀ + b_O while decoding: Q [B, T, E] split into heads, K/V [B, H, S, D].
Tensor MultiheadAttention::attend_inference(const Tensor& Q, const Tensor& K, const Tensor& V,
                                            const AttentionOptions& opt) const {
  const int64_t B = Q.size(0), T = Q.size(1), E = embed_dim;
  Tensor attn = scaled_dot_product_attention(Q.view({B, T, num_heads, head_dim}).transpose(1, 2), K, V, opt);
  return out_proj->forward_inference(attn.transpose(1, 2).reshape({B, T, E}));
}

Tensor MultiheadAttention::forward_cached(const Tensor& x, KVCache& cache) const {
  NoGradGuard no_grad;
  QKV_CHECK(x.dim() == 3 && x.size(2) == embed_dim, "MultiheadAttention::forward_cached: x ", shape_str(x.shape()),
            " should be [B, T, ", embed_dim, "]");
  QKV_CHECK(kdim == embed_dim && vdim == embed_dim, "MultiheadAttention::forward_cached: self-attention needs kdim = vdim = embed_dim");
  const int64_t B = x.size(0), T = x.size(1), H = num_heads, D = head_dim;
  const auto [Q, K, V] = self_projections(x);
  const int64_t past = cache.length;
  cache.append(K.view({B, T, H, D}).transpose(1, 2), V.view({B, T, H, D}).transpose(1, 2));

  AttentionOptions opt;
  if (T > 1 && past == 0) {
    opt.is_causal = true;
  } else if (T > 1) {  // query i (position past+i) sees keys 0 … past+i: causal, aligned bottom-right
    opt.attn_mask = causal_mask(T, past + T, past, x.device());
  }
  return attend_inference(Q, cache.keys(), cache.values(), opt);
}

Tensor MultiheadAttention::forward_paged(const Tensor& x, PagedKVCache& cache, int64_t layer, const PagedStep& step) const {
  NoGradGuard no_grad;
  QKV_CHECK(x.dim() == 3 && x.size(0) == 1 && x.size(1) == step.tokens() && x.size(2) == embed_dim,
            "MultiheadAttention::forward_paged: x ", shape_str(x.shape()), " should be [1, ", step.tokens(), ", ", embed_dim, "]");
  QKV_CHECK(kdim == embed_dim && vdim == embed_dim, "MultiheadAttention::forward_paged: self-attention needs kdim = vdim = embed_dim");
  const int64_t T = x.size(1), H = num_heads, D = head_dim;
  const auto [Q, K, V] = self_projections(x);  // [1, T, E] each
  const Tensor attn = attend_paged(Q.reshape({T, H, D}), K.reshape({T, H, D}), V.reshape({T, H, D}), cache, layer, step);
  return out_proj->forward_inference(attn.reshape({1, T, embed_dim}));
}

// Q, K, V = x W_{Q,K,V}ᵀ + b; k_pool[slots[r]] = K[r], v_pool[slots[r]] = V[r];
// out[r] = softmax(Q[r] · k_pool[history[r, j]]ᵀ / √D) · v_pool[history[r, j]] over j < self_len[r], then W_O
Tensor MultiheadAttention::forward_slots(const Tensor& x, const Tensor& k_pool, const Tensor& v_pool,
                                         const SlotStep& step) const {
  NoGradGuard no_grad;
  QKV_CHECK(x.dim() == 3 && x.size(1) == 1 && x.size(2) == embed_dim && kdim == embed_dim && vdim == embed_dim,
            "MultiheadAttention::forward_slots: x ", shape_str(x.shape()), " should be [R, 1, ", embed_dim,
            "] (self-attention, kdim = vdim = embed_dim)");
  const int64_t R = x.size(0), H = num_heads, D = head_dim;
  const auto [Q, K, V] = self_projections(x);  // [R, 1, E] each
  paged_kv_write(k_pool, v_pool, K.reshape({R, H, D}), V.reshape({R, H, D}), step.slots);
  const Tensor attn = paged_attention(Q.reshape({R, H, D}), k_pool, v_pool, step.history, step.rows, step.self_len);
  return out_proj->forward_inference(attn.reshape({R, 1, embed_dim}));  // [R, H, D] → [R, 1, E]
}

// out[r] = softmax(Q[r] · K_{source[r]}[j]ᵀ / √D) · V_{source[r]}[j] over j < source_len[r], then W_O
Tensor MultiheadAttention::forward_cross_slots(const Tensor& query, const Tensor& k_pool, const Tensor& v_pool,
                                               const SlotStep& step) const {
  NoGradGuard no_grad;
  QKV_CHECK(query.dim() == 3 && query.size(1) == 1 && query.size(2) == embed_dim,
            "MultiheadAttention::forward_cross_slots: query ", shape_str(query.shape()), " should be [R, 1, ", embed_dim, "]");
  const int64_t R = query.size(0), H = num_heads, D = head_dim;
  const Tensor q = project(query, 0, true);  // [R, 1, E]
  const Tensor attn = paged_attention(q.reshape({R, H, D}), k_pool, v_pool, step.sources, step.source, step.source_len);
  return out_proj->forward_inference(attn.reshape({R, 1, embed_dim}));
}

Tensor MultiheadAttention::forward_inference(const Tensor& x, const Tensor& mask, const ScoreTerm* term) const {
  NoGradGuard no_grad;
  QKV_CHECK(x.dim() == 3 && x.size(2) == embed_dim && kdim == embed_dim && vdim == embed_dim,
            "MultiheadAttention::forward_inference: x ", shape_str(x.shape()), " should be [B, L, ", embed_dim,
            "] (self-attention, kdim = vdim = embed_dim)");
  const int64_t B = x.size(0), L = x.size(1), H = num_heads, D = head_dim;
  const auto [Q, K, V] = self_projections(x);
  AttentionOptions opt;
  opt.attn_mask = mask;
  // K, V [B, L, E] → [B, H, L, D] (views); attend_inference splits Q and applies W_O
  const Tensor Kh = K.view({B, L, H, D}).transpose(1, 2);
  if (term) {  // scores = scale · Q Kᵀ + add(Q, K) + mask
    opt.attn_mask = merge_attention_masks(mask, term->add(Q.view({B, L, H, D}).transpose(1, 2), Kh));
    opt.scale = term->scale;
  }
  return attend_inference(Q, Kh, V.view({B, L, H, D}).transpose(1, 2), opt);
}

KVCache MultiheadAttention::project_kv(const Tensor& key, const Tensor& value) const {
  NoGradGuard no_grad;
  QKV_CHECK(key.dim() == 3 && value.dim() == 3 && key.size(2) == kdim && value.size(2) == vdim &&
                key.size(0) == value.size(0) && key.size(1) == value.size(1),
            "MultiheadAttention::project_kv: key ", shape_str(key.shape()), " / value ", shape_str(value.shape()),
            " should be [B, S, ", kdim, "] / [B, S, ", vdim, "]");
  const int64_t B = key.size(0), S = key.size(1), H = num_heads, D = head_dim;
  KVCache c;
  c.k = project(key, 1, true).view({B, S, H, D}).transpose(1, 2).contiguous();
  c.v = project(value, 2, true).view({B, S, H, D}).transpose(1, 2).contiguous();
  c.length = S;
  return c;
}

Tensor MultiheadAttention::forward_cross_cached(const Tensor& query, const KVCache& kv, const Tensor& mask) const {
  NoGradGuard no_grad;
  QKV_CHECK(query.dim() == 3 && query.size(2) == embed_dim && kv.batch() > 0 && query.size(0) % kv.batch() == 0,
            "MultiheadAttention::forward_cross_cached: query ", shape_str(query.shape()), " should be [G·", kv.batch(),
            ", T, ", embed_dim, "]");
  // G rows per memory row (a beam's hypotheses of one source): cross-attention has no mask between
  // queries, so the G·T queries of a group attend to their memory row as one sequence of queries —
  // [B·G, T, E] viewed [B, G·T, E] — and K/V are stored once per source, not once per hypothesis.
  const int64_t B = kv.batch(), G = query.size(0) / B, T = query.size(1);
  AttentionOptions opt;
  opt.attn_mask = mask;
  Tensor q = project(query, 0, true).reshape({B, G * T, embed_dim});
  return attend_inference(q, kv.keys(), kv.values(), opt).view({B * G, T, embed_dim});
}

}  // namespace qkv::nn
