#include "qkv/ops/paged_attention.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/paged_prefixes.h"
#include "qkv/autograd/grad_mode.h"

namespace qkv {

using ops_detail::device_of;

namespace {

void check_no_grad(const char* op, std::initializer_list<const Tensor*> xs) {
  if (!autograd::grad_enabled()) return;
  for (const Tensor* x : xs)
    QKV_CHECK(!x->requires_grad(), op, " is for inference and has no backward: call it under NoGradGuard "
              "(torch.no_grad()) or on tensors that do not require a gradient");
}

void check_ids(const char* op, const char* name, const Tensor& t, int64_t n) {
  QKV_CHECK(t.dtype() == DType::i32 && t.dim() == 1 && t.size(0) == n, op, ": ", name, " must be an i32 [", n, "], got ",
            t.str());
}

// The indices a host reads of a dense block table, seq and seq_len (s: its T, rows, max_pages and
// page_size): each token's row lies in the table and its length within the row; with `pages`, each
// page it reads lies in the caches' s.pages.
void check_host_indices(const char* op, const Tensor& table, const Tensor& rows, const Tensor& lens,
                        const kernels::PagedShape& s, bool pages) {
  const int32_t *tb = table.data<int32_t>(), *r = rows.data<int32_t>(), *n = lens.data<int32_t>();
  const int64_t cap = s.max_pages * s.page_size;
  for (int64_t t = 0; t < s.T; ++t) {
    QKV_CHECK(r[t] >= 0 && r[t] < s.rows, op, ": seq[", t, "] = ", r[t], " is not a row of the block table's ", s.rows);
    QKV_CHECK(n[t] >= 0 && n[t] <= cap, op, ": seq_len[", t, "] = ", n[t], " is outside 0 … ", cap, " (", s.max_pages,
              " pages of ", s.page_size, ")");
    for (int64_t p = 0; pages && p < (n[t] + s.page_size - 1) / s.page_size; ++p) {
      const int32_t page = tb[r[t] * s.max_pages + p];
      QKV_CHECK(page >= 0 && page < s.pages, op, ": block_table[", r[t], ", ", p, "] = ", page, " is not one of the caches' ",
                s.pages, " pages");
    }
  }
}

}  // namespace

// The caches' shape, checked: k [pages, Hkv, page_size, D], v [pages, Hkv, page_size, Dv], both f32,
// both bf16 or both f8e4m3.
static kernels::PagedShape cache_shape(const char* op, const Tensor& k_cache, const Tensor& v_cache) {
  const DType c = k_cache.dtype();
  QKV_CHECK((c == DType::f32 || c == DType::bf16 || c == DType::f8e4m3) && v_cache.dtype() == c &&
                k_cache.dim() == 4 && v_cache.dim() == 4 &&
                k_cache.size(0) == v_cache.size(0) && k_cache.size(1) == v_cache.size(1) &&
                k_cache.size(2) == v_cache.size(2) && k_cache.size(1) > 0 && k_cache.size(2) > 0,
            op, ": k_cache ", k_cache.str(), " and v_cache ", v_cache.str(),
            " must be [pages, Hkv, page_size, D] and [pages, Hkv, page_size, Dv], both f32, both bf16 or both f8e4m3");
  kernels::PagedShape s;
  s.pages = k_cache.size(0), s.Hkv = k_cache.size(1), s.page_size = k_cache.size(2), s.D = k_cache.size(3),
  s.Dv = v_cache.size(3);
  return s;
}

// out[t, h] = Σ_j softmax_j(c(scale · q[t, h] · k[p_j, h / G, o_j])) · v[p_j, h / G, o_j] over j < seq_len[t]
// (the last `window`), p_j = block_table[seq[t], j / page_size], o_j = j mod page_size, c the soft cap (or none)
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                       const Tensor& seq, const Tensor& seq_len, std::optional<double> scale, int64_t window,
                       const PagedPrefixes* prefixes, double softcap) {
  constexpr const char* op = "paged_attention";
  check_no_grad(op, {&q, &k_cache, &v_cache});
  kernels::PagedShape s = cache_shape(op, k_cache, v_cache);
  QKV_CHECK(q.dtype() == DType::f32 && q.dim() == 3 && q.size(2) == s.D, op, ": q must be an f32 [T, H, D] with the caches' D = ",
            s.D, ", got ", q.str());
  const int64_t T = q.size(0), H = q.size(1), page_size = s.page_size;
  QKV_CHECK(H % s.Hkv == 0, op, ": q's ", H, " heads are not a multiple of the caches' ", s.Hkv);
  QKV_CHECK(block_table.dtype() == DType::i32 && block_table.dim() == 2, op, ": block_table must be an i32 [rows, max_pages], got ",
            block_table.str());
  check_ids(op, "seq", seq, T);
  check_ids(op, "seq_len", seq_len, T);
  QKV_CHECK(window >= 0, op, ": window must be ≥ 0, got ", window);
  const Device d = device_of(op, {&q, &k_cache, &v_cache, &block_table, &seq, &seq_len});
  s.T = T, s.H = H, s.rows = block_table.size(0), s.max_pages = block_table.size(1), s.window = window;
  s.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(s.D)));
  QKV_CHECK(softcap == 0 || (softcap > 0 && std::isnormal(static_cast<float>(softcap))), op,
            ": softcap must be 0 (none) or a positive normal float, got ", softcap);
  s.softcap = static_cast<float>(softcap);
  Tensor table = dense(block_table), rows = dense(seq), lens = dense(seq_len);
  // every page a token reads lies in the cache (a GPU kernel skips one that does not)
  if (d.is_cpu()) check_host_indices(op, table, rows, lens, s, true);
  // a GPU's cascade: the groups prefixes found, for these tokens
  kernels::PagedCascade cascade;
  const kernels::PagedCascade* shared = nullptr;
  if (prefixes != nullptr && !prefixes->empty() && !d.is_cpu()) {
    const PagedPrefixes& f = *prefixes;
    QKV_CHECK(f.T_ == T && f.rows_ == s.rows && f.max_pages_ == s.max_pages && f.page_size_ == page_size &&
                  f.window_ == window && f.data_.device() == d,
              op, ": prefixes were found for ", f.T_, " tokens, a block table of ", f.rows_, " × ", f.max_pages_,
              ", pages of ", f.page_size_, " and window ", f.window_, " on ", f.data_.device().str(), "; these are ", T,
              ", ", s.rows, " × ", s.max_pages, ", ", page_size, " and ", window, " on ", d.str());
    const int32_t* p = f.data_.data<int32_t>();
    cascade.blocks = p, cascade.tokens = p + 3 * f.blocks_, cascade.from = cascade.tokens + f.tokens_;
    cascade.n_blocks = f.blocks_, cascade.max_keys = f.max_keys_, cascade.max_count = f.max_count_;
    shared = &cascade;
  }
  Tensor qc = dense(q), kc = dense(k_cache), vc = dense(v_cache);
  Tensor out = Tensor::empty({T, H, s.Dv}, DType::f32, d);
  if (T == 0) return out;
  if (kc.dtype() == DType::bf16)
    QKV_DISPATCH(op, d, k::paged_attention_forward(qc.data(), kc.data<bf16>(), vc.data<bf16>(), table.data<int32_t>(),
                                                   rows.data<int32_t>(), lens.data<int32_t>(), out.data(), s, shared));
  else if (kc.dtype() == DType::f8e4m3)
    QKV_DISPATCH(op, d, k::paged_attention_forward(qc.data(), kc.data<f8e4m3>(), vc.data<f8e4m3>(), table.data<int32_t>(),
                                                   rows.data<int32_t>(), lens.data<int32_t>(), out.data(), s, shared));
  else
    QKV_DISPATCH(op, d, k::paged_attention_forward(qc.data(), kc.data(), vc.data(), table.data<int32_t>(),
                                                   rows.data<int32_t>(), lens.data<int32_t>(), out.data(), s, shared));
  return out;
}

