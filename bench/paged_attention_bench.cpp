// qkv_paged_attention_bench — attention over the paged KV cache (ops/paged_attention.h) against the
// dense attention the same work takes without pages (scaled_dot_product_attention, the flash
// kernels), H = 12 query heads on Hkv = 4 key/value heads, d = 64, f32, every thread:
//
//   prefill/L      one sequence's L prompt tokens, causal: paged (queries of lengths 1 … L, keys from
//                  shuffled pages of 16) against sdpa(q [1, 12, L, 64], k, v [1, 4, L, 64], causal, GQA)
//   decode/B/L     B sequences of L keys, one new token each: paged against sdpa(q [B, 12, 1, 64],
//                  k, v [B, 4, L, 64]) — what a dense KV cache's decoding step computes
//   chunk/S/N      a prompt's chunk of N tokens continuing a sequence of S cached ones (a later
//                  chunk, or the rest of a prompt after its cached prefix), through nn::attend_paged:
//                  `paged` — each token through the paged kernel — against `gathered` — the
//                  sequence's keys gathered from its pages, then the dense kernels, causal from S
//                  (what plan() chooses for N ≥ 32: below it the paged kernel is faster)
//   prefixes/B/L   the host's work a GPU's step does once for its cascade (ops' paged_prefixes: which
//                  of B sequences of L keys share their first pages — here all but the last page —
//                  laid out for the kernels; on the CPU's device, so no upload), against one decode/paged
//                  layer's attention of the same step on this CPU (for scale: a step has one plan and
//                  a layer's attention per layer)
//
// GFLOP/s counts the useful work: 4·H·(keys seen)·d per query token.
//
//   build/bench/qkv_paged_attention_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "qkv/nn/paged_kv_cache.h"
#include "qkv/qkv.h"

namespace {

constexpr int64_t kH = 12, kHkv = 4, kD = 64, kPage = 16;

// B sequences of L keys in shuffled pages; queries: the last token of each (decode) or, for one
// sequence, every token (prefill)
struct Paged {
  qkv::Tensor q, k, v, table, seq, len;
  Paged(int64_t B, int64_t L, bool prefill) {
    qkv::Generator gen(0);
    const int64_t per = (L + kPage - 1) / kPage, pages = B * per;
    std::vector<int32_t> order(static_cast<size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(1));
    std::vector<int32_t> s, n;
    if (prefill) {
      for (int64_t t = 0; t < L; ++t) s.push_back(0), n.push_back(static_cast<int32_t>(t + 1));
    } else {
      for (int64_t b = 0; b < B; ++b) s.push_back(static_cast<int32_t>(b)), n.push_back(static_cast<int32_t>(L));
    }
    const auto T = static_cast<int64_t>(s.size());
    q = qkv::Tensor::randn({T, kH, kD}, gen);
    k = qkv::Tensor::randn({pages, kHkv, kPage, kD}, gen);
    v = qkv::Tensor::randn({pages, kHkv, kPage, kD}, gen);
    table = qkv::Tensor::from_ints(order, {B, per});
    seq = qkv::Tensor::from_ints(s, {T});
    len = qkv::Tensor::from_ints(n, {T});
  }
};

void flops(benchmark::State& state, double keys_seen) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * kH * kD * keys_seen * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = qkv::num_threads();
}

void bm_paged(benchmark::State& state, bool prefill) {
  const int64_t B = prefill ? 1 : state.range(0), L = prefill ? state.range(0) : state.range(1);
  const Paged p(B, L, prefill);
  for (auto _ : state) {
    qkv::NoGradGuard g;
    benchmark::DoNotOptimize(qkv::paged_attention(p.q, p.k, p.v, p.table, p.seq, p.len));
  }
  flops(state, prefill ? 0.5 * static_cast<double>(L) * static_cast<double>(L + 1) : static_cast<double>(B * L));
}

