// qkv_attention_bench — qkv::scaled_dot_product_attention forward (no grad) and forward+backward,
// B=1, H=8, d=64, L = 128 … 4096, causal and not, f32, every thread (OMP_NUM_THREADS); and on the flash
// backend within a window of 64 keys either way (a boolean [L, L] band: ModernBERT's local layers).
//
// Counters:
//   GFLOP/s        useful work per second, wall time: 4·B·H·L·L·d for the forward (Q Kᵀ and P V),
//                  halved when causal (only the lower triangle is needed); ×3 for forward+backward
//                  (dV, dP, dQ, dK: twice the forward). The flash backend (the default) skips
//                  the key blocks a causal mask hides; the reference backend computes the full
//                  L×L product even when causal, so its causal GFLOP/s is half its raw throughput.
//                  Windowed: the band's L·129 − 64·65 scores; the flash kernel skips the blocks of
//                  64 queries × 256 keys the band misses and trims the others to the keys some
//                  query of the block sees (192 for 64 queries).
//   peak_MiB       the most memory held in qkv tensors during one call beyond the inputs
//                  (qkv's allocation counter, not RSS; `qkv bench attention` reports RSS).
//
//   build/bench/qkv_attention_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "qkv/qkv.h"

namespace {

constexpr int64_t kBatch = 1, kHeads = 8, kHeadDim = 64;

struct Inputs {
  qkv::Tensor q, k, v, dout;
  explicit Inputs(int64_t L) {
    qkv::Generator gen(0);
    q = qkv::Tensor::randn({kBatch, kHeads, L, kHeadDim}, gen);
    k = qkv::Tensor::randn({kBatch, kHeads, L, kHeadDim}, gen);
    v = qkv::Tensor::randn({kBatch, kHeads, L, kHeadDim}, gen);
    dout = qkv::Tensor::randn({kBatch, kHeads, L, kHeadDim}, gen);
  }
};

enum class Mask { full, causal, window };
constexpr int64_t kWindow = 64;  // keys either way

qkv::AttentionOptions options(int64_t L, Mask mask, qkv::AttentionBackend backend) {
  qkv::AttentionOptions opt;
  opt.is_causal = mask == Mask::causal;
  opt.backend = backend;
  if (mask == Mask::window) {
    std::vector<bool> keep(static_cast<size_t>(L * L));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = std::max<int64_t>(0, i - kWindow); j <= std::min(L - 1, i + kWindow); ++j)
        keep[i * L + j] = true;
    opt.attn_mask = qkv::Tensor::from_bools(keep, {L, L});
  }
  return opt;
}

double useful_flop(int64_t L, Mask mask) {
  const double scores = mask == Mask::full     ? double(L) * L
                        : mask == Mask::causal ? 0.5 * L * L
                                               : double(L) * (2 * kWindow + 1) - kWindow * (kWindow + 1);
  return 4.0 * kBatch * kHeads * scores * kHeadDim;
}

void set_counters(benchmark::State& state, double flop, int64_t base_bytes) {
  state.counters["GFLOP/s"] = benchmark::Counter(flop * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = static_cast<double>(qkv::peak_allocated_bytes() - base_bytes) / (1 << 20);
  state.counters["threads"] = qkv::num_threads();
}

void bm_forward(benchmark::State& state, Mask mask, qkv::AttentionBackend backend) {
  const int64_t L = state.range(0);
  Inputs in(L);
  const qkv::AttentionOptions opt = options(L, mask, backend);
  const int64_t base = qkv::allocated_bytes();
  qkv::reset_peak_bytes();
  for (auto _ : state) {
    qkv::NoGradGuard g;
    qkv::Tensor o = qkv::scaled_dot_product_attention(in.q, in.k, in.v, opt);
    benchmark::DoNotOptimize(o.data());
  }
  set_counters(state, useful_flop(L, mask), base);
}

void bm_forward_backward(benchmark::State& state, Mask mask, qkv::AttentionBackend backend) {
  const int64_t L = state.range(0);
  Inputs in(L);
  in.q.requires_grad_(), in.k.requires_grad_(), in.v.requires_grad_();
  const qkv::AttentionOptions opt = options(L, mask, backend);
  const int64_t base = qkv::allocated_bytes();
  qkv::reset_peak_bytes();
  for (auto _ : state) {
    qkv::Tensor o = qkv::scaled_dot_product_attention(in.q, in.k, in.v, opt);
    o.backward(in.dout);
    benchmark::DoNotOptimize(in.q.grad().data());
    in.q.zero_grad(), in.k.zero_grad(), in.v.zero_grad();
  }
  set_counters(state, 3 * useful_flop(L, mask), base);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
  benchmark::AddCustomContext("shape", "B=1 H=8 d=64 f32");
  for (auto backend : {qkv::AttentionBackend::flash, qkv::AttentionBackend::reference})
    for (Mask mask : {Mask::full, Mask::causal, Mask::window}) {
      if (mask == Mask::window && backend == qkv::AttentionBackend::reference) continue;
      const std::string name = std::string(backend == qkv::AttentionBackend::flash ? "flash/" : "reference/") +
                               (mask == Mask::full     ? "full"
                                : mask == Mask::causal ? "causal"
                                                       : "window64");
      benchmark::RegisterBenchmark(("sdpa_forward/" + name).c_str(), bm_forward, mask, backend)
          ->RangeMultiplier(2)
          ->Range(128, 4096)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("sdpa_forward_backward/" + name).c_str(), bm_forward_backward, mask, backend)
          ->RangeMultiplier(2)
          ->Range(128, 4096)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
