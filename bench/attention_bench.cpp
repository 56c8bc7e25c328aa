// qkv_attention_bench — qkv::scaled_dot_product_attention forward (no grad) and forward+backward,
// B=1, H=8, d=64, L = 128 … 4096, causal and not, f32, every thread (OMP_NUM_THREADS).
//
// Counters:
//   GFLOP/s        useful work per second, wall time: 4·B·H·L·L·d for the forward (Q Kᵀ and P V),
//                  halved when causal (only the lower triangle is needed); ×3 for forward+backward
//                  (dV, dP, dQ, dK: twice the forward). The flash backend (the default) skips
//                  the key blocks a causal mask hides; the reference backend computes the full
//                  L×L product even when causal, so its causal GFLOP/s is half its raw throughput.
//   peak_MiB       the most memory held in qkv tensors during one call beyond the inputs
//                  (qkv's allocation counter, not RSS; `qkv bench attention` reports RSS).
//
//   build/bench/qkv_attention_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <string>

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

qkv::AttentionOptions options(bool causal, qkv::AttentionBackend backend) {
  qkv::AttentionOptions opt;
  opt.is_causal = causal;
  opt.backend = backend;
  return opt;
}

double useful_flop(int64_t L, bool causal) {
  return 4.0 * kBatch * kHeads * L * L * kHeadDim * (causal ? 0.5 : 1.0);
}

void set_counters(benchmark::State& state, double flop, int64_t base_bytes) {
  state.counters["GFLOP/s"] = benchmark::Counter(flop * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_MiB"] = static_cast<double>(qkv::peak_allocated_bytes() - base_bytes) / (1 << 20);
  state.counters["threads"] = qkv::num_threads();
}

void bm_forward(benchmark::State& state, bool causal, qkv::AttentionBackend backend) {
  const int64_t L = state.range(0);
  Inputs in(L);
  const qkv::AttentionOptions opt = options(causal, backend);
  const int64_t base = qkv::allocated_bytes();
  qkv::reset_peak_bytes();
  for (auto _ : state) {
    qkv::NoGradGuard g;
    qkv::Tensor o = qkv::scaled_dot_product_attention(in.q, in.k, in.v, opt);
    benchmark::DoNotOptimize(o.data());
  }
  set_counters(state, useful_flop(L, causal), base);
}

void bm_forward_backward(benchmark::State& state, bool causal, qkv::AttentionBackend backend) {
  const int64_t L = state.range(0);
  Inputs in(L);
  in.q.requires_grad_(), in.k.requires_grad_(), in.v.requires_grad_();
  const qkv::AttentionOptions opt = options(causal, backend);
  const int64_t base = qkv::allocated_bytes();
  qkv::reset_peak_bytes();
  for (auto _ : state) {
    qkv::Tensor o = qkv::scaled_dot_product_attention(in.q, in.k, in.v, opt);
    o.backward(in.dout);
    benchmark::DoNotOptimize(in.q.grad().data());
    in.q.zero_grad(), in.k.zero_grad(), in.v.zero_grad();
  }
  set_counters(state, 3 * useful_flop(L, causal), base);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
  benchmark::AddCustomContext("shape", "B=1 H=8 d=64 f32");
  for (auto backend : {qkv::AttentionBackend::flash, qkv::AttentionBackend::reference})
  for (bool causal : {false, true}) {
    const std::string mask = std::string(backend == qkv::AttentionBackend::flash ? "flash/" : "reference/") +
                             (causal ? "causal" : "full");
    benchmark::RegisterBenchmark(("sdpa_forward/" + mask).c_str(), bm_forward, causal, backend)
        ->RangeMultiplier(2)
        ->Range(128, 4096)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("sdpa_forward_backward/" + mask).c_str(), bm_forward_backward, causal, backend)
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
