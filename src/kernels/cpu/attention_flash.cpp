// Tiled ("flash") attention on the CPU: the Lq×Lk scores are never materialized.
//
// Forward, per query block Q_i (Br rows), over key blocks K_j, V_j (Bc keys), with the running
// row max m, row sum l and unnormalized output O (online softmax):
//   S    = c(scale · Q_i K_jᵀ) + M_ij                   (mask, causal −∞; c: the soft cap or none)
//   m'   = max(m, rowmax S);   α = e^(m − m')
//   P    = e^(S − m');          l = α·l + rowsum P
//   O    = α·O + (P ∘ Z/(1−p)) V_j                      (dropout on the weights, not on l)
//   end: O /= l,  lse = m + log l                       (l = 0: the row saw no key → O = 0)
//
// Backward (FlashAttention-2), with D_i = rowsum(dO_i ∘ O_i) and P recomputed from lse:
//   P = e^(S − lse),  W = P ∘ Z/(1−p)
//   dV_j += Wᵀ dO_i,   dP = (dO_i V_jᵀ) ∘ Z/(1−p),   dS = P ∘ (dP − D_i) (∘ c', soft-capped)
//   dQ_i += scale · dS K_j,   dK_j += scale · dSᵀ Q_i
// Each work item owns one key/value head (all its query heads, so GQA needs no atomics) or, when
// there are fewer heads than threads, a set of key blocks of one head with a private dQ. Of a block,
// only the keys that the mask leaves visible to some of its queries are computed (visible_span).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn_call.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

constexpr int64_t kBr = 64;   // query rows per block
constexpr int64_t kBc = 256;  // keys per block

// The number of keys query i can see at most (causal, top-left aligned: j ≤ i).
inline int64_t visible_keys(const AttnProblem& p, int64_t i_end) { return p.causal ? std::min(p.Lk, i_end) : p.Lk; }

// Adds the mask and the causal −∞ to the block S [br, bc] of head (b, h) at (i0, j0).
void mask_block(const AttnProblem& p, int64_t b, int64_t h, int64_t i0, int64_t br, int64_t j0, int64_t bc, float* S,
                int64_t lds) {
  if (p.mask.kind == AttnMask::Kind::boolean) {
    for (int64_t r = 0; r < br; ++r) {
      const uint8_t* m =
          static_cast<const uint8_t*>(p.mask.data) + b * p.mask.sb + h * p.mask.sh + (i0 + r) * p.mask.sq + j0 * p.mask.sk;
      float* s = S + r * lds;
      for (int64_t c = 0; c < bc; ++c)
        if (!m[c * p.mask.sk]) s[c] = -INFINITY;
    }
  } else if (p.mask.kind == AttnMask::Kind::additive) {
    for (int64_t r = 0; r < br; ++r) {
      const float* m =
          static_cast<const float*>(p.mask.data) + b * p.mask.sb + h * p.mask.sh + (i0 + r) * p.mask.sq + j0 * p.mask.sk;
      float* s = S + r * lds;
      if (p.mask.sk == 1) {
        for (int64_t c = 0; c < bc; ++c) s[c] += m[c];
      } else {
        for (int64_t c = 0; c < bc; ++c) s[c] += m[c * p.mask.sk];
      }
    }
  }
  if (p.causal && j0 + bc - 1 > i0) {
    for (int64_t r = 0; r < br; ++r) {
      const int64_t first_hidden = std::max<int64_t>(i0 + r + 1 - j0, 0);
      float* s = S + r * lds;
      for (int64_t c = first_hidden; c < bc; ++c) s[c] = -INFINITY;
    }
  }
}

// The keys [lo, hi) of the block [br, bc] of head (b, h) at (i0, j0) (offsets from j0) that hold every
// score the mask leaves visible: a boolean mask true, an additive one not −∞. The keys outside add
// nothing — forward, P = e^(−∞ − m') = 0 leaves m, l and O as they are; backward, P = 0 makes
// dS = P ∘ (dP − D) = 0 and its dV, dQ, dK terms 0 — so the kernels compute only [lo, hi), and nothing
// where it is empty: a sliding window (ModernBERT's local layers, Mistral's) costs the keys near the
// diagonal, not every block's, and a padded sequence's tail nothing. Causal masking is the callers'.
struct KeySpan {
  int64_t lo, hi;
  bool empty() const { return lo >= hi; }
};

