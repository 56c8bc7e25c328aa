// Attention over a paged KV cache on the CPU (formulas: kernels/paged_attention.inc). One task per
// (query token, key/value head): the G query heads that share the head read each page of keys once,
// tile by tile with an online softmax — the scores two rows and four keys at a time, then the values
// summed with their weights (a page's rows into registers). Before them, tokens whose sequences begin
// with the same pages attend to those pages together (cascade attention: paged_shared_prefixes in
// kernels/paged_prefixes.h), the tokens' own tasks going on from there. A bf16 cache's rows are
// widened as they are read (vec.h's widen, load_widened), an e4m3 cache's too.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/vec.h"
#include "kernels/paged_prefixes.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

// GCC 12's AVX-512 headers build a bf16 load's halves from _mm256_undefined_*, which it then warns
// about as "uninitialized" where the loads are inlined (GCC PR 105593, fixed in 13): a false positive,
// silenced for this file's kernels only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// out_i[r] = scale · q_i · k[r] for NR query rows (1 or 2) over the `run` rows of a page (k [run, D]):
// four keys at a time, each key's registers loaded once for the NR rows and each row's four sums
// reduced together. A row's sums take the same steps whatever NR: the same bits alone or paired.
template <int NR, typename C>
void score_rows(const float* const* q, const C* k, int64_t run, int64_t D, float scale, float* const* out) {
  int64_t r = 0;
#if QKV_SIMD
  const int64_t Dvec = D - D % kLanes;  // the vector part; the rest one by one
  for (; r + 4 <= run; r += 4) {
    const C* k0 = k + r * D;
    simd::vf a[NR][4];
    for (int i = 0; i < NR; ++i)
      for (int c = 0; c < 4; ++c) a[i][c] = simd::zero();
    for (int64_t d = 0; d < Dvec; d += kLanes) {
      const simd::vf x0 = load_widened(k0 + d), x1 = load_widened(k0 + D + d), x2 = load_widened(k0 + 2 * D + d),
                     x3 = load_widened(k0 + 3 * D + d);
      for (int i = 0; i < NR; ++i) {
        const simd::vf x = simd::load(q[i] + d);
        a[i][0] = simd::fmadd(x, x0, a[i][0]), a[i][1] = simd::fmadd(x, x1, a[i][1]);
        a[i][2] = simd::fmadd(x, x2, a[i][2]), a[i][3] = simd::fmadd(x, x3, a[i][3]);
      }
    }
    for (int i = 0; i < NR; ++i) {
      float sums[4];
      simd::reduce_add4(a[i][0], a[i][1], a[i][2], a[i][3], sums);
      for (int64_t c = 0; c < 4; ++c) {
        for (int64_t d = Dvec; d < D; ++d) sums[c] += q[i][d] * widen(k0[c * D + d]);
        out[i][r + c] = scale * sums[c];
      }
    }
  }
#endif
  for (; r < run; ++r)
    for (int i = 0; i < NR; ++i) out[i][r] = scale * dot(q[i], k + r * D, D);
}

// o_i[d] += Σ_r w_i[r] · v[r, d] for NR rows (1 or 2) over the `run` rows of a page (v [run, Dv]): each
// column block of the outputs kept in registers across the rows — one load and one store of o per
// page, not per key — and each value register loaded once for the NR rows. A block is 8 registers
// of o for one row, 4 for two (AVX2 has 16): a row's 64 values (head dim 64, AVX2) are then read in
// one pass, whole cache lines in order, with 8 sums in flight, not in two passes of every other pair
// of lines (which left the loads waiting on memory: 12 % of a Marian-sized int8 translation, Zen 3).
// Each o_i[d] sums its rows in order r = 0, 1, … with one fmadd each, whatever the block: the same
// bits alone or paired, at any width.
template <int NR, int Regs, typename C>
int64_t add_weighted_block(float* const* o, const float* const* w, const C* v, int64_t run, int64_t Dv, int64_t d) {
#if QKV_SIMD
  constexpr int64_t B = Regs * kLanes;
  for (; d + B <= Dv; d += B) {
    simd::vf a[NR][Regs];
    for (int i = 0; i < NR; ++i)
      for (int c = 0; c < Regs; ++c) a[i][c] = simd::load(o[i] + d + c * kLanes);
    for (int64_t r = 0; r < run; ++r) {
      const C* vr = v + r * Dv + d;
      simd::vf x[Regs];
      for (int c = 0; c < Regs; ++c) x[c] = load_widened(vr + c * kLanes);
      for (int i = 0; i < NR; ++i) {
        const simd::vf wr = simd::set1(w[i][r]);
        for (int c = 0; c < Regs; ++c) a[i][c] = simd::fmadd(wr, x[c], a[i][c]);
      }
    }
    for (int i = 0; i < NR; ++i)
      for (int c = 0; c < Regs; ++c) simd::store(o[i] + d + c * kLanes, a[i][c]);
  }
#endif
  return d;
}

