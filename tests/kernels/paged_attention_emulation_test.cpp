// The paged-attention GPU kernels (kernels/cuda/paged_attention_kernels.cuh) run on the host,
// unchanged, through tests/kernels/cuda_emulation.h, with the grids paged_attention.cu gives them,
// against the CPU's kernels (kernels/cpu/paged_attention.cpp) — the tiled decoding kernel (the
// default; its tiles by cp.async, and by plain loads where rows are not whole 16-byte pieces) and the
// key-a-warp kernel it replaced: decoding steps of sequences of
// lengths 0, 1, 17 and 100 sharing one cache in a shuffled page order (grouped-query and not, D = 64
// and odd widths with Dv ≠ D, up to 256, pages of 16 and 4, a sliding window, more query heads a key
// head than one block takes), a prompt as T causal queries of one sequence, and the writes of new
// tokens into the cache (f32, bf16 and e4m3 caches); long contexts split over the keys (runs, then their
// merge) and where paged_split chooses that; a block table naming pages outside the cache, a negative row and a length
// past the table are skipped, not read, as are rows outside the table and slots outside the cache
// (under qkv_emulation_asan a read or write outside would be reported); and paged_attention.cu's own
// launchers, whose choices (split or not on 132 SMs, the cascade's runs, each kernel's shared memory
// allowed) the other cases make by hand.
// Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/paged_attention.cu"  // the launchers, on the emulated H200 (132 SMs)
#include "kernels/emulated_kernels.h"
#include "kernels/paged_prefixes.h"
#include "testing.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel
using qkv::kernels::PagedShape;
namespace kqkv = qkv::kernels;

// A paged cache and the queries over it: q [T, H, D]; k, v [pages · page_size, Hkv, D | Dv];
// table [rows, max_pages]; seq, len [T].
struct Paged {
  PagedShape s;
  std::vector<float> q, k, v;
  std::vector<int32_t> table, seq, len;
};

struct Heads {
  int64_t H, Hkv, D, Dv, page_size, window;
};

// Sequences of the given lengths in one cache, their pages handed out in a shuffled order (one spare
// page no row lists), and the queries (row, length) one per token; every slot of the cache random.
Paged make(const Heads& h, const std::vector<int64_t>& lengths, const std::vector<std::pair<int32_t, int32_t>>& queries,
           uint64_t seed) {
  Paged c;
  PagedShape& s = c.s;
  s.T = static_cast<int64_t>(queries.size()), s.H = h.H, s.Hkv = h.Hkv, s.D = h.D, s.Dv = h.Dv;
  s.page_size = h.page_size, s.window = h.window, s.scale = 1.f / std::sqrt(static_cast<float>(h.D));
  s.rows = static_cast<int64_t>(lengths.size()), s.max_pages = 1;
  for (int64_t n : lengths) s.max_pages = std::max(s.max_pages, (n + h.page_size - 1) / h.page_size);
  s.pages = 1;
  for (int64_t n : lengths) s.pages += (n + h.page_size - 1) / h.page_size;
  // a permutation of the pages (Fisher–Yates on qkv's generator: the same on every machine)
  std::vector<int32_t> order(static_cast<size_t>(s.pages));
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size(); i > 1; --i)
    std::swap(order[i - 1], order[static_cast<size_t>(qkv::Generator::uniform(seed + 7, i) * static_cast<float>(i)) % i]);
  c.table.assign(static_cast<size_t>(static_cast<int64_t>(lengths.size()) * s.max_pages), -1);  // (unread past a length)
  size_t next = 0;
  for (size_t r = 0; r < lengths.size(); ++r)
    for (int64_t p = 0; p < (lengths[r] + h.page_size - 1) / h.page_size; ++p)
      c.table[r * static_cast<size_t>(s.max_pages) + static_cast<size_t>(p)] = order[next++];
  for (const auto& [row, n] : queries) c.seq.push_back(row), c.len.push_back(n);
  const int64_t slots = s.pages * s.page_size;
  c.q = random_floats(static_cast<size_t>(s.T * s.H * s.D), seed, 1.f);
  c.k = random_floats(static_cast<size_t>(slots * s.Hkv * s.D), seed + 1, 1.f);
  c.v = random_floats(static_cast<size_t>(slots * s.Hkv * s.Dv), seed + 2, 1.f);
  return c;
}

std::vector<float> forward_cpu(const Paged& c) {
  std::vector<float> out(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv));
  cpu::paged_attention_forward(c.q.data(), c.k.data(), c.v.data(), c.table.data(), c.seq.data(), c.len.data(),
                               out.data(), c.s);
  return out;
}
// The decoding kernels: the tiled one (the default), paged_attention_kernel (a key a warp;
// QKV_CUDA_PAGED_KERNEL=warps) and the tensor-core one (bf16 caches; QKV_CUDA_PAGED_KERNEL=mma)
enum class Kernel { tiled, warps, mma };
std::string name(Kernel k) { return k == Kernel::tiled ? "tiled" : k == Kernel::warps ? "a key a warp" : "mma"; }

// a decoding kernel's launch as paged_attention.cu's decode makes it (aligned false: the tiled kernel
// copies by plain loads, as for caches not on 16 bytes)
template <typename C>
void decode(Kernel kind, const Paged& c, const C* k, const C* v, float* out, dim3 grid, kc::PagedSplit split = {},
            float* part = nullptr, const int32_t* from = nullptr, bool aligned = true) {
  if (kind == Kernel::warps) {
    launch(grid, kc::kPagedThreads, kc::paged_attention_shared_bytes(c.s), [&] {
      kc::paged_attention_kernel(c.q.data(), k, v, c.table.data(), c.seq.data(), c.len.data(), out, c.s, split, part,
                                 from);
    });
    return;
  }
  if constexpr (std::is_same_v<C, qkv::bf16> || std::is_same_v<C, qkv::f8e4m3>) {
    if (kind == Kernel::mma) {
      const kc::PagedMmaTiles tl = kc::paged_mma_tiles(c.s, sizeof(C));
      launch(grid, kc::kPagedThreads, tl.bytes, [&] {
        if (c.s.D == 64)
          kc::paged_attention_mma_kernel<C, 64>(c.q.data(), k, v, c.table.data(), c.seq.data(), c.len.data(), out, c.s,
                                                tl.stages, split, part, from);
        else
          kc::paged_attention_mma_kernel<C, 128>(c.q.data(), k, v, c.table.data(), c.seq.data(), c.len.data(), out, c.s,
                                                 tl.stages, split, part, from);
      });
      return;
    }
  }
  const kc::PagedTiles tl = kc::paged_tiles(c.s, sizeof(C), aligned);
  launch(grid, kc::kPagedThreads, tl.bytes, [&] {
    kc::paged_attention_tiled_kernel(c.q.data(), k, v, c.table.data(), c.seq.data(), c.len.data(), out, c.s, tl, split,
                                     part, from);
  });
}
dim3 decode_grid(const Paged& c, int64_t runs = 1) {
  return dim3(static_cast<unsigned>(kc::paged_attention_blocks(c.s)), static_cast<unsigned>(runs));
}

// the kernel's launch as paged_attention.cu makes it
std::vector<float> forward_gpu(const Paged& c, Kernel kind = Kernel::tiled, bool aligned = true) {
  std::vector<float> out(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv), NAN);
  decode(kind, c, c.k.data(), c.v.data(), out.data(), decode_grid(c), {}, nullptr, nullptr, aligned);
  return out;
}

// the split launch as paged_attention.cu makes it: the runs, then their merge
std::vector<float> forward_gpu_split(const Paged& c, kc::PagedSplit split, Kernel kind = Kernel::tiled) {
  std::vector<float> out(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv), NAN),
      part(static_cast<size_t>(kc::paged_split_floats(c.s, split)), NAN);
  decode(kind, c, c.k.data(), c.v.data(), out.data(), decode_grid(c, split.splits), split, part.data());
  for (float x : out) EXPECT_TRUE(std::isnan(x)) << "a run wrote the output";
  launch(dim3(kc::paged_merge_blocks(c.s)), 256, 0, [&] { kc::paged_attention_merge_kernel(part.data(), out.data(), c.s, split); });
  return out;
}
// … with the split paged_attention.cu chooses on a GPU of `sms` SMs (which must be one: S > 1)
std::vector<float> forward_gpu_split(const Paged& c, int sms) {
  const kc::PagedSplit split = kc::paged_split(c.s, sms);
  EXPECT_GT(split.splits, 1) << "no split chosen";
  return forward_gpu_split(c, split);
}

std::string name(const Heads& h) {
  return "H " + std::to_string(h.H) + ", Hkv " + std::to_string(h.Hkv) + ", D " + std::to_string(h.D) + ", Dv " +
         std::to_string(h.Dv) + ", page " + std::to_string(h.page_size) + ", window " + std::to_string(h.window);
}

const std::vector<Heads> kHeads = {
    {8, 2, 64, 64, 16, 0},    // grouped-query, G = 4
    {4, 4, 40, 24, 4, 0},     // one query head a key head, odd D, Dv ≠ D
    {8, 2, 40, 72, 4, 7},     // a sliding window
    {12, 1, 32, 16, 16, 0},   // G = 12: two blocks a key head (8 heads and 4)
    {2, 1, 256, 200, 16, 0},  // the widest heads
};