// The first and the last nonzero byte of m[0, n) (n when there is none), eight bytes a load.
int64_t first_nonzero(const uint8_t* m, int64_t n) {
  int64_t c = 0;
  for (uint64_t w; c + 8 <= n; c += 8)
    if (std::memcpy(&w, m + c, 8), w) break;
  for (; c < n; ++c)
    if (m[c]) return c;
  return n;
}
int64_t last_nonzero(const uint8_t* m, int64_t n) {
  int64_t c = n;
  for (uint64_t w; c >= 8; c -= 8)
    if (std::memcpy(&w, m + c - 8, 8), w) break;
  for (; c > 0; --c)
    if (m[c - 1]) return c - 1;
  return n;
}

KeySpan visible_span(const AttnProblem& p, int64_t b, int64_t h, int64_t i0, int64_t br, int64_t j0, int64_t bc) {
  if (p.mask.kind == AttnMask::Kind::none) return {0, bc};
  const int64_t rows = p.mask.sq == 0 ? 1 : br;  // a mask broadcast over the queries: one row says it
  const int64_t first = b * p.mask.sb + h * p.mask.sh + i0 * p.mask.sq + j0 * p.mask.sk;
  const auto* bytes = static_cast<const uint8_t*>(p.mask.data);
  const auto* floats = static_cast<const float*>(p.mask.data);
  auto visible = [&](int64_t row, int64_t c) {
    return p.mask.kind == AttnMask::Kind::boolean ? bytes[row + c * p.mask.sk] != 0
                                                  : !(floats[row + c * p.mask.sk] == -INFINITY);  // NaN: seen
  };
  int64_t lo = bc, hi = 0;  // empty; each row widens it to its own first and last visible key
  for (int64_t r = 0; r < rows && !(lo == 0 && hi == bc); ++r) {
    const int64_t row = first + r * p.mask.sq;
    if (p.mask.kind == AttnMask::Kind::boolean && p.mask.sk == 1) {
      const int64_t f = first_nonzero(bytes + row, lo);  // (left of lo only: the span holds the rest)
      if (f < lo) lo = f;
      const int64_t l = last_nonzero(bytes + row + hi, bc - hi);
      if (l < bc - hi) hi = hi + l + 1;
      continue;
    }
    for (int64_t c = 0; c < lo; ++c)
      if (visible(row, c)) {
        lo = c;
        break;
      }
    for (int64_t c = bc - 1; c >= hi; --c)
      if (visible(row, c)) {
        hi = c + 1;
        break;
      }
  }
  return {lo, hi};
}

// Z/(1−p) applied in place to the block W [br, bc] of head (b, h) at (i0, j0); the element
// (i, j) uses the same counter as the reference kernel, so both draw the same mask.
void dropout_block(const AttnProblem& p, int64_t b, int64_t h, int64_t i0, int64_t br, int64_t j0, int64_t bc, float* W,
                   int64_t ldw) {
  const uint64_t base = p.first_counter() + static_cast<uint64_t>((b * p.H + h) * p.Lq * p.Lk);
  for (int64_t r = 0; r < br; ++r)
    dropout_apply(W + r * ldw, W + r * ldw, bc, dropout_mask(p.dropout_p, p.seed, base + static_cast<uint64_t>((i0 + r) * p.Lk + j0)));
}

// e^(s − shift) in place over a row; returns the sum. shift = −∞ (row fully masked) → zeros.
inline float exp_row(float* s, int64_t n, float shift) {
  if (shift == -INFINITY) {
    std::memset(s, 0, static_cast<size_t>(n) * sizeof(float));
    return 0.f;
  }
  return exp_shift_sum(s, s, n, shift);
}

// The online-softmax step for a tile S [br, bc] (scores in, e^(S − m') out):
//   m' = max(m, rowmax S),  α = e^(m − m'),  l = α·l + rowsum e^(S − m'),  O ← α·O
void online_softmax(float* S, int64_t br, int64_t bc, float* m, float* l, float* O, int64_t ldo, int64_t dv) {
  for (int64_t r = 0; r < br; ++r) {
    float* s = S + r * kBc;
    const float m_new = std::max(m[r], max_of(s, bc));
    const float rs = exp_row(s, bc, m_new);
    if (m_new == -INFINITY) continue;  // nothing visible yet: O, l stay 0
    const float alpha = m[r] == -INFINITY ? 0.f : std::exp(m[r] - m_new);
    l[r] = alpha * l[r] + rs;
    m[r] = m_new;
    if (alpha != 1.f) scale(O + r * ldo, dv, alpha);
  }
}