template <int NR, typename C>
void add_weighted_rows(float* const* o, const float* const* w, const C* v, int64_t run, int64_t Dv) {
  int64_t d = 0;
#if QKV_SIMD
  if constexpr (NR == 1) d = add_weighted_block<NR, 8>(o, w, v, run, Dv, d);
  d = add_weighted_block<NR, 4>(o, w, v, run, Dv, d);
  d = add_weighted_block<NR, 1>(o, w, v, run, Dv, d);
#endif
  for (; d < Dv; ++d)
    for (int i = 0; i < NR; ++i) {
      float a = o[i][d];
      for (int64_t r = 0; r < run; ++r) a += w[i][r] * widen(v[r * Dv + d]);
      o[i][d] = a;
    }
}

// token t's block-table row: its sequence's pages in order
inline const int32_t* row_of(const int32_t* table, const int32_t* seq, int64_t t, const PagedShape& s) {
  return table + static_cast<int64_t>(seq[t]) * s.max_pages;
}

// Keys are taken in tiles (kernels/paged_prefixes.h's tile_keys: whole pages, at fixed places). A
// row's arithmetic depends only on its own query and keys, so a row's output has the same bits
// whichever rows share its tiles.

// f(the n cache elements at p, as the rows' loops read them): f32 and bf16 ones where they lie (a bf16
// element widens in two instructions as it is loaded), e4m3 ones widened once into a thread's buffer
// (vec.h's widen_f8e4m3_row: done once for every row of the task, not once for each pair of rows).
// The same values either way, so the same bits.
template <typename C, typename F>
void readable(const C* p, int64_t n, F&& f) {
  if constexpr (std::is_same_v<C, f8e4m3>) {
    thread_local std::vector<float> buf;
    if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
    widen_f8e4m3_row(p, buf.data(), n);
    f(static_cast<const float*>(buf.data()));
  } else {
    f(p);
  }
}

// The online softmax of query rows over their keys, tile by tile (Milakov & Gimelshein, 2018): a row
// keeps m, its largest score so far, l = Σ_j e^{s_j − m} and o = Σ_j e^{s_j − m} · v_j (in out, not yet
// divided by l). A tile of scores s_j = scale · q · k_j (soft-capped where s.softcap > 0) moves them to
//
//   m' = max(m, max_j s_j),  l' = l · e^{m − m'} + Σ_j e^{s_j − m'},  o' = o · e^{m − m'} + Σ_j e^{s_j − m'} · v_j
//
// and the row's attention is o / l once every tile is in.
template <typename C>
struct Online {
  const float* q;          // [T · H, D]
  const C *k, *v;          // the caches [pages, Hkv, page_size, D | Dv]
  float *out, *m, *l;      // out [T · H, Dv]; m, l [T · H]
  const PagedShape& s;