PagedPrefixes paged_prefixes(const Tensor& block_table, const Tensor& seq, const Tensor& seq_len, int64_t page_size,
                             int64_t window, Device device) {
  constexpr const char* op = "paged_prefixes";
  QKV_CHECK(block_table.dtype() == DType::i32 && block_table.dim() == 2 && block_table.device().is_cpu(), op,
            ": block_table must be an i32 [rows, max_pages] on the cpu, got ", block_table.str());
  const int64_t T = seq.dim() == 1 ? seq.size(0) : -1;
  QKV_CHECK(T >= 0 && seq.device().is_cpu() && seq_len.device().is_cpu(), op, ": seq and seq_len must be on the cpu, got ",
            seq.str(), " and ", seq_len.str());
  check_ids(op, "seq", seq, T);
  check_ids(op, "seq_len", seq_len, T);
  QKV_CHECK(page_size > 0 && window >= 0, op, ": page_size must be > 0 and window ≥ 0, got ", page_size, " and ", window);
  kernels::PagedShape s;
  s.T = T, s.page_size = page_size, s.window = window, s.rows = block_table.size(0), s.max_pages = block_table.size(1);
  const Tensor table = dense(block_table), rows = dense(seq), lens = dense(seq_len);
  check_host_indices(op, table, rows, lens, s, false);  // (the rows it reads: a token's, up to its length)
  const kernels::PagedCascadeArrays a = kernels::paged_cascade_arrays(
      kernels::paged_shared_prefixes(table.data<int32_t>(), rows.data<int32_t>(), lens.data<int32_t>(), s), T);
  PagedPrefixes p;
  p.T_ = T, p.rows_ = s.rows, p.max_pages_ = s.max_pages, p.page_size_ = page_size, p.window_ = window;
  if (a.n_blocks() == 0) return p;
  std::vector<int32_t> all(a.blocks);
  all.insert(all.end(), a.tokens.begin(), a.tokens.end());
  all.insert(all.end(), a.from.begin(), a.from.end());
  p.data_ = Tensor::from_ints(all, {static_cast<int64_t>(all.size())}).to(device);
  p.blocks_ = a.n_blocks(), p.tokens_ = static_cast<int64_t>(a.tokens.size()), p.max_keys_ = a.max_keys,
  p.max_count_ = a.max_count;
  return p;
}