// Partial result of one query block over a range of key blocks.
struct Partial {
  float* O;  // [br, Dv], unnormalized
  float* m;  // [br]
  float* l;  // [br]
};

// Runs the online softmax of query rows [i0, i0 + br) of head (b, h) over keys [k_begin, k_end).
void forward_block(const AttnProblem& p, int64_t b, int64_t h, int64_t i0, int64_t br, int64_t k_begin, int64_t k_end,
                   Partial acc, float* S) {
  const int64_t hk = h / (p.H / p.Hkv);
  const float* q = p.q + b * p.q_sb + h * p.q_sh + i0 * p.q_sl;
  const float* k = p.k + b * p.k_sb + hk * p.k_sh;
  const float* v = p.v + b * p.v_sb + hk * p.v_sh;
  for (int64_t r = 0; r < br; ++r) acc.m[r] = -INFINITY, acc.l[r] = 0.f;
  std::memset(acc.O, 0, static_cast<size_t>(br * p.Dv) * sizeof(float));
  for (int64_t jb = k_begin; jb < k_end; jb += kBc) {
    const KeySpan span = visible_span(p, b, h, i0, br, jb, std::min(kBc, k_end - jb));
    if (span.empty()) continue;
    const int64_t j0 = jb + span.lo, bc = span.hi - span.lo;
    sgemm(false, true, br, bc, p.D, p.scale, q, p.q_sl, k + j0 * p.k_sl, p.k_sl, 0.f, S, kBc);
    if (p.softcap > 0.f)
      for (int64_t r = 0; r < br; ++r) softcap_row(S + r * kBc, bc, p.softcap);
    mask_block(p, b, h, i0, br, j0, bc, S, kBc);
    online_softmax(S, br, bc, acc.m, acc.l, acc.O, p.Dv, p.Dv);
    if (p.dropout_p > 0.f) dropout_block(p, b, h, i0, br, j0, bc, S, kBc);
    sgemm(false, false, br, p.Dv, bc, 1.f, S, kBc, v + j0 * p.v_sl, p.v_sl, 1.f, acc.O, p.Dv);
  }
}

// O /= l and lse = m + log l, writing the final rows [i0, i0 + br) of head (b, h) into out and lse.
void finish_rows(const AttnProblem& p, int64_t b, int64_t h, int64_t i0, int64_t br, const Partial& acc, float* out,
                 float* lse) {
  out += p.out_l.offset(b, h, i0);
  if (lse) lse += (b * p.H + h) * p.Lq + i0;
  for (int64_t r = 0; r < br; ++r) {
    float* o = out + r * p.out_l.sl;
    const float* a = acc.O + r * p.Dv;
    if (acc.l[r] == 0.f) {
      std::memset(o, 0, static_cast<size_t>(p.Dv) * sizeof(float));
      if (lse) lse[r] = -INFINITY;
      continue;
    }
    const float inv = 1.f / acc.l[r];
    for (int64_t c = 0; c < p.Dv; ++c) o[c] = a[c] * inv;
    if (lse) lse[r] = acc.m[r] + std::log(acc.l[r]);
  }
}

}  // namespace