  // rows (indices into T · H, all of key/value head kvh and of one sequence's pages) over keys
  // j0 … j1 − 1; scores: scratch for [rows, tile]
  void attend(const int64_t* rows, int64_t R, const int32_t* pages, int64_t kvh, int64_t j0, int64_t j1,
              std::vector<float>& scores) const {
    const int64_t tk = tile_keys(s);
    for (int64_t a = j0; a < j1;) {
      const int64_t b = std::min(j1, (a / tk + 1) * tk), n = b - a;
      scores.resize(static_cast<size_t>(R * n));
      // page by page: keys j … j + run − 1 lie together, k[page, kvh, off … off + run − 1]; a page's
      // keys (a few KiB) stay in L1 while every row reads them
      auto each_run = [&](auto&& f) {
        for (int64_t j = a; j < b;) {
          const int64_t off = j % s.page_size, run = std::min(s.page_size - off, b - j);
          const int64_t at = (static_cast<int64_t>(pages[j / s.page_size]) * s.Hkv + kvh) * s.page_size + off;
          f(j - a, at, run);
          j += run;
        }
      };
      // rows two at a time (each key's registers loaded once for both), the odd one alone
      auto by_pairs = [&](auto&& f) {
        int64_t r = 0;
        for (; r + 2 <= R; r += 2) f(std::integral_constant<int, 2>{}, r);
        if (r < R) f(std::integral_constant<int, 1>{}, r);
      };
      each_run([&](int64_t i0, int64_t at, int64_t run) {
        readable(k + at * s.D, run * s.D, [&](const auto* kr) {
          by_pairs([&](auto nr, int64_t r) {
            const float* qs[2] = {q + rows[r] * s.D, q + rows[r + nr - 1] * s.D};
            float* os[2] = {scores.data() + r * n + i0, scores.data() + (r + nr - 1) * n + i0};
            score_rows<nr>(qs, kr, run, s.D, s.scale, os);
          });
        });
      });
      for (int64_t r = 0; r < R; ++r) {
        float* p = scores.data() + r * n;
        if (s.softcap > 0.f) softcap_row(p, n, s.softcap);
        const float m1 = std::max(m[rows[r]], max_of(p, n));
        const float alpha = std::exp(m[rows[r]] - m1);  // 0 at the first tile (m = −∞)
        const float sum = exp_shift_sum(p, p, n, m1);
        if (alpha != 1.f) scale(out + rows[r] * s.Dv, s.Dv, alpha);
        l[rows[r]] = l[rows[r]] * alpha + sum, m[rows[r]] = m1;
      }
      each_run([&](int64_t i0, int64_t at, int64_t run) {
        readable(v + at * s.Dv, run * s.Dv, [&](const auto* vr) {
          by_pairs([&](auto nr, int64_t r) {
            float* os[2] = {out + rows[r] * s.Dv, out + rows[r + nr - 1] * s.Dv};
            const float* ws[2] = {scores.data() + r * n + i0, scores.data() + (r + nr - 1) * n + i0};
            add_weighted_rows<nr>(os, ws, vr, run, s.Dv);
          });
        });
      });
      a = b;
    }
  }
  void start(const int64_t* rows, int64_t R) const {
    for (int64_t r = 0; r < R; ++r) {
      std::memset(out + rows[r] * s.Dv, 0, static_cast<size_t>(s.Dv) * sizeof(float));
      m[rows[r]] = -INFINITY, l[rows[r]] = 0.f;
    }
  }
};