// k_cache[slots[t] / page_size, :, slots[t] mod page_size] = k[t], the same for v
void paged_kv_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slots) {
  constexpr const char* op = "paged_kv_write";
  check_no_grad(op, {&k_cache, &v_cache, &k, &v});
  kernels::PagedShape s = cache_shape(op, k_cache, v_cache);
  QKV_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), op, ": the caches must be dense (they are written in place)");
  QKV_CHECK(k.dtype() == DType::f32 && v.dtype() == DType::f32 && k.dim() == 3 && v.dim() == 3 && k.size(0) == v.size(0) &&
                k.size(1) == s.Hkv && v.size(1) == s.Hkv && k.size(2) == s.D && v.size(2) == s.Dv,
            op, ": k ", k.str(), " and v ", v.str(), " must be f32 [T, ", s.Hkv, ", ", s.D, "] and [T, ", s.Hkv, ", ", s.Dv,
            "] for the caches ", k_cache.str(), " and ", v_cache.str());
  s.T = k.size(0);
  check_ids(op, "slots", slots, s.T);
  const Device d = device_of(op, {&k_cache, &v_cache, &k, &v, &slots});
  Tensor sl = dense(slots);
  if (d.is_cpu())
    for (int64_t t = 0; t < s.T; ++t) {
      const int32_t x = sl.data<int32_t>()[t];
      QKV_CHECK(x >= -1 && x < s.pages * s.page_size, op, ": slots[", t, "] = ", x, " is not one of the caches' ",
                s.pages * s.page_size, " slots (", s.pages, " pages of ", s.page_size, ") nor −1 (a padding token's)");
    }
  if (s.T == 0) return;
  Tensor kc = dense(k), vc = dense(v);
  if (k_cache.dtype() == DType::bf16)  // (each rounded to nearest even)
    QKV_DISPATCH(op, d, k::paged_kv_write(k_cache.data<bf16>(), v_cache.data<bf16>(), kc.data(), vc.data(),
                                          sl.data<int32_t>(), s));
  else if (k_cache.dtype() == DType::f8e4m3)  // (each rounded to nearest even, saturating at ±448)
    QKV_DISPATCH(op, d, k::paged_kv_write(k_cache.data<f8e4m3>(), v_cache.data<f8e4m3>(), kc.data(), vc.data(),
                                          sl.data<int32_t>(), s));
  else
    QKV_DISPATCH(op, d, k::paged_kv_write(k_cache.data(), v_cache.data(), kc.data(), vc.data(), sl.data<int32_t>(), s));
  ++k_cache.impl().storage->writes, ++v_cache.impl().storage->writes;
}

}  // namespace qkv