void attention_forward_flash_f32(const AttnProblem& p, float* out, float* lse) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t nqb = (p.Lq + kBr - 1) / kBr;
  const int64_t items = p.B * p.H * nqb;
  const int nt = in_parallel_region() ? 1 : num_threads();
  // Decode-shaped problems (few query blocks, long keys): also split the keys across threads and
  // merge the partial softmaxes.
  int64_t ksplit = 1;
  if (items > 0 && items < nt && p.Lk >= 2 * kBc) ksplit = std::min<int64_t>((nt + items - 1) / items, (p.Lk + kBc - 1) / kBc);
  const int64_t total = items * ksplit;
  const size_t per_item = static_cast<size_t>(kBr * p.Dv + 2 * kBr);

  std::vector<float> partials(ksplit > 1 ? static_cast<size_t>(total) * per_item : 0);
  auto run_item = [&](int64_t it, float* S, float* own) {
    // Causal: schedule the longest query blocks (the last ones) first.
    const int64_t idx = it / ksplit, split = it % ksplit;
    const int64_t qb = nqb - 1 - idx % nqb, bh = idx / nqb, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = qb * kBr, br = std::min(kBr, p.Lq - i0);
    const int64_t kv_end = visible_keys(p, i0 + br);
    const int64_t nkb = (kv_end + kBc - 1) / kBc;
    const int64_t kb0 = nkb * split / ksplit, kb1 = nkb * (split + 1) / ksplit;
    float* mem = ksplit > 1 ? partials.data() + static_cast<size_t>(it) * per_item : own;
    Partial acc{mem, mem + kBr * p.Dv, mem + kBr * p.Dv + kBr};
    forward_block(p, b, h, i0, br, kb0 * kBc, std::min(kb1 * kBc, kv_end), acc, S);
    if (ksplit == 1) finish_rows(p, b, h, i0, br, acc, out, lse);
  };
  RegionErrors errors;  // (sgemm or a buffer failing inside the region: thrown after it)
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    std::vector<float> S, own;
    errors.run([&] { S.resize(static_cast<size_t>(kBr * kBc)), own.resize(per_item); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < total; ++it) errors.run([&] { run_item(it, S.data(), own.data()); });
  }
  errors.rethrow();
  if (ksplit == 1) return;
  // Merge the key splits: m = max m_s, l = Σ e^(m_s − m) l_s, O = Σ e^(m_s − m) O_s.
  std::vector<float> O(static_cast<size_t>(kBr * p.Dv)), m(kBr), l(kBr);
  for (int64_t idx = 0; idx < items; ++idx) {
    const int64_t qb = nqb - 1 - idx % nqb, bh = idx / nqb, b = bh / p.H, h = bh % p.H;
    const int64_t i0 = qb * kBr, br = std::min(kBr, p.Lq - i0);
    std::fill(O.begin(), O.end(), 0.f);
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.f);
    for (int64_t s = 0; s < ksplit; ++s) {
      const float* mem = partials.data() + static_cast<size_t>(idx * ksplit + s) * per_item;
      for (int64_t r = 0; r < br; ++r) m[r] = std::max(m[r], mem[kBr * p.Dv + r]);
    }
    for (int64_t s = 0; s < ksplit; ++s) {
      const float* mem = partials.data() + static_cast<size_t>(idx * ksplit + s) * per_item;
      for (int64_t r = 0; r < br; ++r) {
        const float ms = mem[kBr * p.Dv + r];
        if (ms == -INFINITY) continue;
        const float w = std::exp(ms - m[r]);
        l[r] += w * mem[kBr * p.Dv + kBr + r];
        for (int64_t c = 0; c < p.Dv; ++c) O[r * p.Dv + c] += w * mem[r * p.Dv + c];
      }
    }
    Partial acc{O.data(), m.data(), l.data()};
    finish_rows(p, b, h, i0, br, acc, out, lse);
  }
}