TEST(PagedAttentionKernelsEmulated, DecodingStepsOverSharedShuffledPagesMatchTheCpu) {
  // one decoding step of four sequences (the new token included in each length)
  const std::vector<int64_t> lengths = {0, 1, 17, 100};
  for (const Heads& h : kHeads) {
    SCOPED_TRACE(name(h));
    const Paged c = make(h, lengths, {{2, 17}, {0, 0}, {3, 100}, {1, 1}}, 31);
    const std::vector<float> want = forward_cpu(c), got = forward_gpu(c);
    EXPECT_LT(rel(got, want), 1e-5);
    for (int64_t i = 0; i < c.s.H * c.s.Dv; ++i) EXPECT_EQ(got[static_cast<size_t>(c.s.H * c.s.Dv + i)], 0.f) << "no key";
  }
}

TEST(PagedAttentionKernelsEmulated, APromptsCausalQueriesMatchTheCpu) {
  // a prompt of 22 tokens: 22 queries of one sequence, with lengths 1 … 22
  for (const Heads& h : {Heads{8, 2, 64, 64, 4, 0}, Heads{8, 2, 40, 24, 4, 5}, Heads{3, 3, 40, 56, 16, 0}}) {
    SCOPED_TRACE(name(h));
    std::vector<std::pair<int32_t, int32_t>> queries;
    for (int32_t n = 1; n <= 22; ++n) queries.emplace_back(1, n);
    const Paged c = make(h, {9, 22}, queries, 57);
    EXPECT_LT(rel(forward_gpu(c), forward_cpu(c)), 1e-5);
  }
}

// a cache of narrow elements holding x, each rounded as dtype.h rounds it
qkv::bf16 narrowed(float f, qkv::bf16) { return qkv::f32_to_bf16(f); }
qkv::f8e4m3 narrowed(float f, qkv::f8e4m3) { return qkv::f32_to_f8e4m3(f); }
template <typename C>
std::vector<C> to_cache(const std::vector<float>& x) {
  std::vector<C> y;
  for (float f : x) y.push_back(narrowed(f, C{}));
  return y;
}
template <typename C>
auto bits_of(const std::vector<C>& x) {
  std::vector<decltype(C{}.bits)> b;
  for (C h : x) b.push_back(h.bits);
  return b;
}

// the caches in bf16 or e4m3 (widened as they are read): decoding steps and a long context split over
// the keys
template <typename C>
void expect_narrow_caches_match_the_cpu(Kernel kind) {
  SCOPED_TRACE(name(kind));
  for (const Heads& h : {Heads{8, 2, 64, 64, 16, 0}, Heads{4, 4, 40, 24, 4, 0}, Heads{2, 1, 256, 200, 16, 0}}) {
    SCOPED_TRACE(name(h));
    const Paged c = make(h, {0, 1, 17, 600}, {{2, 17}, {0, 0}, {3, 600}, {1, 1}}, 41);
    const std::vector<C> k16 = to_cache<C>(c.k), v16 = to_cache<C>(c.v);
    std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv)), got(want.size(), NAN);
    cpu::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                 want.data(), c.s);
    decode(kind, c, k16.data(), v16.data(), got.data(), decode_grid(c));
    EXPECT_LT(rel(got, want), 1e-5);
    // the split: runs of 150 keys
    const kc::PagedSplit split{4, 150};
    std::vector<float> part(static_cast<size_t>(kc::paged_split_floats(c.s, split)), NAN), split_out(want.size(), NAN);
    decode(kind, c, k16.data(), v16.data(), split_out.data(), decode_grid(c, 4), split, part.data());
    launch(dim3(kc::paged_merge_blocks(c.s)), 256, 0, [&] { kc::paged_attention_merge_kernel(part.data(), split_out.data(), c.s, split); });
    EXPECT_LT(rel(split_out, want), 1e-5);
    // and not the f32 caches' result: the rounding is there
    EXPECT_GT(rel(got, forward_cpu(c)), 1e-4);
  }
}

// (e4m3 at D 40 and Dv 24 or 200: rows not whole 16-byte pieces, which the tiled kernel copies by plain loads)
TEST(PagedAttentionKernelsEmulated, Bf16CachesMatchTheCpuWholeAndSplit) {
  expect_narrow_caches_match_the_cpu<qkv::bf16>(Kernel::tiled);
}
TEST(PagedAttentionKernelsEmulated, Fp8CachesMatchTheCpuWholeAndSplit) {
  expect_narrow_caches_match_the_cpu<qkv::f8e4m3>(Kernel::tiled);
}

// The tiled kernel's tiles: whole 16-byte pieces a row (zeros past D), a key's row an odd number of
// pieces from the next — so that the 8 lanes of each phase of a 16-byte load, keys j … j + 7, read 8
// distinct 4-bank groups —, as many tiles in flight as ~104 KB hold (2 to 4: two blocks an SM), cp.async
// only where every row is whole pieces on 16-byte addresses.
TEST(PagedAttentionKernelsEmulated, TheTiledKernelsTilesSpreadTheBanksAndFitTwoBlocksAnSm) {
  PagedShape s;
  s.H = 32, s.Hkv = 8, s.D = s.Dv = 128;
  kc::PagedTiles f32 = kc::paged_tiles(s, 4, true);
  EXPECT_EQ(f32.chunk, 4);
  EXPECT_EQ(f32.dc, 128);
  EXPECT_EQ(f32.k_stride, 528);  // 512 bytes: 32 pieces, one more
  EXPECT_EQ(f32.v_stride, 512);
  EXPECT_EQ(f32.stages, 3);
  EXPECT_TRUE(f32.async);
  EXPECT_LE(2 * (f32.bytes + 1024), size_t{228 * 1024}) << "two blocks an SM (1 KB a block reserved)";
  EXPECT_FALSE(kc::paged_tiles(s, 4, false).async) << "a cache not on 16 bytes";
  EXPECT_EQ(kc::paged_tiles(s, 2, true).stages, 4);      // bf16: 16.5 KB a tile
  EXPECT_EQ(kc::paged_tiles(s, 1, true).k_stride, 144);  // e4m3: 128 bytes, 8 pieces: one more
  s.D = s.Dv = 256, s.H = s.Hkv * 8;                     // the widest rows, 8 heads a block: 2 tiles, one block an SM
  EXPECT_EQ(kc::paged_tiles(s, 4, true).stages, 2);
  EXPECT_LE(kc::paged_tiles(s, 4, true).bytes, size_t{227 * 1024});
  s.D = 30, s.Dv = 20;  // not whole pieces: plain loads, rows rounded up (f32: 32 and 20 dims; e4m3: 32 and 32)
  const kc::PagedTiles odd = kc::paged_tiles(s, 4, true), odd8 = kc::paged_tiles(s, 1, true);
  EXPECT_FALSE(odd.async);
  EXPECT_EQ(odd.dc, 32);
  EXPECT_EQ(odd.v_stride, 80);
  EXPECT_EQ(odd8.dc, 32);
  EXPECT_EQ(odd8.k_stride, 48);
  EXPECT_FALSE(odd8.async);
  for (const int64_t D : {16, 24, 40, 64, 72, 96, 128, 200, 256})
    for (const size_t e : {size_t{1}, size_t{2}, size_t{4}}) {
      s.D = s.Dv = D;
      const kc::PagedTiles tl = kc::paged_tiles(s, e, true);
      EXPECT_EQ(tl.k_stride % 16, 0);
      EXPECT_EQ(tl.k_stride / 16 % 2, 1) << "D " << D << ", " << e << "-byte elements";
      EXPECT_GE(tl.k_stride, tl.dc * static_cast<int64_t>(e));
      EXPECT_EQ(tl.q_at % 16, 0u);
      EXPECT_EQ(tl.p_at % 16, 0u);
      EXPECT_EQ(tl.async, D * static_cast<int64_t>(e) % 16 == 0);
    }
}

// The tiled kernel's plain loads (its rows copied without cp.async, as for caches not on 16 bytes, or rows
// not whole 16-byte pieces: D 30 and Dv 18), whole and split; and the kernel it replaced, a key a warp
// (QKV_CUDA_PAGED_KERNEL=warps), as before.
TEST(PagedAttentionKernelsEmulated, TheTiledKernelsPlainLoadsAndTheKeyAWarpKernelMatchTheCpu) {
  std::vector<Heads> heads = kHeads;
  heads.push_back({6, 2, 30, 18, 4, 0});
  for (const Heads& h : heads) {
    SCOPED_TRACE(name(h));
    const Paged c = make(h, {0, 1, 17, 100}, {{2, 17}, {0, 0}, {3, 100}, {1, 1}}, 33);
    const std::vector<float> want = forward_cpu(c);
    EXPECT_LT(rel(forward_gpu(c, Kernel::tiled, false), want), 1e-5) << "plain loads";
    EXPECT_LT(rel(forward_gpu(c, Kernel::warps), want), 1e-5) << "a key a warp";
    const Paged long_context = make(h, {700, 3}, {{0, 700}, {1, 3}}, 34);
    const std::vector<float> want_long = forward_cpu(long_context);
    EXPECT_LT(rel(forward_gpu_split(long_context, kc::PagedSplit{3, 250}), want_long), 1e-5) << "split";
    EXPECT_LT(rel(forward_gpu_split(long_context, kc::PagedSplit{3, 250}, Kernel::warps), want_long), 1e-5)
        << "a key a warp, split";
  }
  expect_narrow_caches_match_the_cpu<qkv::bf16>(Kernel::warps);
}

