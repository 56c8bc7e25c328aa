// Cascade attention on the CPU (kernels/cpu/paged_attention.{h,cpp}): tokens whose sequences begin
// with the same pages attend to those pages together, then each goes on over its own keys. Which
// tokens group, and over how many keys (paged_shared_prefixes); that a token's output has the same
// bits in its group as alone (f32, bf16 and e4m3 caches — an e4m3 one as an f32 cache holding its
// values, bit for bit —, odd widths: the vector loops' tails, an odd row of the pairs); and the outputs against a double-precision reference over the same cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/paged_prefixes.h"
#include "qkv/core/dtype.h"
#include "qkv/core/rng.h"

namespace {

using qkv::kernels::PagedShape;
using qkv::kernels::PagedGroup;

// Five sequences in one cache of pages of 16 (tiles of 128 keys):
//   row 0: pages 0 … 19 (a 320-key prefix), then 40, 41           350 keys
//   row 1: pages 0 … 19, then 42, 43, 44                           333
//   row 2: pages 0 … 16, then 45 … 48 (parts from row 0 at 17)      300
//   row 3: pages 20 … 44 (its own: a prompt's later chunk)          400
//   row 4: pages 0 … 12                                             200 (fewer than 256: never grouped)
// Tokens: one decoding step each of rows 0, 1, 2 and 4, and three queries of row 3 (398, 399, 400).
struct Cascade {
  PagedShape s;
  std::vector<int32_t> table, seq, len;
};

Cascade make(int64_t window = 0) {
  Cascade c;
  PagedShape& s = c.s;
  s.page_size = 16, s.pages = 64, s.rows = 5, s.max_pages = 26, s.window = window;
  c.table.assign(static_cast<size_t>(s.rows * s.max_pages), -1);
  auto set = [&](int64_t r, std::vector<int32_t> pages) {
    for (size_t i = 0; i < pages.size(); ++i) c.table[static_cast<size_t>(r * s.max_pages) + i] = pages[i];
  };
  std::vector<int32_t> prefix(20);
  std::iota(prefix.begin(), prefix.end(), 0);
  auto with = [](std::vector<int32_t> a, std::vector<int32_t> b) { return a.insert(a.end(), b.begin(), b.end()), a; };
  set(0, with(prefix, {40, 41}));
  set(1, with(prefix, {42, 43, 44}));
  set(2, with(std::vector<int32_t>(prefix.begin(), prefix.begin() + 17), {45, 46, 47, 48}));
  std::vector<int32_t> own(25);
  std::iota(own.begin(), own.end(), 20);
  set(3, own);
  set(4, std::vector<int32_t>(prefix.begin(), prefix.begin() + 13));
  c.seq = {0, 3, 1, 2, 3, 4, 3};
  c.len = {350, 398, 333, 300, 399, 200, 400};
  s.T = static_cast<int64_t>(c.seq.size());
  return c;
}

TEST(PagedCascade, GroupsTheTokensThatBeginWithTheSamePagesOverTheirCommonWholeTiles) {
  const Cascade c = make();
  const std::vector<PagedGroup> g =
      qkv::kernels::paged_shared_prefixes(c.table.data(), c.seq.data(), c.len.data(), c.s);
  ASSERT_EQ(g.size(), 2u);
  // rows 0, 1, 2 share 17 whole pages (272 keys): two tiles; row 4's token sees too few keys
  EXPECT_EQ(g[0].tokens, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(g[0].keys, 256);
  // row 3's three queries: 24 whole pages the shortest sees (384 keys), three tiles
  EXPECT_EQ(g[1].tokens, (std::vector<int64_t>{1, 4, 6}));
  EXPECT_EQ(g[1].keys, 384);

  // a window that hides a token's first keys leaves it out: rows 0 (350) and 3 (398 …) under 340
  const Cascade w = make(340);
  const std::vector<PagedGroup> gw =
      qkv::kernels::paged_shared_prefixes(w.table.data(), w.seq.data(), w.len.data(), w.s);
  ASSERT_EQ(gw.size(), 1u);
  EXPECT_EQ(gw[0].tokens, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(gw[0].keys, 256);

  // pages of 5: tiles of 125 keys; rows sharing 300 keys (60 pages) share two tiles, 250 keys; a
  // single token, or two sharing fewer than two tiles, make no group
  PagedShape s5;
  s5.page_size = 5, s5.pages = 200, s5.rows = 2, s5.max_pages = 70, s5.T = 2;
  std::vector<int32_t> t5(140);
  for (int32_t i = 0; i < 70; ++i) t5[static_cast<size_t>(i)] = i, t5[static_cast<size_t>(70 + i)] = i < 60 ? i : 100 + i;
  const std::vector<int32_t> seq5 = {0, 1}, len5 = {330, 349};
  std::vector<PagedGroup> g5 = qkv::kernels::paged_shared_prefixes(t5.data(), seq5.data(), len5.data(), s5);
  ASSERT_EQ(g5.size(), 1u);
  EXPECT_EQ(g5[0].keys, 250);
  s5.T = 1;
  EXPECT_TRUE(qkv::kernels::paged_shared_prefixes(t5.data(), seq5.data(), len5.data(), s5).empty());
  s5.T = 2;
  for (int32_t i = 40; i < 60; ++i) t5[static_cast<size_t>(70 + i)] = 100 + i;  // now 40 pages in common: one tile
  EXPECT_TRUE(qkv::kernels::paged_shared_prefixes(t5.data(), seq5.data(), len5.data(), s5).empty());
}

// out[t, h] in double: softmax over the token's keys (the last `window`) of scale · q · k, times v
std::vector<double> reference(const Cascade& c, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v) {
  const PagedShape& s = c.s;
  const int64_t G = s.H / s.Hkv;
  std::vector<double> out(static_cast<size_t>(s.T * s.H * s.Dv));
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t n = c.len[static_cast<size_t>(t)], lo = s.window > 0 ? std::max<int64_t>(0, n - s.window) : 0;
      std::vector<double> p;
      std::vector<int64_t> at;
      for (int64_t j = lo; j < n; ++j) {
        const int64_t page = c.table[static_cast<size_t>(c.seq[static_cast<size_t>(t)] * s.max_pages + j / s.page_size)];
        at.push_back((page * s.Hkv + h / G) * s.page_size + j % s.page_size);
        double d = 0;
        for (int64_t x = 0; x < s.D; ++x) d += double(q[static_cast<size_t>((t * s.H + h) * s.D + x)]) * k[static_cast<size_t>(at.back() * s.D + x)];
        p.push_back(s.scale * d);
      }
      double m = -INFINITY, sum = 0;
      for (double x : p) m = std::max(m, x);
      for (double& x : p) sum += (x = std::exp(x - m));
      for (size_t j = 0; j < p.size(); ++j)
        for (int64_t x = 0; x < s.Dv; ++x)
          out[static_cast<size_t>((t * s.H + h) * s.Dv + x)] += p[j] / sum * v[static_cast<size_t>(at[j] * s.Dv + x)];
    }
  return out;
}

// The whole step at once against each token alone (a step of one token groups nothing): the same
// bits; and both within 2e-6 of the double reference.
template <typename Cache>
void expect_together_as_alone(int64_t H, int64_t Hkv, int64_t D, int64_t Dv, int64_t window) {
  Cascade c = make(window);
  PagedShape& s = c.s;
  s.H = H, s.Hkv = Hkv, s.D = D, s.Dv = Dv, s.scale = 1.f / std::sqrt(static_cast<float>(D));
  ASSERT_FALSE(qkv::kernels::paged_shared_prefixes(c.table.data(), c.seq.data(), c.len.data(), s).empty());
  const int64_t slots = s.pages * s.page_size;
  std::vector<float> q(static_cast<size_t>(s.T * H * D)), k(static_cast<size_t>(slots * Hkv * D)), v(static_cast<size_t>(slots * Hkv * Dv));
  uint64_t i = 0;
  for (float& x : q) x = 2.f * qkv::Generator::normal(11, i++);
  for (float& x : k) x = qkv::Generator::normal(12, i++);
  for (float& x : v) x = qkv::Generator::normal(13, i++);
  // the cache as it holds them (a bf16 cache: rounded), and the reference over those values
  auto held = [](std::vector<float>& x) {
    std::vector<Cache> c(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      if constexpr (std::is_same_v<Cache, qkv::bf16>) c[j] = qkv::f32_to_bf16(x[j]), x[j] = qkv::bf16_to_f32(c[j]);
      else if constexpr (std::is_same_v<Cache, qkv::f8e4m3>) c[j] = qkv::f32_to_f8e4m3(x[j]), x[j] = qkv::f8e4m3_to_f32(c[j]);
      else c[j] = x[j];
    }
    return c;
  };
  const std::vector<Cache> kc = held(k), vc = held(v);
  std::vector<float> together(static_cast<size_t>(s.T * H * Dv));
  qkv::kernels::cpu::paged_attention_forward(q.data(), kc.data(), vc.data(), c.table.data(), c.seq.data(), c.len.data(),
                                             together.data(), s);
  const std::vector<double> want = reference(c, q, k, v);
  // an e4m3 cache is widened a run at a time and read by the f32 kernel: as an f32 cache holding its
  // values, bit for bit (a bf16 one is widened in the loops' registers, whose products the compiler
  // may fuse otherwise: within the reference's 2e-6)
  if constexpr (std::is_same_v<Cache, qkv::f8e4m3>) {
    std::vector<float> wide(together.size());
    qkv::kernels::cpu::paged_attention_forward(q.data(), k.data(), v.data(), c.table.data(), c.seq.data(), c.len.data(),
                                               wide.data(), s);
    for (size_t x = 0; x < wide.size(); ++x) ASSERT_EQ(together[x], wide[x]) << "element " << x << " of the f32 cache's";
  }
  for (int64_t t = 0; t < s.T; ++t) {
    PagedShape one = s;
    one.T = 1;
    std::vector<float> alone(static_cast<size_t>(H * Dv));
    qkv::kernels::cpu::paged_attention_forward(q.data() + t * H * D, kc.data(), vc.data(), c.table.data(),
                                               c.seq.data() + t, c.len.data() + t, alone.data(), one);
    for (int64_t x = 0; x < H * Dv; ++x) {
      const size_t at = static_cast<size_t>(t * H * Dv + x);
      ASSERT_EQ(together[at], alone[static_cast<size_t>(x)]) << "token " << t << ", element " << x;
      ASSERT_NEAR(together[at], want[at], 2e-6) << "token " << t << ", element " << x;
    }
  }
}

TEST(PagedCascade, ATokenHasTheSameBitsInItsGroupAsAloneAndMatchesTheReference) {
  {
    SCOPED_TRACE("f32, H 6 on 2 (three rows a key head: a pair and one alone), D 40, Dv 24");
    expect_together_as_alone<float>(6, 2, 40, 24, 0);
  }
  {
    SCOPED_TRACE("f32, H 8 on 2, D 128, Dv 128, a window of 1,000");
    expect_together_as_alone<float>(8, 2, 128, 128, 1000);
  }
  {
    SCOPED_TRACE("f32, one query head a key head, D 7, Dv 70");
    expect_together_as_alone<float>(3, 3, 7, 70, 0);
  }
  {
    SCOPED_TRACE("bf16, H 6 on 2, D 40, Dv 24");
    expect_together_as_alone<qkv::bf16>(6, 2, 40, 24, 0);
  }
  {
    SCOPED_TRACE("bf16, H 4 on 1, D 64, Dv 64");
    expect_together_as_alone<qkv::bf16>(4, 1, 64, 64, 0);
  }
  {
    SCOPED_TRACE("f8e4m3, H 6 on 2, D 40, Dv 24");
    expect_together_as_alone<qkv::f8e4m3>(6, 2, 40, 24, 0);
  }
  {
    SCOPED_TRACE("f8e4m3, H 8 on 2, D 128, Dv 128, a window of 1,000");
    expect_together_as_alone<qkv::f8e4m3>(8, 2, 128, 128, 1000);
  }
}

}  // namespace