void attention_backward_flash_f32(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t group = p.H / p.Hkv;
  const int nt = in_parallel_region() ? 1 : num_threads();
  // D_i = rowsum(dO_i ∘ O_i)
  std::vector<float> Dsum(static_cast<size_t>(p.B * p.H * p.Lq));
  parallel_for(p.B * p.H * p.Lq, 256, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (p.H * p.Lq), h = r / p.Lq % p.H, i = r % p.Lq;
      Dsum[r] = dot(dout + p.dout_l.offset(b, h, i), out + p.out_l.offset(b, h, i), p.Dv);
    }
  });
  auto zero_rows = [](float* first, int64_t n, int64_t ld, int64_t width) {
    for (int64_t i = 0; i < n; ++i) std::memset(first + i * ld, 0, static_cast<size_t>(width) * sizeof(float));
  };

  const int64_t heads = p.B * p.Hkv;
  if (heads == 0) return;  // an empty batch: no gradient has an element
  const int64_t nkb = (p.Lk + kBc - 1) / kBc;
  // Fewer key/value heads than threads: split each head's key blocks, each split with its own dQ
  // (at least one split: with no key, the one zeroes dQ).
  const int64_t ksplit = heads < nt ? std::max<int64_t>(1, std::min<int64_t>((nt + heads - 1) / heads, nkb)) : 1;
  const size_t dq_head = static_cast<size_t>(group * p.Lq * p.D);
  std::vector<float> dq_split(ksplit > 1 ? static_cast<size_t>(heads * ksplit) * dq_head : 0, 0.f);

  // C: a tile's soft-capped scores, for the cap's derivative once P has replaced them in S
  auto run_item = [&](int64_t it, float* S, float* dP, float* C) {
    const int64_t bhk = it / ksplit, split = it % ksplit, b = bhk / p.Hkv, hk = bhk % p.Hkv;
    const float* k = p.k + b * p.k_sb + hk * p.k_sh;
    const float* v = p.v + b * p.v_sb + hk * p.v_sh;
    float* dk_h = dk + p.dk_l.offset(b, hk, 0);
    float* dv_h = dv + p.dv_l.offset(b, hk, 0);
    const int64_t ldk = p.dk_l.sl, ldv = p.dv_l.sl, ldo = p.dout_l.sl;
    // This item alone writes the dK, dV rows of its key blocks (and, unsplit, its heads' dQ rows).
    for (int64_t kb = split; kb < nkb; kb += ksplit) {
      const int64_t j0 = kb * kBc, bc = std::min(kBc, p.Lk - j0);
      zero_rows(dk_h + j0 * ldk, bc, ldk, p.D);
      zero_rows(dv_h + j0 * ldv, bc, ldv, p.Dv);
    }
    for (int64_t g = 0; g < group; ++g) {
      const int64_t h = hk * group + g;
      const float* q = p.q + b * p.q_sb + h * p.q_sh;
      const float* dO = dout + p.dout_l.offset(b, h, 0);
      const float* L = lse + (b * p.H + h) * p.Lq;
      const float* Dh = Dsum.data() + (b * p.H + h) * p.Lq;
      float* dQ = ksplit > 1 ? dq_split.data() + static_cast<size_t>(it) * dq_head + g * p.Lq * p.D
                             : dq + p.dq_l.offset(b, h, 0);
      const int64_t ldq = ksplit > 1 ? p.D : p.dq_l.sl;
      if (ksplit == 1) zero_rows(dQ, p.Lq, ldq, p.D);
      // Key blocks of this split, interleaved so causal work is balanced across splits.
      for (int64_t kb = split; kb < nkb; kb += ksplit) {
        const int64_t kj0 = kb * kBc, kbc = std::min(kBc, p.Lk - kj0);
        const int64_t i_first = p.causal ? (kj0 / kBr) * kBr : 0;  // earlier queries cannot see these keys
        for (int64_t i0 = i_first; i0 < p.Lq; i0 += kBr) {
          const int64_t br = std::min(kBr, p.Lq - i0);
          const KeySpan span = visible_span(p, b, h, i0, br, kj0, kbc);
          if (span.empty()) continue;
          const int64_t j0 = kj0 + span.lo, bc = span.hi - span.lo;  // the keys this query block sees
          // P = e^(scale·Q Kᵀ + M − lse)
          sgemm(false, true, br, bc, p.D, p.scale, q + i0 * p.q_sl, p.q_sl, k + j0 * p.k_sl, p.k_sl, 0.f, S, kBc);
          if (p.softcap > 0.f)
            for (int64_t r = 0; r < br; ++r) {
              softcap_row(S + r * kBc, bc, p.softcap);
              std::memcpy(C + r * kBc, S + r * kBc, static_cast<size_t>(bc) * sizeof(float));
            }
          mask_block(p, b, h, i0, br, j0, bc, S, kBc);
          for (int64_t r = 0; r < br; ++r) exp_row(S + r * kBc, bc, L[i0 + r]);
          // dP = (dO Vᵀ) ∘ Z/(1−p)
          sgemm(false, true, br, bc, p.Dv, 1.f, dO + i0 * ldo, ldo, v + j0 * p.v_sl, p.v_sl, 0.f, dP, kBc);
          if (p.dropout_p > 0.f) dropout_block(p, b, h, i0, br, j0, bc, dP, kBc);
          // dS = P ∘ (dP − D), kept in dP; then W = P ∘ Z/(1−p) replaces P in S for dV.
          for (int64_t r = 0; r < br; ++r) {
            float* pr = S + r * kBc;
            float* dpr = dP + r * kBc;
            const float d = Dh[i0 + r];
            for (int64_t c = 0; c < bc; ++c) dpr[c] = pr[c] * (dpr[c] - d);
            if (p.softcap > 0.f) softcap_backward_row(dpr, C + r * kBc, bc, p.softcap);
          }
          if (p.dropout_p > 0.f) dropout_block(p, b, h, i0, br, j0, bc, S, kBc);
          sgemm(true, false, bc, p.Dv, br, 1.f, S, kBc, dO + i0 * ldo, ldo, 1.f, dv_h + j0 * ldv, ldv);
          // dQ += scale · dS K;  dK += scale · dSᵀ Q
          sgemm(false, false, br, p.D, bc, p.scale, dP, kBc, k + j0 * p.k_sl, p.k_sl, 1.f, dQ + i0 * ldq, ldq);
          sgemm(true, false, bc, p.D, br, p.scale, dP, kBc, q + i0 * p.q_sl, p.q_sl, 1.f, dk_h + j0 * ldk, ldk);
        }
      }
    }
  };
  RegionErrors errors;  // (sgemm or a buffer failing inside the region: thrown after it)
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    std::vector<float> S, dP, C;
    errors.run([&] {
      S.resize(static_cast<size_t>(kBr * kBc)), dP.resize(static_cast<size_t>(kBr * kBc));
      if (p.softcap > 0.f) C.resize(static_cast<size_t>(kBr * kBc));
    });
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < heads * ksplit; ++it) errors.run([&] { run_item(it, S.data(), dP.data(), C.data()); });
  }
  errors.rethrow();
  if (ksplit > 1) {
    for (int64_t bhk = 0; bhk < heads; ++bhk) {
      const int64_t b = bhk / p.Hkv, hk = bhk % p.Hkv;
      // dQ of the group's heads = Σ over splits (each split's dQ dense [group, Lq, D]).
      const float* splits = dq_split.data() + static_cast<size_t>(bhk * ksplit) * dq_head;
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < p.Lq; ++i) {
          float* dst = dq + p.dq_l.offset(b, hk * group + g, i);
          std::fill(dst, dst + p.D, 0.f);
          for (int64_t s = 0; s < ksplit; ++s) {
            const float* src = splits + s * dq_head + (g * p.Lq + i) * p.D;
            for (int64_t c = 0; c < p.D; ++c) dst[c] += src[c];
          }
        }
    }
  }
}