// The tensor-core kernel (bf16 and e4m3 caches at head dims 64 and 128; QKV_CUDA_PAGED_KERNEL=mma) against
// the CPU over the same caches: G 4 and 8, one query head a key head, G 12 (two blocks a key head, the
// second of 4 heads), a window over pages of 4; a row of no key; whole and split.
template <typename C>
void expect_the_tensor_core_kernel_matches_the_cpu() {
  for (const Heads& h : {Heads{8, 2, 64, 64, 16, 0}, Heads{4, 4, 128, 128, 16, 0}, Heads{12, 1, 64, 64, 4, 7},
                         Heads{16, 2, 128, 128, 16, 0}}) {
    SCOPED_TRACE(name(h));
    const Paged c = make(h, {0, 1, 17, 600}, {{2, 17}, {0, 0}, {3, 600}, {1, 1}}, 171);
    const std::vector<C> k8 = to_cache<C>(c.k), v8 = to_cache<C>(c.v);
    std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv)), got(want.size(), NAN);
    cpu::paged_attention_forward(c.q.data(), k8.data(), v8.data(), c.table.data(), c.seq.data(), c.len.data(),
                                 want.data(), c.s);
    decode(Kernel::mma, c, k8.data(), v8.data(), got.data(), decode_grid(c));
    EXPECT_LT(rel(got, want), 1e-5);
    for (int64_t i = 0; i < c.s.H * c.s.Dv; ++i)
      ASSERT_EQ(got[static_cast<size_t>(c.s.H * c.s.Dv + i)], 0.f) << "no key";
    EXPECT_GT(rel(got, forward_cpu(c)), 1e-4) << "not the narrow cache's numbers";
    const kc::PagedSplit split{4, 150};  // runs of 150 keys: steps of 64 cut short
    std::vector<float> part(static_cast<size_t>(kc::paged_split_floats(c.s, split)), NAN), split_out(want.size(), NAN);
    decode(Kernel::mma, c, k8.data(), v8.data(), split_out.data(), decode_grid(c, 4), split, part.data());
    launch(dim3(kc::paged_merge_blocks(c.s)), 256, 0,
           [&] { kc::paged_attention_merge_kernel(part.data(), split_out.data(), c.s, split); });
    EXPECT_LT(rel(split_out, want), 1e-5) << "split";
  }
}
// Drawn shapes (qkv's generator: the same on every machine) — heads and their groups, head dim, page size,
// a window or none, 1–5 sequences of 0–700 keys, a query each at a drawn length, split or not — through the
// tensor-core kernel over bf16 and e4m3 caches, against the CPU over the same caches
TEST(PagedAttentionKernelsEmulated, TheTensorCoreKernelMatchesTheCpuOverDrawnShapes) {
  uint64_t counter = 0;
  auto draw = [&](int64_t n) {  // 0 … n − 1
    return static_cast<int64_t>(qkv::Generator::uniform(9001, counter++) * static_cast<float>(n)) % n;
  };
  const int64_t kv_heads[] = {1, 2, 4}, groups[] = {1, 2, 3, 4, 8, 12}, page_sizes[] = {1, 4, 16, 32};
  for (int trial = 0; trial < 16; ++trial) {
    Heads h{};
    h.Hkv = kv_heads[draw(3)], h.H = h.Hkv * groups[draw(6)], h.D = h.Dv = draw(2) == 0 ? 64 : 128;
    h.page_size = page_sizes[draw(4)], h.window = draw(3) == 0 ? 1 + draw(300) : 0;
    std::vector<int64_t> lengths;
    std::vector<std::pair<int32_t, int32_t>> queries;
    const int64_t rows = 1 + draw(5);
    for (int64_t r = 0; r < rows; ++r) {
      lengths.push_back(draw(701));
      queries.emplace_back(static_cast<int32_t>(r), static_cast<int32_t>(draw(lengths.back() + 1)));
    }
    const Paged c = make(h, lengths, queries, 9100 + static_cast<uint64_t>(trial));
    // runs covering the longest row (as paged_split makes them), cut anywhere against the steps of 64
    const int64_t longest = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
    const int64_t runs = draw(3) == 0 ? 1 : 2 + draw(3), run_keys = (longest + runs - 1) / runs + draw(64);
    SCOPED_TRACE(name(h) + ", " + std::to_string(rows) + " rows, runs " + std::to_string(runs) + " of " +
                 std::to_string(run_keys));
    auto check = [&](auto e) {
      using C = decltype(e);
      const std::vector<C> k8 = to_cache<C>(c.k), v8 = to_cache<C>(c.v);
      std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv)), got(want.size(), NAN);
      cpu::paged_attention_forward(c.q.data(), k8.data(), v8.data(), c.table.data(), c.seq.data(), c.len.data(),
                                   want.data(), c.s);
      if (runs == 1) {
        decode(Kernel::mma, c, k8.data(), v8.data(), got.data(), decode_grid(c));
      } else {
        const kc::PagedSplit split{runs, run_keys};
        std::vector<float> part(static_cast<size_t>(kc::paged_split_floats(c.s, split)), NAN);
        decode(Kernel::mma, c, k8.data(), v8.data(), got.data(), decode_grid(c, runs), split, part.data());
        launch(dim3(kc::paged_merge_blocks(c.s)), 256, 0,
               [&] { kc::paged_attention_merge_kernel(part.data(), got.data(), c.s, split); });
      }
      EXPECT_LT(rel(got, want), 1e-5) << sizeof(C) << "-byte cache";
      for (float x : got) ASSERT_TRUE(std::isfinite(x));
    };
    check(qkv::bf16{});
    check(qkv::f8e4m3{});
  }
}

// Its shared memory: bf16 3 stages at d 128 and 4 at 64, e4m3 4 (and the widened tile), two blocks an SM.
TEST(PagedAttentionKernelsEmulated, TheTensorCoreKernelMatchesTheCpuOverBf16Caches) {
  PagedShape s;
  s.H = 32, s.Hkv = 8, s.D = s.Dv = 128;
  EXPECT_TRUE(kc::paged_mma_serves(s));
  EXPECT_EQ(kc::paged_mma_tiles(s, 2).stages, 3);
  EXPECT_EQ(kc::paged_mma_tiles(s, 1).stages, 4);
  for (const size_t e : {size_t{1}, size_t{2}})
    EXPECT_LE(2 * (kc::paged_mma_tiles(s, e).bytes + 1024), size_t{228 * 1024}) << "two blocks an SM";
  EXPECT_EQ(kc::paged_mma_tiles(s, 1).bytes, size_t{4 * 4 * 2 * 16 * 128 + 4 * 2 * 16 * 136 * 2});
  s.D = s.Dv = 64;
  EXPECT_EQ(kc::paged_mma_tiles(s, 2).stages, 4);
  for (const auto& [D, Dv] : {std::pair{64, 128}, std::pair{96, 96}, std::pair{256, 256}, std::pair{40, 40}}) {
    s.D = D, s.Dv = Dv;
    EXPECT_FALSE(kc::paged_mma_serves(s)) << D << ", " << Dv;
  }
  expect_the_tensor_core_kernel_matches_the_cpu<qkv::bf16>();
}
// e4m3 caches: each tile copied as it is, then widened to bf16 rows (exactly) once a block
TEST(PagedAttentionKernelsEmulated, TheTensorCoreKernelMatchesTheCpuOverFp8Caches) {
  expect_the_tensor_core_kernel_matches_the_cpu<qkv::f8e4m3>();
}

TEST(PagedAttentionKernelsEmulated, SplitChoosesRunsOnlyWhereBlocksLeaveSmsIdle) {
  PagedShape s;
  s.T = 1, s.H = 32, s.Hkv = 8, s.D = s.Dv = 128, s.page_size = 16, s.max_pages = 256;  // 8 blocks, 4,096 keys a row
  const kc::PagedSplit one = kc::paged_split(s, 132);
  EXPECT_EQ(one.splits, 16);  // 2 · 132 / 8 = 33 runs wanted, 4,096 / 256 = 16 at most
  EXPECT_EQ(one.keys, 256);
  s.max_pages = 4096;  // 65,536 keys: 33 runs of 1,986
  EXPECT_EQ(kc::paged_split(s, 132).splits, 33);
  EXPECT_GE(kc::paged_split(s, 132).splits * kc::paged_split(s, 132).keys, 65536);
  s.window = 1000;  // a window: runs over the keys a token sees at most
  EXPECT_EQ(kc::paged_split(s, 132).splits, 3);
  EXPECT_GE(kc::paged_split(s, 132).splits * kc::paged_split(s, 132).keys, 1000);
  s.window = 0, s.T = 64;  // 512 blocks fill 132 SMs: no split
  EXPECT_EQ(kc::paged_split(s, 132).splits, 1);
  s.T = 1, s.max_pages = 31;  // 496 keys: less than two runs' worth
  EXPECT_EQ(kc::paged_split(s, 132).splits, 1);
  s.T = 0;  // no tokens
  EXPECT_EQ(kc::paged_split(s, 132).splits, 1);
}