template <typename C>
void forward(const float* q, const C* k_cache, const C* v_cache, const int32_t* table, const int32_t* seq,
             const int32_t* len, float* out, const PagedShape& s) {
  const int64_t G = s.H / s.Hkv;
  std::vector<float> m(static_cast<size_t>(s.T * s.H)), l(m.size());
  const Online<C> online{q, k_cache, v_cache, out, m.data(), l.data(), s};
  auto lo_of = [&](int64_t t) { return s.window > 0 ? std::max<int64_t>(0, len[t] - s.window) : int64_t{0}; };

  // 1. cascade: the prefixes tokens share (paged_shared_prefixes), a task per (group, key/value head,
  // block of its tokens), the blocks as large as the threads allow (each reads the prefix's pages once
  // for all its rows); each row's m, l and o left for step 2 to go on from
  static const bool cascade = [] {
    const char* e = std::getenv("QKV_PAGED_CASCADE");  // "0": every token on its own (to compare)
    return !(e && std::strcmp(e, "0") == 0);
  }();
  const std::vector<PagedGroup> groups = cascade ? paged_shared_prefixes(table, seq, len, s) : std::vector<PagedGroup>{};
  std::vector<int64_t> from(static_cast<size_t>(s.T), -1);  // a token's first key left to attend; −1: none done
  struct Task {
    const PagedGroup* g;
    int64_t kvh, t0, t1;  // tokens g->tokens[t0 … t1 − 1]
  };
  std::vector<Task> tasks;
  const int64_t pieces = s.Hkv * static_cast<int64_t>(groups.size());  // (group, key/value head) pairs
  for (const PagedGroup& g : groups) {
    for (int64_t t : g.tokens) from[static_cast<size_t>(t)] = g.keys;
    const auto n = static_cast<int64_t>(g.tokens.size());
    const int64_t blocks = std::clamp<int64_t>((2 * num_threads() + pieces - 1) / pieces, 1, n);
    for (int64_t kvh = 0; kvh < s.Hkv; ++kvh)
      for (int64_t b = 0; b < blocks; ++b) tasks.push_back({&g, kvh, b * n / blocks, (b + 1) * n / blocks});
  }
  parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t b, int64_t e) {
    std::vector<float> scores;
    std::vector<int64_t> rows;
    for (int64_t i = b; i < e; ++i) {
      const Task& task = tasks[static_cast<size_t>(i)];
      rows.clear();
      for (int64_t x = task.t0; x < task.t1; ++x)
        for (int64_t g = 0; g < G; ++g) rows.push_back(task.g->tokens[static_cast<size_t>(x)] * s.H + task.kvh * G + g);
      const auto R = static_cast<int64_t>(rows.size());
      online.start(rows.data(), R);
      online.attend(rows.data(), R, row_of(table, seq, task.g->tokens[static_cast<size_t>(task.t0)], s), task.kvh, 0, task.g->keys, scores);
    }
  });

  // 2. each token's own keys (all of them, or those past its group's prefix): one task per (token,
  // key/value head), its G query heads together; then o / l
  parallel_for(s.T * s.Hkv, 1, [&](int64_t b, int64_t e) {
    std::vector<float> scores;  // [G, tile]
    std::vector<int64_t> rows(static_cast<size_t>(G));
    int64_t* r = rows.data();
    for (int64_t task = b; task < e; ++task) {
      const int64_t t = task / s.Hkv, kvh = task % s.Hkv;
      for (int64_t g = 0; g < G; ++g) r[g] = t * s.H + kvh * G + g;
      int64_t j = from[static_cast<size_t>(t)];
      if (j < 0) online.start(r, G), j = lo_of(t);
      online.attend(r, G, row_of(table, seq, t, s), kvh, j, len[t], scores);
      for (int64_t g = 0; g < G; ++g)
        if (l[static_cast<size_t>(r[g])] > 0.f) scale(out + r[g] * s.Dv, s.Dv, 1.f / l[static_cast<size_t>(r[g])]);
    }
  });
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// a row of new keys or values into the cache: copied, or rounded to bf16 or to e4m3 (saturating)
inline void store_row(float* dst, const float* src, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }
inline void store_row(bf16* dst, const float* src, int64_t n) { bf16_row(src, dst, n); }
inline void store_row(f8e4m3* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f8e4m3(src[i]);
}

// k[slot / page_size, h, slot mod page_size] = k_new[t, h] (and v)
template <typename C>
void write(C* k_cache, C* v_cache, const float* k, const float* v, const int32_t* slots, const PagedShape& s) {
  parallel_for(s.T, 1 + 4096 / (s.Hkv * (s.D + s.Dv) + 1), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (slots[t] < 0) continue;  // a padding token's (−1): not written
      const int64_t page = slots[t] / s.page_size, off = slots[t] % s.page_size;
      for (int64_t h = 0; h < s.Hkv; ++h) {
        const int64_t at = (page * s.Hkv + h) * s.page_size + off;
        store_row(k_cache + at * s.D, k + (t * s.Hkv + h) * s.D, s.D);
        store_row(v_cache + at * s.Dv, v + (t * s.Hkv + h) * s.Dv, s.Dv);
      }
    }
  });
}

}  // namespace

void paged_attention_forward(const float* q, const float* k_cache, const float* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s,
                             const PagedCascade*) {
  forward(q, k_cache, v_cache, table, seq, len, out, s);
}
void paged_attention_forward(const float* q, const bf16* k_cache, const bf16* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s,
                             const PagedCascade*) {
  forward(q, k_cache, v_cache, table, seq, len, out, s);
}
void paged_attention_forward(const float* q, const f8e4m3* k_cache, const f8e4m3* v_cache, const int32_t* table,
                             const int32_t* seq, const int32_t* len, float* out, const PagedShape& s,
                             const PagedCascade*) {
  forward(q, k_cache, v_cache, table, seq, len, out, s);
}
void paged_kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}
void paged_kv_write(bf16* k_cache, bf16* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}

void paged_kv_write(f8e4m3* k_cache, f8e4m3* v_cache, const float* k, const float* v, const int32_t* slots,
                    const PagedShape& s) {
  write(k_cache, v_cache, k, v, slots, s);
}

}  // namespace qkv::kernels::cpu