// ---- bf16 forward ------------------------------------------------------------------------------
// The same online softmax, with both products on AVX512_BF16 dot products (f32 accumulation):
//   S = scale · bf16(Q) bf16(K)ᵀ,   O += bf16(P) bf16(V)
// vdpbf16ps multiplies pairs: acc[i] += a[2i]·b[2i] + a[2i+1]·b[2i+1]. So K is packed per head as
// Kp[t][c] = (K[c][2t], K[c][2t+1]) (16 keys per vector, a query pair broadcast), and V as
// Vp[u][e] = (V[2u][e], V[2u+1][e]) (16 features per vector, a probability pair broadcast).

bool has_avx512_bf16() {
#if defined(__AVX512BF16__)
  return true;
#else
  return false;
#endif
}

#if defined(__AVX512BF16__)
namespace {

constexpr int64_t kPadKeys = 64;  // keys per S tile

inline uint32_t pack_pair(float a, float b) {
  return static_cast<uint32_t>(f32_to_bf16(a).bits) | (static_cast<uint32_t>(f32_to_bf16(b).bits) << 16);
}

// S[r][c] = scale · Σ_t q[r][t] · kp[t][c] over 64 keys (4 vectors), R query rows.
template <int R>
void qk_tile(const uint32_t* q, int64_t ldq, const uint32_t* kp, int64_t ldk, int64_t npairs, float scale, float* S,
             int64_t lds) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < npairs; ++t) {
    __m512bh b[4];
    for (int v = 0; v < 4; ++v) b[v] = (__m512bh)_mm512_loadu_si512(kp + t * ldk + 16 * v);
    for (int r = 0; r < R; ++r) {
      __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(q[r * ldq + t]));
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  const __m512 vs = _mm512_set1_ps(scale);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(S + r * lds + 16 * v, _mm512_mul_ps(acc[r][v], vs));
}