TEST(PagedAttentionKernelsEmulated, LongContextsSplitOverTheKeysMatchTheCpu) {
  // two sequences with long contexts and two short ones, decoding together; the grid's 2 · Hkv blocks
  // (G ≤ 8) on a GPU of 40 SMs: the keys in runs of ≥ 256, most runs past the short ones' keys
  for (const Heads& h : {Heads{8, 2, 64, 64, 16, 0}, Heads{4, 4, 40, 24, 4, 0}, Heads{8, 2, 40, 72, 16, 520},
                         Heads{12, 1, 32, 16, 16, 0}}) {
    SCOPED_TRACE(name(h));
    const Paged c = make(h, {700, 3, 0, 530}, {{0, 700}, {1, 3}, {2, 0}, {3, 530}, {0, 699}}, 91);
    const std::vector<float> want = forward_cpu(c), got = forward_gpu_split(c, 40);
    EXPECT_LT(rel(got, want), 1e-5);
    const size_t row = static_cast<size_t>(c.s.H * c.s.Dv);
    for (size_t i = 2 * row; i < 3 * row; ++i) EXPECT_EQ(got[i], 0.f) << "no key";
  }
}

TEST(PagedAttentionKernelsEmulated, IndicesOutsideTheCacheAreSkippedNotRead) {
  const Heads h{8, 2, 40, 24, 4, 0};
  Paged c = make(h, {0, 1, 17, 100}, {{2, 17}, {3, 100}, {1, 1}, {3, 100}, {0, 0}, {2, 17}}, 71);
  const std::vector<float> want = forward_cpu(c);  // before the table is spoiled
  // tokens 0 and 5: sequence 2's second page the one past the cache's end, its third negative; token 3: a length past
  // the block-table row (max_pages · page_size); token 4: a negative row
  c.table[2 * static_cast<size_t>(c.s.max_pages) + 1] = static_cast<int32_t>(c.s.pages);  // (just past: ASan's redzone)
  c.table[2 * static_cast<size_t>(c.s.max_pages) + 2] = -1;
  c.len[3] = static_cast<int32_t>(c.s.max_pages * c.s.page_size + 50);
  c.seq[4] = -3, c.len[4] = 9;
  c.seq[2] = static_cast<int32_t>(c.s.rows), c.len[2] = 9;  // (token 2, a row past the table: none either)
  const std::vector<float> got = forward_gpu(c);
  const size_t row = static_cast<size_t>(c.s.H * c.s.Dv);
  // and split in 4 runs of 25 keys (too short a row for paged_split to choose it): the same
  EXPECT_LT(rel(forward_gpu_split(c, kc::PagedSplit{4, 25}), got), 1e-5);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(std::isfinite(got[i])) << i;
  // the untouched tokens as before; the long one as over its whole row; the negative row none
  for (size_t t : {1}) {
    const std::vector<float> g(got.begin() + t * row, got.begin() + (t + 1) * row),
        w(want.begin() + t * row, want.begin() + (t + 1) * row);
    EXPECT_LT(rel(g, w), 1e-5) << "token " << t;
  }
  const std::vector<float> g3(got.begin() + 3 * row, got.begin() + 4 * row), w3(want.begin() + 3 * row, want.begin() + 4 * row);
  EXPECT_LT(rel(g3, w3), 1e-5) << "a length past the row is the row's " << c.s.max_pages * c.s.page_size;
  for (size_t i = 4 * row; i < 5 * row; ++i) EXPECT_EQ(got[i], 0.f) << "a negative row sees no key";
  for (size_t i = 2 * row; i < 3 * row; ++i) EXPECT_EQ(got[i], 0.f) << "a row past the table sees no key";
}

// The same spoiled indices before the tensor-core kernel (bf16 caches, d 64): nothing read outside the cache
// (qkv_emulation_asan), the tiled kernel's numbers over the same caches, whole and split
TEST(PagedAttentionKernelsEmulated, TheTensorCoreKernelSkipsIndicesOutsideTheCache) {
  const Heads h{8, 2, 64, 64, 4, 0};
  Paged c = make(h, {0, 1, 17, 100}, {{2, 17}, {3, 100}, {1, 1}, {3, 100}, {0, 0}, {2, 17}}, 72);
  c.table[2 * static_cast<size_t>(c.s.max_pages) + 1] = static_cast<int32_t>(c.s.pages);
  c.table[2 * static_cast<size_t>(c.s.max_pages) + 2] = -1;
  c.len[3] = static_cast<int32_t>(c.s.max_pages * c.s.page_size + 50);
  c.seq[4] = -3, c.len[4] = 9;
  c.seq[2] = static_cast<int32_t>(c.s.rows), c.len[2] = 9;
  const std::vector<qkv::bf16> k16 = to_cache<qkv::bf16>(c.k), v16 = to_cache<qkv::bf16>(c.v);
  const size_t n = static_cast<size_t>(c.s.T * c.s.H * c.s.Dv), row = static_cast<size_t>(c.s.H * c.s.Dv);
  std::vector<float> tiled(n, NAN), mma(n, NAN), split(n, NAN);
  decode(Kernel::tiled, c, k16.data(), v16.data(), tiled.data(), decode_grid(c));
  decode(Kernel::mma, c, k16.data(), v16.data(), mma.data(), decode_grid(c));
  EXPECT_LT(rel(mma, tiled), 1e-5);
  const kc::PagedSplit runs{4, 25};
  std::vector<float> part(static_cast<size_t>(kc::paged_split_floats(c.s, runs)), NAN);
  decode(Kernel::mma, c, k16.data(), v16.data(), split.data(), decode_grid(c, runs.splits), runs, part.data());
  launch(dim3(kc::paged_merge_blocks(c.s)), 256, 0,
         [&] { kc::paged_attention_merge_kernel(part.data(), split.data(), c.s, runs); });
  EXPECT_LT(rel(split, tiled), 1e-5) << "split";
  for (size_t i = 2 * row; i < 3 * row; ++i) EXPECT_EQ(mma[i], 0.f) << "a row past the table sees no key";
  for (size_t i = 4 * row; i < 5 * row; ++i) EXPECT_EQ(mma[i], 0.f) << "a negative row sees no key";
}

TEST(PagedAttentionKernelsEmulated, KvWriteMatchesTheCpu) {
  PagedShape s;
  s.T = 13, s.Hkv = 2, s.D = 40, s.Dv = 24, s.page_size = 8, s.pages = 8;
  const int64_t slots = s.pages * s.page_size, k_row = s.Hkv * s.D, v_row = s.Hkv * s.Dv;
  const std::vector<float> k = random_floats(static_cast<size_t>(s.T * k_row), 81, 1.f),
                           v = random_floats(static_cast<size_t>(s.T * v_row), 82, 1.f),
                           k0 = random_floats(static_cast<size_t>(slots * k_row), 83, 1.f),
                           v0 = random_floats(static_cast<size_t>(slots * v_row), 84, 1.f);
  std::vector<int32_t> where(static_cast<size_t>(s.T));
  for (int64_t t = 0; t < s.T; ++t) where[static_cast<size_t>(t)] = static_cast<int32_t>((t * 37 + 5) % slots);  // distinct
  std::vector<float> kc_c = k0, vc_c = v0, kc_g = k0, vc_g = v0;
  cpu::paged_kv_write(kc_c.data(), vc_c.data(), k.data(), v.data(), where.data(), s);
  // token 3 (slot 116 mod 64 = 52: page 6, offset 4), head 1, dim 7 at k[6, 1, 4, 7]; its value's dim 5
  EXPECT_EQ(kc_c[static_cast<size_t>(((6 * s.Hkv + 1) * s.page_size + 4) * s.D + 7)], k[static_cast<size_t>((3 * s.Hkv + 1) * s.D + 7)]);
  EXPECT_EQ(vc_c[static_cast<size_t>(((6 * s.Hkv + 1) * s.page_size + 4) * s.Dv + 5)], v[static_cast<size_t>((3 * s.Hkv + 1) * s.Dv + 5)]);
  // the kernel's launch as paged_attention.cu makes it
  auto write_gpu = [&](const std::vector<int32_t>& at) {
    launch(dim3(kc::paged_kv_write_blocks(s)), 256, 0, [&] {
      kc::paged_kv_write_kernel(kc_g.data(), vc_g.data(), k.data(), v.data(), at.data(), s);
    });
  };
  write_gpu(where);
  EXPECT_EQ(kc_g, kc_c);
  EXPECT_EQ(vc_g, vc_c);
  // into bf16 and e4m3 caches: each element rounded to nearest even (e4m3 saturating: token 3's
  // head 0 holds values past ±448), bit for bit as the CPU's
  std::vector<float> kbig = k;
  for (int64_t d = 0; d < s.D; ++d) kbig[static_cast<size_t>(3 * k_row + d)] = (d % 2 ? -1.f : 1.f) * 100.f * static_cast<float>(d);
  auto narrow_writes = [&](auto c) {
    using C = decltype(c);
    std::vector<C> k16c = to_cache<C>(k0), v16c = to_cache<C>(v0), k16g = k16c, v16g = v16c;
    cpu::paged_kv_write(k16c.data(), v16c.data(), kbig.data(), v.data(), where.data(), s);
    launch(dim3(kc::paged_kv_write_blocks(s)), 256, 0, [&] {
      kc::paged_kv_write_kernel(k16g.data(), v16g.data(), kbig.data(), v.data(), where.data(), s);
    });
    EXPECT_EQ(bits_of(k16g), bits_of(k16c));
    EXPECT_EQ(bits_of(v16g), bits_of(v16c));
    EXPECT_EQ(k16c[static_cast<size_t>(((6 * s.Hkv + 1) * s.page_size + 4) * s.D + 7)].bits,
              narrowed(k[static_cast<size_t>((3 * s.Hkv + 1) * s.D + 7)], C{}).bits);
    EXPECT_EQ(k16c[static_cast<size_t>(((6 * s.Hkv + 0) * s.page_size + 4) * s.D + 9)].bits, narrowed(-900.f, C{}).bits);
  };
  narrow_writes(qkv::bf16{});
  narrow_writes(qkv::f8e4m3{});
  EXPECT_EQ(qkv::f8e4m3_to_f32(qkv::f32_to_f8e4m3(-900.f)), -448.f);
  // a slot outside the cache (negative, or past its end) writes nothing
  std::vector<int32_t> none(static_cast<size_t>(s.T), -1);
  for (size_t t = 0; t < none.size(); t += 2) none[t] = static_cast<int32_t>(slots + static_cast<int64_t>(t));
  kc_g = k0, vc_g = v0;
  write_gpu(none);
  EXPECT_EQ(kc_g, k0);
  EXPECT_EQ(vc_g, v0);
}