void bm_dense(benchmark::State& state, bool prefill) {
  const int64_t B = prefill ? 1 : state.range(0), L = prefill ? state.range(0) : state.range(1);
  qkv::Generator gen(0);
  const qkv::Tensor q = qkv::Tensor::randn({B, kH, prefill ? L : 1, kD}, gen), k = qkv::Tensor::randn({B, kHkv, L, kD}, gen),
                    v = qkv::Tensor::randn({B, kHkv, L, kD}, gen);
  qkv::AttentionOptions opt;
  opt.is_causal = prefill, opt.enable_gqa = true;
  for (auto _ : state) {
    qkv::NoGradGuard g;
    benchmark::DoNotOptimize(qkv::scaled_dot_product_attention(q, k, v, opt));
  }
  flops(state, prefill ? 0.5 * static_cast<double>(L) * static_cast<double>(L + 1) : static_cast<double>(B * L));
}

// nn::attend_paged for one sequence: S tokens cached, N more fed in one step
void bm_chunk(benchmark::State& state, bool gathered) {
  const int64_t S = state.range(0), N = state.range(1);
  qkv::Generator gen(0);
  qkv::nn::PagedKVCache cache(1, (S + N + kPage - 1) / kPage, kPage, kHkv, kD, kD);
  qkv::nn::PagedSequence seq;
  cache.reserve(seq, S + N);
  const qkv::Tensor q = qkv::Tensor::randn({N, kH, kD}, gen), k = qkv::Tensor::randn({N, kHkv, kD}, gen),
                    v = qkv::Tensor::randn({N, kHkv, kD}, gen);
  {  // the cached keys
    qkv::NoGradGuard g;
    const qkv::nn::PagedStep first = cache.plan({&seq}, {S});
    qkv::nn::attend_paged(qkv::Tensor::randn({S, kH, kD}, gen), qkv::Tensor::randn({S, kHkv, kD}, gen),
                          qkv::Tensor::randn({S, kHkv, kD}, gen), cache, 0, first);
  }
  const qkv::nn::PagedStep step = cache.plan({&seq}, {N}, gathered ? 2 : N + 1);
  for (auto _ : state) {
    qkv::NoGradGuard g;
    benchmark::DoNotOptimize(qkv::nn::attend_paged(q, k, v, cache, 0, step));
  }
  flops(state, static_cast<double>(N) * static_cast<double>(S) + 0.5 * static_cast<double>(N) * static_cast<double>(N + 1));
}

// paged_prefixes over B sequences of L keys whose rows share all but their last page
void bm_prefixes(benchmark::State& state) {
  const int64_t B = state.range(0), L = state.range(1), per = (L + kPage - 1) / kPage;
  std::vector<int32_t> table(static_cast<size_t>(B * per)), seq, len;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p = 0; p < per; ++p)
      table[static_cast<size_t>(b * per + p)] = static_cast<int32_t>(p + 1 < per ? p : per + b);
    seq.push_back(static_cast<int32_t>(b)), len.push_back(static_cast<int32_t>(L));
  }
  const qkv::Tensor t = qkv::Tensor::from_ints(table, {B, per}), s = qkv::Tensor::from_ints(seq, {B}),
                    n = qkv::Tensor::from_ints(len, {B});
  for (auto _ : state) benchmark::DoNotOptimize(qkv::paged_prefixes(t, s, n, kPage, 0, qkv::Device::cpu()));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
  benchmark::AddCustomContext("shape", "H=12 Hkv=4 d=64 pages of 16, f32");
  for (const char* kind : {"paged", "dense"}) {
    const bool paged = kind[0] == 'p';
    benchmark::RegisterBenchmark((std::string("prefill/") + kind).c_str(), paged ? bm_paged : bm_dense, true)
        ->Arg(128)->Arg(512)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("decode/") + kind).c_str(), paged ? bm_paged : bm_dense, false)
        ->Args({1, 512})->Args({16, 512})->Args({16, 2048})->Args({64, 256})->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  for (const char* kind : {"paged", "gathered"})
    benchmark::RegisterBenchmark((std::string("chunk/") + kind).c_str(), bm_chunk, kind[0] == 'g')
        ->Args({192, 16})->Args({192, 32})->Args({192, 64})->Args({1024, 128})->Args({512, 512})->Args({1536, 512})->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("prefixes", bm_prefixes)
      ->Args({16, 2048})->Args({64, 2048})->Args({256, 1024})->UseRealTime()->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