// O[r][0..16·NV) += Σ_u p[r][u] · vp[u][..], R rows.
template <int R, int NV>
void pv_tile(const uint32_t* pp, int64_t ldp, const uint32_t* vp, int64_t ldv, int64_t npairs, float* O, int64_t ldo) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_loadu_ps(O + r * ldo + 16 * v);
  for (int64_t u = 0; u < npairs; ++u) {
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(vp + u * ldv + 16 * v);
    for (int r = 0; r < R; ++r) {
      __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(pp[r * ldp + u]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(O + r * ldo + 16 * v, acc[r][v]);
}

template <int R>
void pv_rows(const uint32_t* pp, int64_t ldp, const uint32_t* vp, int64_t ldv, int64_t npairs, float* O, int64_t ldo,
             int64_t dv_pad) {
  for (int64_t e = 0; e < dv_pad; e += 64) {
    switch (std::min<int64_t>(4, (dv_pad - e) / 16)) {
      case 4: pv_tile<R, 4>(pp, ldp, vp + e, ldv, npairs, O + e, ldo); break;
      case 3: pv_tile<R, 3>(pp, ldp, vp + e, ldv, npairs, O + e, ldo); break;
      case 2: pv_tile<R, 2>(pp, ldp, vp + e, ldv, npairs, O + e, ldo); break;
      default: pv_tile<R, 1>(pp, ldp, vp + e, ldv, npairs, O + e, ldo); break;
    }
  }
}

}  // namespace

void attention_forward_flash_bf16_avx512(const AttnProblem& p, float* out) {
  const int64_t dpairs = (p.D + 1) / 2;
  const int64_t lk_pad = (p.Lk + kPadKeys - 1) / kPadKeys * kPadKeys;
  const int64_t dv_pad = (p.Dv + 15) / 16 * 16;
  const int64_t heads = p.B * p.Hkv;
  // Pack K and V of every key/value head (half the size of K and V in f32).
  std::vector<uint32_t> Kp(static_cast<size_t>(heads * dpairs * lk_pad), 0u);
  std::vector<uint32_t> Vp(static_cast<size_t>(heads * (lk_pad / 2) * dv_pad), 0u);
  parallel_for(heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t bh = h0; bh < h1; ++bh) {
      const int64_t b = bh / p.Hkv, hk = bh % p.Hkv;
      const float* k = p.k + b * p.k_sb + hk * p.k_sh;
      const float* v = p.v + b * p.v_sb + hk * p.v_sh;
      uint32_t* kp = Kp.data() + bh * dpairs * lk_pad;
      uint32_t* vp = Vp.data() + bh * (lk_pad / 2) * dv_pad;
      for (int64_t c = 0; c < p.Lk; ++c)
        for (int64_t t = 0; t < dpairs; ++t)
          kp[t * lk_pad + c] = pack_pair(k[c * p.k_sl + 2 * t], 2 * t + 1 < p.D ? k[c * p.k_sl + 2 * t + 1] : 0.f);
      for (int64_t u = 0; 2 * u < p.Lk; ++u)
        for (int64_t e = 0; e < p.Dv; ++e)
          vp[u * dv_pad + e] = pack_pair(v[2 * u * p.v_sl + e], 2 * u + 1 < p.Lk ? v[(2 * u + 1) * p.v_sl + e] : 0.f);
    }
  });

  const int64_t nqb = (p.Lq + kBr - 1) / kBr;
  const int64_t items = p.B * p.H * nqb;
  const int nt = in_parallel_region() ? 1 : num_threads();
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    std::vector<float> S(static_cast<size_t>(kBr * kBc)), O(static_cast<size_t>(kBr * dv_pad)), m(kBr), l(kBr);
    std::vector<uint32_t> Qp(static_cast<size_t>(kBr * dpairs)), Pp(static_cast<size_t>(kBr * kBc / 2));
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t qb = nqb - 1 - it % nqb, bh = it / nqb, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hkv);
      const int64_t i0 = qb * kBr, br = std::min(kBr, p.Lq - i0);
      const float* q = p.q + b * p.q_sb + h * p.q_sh + i0 * p.q_sl;
      const uint32_t* kp = Kp.data() + (b * p.Hkv + hk) * dpairs * lk_pad;
      const uint32_t* vp = Vp.data() + (b * p.Hkv + hk) * (lk_pad / 2) * dv_pad;
      for (int64_t r = 0; r < br; ++r)
        for (int64_t t = 0; t < dpairs; ++t)
          Qp[r * dpairs + t] = pack_pair(q[r * p.q_sl + 2 * t], 2 * t + 1 < p.D ? q[r * p.q_sl + 2 * t + 1] : 0.f);
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.f);
      std::fill(O.begin(), O.end(), 0.f);
      const int64_t kv_end = visible_keys(p, i0 + br);
      for (int64_t jb = 0; jb < kv_end; jb += kBc) {
        const KeySpan span = visible_span(p, b, h, i0, br, jb, std::min(kBc, kv_end - jb));
        if (span.empty()) continue;
        // from a multiple of 64 keys: K's packed tiles, and V's pairs from an even key
        const int64_t lo = span.lo / kPadKeys * kPadKeys, j0 = jb + lo, bc = span.hi - lo;
        // S = scale · Q Kᵀ in tiles of 4 rows × 64 keys
        for (int64_t c = 0; c < bc; c += kPadKeys) {
          int64_t r = 0;
          for (; r + 4 <= br; r += 4)
            qk_tile<4>(Qp.data() + r * dpairs, dpairs, kp + j0 + c, lk_pad, dpairs, p.scale, S.data() + r * kBc + c, kBc);
          for (; r < br; ++r)
            qk_tile<1>(Qp.data() + r * dpairs, dpairs, kp + j0 + c, lk_pad, dpairs, p.scale, S.data() + r * kBc + c, kBc);
        }
        mask_block(p, b, h, i0, br, j0, bc, S.data(), kBc);
        online_softmax(S.data(), br, bc, m.data(), l.data(), O.data(), dv_pad, dv_pad);
        if (p.dropout_p > 0.f) dropout_block(p, b, h, i0, br, j0, bc, S.data(), kBc);
        // P → bf16 pairs (a zero pads an odd block)
        const int64_t upairs = (bc + 1) / 2;
        for (int64_t r = 0; r < br; ++r) {
          float* s = S.data() + r * kBc;
          if (bc & 1) s[bc] = 0.f;  // pad an odd block (S rows are kBc wide, kBc even)
          // 32 probabilities → 32 bf16 = 16 pairs, rounded to nearest even (as pack_pair)
          uint32_t* pr = Pp.data() + r * (kBc / 2);
          int64_t u = 0;
          for (; 2 * u + 32 <= 2 * upairs; u += 16) {
            __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 2 * u + 16), _mm512_loadu_ps(s + 2 * u));
            _mm512_storeu_si512(pr + u, (__m512i)h);
          }
          for (; u < upairs; ++u) pr[u] = pack_pair(s[2 * u], s[2 * u + 1]);
        }
        // O += P V in tiles of 4 rows × 64 features
        const uint32_t* vb = vp + (j0 / 2) * dv_pad;
        int64_t r = 0;
        for (; r + 4 <= br; r += 4)
          pv_rows<4>(Pp.data() + r * (kBc / 2), kBc / 2, vb, dv_pad, upairs, O.data() + r * dv_pad, dv_pad, dv_pad);
        for (; r < br; ++r)
          pv_rows<1>(Pp.data() + r * (kBc / 2), kBc / 2, vb, dv_pad, upairs, O.data() + r * dv_pad, dv_pad, dv_pad);
      }
      float* o = out + p.out_l.offset(b, h, i0);
      for (int64_t r = 0; r < br; ++r) {
        const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
        for (int64_t e = 0; e < p.Dv; ++e) o[r * p.out_l.sl + e] = O[r * dv_pad + e] * inv;
      }
    }
  }
}
#else
void attention_forward_flash_bf16_avx512(const AttnProblem&, float*) {
  throw Error("attention_forward_flash_bf16_avx512: this build has no AVX512_BF16 (build with -DQKV_NATIVE=ON on a CPU that has it)");
}
#endif

#include "kernels/attention_precision.inc"

}  // namespace qkv::kernels::cpu