// ---- cascade: tokens sharing their sequences' first pages (paged_cascade_kernel) ----

// Rows 0 … n − 1 of c's table made to begin with row 0's first `shared` pages (their own pages after
// them; the pages they no longer list stay in the cache, unread).
void share_first_pages(Paged& c, int64_t n, int64_t shared) {
  const auto w = static_cast<size_t>(c.s.max_pages);
  for (size_t r = 1; r < static_cast<size_t>(n); ++r)
    for (size_t p = 0; p < static_cast<size_t>(shared); ++p) c.table[r * w + p] = c.table[p];
}

// The launch paged_attention.cu makes with a cascade on a GPU of `sms` SMs: the groups found on the
// host (as ops' paged_prefixes finds them), each token's own keys, the groups' shared keys, the merge.
struct CascadeRun {
  std::vector<float> out;
  kc::PagedSplit split;
  kqkv::PagedCascadeArrays arrays;
};
// (planned: the block table, seq and len the groups are found in — c's own, or another's)
template <typename C>
CascadeRun forward_gpu_cascade(const Paged& c, const Paged& planned, const std::vector<C>& k, const std::vector<C>& v,
                               int sms, Kernel kind = Kernel::tiled) {
  CascadeRun run;
  run.arrays = kqkv::paged_cascade_arrays(
      kqkv::paged_shared_prefixes(planned.table.data(), planned.seq.data(), planned.len.data(), planned.s), c.s.T);
  const kqkv::PagedCascadeArrays& a = run.arrays;
  EXPECT_GT(a.n_blocks(), 0) << "no group";
  kqkv::PagedCascade cascade;
  cascade.blocks = a.blocks.data(), cascade.tokens = a.tokens.data(), cascade.from = a.from.data();
  cascade.n_blocks = a.n_blocks(), cascade.max_keys = a.max_keys, cascade.max_count = a.max_count;
  const kc::PagedSplit split = run.split = kc::paged_cascade_split(c.s, cascade, sms);
  run.out.assign(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv), NAN);
  std::vector<float> part(static_cast<size_t>(kc::paged_split_floats(c.s, split)), NAN);
  decode(kind, c, k.data(), v.data(), run.out.data(), decode_grid(c, split.splits), split, part.data(), cascade.from);
  const dim3 cgrid(static_cast<unsigned>(kc::paged_cascade_blocks(c.s, cascade)),
                   static_cast<unsigned>(split.prefix_runs));
  bool done = false;
  if constexpr (std::is_same_v<C, qkv::bf16> || std::is_same_v<C, qkv::f8e4m3>) {
    if (kind == Kernel::mma) {  // the groups on the tensor cores too
      const kc::PagedMmaTiles tl = kc::paged_cascade_mma_tiles(c.s, sizeof(C));
      launch(cgrid, kc::kPagedThreads, tl.bytes, [&] {
        if (c.s.D == 64)
          kc::paged_cascade_mma_kernel<C, 64>(c.q.data(), k.data(), v.data(), c.table.data(), c.seq.data(), c.s,
                                              cascade, split, part.data(), tl.stages);
        else
          kc::paged_cascade_mma_kernel<C, 128>(c.q.data(), k.data(), v.data(), c.table.data(), c.seq.data(), c.s,
                                               cascade, split, part.data(), tl.stages);
      });
      done = true;
    }
  }
  if (!done)
    launch(cgrid, kc::kPagedThreads, kc::paged_cascade_shared_bytes(c.s), [&] {
      kc::paged_cascade_kernel(c.q.data(), k.data(), v.data(), c.table.data(), c.seq.data(), c.s, cascade, split,
                               part.data());
    });
  for (float x : run.out) EXPECT_TRUE(std::isnan(x)) << "a run wrote the output";
  launch(dim3(kc::paged_merge_blocks(c.s)), 256, 0,
         [&] { kc::paged_attention_merge_kernel(part.data(), run.out.data(), c.s, split, cascade.from); });
  return run;
}
template <typename C>
CascadeRun forward_gpu_cascade(const Paged& c, const std::vector<C>& k, const std::vector<C>& v, int sms,
                               Kernel kind = Kernel::tiled) {
  return forward_gpu_cascade(c, c, k, v, sms, kind);
}

TEST(PagedAttentionKernelsEmulated, CascadeSplitCutsTheSharedKeysIntoTilesFillingTheSms) {
  PagedShape s;
  s.T = 17, s.H = 32, s.Hkv = 8, s.D = s.Dv = 128, s.page_size = 16, s.max_pages = 256;
  kqkv::PagedCascade c;
  c.n_blocks = 1, c.max_keys = 2048, c.max_count = 16;  // 16 samples of one prompt (and one token besides):
                                                        // 16 · 4 rows, 2 chunks of 32
  EXPECT_EQ(kc::paged_cascade_chunks(s, c), 2);
  EXPECT_EQ(kc::paged_cascade_blocks(s, c), 16);
  const kc::PagedSplit p = kc::paged_cascade_split(s, c, 132);
  EXPECT_EQ(p.splits, 1);       // the tokens' own: 136 blocks (17 · 8) fill 132 SMs: no split
  EXPECT_EQ(p.prefix_runs, 8);  // 2 · 132 / 16 = 17 wanted, 2,048 / 256 = 8 at most
  EXPECT_EQ(p.prefix_keys, 256);
  EXPECT_EQ(p.runs(), 9);
  c.max_keys = 300;  // one run of 300 keys, rounded up to whole tiles: 320
  EXPECT_EQ(kc::paged_cascade_split(s, c, 132).prefix_runs, 1);
  EXPECT_EQ(kc::paged_cascade_split(s, c, 132).prefix_keys, 320);
  c.max_keys = 100000, c.n_blocks = 200;  // many blocks: one run each
  EXPECT_EQ(kc::paged_cascade_split(s, c, 132).prefix_runs, 1);
  // a block of one token with G = 64 (multi-query): its 64 rows in two chunks
  s.H = 64, s.Hkv = 1, c.max_count = 1;
  EXPECT_EQ(kc::paged_cascade_chunks(s, c), 2);
  EXPECT_GT(kc::paged_cascade_shared_bytes(s), size_t{48 * 1024});  // D 128: 49,408 bytes (paged_attention.cu asks)
  s.D = s.Dv = 64;
  EXPECT_LE(kc::paged_cascade_shared_bytes(s), size_t{48 * 1024});  // 24,832
  s.D = s.Dv = 256;
  EXPECT_LE(kc::paged_cascade_shared_bytes(s), size_t{227 * 1024});  // 98,560: under what a Hopper block may have
}

// Decoding steps where sequences share a prompt's pages: the samples of one prompt (rows 0 … 3 and a
// second token of row 0's), a sequence whose length ends where the shared keys do (no keys of its
// own), another prompt's two samples, and sequences that share nothing (one too short to group).
TEST(PagedAttentionKernelsEmulated, CascadeOverSharedPagesMatchesTheCpu) {
  for (const Heads& h : {Heads{8, 2, 64, 64, 16, 0}, Heads{4, 4, 40, 24, 4, 0}, Heads{8, 2, 40, 72, 16, 2000},
                         Heads{12, 1, 32, 16, 16, 0}, Heads{2, 1, 256, 200, 16, 0}}) {
    SCOPED_TRACE(name(h));
    const std::vector<int64_t> lengths = {560, 540, 600, 512, 300, 300, 100, 290};
    Paged c = make(h, lengths, {{0, 560}, {1, 540}, {2, 600}, {3, 512}, {4, 300}, {0, 559}, {5, 300}, {6, 100}, {7, 290}}, 111);
    share_first_pages(c, 4, 512 / h.page_size);  // rows 0 … 3: 512 keys in common
    const auto w = static_cast<size_t>(c.s.max_pages);
    for (size_t p = 0; p < 288 / static_cast<size_t>(h.page_size); ++p) c.table[7 * w + p] = c.table[5 * w + p];  // rows 5, 7
    const std::vector<float> want = forward_cpu(c);
    // one run of the shared keys; two; two, and the tokens' own keys split too (the first heads only:
    // the emulation takes its time)
    for (int sms : h.H == 8 && h.D == 64 ? std::vector<int>{1, 8, 40} : std::vector<int>{8}) {
      SCOPED_TRACE("SMs " + std::to_string(sms));
      const CascadeRun got = forward_gpu_cascade(c, c.k, c.v, sms);
      EXPECT_LT(rel(got.out, want), 1e-5);
      // the groups: tokens 0, 1, 2, 3, 5 over 512 keys; 6 and 8 over 256 (rows 5 and 7 share 288 keys,
      // whole tiles: 256); token 3 has none of its own
      EXPECT_EQ(got.arrays.from, (std::vector<int32_t>{512, 512, 512, 512, -1, 512, 256, -1, 256}));
      EXPECT_EQ(got.arrays.n_blocks(), 2);
      EXPECT_EQ(got.split.prefix_runs, sms == 1 ? 1 : 2);
      if (sms == 40 && c.s.Hkv == 2) {
        EXPECT_GT(got.split.splits, 1);
      }
    }
  }
}

