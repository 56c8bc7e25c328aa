#include "qkv/ops/paged_attention.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/paged_attention.h"
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

}  // namespace

// out[t, h] = Σ_j softmax_j(scale · q[t, h] · k[slot(seq[t], j), h / G]) · v[slot(seq[t], j), h / G]
// over j < seq_len[t] (the last `window`), slot(r, j) = table[r, j / page_size] · page_size + j mod page_size
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& block_table,
                       const Tensor& seq, const Tensor& seq_len, int64_t page_size, std::optional<double> scale,
                       int64_t window) {
  constexpr const char* op = "paged_attention";
  check_no_grad(op, {&q, &k_cache, &v_cache});
  QKV_CHECK(q.dtype() == DType::f32 && q.dim() == 3, op, ": q must be an f32 [T, H, D], got ", q.str());
  QKV_CHECK(k_cache.dtype() == DType::f32 && v_cache.dtype() == DType::f32 && k_cache.dim() == 3 && v_cache.dim() == 3 &&
                k_cache.size(0) == v_cache.size(0) && k_cache.size(1) == v_cache.size(1) && k_cache.size(2) == q.size(2),
            op, ": k_cache ", k_cache.str(), " and v_cache ", v_cache.str(), " must be f32 [slots, Hkv, D] and [slots, Hkv, Dv] with q's D = ",
            q.size(2));
  QKV_CHECK(page_size > 0 && k_cache.size(0) % page_size == 0, op, ": the caches' ", k_cache.size(0),
            " slots are not whole pages of ", page_size);
  const int64_t T = q.size(0), H = q.size(1), Hkv = k_cache.size(1);
  QKV_CHECK(Hkv > 0 && H % Hkv == 0, op, ": q's ", H, " heads are not a multiple of the caches' ", Hkv);
  QKV_CHECK(block_table.dtype() == DType::i32 && block_table.dim() == 2, op, ": block_table must be an i32 [rows, max_pages], got ",
            block_table.str());
  check_ids(op, "seq", seq, T);
  check_ids(op, "seq_len", seq_len, T);
  QKV_CHECK(window >= 0, op, ": window must be ≥ 0, got ", window);
  const Device d = device_of(op, {&q, &k_cache, &v_cache, &block_table, &seq, &seq_len});
  kernels::PagedShape s;
  s.T = T, s.H = H, s.Hkv = Hkv, s.D = q.size(2), s.Dv = v_cache.size(2), s.page_size = page_size;
  s.pages = k_cache.size(0) / page_size, s.rows = block_table.size(0), s.max_pages = block_table.size(1), s.window = window;
  s.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(s.D)));
  Tensor table = dense(block_table), rows = dense(seq), lens = dense(seq_len);
  if (d.is_cpu()) {  // every page a token reads lies in the cache (a GPU kernel skips one that does not)
    const int32_t* tb = table.data<int32_t>();
    for (int64_t t = 0; t < T; ++t) {
      const int32_t r = rows.data<int32_t>()[t], n = lens.data<int32_t>()[t];
      QKV_CHECK(r >= 0 && r < table.size(0), op, ": seq[", t, "] = ", r, " is not a row of the block table's ", table.size(0));
      QKV_CHECK(n >= 0 && n <= s.max_pages * page_size, op, ": seq_len[", t, "] = ", n, " is outside 0 … ",
                s.max_pages * page_size, " (", s.max_pages, " pages of ", page_size, ")");
      for (int64_t p = 0; p < (n + page_size - 1) / page_size; ++p) {
        const int32_t page = tb[r * s.max_pages + p];
        QKV_CHECK(page >= 0 && page < s.pages, op, ": block_table[", r, ", ", p, "] = ", page, " is not one of the caches' ",
                  s.pages, " pages");
      }
    }
  }
  Tensor qc = dense(q), kc = dense(k_cache), vc = dense(v_cache);
  Tensor out = Tensor::empty({T, H, s.Dv}, DType::f32, d);
  if (T == 0) return out;
  QKV_DISPATCH(op, d, k::paged_attention_forward(qc.data(), kc.data(), vc.data(), table.data<int32_t>(),
                                                 rows.data<int32_t>(), lens.data<int32_t>(), out.data(), s));
  return out;
}

// k_cache[slots[t]] = k[t], v_cache[slots[t]] = v[t]
void paged_kv_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slots) {
  constexpr const char* op = "paged_kv_write";
  check_no_grad(op, {&k_cache, &v_cache, &k, &v});
  QKV_CHECK(k_cache.dtype() == DType::f32 && v_cache.dtype() == DType::f32 && k_cache.dim() == 3 && v_cache.dim() == 3 &&
                k_cache.size(0) == v_cache.size(0) && k_cache.size(1) == v_cache.size(1),
            op, ": k_cache ", k_cache.str(), " and v_cache ", v_cache.str(), " must be f32 [slots, Hkv, D] and [slots, Hkv, Dv]");
  QKV_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), op, ": the caches must be dense (they are written in place)");
  QKV_CHECK(k.dtype() == DType::f32 && v.dtype() == DType::f32 && k.dim() == 3 && v.dim() == 3 && k.size(0) == v.size(0) &&
                k.size(1) == k_cache.size(1) && k.size(2) == k_cache.size(2) && v.size(1) == v_cache.size(1) &&
                v.size(2) == v_cache.size(2),
            op, ": k ", k.str(), " and v ", v.str(), " must be f32 [T, Hkv, D] and [T, Hkv, Dv] of the caches' ", k_cache.str(),
            " and ", v_cache.str());
  const int64_t T = k.size(0);
  check_ids(op, "slots", slots, T);
  const Device d = device_of(op, {&k_cache, &v_cache, &k, &v, &slots});
  Tensor sl = dense(slots);
  if (d.is_cpu())
    for (int64_t t = 0; t < T; ++t) {
      const int32_t x = sl.data<int32_t>()[t];
      QKV_CHECK(x >= 0 && x < k_cache.size(0), op, ": slots[", t, "] = ", x, " is not one of the caches' ", k_cache.size(0), " slots");
    }
  if (T == 0) return;
  Tensor kc = dense(k), vc = dense(v);
  const int64_t k_row = k.size(1) * k.size(2), v_row = v.size(1) * v.size(2);  // (`k` is the kernels inside QKV_DISPATCH)
  QKV_DISPATCH(op, d, k::paged_kv_write(k_cache.data(), v_cache.data(), kc.data(), vc.data(), sl.data<int32_t>(), T,
                                        k_row, v_row, k_cache.size(0)));
  ++k_cache.impl().storage->writes, ++v_cache.impl().storage->writes;
}

}  // namespace qkv