// A group of more tokens than a block takes (40 samples of one prompt: blocks of 20), each with a
// few keys of its own; and bf16 and e4m3 caches through the cascade. D = 30: the scores' loop over
// single dims (elsewhere four at a time).
TEST(PagedAttentionKernelsEmulated, CascadeOverManySamplesAndNarrowCachesMatchesTheCpu) {
  const Heads h{4, 2, 30, 24, 16, 0};
  std::vector<int64_t> lengths;
  std::vector<std::pair<int32_t, int32_t>> queries;
  for (int32_t r = 0; r < 40; ++r) lengths.push_back(260 + r % 7), queries.emplace_back(r, 260 + r % 7);
  Paged c = make(h, lengths, queries, 121);
  share_first_pages(c, 40, 16);  // 256 keys in common
  const CascadeRun got = forward_gpu_cascade(c, c.k, c.v, 132);
  EXPECT_EQ(got.arrays.n_blocks(), 2);
  EXPECT_EQ(got.arrays.max_count, 20);
  EXPECT_LT(rel(got.out, forward_cpu(c)), 1e-5);
  auto narrow = [&](auto e) {
    using C = decltype(e);
    const std::vector<C> k8 = to_cache<C>(c.k), v8 = to_cache<C>(c.v);
    std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv));
    cpu::paged_attention_forward(c.q.data(), k8.data(), v8.data(), c.table.data(), c.seq.data(), c.len.data(),
                                 want.data(), c.s);
    EXPECT_LT(rel(forward_gpu_cascade(c, k8, v8, 132).out, want), 1e-5);
  };
  narrow(qkv::bf16{});
  narrow(qkv::f8e4m3{});
}

// The tensor-core kernels over bf16 caches through a cascade: the groups' shared keys (paged_cascade_mma_kernel:
// 8 rows a warp, 32 a block — here 4 tokens × G 4 and × G 4 of one key head, and 40 tokens × G 2 in two
// blocks of 20, chunks of 32 rows part-filled) and each token's own keys past them (from[t] on), one run and
// several, against the CPU
TEST(PagedAttentionKernelsEmulated, TheTensorCoreKernelsTakeACascadeAsTheCpu) {
  for (const Heads& h : {Heads{8, 2, 128, 128, 16, 0}, Heads{4, 1, 64, 64, 16, 0}}) {
    SCOPED_TRACE(name(h));
    Paged c = make(h, {560, 540, 600, 300}, {{0, 560}, {1, 540}, {2, 600}, {3, 300}, {0, 559}}, 181);
    share_first_pages(c, 3, 512 / h.page_size);  // rows 0 … 2: 512 keys in common
    const std::vector<qkv::bf16> k16 = to_cache<qkv::bf16>(c.k), v16 = to_cache<qkv::bf16>(c.v);
    std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv));
    cpu::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                 want.data(), c.s);
    for (int sms : {1, 132}) {  // the shared keys in one run (G 4 over 2 key heads) or two, and in two
      const CascadeRun got = forward_gpu_cascade(c, k16, v16, sms, Kernel::mma);
      EXPECT_LT(rel(got.out, want), 1e-5) << sms << " SMs";
      EXPECT_EQ(got.split.prefix_runs, sms == 1 && h.Hkv == 2 ? 1 : 2);
    }
  }
  const Heads h{4, 2, 64, 64, 16, 0};
  std::vector<int64_t> lengths;
  std::vector<std::pair<int32_t, int32_t>> queries;
  for (int32_t r = 0; r < 40; ++r) lengths.push_back(260 + r % 7), queries.emplace_back(r, 260 + r % 7);
  Paged c = make(h, lengths, queries, 182);
  share_first_pages(c, 40, 16);  // 256 keys in common
  const std::vector<qkv::bf16> k16 = to_cache<qkv::bf16>(c.k), v16 = to_cache<qkv::bf16>(c.v);
  std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv));
  cpu::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                               want.data(), c.s);
  const CascadeRun got = forward_gpu_cascade(c, k16, v16, 132, Kernel::mma);
  EXPECT_EQ(got.arrays.max_count, 20);
  EXPECT_LT(rel(got.out, want), 1e-5) << "40 samples";  // an e4m3 cache's, widened once a tile for the block
  const std::vector<qkv::f8e4m3> k8 = to_cache<qkv::f8e4m3>(c.k), v8 = to_cache<qkv::f8e4m3>(c.v);
  cpu::paged_attention_forward(c.q.data(), k8.data(), v8.data(), c.table.data(), c.seq.data(), c.len.data(),
                               want.data(), c.s);
  EXPECT_LT(rel(forward_gpu_cascade(c, k8, v8, 132, Kernel::mma).out, want), 1e-5) << "40 samples, e4m3";
}

// Soft-capped scores (Gemma 2's, s.softcap): every decoding kernel — the tiled one over f32 and bf16
// caches, the key-a-warp one, the tensor-core one, split over the keys, and the cascade on the CUDA
// cores and on the tensor cores — against the CPU's, which the cap moves well past the tolerance
TEST(PagedAttentionKernelsEmulated, SoftCappedScoresMatchTheCpuInEveryKernel) {
  for (const Heads& h : {Heads{8, 2, 64, 64, 16, 0}, Heads{4, 4, 40, 24, 4, 0}}) {
    SCOPED_TRACE(name(h));
    Paged c = make(h, {560, 540, 17, 0}, {{0, 560}, {1, 540}, {2, 17}, {3, 0}, {0, 559}}, 191);
    share_first_pages(c, 2, 512 / h.page_size);  // rows 0 and 1: 512 keys in common
    c.s.softcap = 0.25f;
    const std::vector<float> want = forward_cpu(c);
    Paged uncapped = c;
    uncapped.s.softcap = 0.f;
    EXPECT_GT(rel(want, forward_cpu(uncapped)), 1e-2) << "the cap changes little: the test could not fail";
    EXPECT_LT(rel(forward_gpu(c), want), 1e-5) << "tiled";
    EXPECT_LT(rel(forward_gpu(c, Kernel::warps), want), 1e-5) << "a key a warp";
    EXPECT_LT(rel(forward_gpu_split(c, kc::PagedSplit{4, 150}), want), 1e-5) << "split";
    EXPECT_LT(rel(forward_gpu_cascade(c, c.k, c.v, 8).out, want), 1e-5) << "cascade";
    const std::vector<qkv::bf16> k16 = to_cache<qkv::bf16>(c.k), v16 = to_cache<qkv::bf16>(c.v);
    std::vector<float> want16(want.size()), got(want.size(), NAN);
    cpu::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                 want16.data(), c.s);
    decode(Kernel::tiled, c, k16.data(), v16.data(), got.data(), decode_grid(c));
    EXPECT_LT(rel(got, want16), 1e-5) << "tiled, bf16";
    if (h.D != 64) continue;  // (the tensor-core kernels: head dims 64 and 128)
    std::fill(got.begin(), got.end(), NAN);
    decode(Kernel::mma, c, k16.data(), v16.data(), got.data(), decode_grid(c));
    EXPECT_LT(rel(got, want16), 1e-5) << "mma";
    EXPECT_LT(rel(forward_gpu_cascade(c, k16, v16, 8, Kernel::mma).out, want16), 1e-5) << "cascade, mma";
  }
}

// A shared page outside the cache (the GPU's block table is not checked): skipped by the cascade as
// by the token-by-token kernel, nothing read outside the cache (qkv_emulation_asan); and a group's
// first token's row outside the table (the GPU's seq is not checked either): that group reads nothing.
TEST(PagedAttentionKernelsEmulated, CascadeSkipsSharedPagesOutsideTheCache) {
  const Heads h{8, 2, 40, 24, 16, 0};
  Paged c = make(h, {300, 310, 290}, {{0, 300}, {1, 310}, {2, 290}}, 131);
  share_first_pages(c, 3, 16);
  for (size_t r = 0; r < 3; ++r)  // pages 3 and 7 of every row
    c.table[r * static_cast<size_t>(c.s.max_pages) + 3] = static_cast<int32_t>(c.s.pages),
                          c.table[r * static_cast<size_t>(c.s.max_pages) + 7] = -5;
  const std::vector<float> alone = forward_gpu(c);
  const CascadeRun got = forward_gpu_cascade(c, c.k, c.v, 132);
  for (float x : got.out) EXPECT_TRUE(std::isfinite(x));
  EXPECT_LT(rel(got.out, alone), 1e-5);
  Paged bad = c;
  bad.seq[0] = static_cast<int32_t>(c.s.rows), bad.seq[1] = -2;  // (token 0 leads the group)
  const CascadeRun spoiled = forward_gpu_cascade(bad, c, c.k, c.v, 132);
  const size_t row = static_cast<size_t>(c.s.H * c.s.Dv);
  for (size_t i = 0; i < 2 * row; ++i) EXPECT_EQ(spoiled.out[i], 0.f) << "a row outside the table sees no key";
  for (size_t i = 2 * row; i < 3 * row; ++i) EXPECT_TRUE(std::isfinite(spoiled.out[i]));
  // token 2: its own keys only (its group's shared ones were to be read through token 0's row)
  const std::vector<float> t2(spoiled.out.begin() + 2 * static_cast<std::ptrdiff_t>(row), spoiled.out.end()),
      a2(alone.begin() + 2 * static_cast<std::ptrdiff_t>(row), alone.end());
  EXPECT_GT(rel(t2, a2), 1e-3);
}

// ---- a dense KV cache's decoding step through the tiled kernel (attention_decode_tiled) ----

// A decoding step over a dense cache: q [B, Lq, H, D] (as heads split off a projection; with Lq = 1 also
// [B, H, 1, D]), k and v [B, Hkv, P, D | Dv] of capacity P ≥ Lk — the slots past Lk NaN, which must not
// be read — and out in q's layout.
struct DenseStep {
  qkv::kernels::AttnProblem p;
  std::vector<float> q, k, v;
};
DenseStep dense_step(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t P, int64_t D, int64_t Dv,
                     bool causal, uint64_t seed) {
  DenseStep d;
  qkv::kernels::AttnProblem& p = d.p;
  p.B = B, p.H = H, p.Hkv = Hkv, p.Lq = Lq, p.Lk = Lk, p.D = D, p.Dv = Dv, p.causal = causal;
  p.scale = 1.f / std::sqrt(static_cast<float>(D));
  d.q = random_floats(static_cast<size_t>(B * Lq * H * D), seed, 1.f);
  d.k = random_floats(static_cast<size_t>(B * Hkv * P * D), seed + 1, 1.f);
  d.v = random_floats(static_cast<size_t>(B * Hkv * P * Dv), seed + 2, 1.f);
  for (int64_t r = 0; r < B * Hkv; ++r)
    for (int64_t j = Lk; j < P; ++j) {
      for (int64_t c = 0; c < D; ++c) d.k[static_cast<size_t>((r * P + j) * D + c)] = NAN;
      for (int64_t c = 0; c < Dv; ++c) d.v[static_cast<size_t>((r * P + j) * Dv + c)] = NAN;
    }
  p.q = d.q.data(), p.q_sb = Lq * H * D, p.q_sh = D, p.q_sl = H * D;
  p.k = d.k.data(), p.k_sb = Hkv * P * D, p.k_sh = P * D, p.k_sl = D;
  p.v = d.v.data(), p.v_sb = Hkv * P * Dv, p.v_sh = P * Dv, p.v_sl = Dv;
  p.out_l = {Lq * H * Dv, Dv, H * Dv};
  return d;
}
std::vector<float> dense_cpu(const qkv::kernels::AttnProblem& p) {
  std::vector<float> out(static_cast<size_t>(p.B * p.Lq * p.H * p.Dv), NAN);
  cpu::attention_forward_flash_f32(p, out.data(), nullptr);
  return out;
}

// GQA and not, capacities past the keys (never read: NaN there), a causal chunk of 3 tokens (top-left:
// token i sees keys 0 … i), odd widths (plain loads), long contexts (split over the keys on 132 SMs)
TEST(PagedAttentionKernelsEmulated, DenseCachesDecodeThroughTheTiledKernelAsTheCpu) {
  struct Case {
    int64_t B, H, Hkv, Lq, Lk, P, D, Dv;
    bool causal;
  };
  for (const Case& c : {Case{2, 8, 2, 1, 600, 640, 64, 64, false}, Case{1, 4, 4, 1, 1500, 1500, 128, 128, false},
                        Case{3, 6, 2, 1, 70, 100, 30, 18, false}, Case{1, 4, 1, 3, 520, 530, 40, 24, true},
                        Case{2, 12, 1, 1, 900, 1024, 32, 16, false}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + ", H " + std::to_string(c.H) + "/" + std::to_string(c.Hkv) + ", Lq " +
                 std::to_string(c.Lq) + ", Lk " + std::to_string(c.Lk) + " of " + std::to_string(c.P) + ", D " +
                 std::to_string(c.D) + "/" + std::to_string(c.Dv) + (c.causal ? ", causal" : ""));
    const DenseStep d = dense_step(c.B, c.H, c.Hkv, c.Lq, c.Lk, c.P, c.D, c.Dv, c.causal, 141);
    std::vector<float> got(static_cast<size_t>(c.B * c.Lq * c.H * c.Dv), NAN);
    qkv::emulation::device().launched.clear();
    ASSERT_TRUE(kc::attention_decode_tiled(d.p, got.data()));
    EXPECT_TRUE(qkv::emulation::launched(kc::paged_attention_tiled_kernel<float>));
    EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "the index arrays' scratch not freed";
    EXPECT_LT(rel(got, dense_cpu(d.p)), 1e-5);
    for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "a slot past Lk read";
  }
}

// A bf16 or f16 decoding step (autocast's) over a dense f32 cache: the tiled kernel reads q, k and v rounded
// to the 16-bit type (paged_attention_tiled_kernel<float, 1 | 2>) — bit for bit the f32 kernel over copies
// rounded first, and the CPU's f32 attention over those copies; NaN past the filled keys still never read
TEST(PagedAttentionKernelsEmulated, SixteenBitStepsOverADenseCacheReadTheOperandsRounded) {
  using qkv::kernels::AttnCompute;
  for (const AttnCompute compute : {AttnCompute::bf16, AttnCompute::f16}) {
    const bool is_bf16 = compute == AttnCompute::bf16;
    for (const bool split : {false, true}) {  // 600 keys on 8 blocks: split; 1 token × 12 heads/1 × 100 keys: not
      SCOPED_TRACE(std::string(is_bf16 ? "bf16" : "f16") + (split ? ", split" : ""));
      const DenseStep d = split ? dense_step(2, 8, 2, 1, 600, 640, 64, 64, false, 161)
                                : dense_step(1, 12, 1, 2, 100, 128, 40, 24, true, 162);
      qkv::kernels::AttnProblem p = d.p;
      p.compute = compute;
      std::vector<float> got(static_cast<size_t>(p.B * p.Lq * p.H * p.Dv), NAN);
      qkv::emulation::device().launched.clear();
      ASSERT_TRUE(kc::attention_decode_tiled(p, got.data()));
      EXPECT_TRUE(is_bf16 ? qkv::emulation::launched(kc::paged_attention_tiled_kernel<float, 1>)
                          : qkv::emulation::launched(kc::paged_attention_tiled_kernel<float, 2>));
      EXPECT_EQ(qkv::emulation::launched(kc::paged_attention_merge_kernel), split);
      auto rounded = [&](const std::vector<float>& x) {  // (NaN stays NaN)
        std::vector<float> r = x;
        for (float& e : r) e = is_bf16 ? qkv::bf16_to_f32(qkv::f32_to_bf16(e)) : qkv::round_to_f16(e);
        return r;
      };
      const std::vector<float> q = rounded(d.q), k = rounded(d.k), v = rounded(d.v);
      qkv::kernels::AttnProblem f32 = d.p;
      f32.q = q.data(), f32.k = k.data(), f32.v = v.data();
      std::vector<float> want(got.size(), NAN);
      ASSERT_TRUE(kc::attention_decode_tiled(f32, want.data()));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "output " << i << ": not the f32 kernel's number over rounded copies";
      EXPECT_LT(rel(got, dense_cpu(f32)), 1e-5);
      EXPECT_GT(rel(got, dense_cpu(d.p)), 1e-4) << "q, k and v not rounded";
      for (float x : got) ASSERT_TRUE(std::isfinite(x)) << "a slot past Lk read";
    }
  }
}

// Where the tiled kernel does not serve a dense problem — keys not rows of a [B, Hkv, P, D] cache, q or out
// not [B, Lq, H, d], a mask, dropout, QKV_CUDA_PAGED_KERNEL=warps — it declines, launching nothing
TEST(PagedAttentionKernelsEmulated, DenseProblemsOffTheCacheLayoutAreDeclined) {
  const DenseStep d = dense_step(2, 4, 2, 1, 600, 640, 64, 64, false, 151);
  std::vector<float> out(static_cast<size_t>(2 * 4 * 64), NAN);
  auto declined = [&](qkv::kernels::AttnProblem p) {
    qkv::emulation::device().launched.clear();
    const bool served = kc::attention_decode_tiled(p, out.data());
    return !served && qkv::emulation::device().launched.empty();
  };
  qkv::kernels::AttnProblem p = d.p;
  p.k_sl = 2 * p.D;  // keys of [B, P, Hkv, D]
  EXPECT_TRUE(declined(p));
  p = d.p, p.v_sh = 600 * p.Dv;  // values of another capacity
  EXPECT_TRUE(declined(p));
  p = d.p, p.Lq = 2, p.q_sl = p.D, p.q_sh = 2 * p.D, p.q_sb = 2 * p.H * p.D;  // q [B, H, 2, D]
  EXPECT_TRUE(declined(p));
  p = d.p, p.out_l = {p.H * p.Dv, 2 * p.Dv, p.Dv};  // out rows apart
  EXPECT_TRUE(declined(p));
  p = d.p, p.Lk = 700;  // more keys than the capacity
  EXPECT_TRUE(declined(p));
  p = d.p, p.dropout_p = 0.1f;
  EXPECT_TRUE(declined(p));
  const std::vector<uint8_t> mask(600, 1);
  p = d.p, p.mask.kind = qkv::kernels::AttnMask::Kind::boolean, p.mask.data = mask.data(), p.mask.sk = 1;
  EXPECT_TRUE(declined(p));
  {
    const qkv::testing::ScopedEnv warps("QKV_CUDA_PAGED_KERNEL", "warps");
    EXPECT_TRUE(declined(d.p));
  }
  EXPECT_FALSE(declined(d.p));
}

// The launchers themselves (paged_attention.cu on the emulated H200): a decoding step (the split left
// to paged_split on 132 SMs: none for these rows), a long context over few rows (split there) and the
// same with QKV_CUDA_PAGED_SPLIT=0, the cascade over shared pages (its groups' kernel asks for its
// shared memory past 48 KB at head dim 128 and 256), a bf16 cache, and the writes of new tokens.
TEST(PagedAttentionKernelsEmulated, TheLaunchersMatchTheCpu) {
  auto launched = [](const Paged& c, const kqkv::PagedCascade* cascade = nullptr) {
    std::vector<float> out(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv), NAN);
    kc::paged_attention_forward(c.q.data(), c.k.data(), c.v.data(), c.table.data(), c.seq.data(), c.len.data(),
                                out.data(), c.s, cascade);
    EXPECT_TRUE(qkv::emulation::device().blocks.empty()) << "the runs' scratch not freed";
    return out;
  };
  for (const Heads& h : {Heads{8, 2, 64, 64, 16, 0}, Heads{2, 1, 256, 200, 16, 0}}) {
    SCOPED_TRACE(name(h));
    const Paged step = make(h, {0, 1, 17, 100}, {{2, 17}, {0, 0}, {3, 100}, {1, 1}}, 131);
    EXPECT_LT(rel(launched(step), forward_cpu(step)), 1e-5);
    const Paged long_context = make(h, {1500}, {{0, 1500}}, 132);
    ASSERT_GT(kc::paged_split(long_context.s, 132).splits, 1) << "no split chosen";
    const std::vector<float> want = forward_cpu(long_context);
    EXPECT_LT(rel(launched(long_context), want), 1e-5);
    {
      const qkv::testing::ScopedEnv no_split("QKV_CUDA_PAGED_SPLIT", "0");
      EXPECT_LT(rel(launched(long_context), want), 1e-5);
    }
    {
      const qkv::testing::ScopedEnv warps("QKV_CUDA_PAGED_KERNEL", "warps");
      EXPECT_LT(rel(launched(long_context), want), 1e-5);
    }
  }
  for (const Heads& h : {Heads{8, 2, 128, 128, 16, 0}, Heads{2, 1, 256, 256, 16, 0}}) {  // the cascade
    SCOPED_TRACE(name(h) + ", cascade");
    Paged c = make(h, {560, 540, 600, 300}, {{0, 560}, {1, 540}, {2, 600}, {3, 300}}, 133);
    share_first_pages(c, 3, 512 / h.page_size);  // rows 0 … 2: 512 keys in common
    const kqkv::PagedCascadeArrays a = kqkv::paged_cascade_arrays(
        kqkv::paged_shared_prefixes(c.table.data(), c.seq.data(), c.len.data(), c.s), c.s.T);
    ASSERT_GT(a.n_blocks(), 0);
    kqkv::PagedCascade cascade;
    cascade.blocks = a.blocks.data(), cascade.tokens = a.tokens.data(), cascade.from = a.from.data();
    cascade.n_blocks = a.n_blocks(), cascade.max_keys = a.max_keys, cascade.max_count = a.max_count;
    EXPECT_LT(rel(launched(c, &cascade), forward_cpu(c)), 1e-5);
    {  // bf16 caches with QKV_CUDA_PAGED_KERNEL=mma: the tensor-core kernels at head dim 128, not at 256
      const qkv::testing::ScopedEnv mma("QKV_CUDA_PAGED_KERNEL", "mma");
      const std::vector<qkv::bf16> k16 = to_cache<qkv::bf16>(c.k), v16 = to_cache<qkv::bf16>(c.v);
      std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv)), got(want.size(), NAN);
      cpu::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                   want.data(), c.s);
      qkv::emulation::device().launched.clear();
      kc::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                  got.data(), c.s, &cascade);
      EXPECT_LT(rel(got, want), 1e-5);
      const bool tensor_cores = h.D == 128;
      EXPECT_EQ(qkv::emulation::launched(kc::paged_cascade_mma_kernel<qkv::bf16, 128>), tensor_cores);
      EXPECT_EQ(qkv::emulation::launched(kc::paged_attention_mma_kernel<qkv::bf16, 128>), tensor_cores);
      EXPECT_EQ(qkv::emulation::launched(kc::paged_cascade_kernel<qkv::bf16>), !tensor_cores);
    }
    if (h.D == 128) {  // an e4m3 cache's too
      const qkv::testing::ScopedEnv mma("QKV_CUDA_PAGED_KERNEL", "mma");
      const std::vector<qkv::f8e4m3> k8 = to_cache<qkv::f8e4m3>(c.k), v8 = to_cache<qkv::f8e4m3>(c.v);
      std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv)), got(want.size(), NAN);
      cpu::paged_attention_forward(c.q.data(), k8.data(), v8.data(), c.table.data(), c.seq.data(), c.len.data(),
                                   want.data(), c.s);
      qkv::emulation::device().launched.clear();
      kc::paged_attention_forward(c.q.data(), k8.data(), v8.data(), c.table.data(), c.seq.data(), c.len.data(),
                                  got.data(), c.s, &cascade);
      EXPECT_LT(rel(got, want), 1e-5);
      EXPECT_TRUE(qkv::emulation::launched(kc::paged_cascade_mma_kernel<qkv::f8e4m3, 128>));
      EXPECT_TRUE(qkv::emulation::launched(kc::paged_attention_mma_kernel<qkv::f8e4m3, 128>));
    }
  }
  {  // a bf16 cache, and the writes of new tokens into f32 and bf16 caches
    const Heads h{8, 2, 64, 64, 16, 0};
    const Paged c = make(h, {0, 1, 17, 600}, {{2, 17}, {0, 0}, {3, 600}, {1, 1}}, 134);
    const std::vector<qkv::bf16> k16 = to_cache<qkv::bf16>(c.k), v16 = to_cache<qkv::bf16>(c.v);
    std::vector<float> want(static_cast<size_t>(c.s.T * c.s.H * c.s.Dv)), got(want.size(), NAN);
    cpu::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                 want.data(), c.s);
    kc::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                got.data(), c.s);
    EXPECT_LT(rel(got, want), 1e-5);
    {  // QKV_CUDA_PAGED_KERNEL=mma: the tensor-core kernel; an f32 cache, which it does not take, the tiled one
      const qkv::testing::ScopedEnv mma("QKV_CUDA_PAGED_KERNEL", "mma");
      qkv::emulation::device().launched.clear();
      std::fill(got.begin(), got.end(), NAN);
      kc::paged_attention_forward(c.q.data(), k16.data(), v16.data(), c.table.data(), c.seq.data(), c.len.data(),
                                  got.data(), c.s);
      EXPECT_LT(rel(got, want), 1e-5);
      EXPECT_TRUE(qkv::emulation::launched(kc::paged_attention_mma_kernel<qkv::bf16, 64>));
      EXPECT_FALSE(qkv::emulation::launched(kc::paged_attention_tiled_kernel<qkv::bf16>));
      kc::paged_attention_forward(c.q.data(), c.k.data(), c.v.data(), c.table.data(), c.seq.data(), c.len.data(),
                                  got.data(), c.s);
      EXPECT_TRUE(qkv::emulation::launched(kc::paged_attention_tiled_kernel<float>));
      EXPECT_LT(rel(got, forward_cpu(c)), 1e-5);
    }
    PagedShape s = c.s;
    s.T = 5;
    const std::vector<float> k = random_floats(static_cast<size_t>(s.T * s.Hkv * s.D), 135, 1.f),
                             v = random_floats(static_cast<size_t>(s.T * s.Hkv * s.Dv), 136, 1.f);
    const std::vector<int32_t> slots = {3, 40, 41, 90, 17};
    std::vector<float> kc_c = c.k, vc_c = c.v, kc_g = c.k, vc_g = c.v;
    cpu::paged_kv_write(kc_c.data(), vc_c.data(), k.data(), v.data(), slots.data(), s);
    kc::paged_kv_write(kc_g.data(), vc_g.data(), k.data(), v.data(), slots.data(), s);
    EXPECT_EQ(kc_g, kc_c);
    EXPECT_EQ(vc_g, vc_c);
    std::vector<qkv::bf16> k16c = k16, v16c = v16, k16g = k16, v16g = v16;
    cpu::paged_kv_write(k16c.data(), v16c.data(), k.data(), v.data(), slots.data(), s);
    kc::paged_kv_write(k16g.data(), v16g.data(), k.data(), v.data(), slots.data(), s);
    EXPECT_EQ(bits_of(k16g), bits_of(k16c));
    EXPECT_EQ(bits_of(v16g), bits_of(v16c));
  }
}

}  // namespace
#endif
