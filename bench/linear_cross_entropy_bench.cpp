// qkv_linear_cross_entropy_bench — a language model's output layer and its loss, forward and backward
// (every gradient: x, W), two ways: cross_entropy(linear(x, W), y) — the [N, V] logits written, then
// their gradient — and linear_cross_entropy(x, W, y) (ops/loss.h: a chunk of rows at a time, the
// gradients made as each chunk's logits are). f32, mean over the targets, every thread
// (OMP_NUM_THREADS). Shapes (N tokens, d, V): GPT-2 small's head on 2,048 tokens (V = 50,257), the
// translation Transformer's on 4,096 (d 512, V 8,000). bench/linear_cross_entropy_vs_pytorch.py runs
// it beside PyTorch.
//
// Counters:
//   peak_MB   the most bytes qkv's tensors held at once during a step, past the inputs' (core/tensor.h's
//             peak_allocated_bytes)
//
//   build/bench/qkv_linear_cross_entropy_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "qkv/qkv.h"

namespace {

void bm(benchmark::State& state, bool fused) {
  const int64_t N = state.range(0), d = state.range(1), V = state.range(2);
  qkv::Generator gen(0);
  qkv::Tensor x = qkv::Tensor::randn({N, d}, gen), w = qkv::Tensor::randn({V, d}, gen, 0.f, 0.02f);
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) ids[static_cast<size_t>(n)] = static_cast<int32_t>((n * 7919) % V);
  const qkv::Tensor y = qkv::Tensor::from_ints(ids, {N});
  x.requires_grad_(), w.requires_grad_();
  int64_t peak = 0;
  for (auto _ : state) {
    const int64_t before = qkv::allocated_bytes();
    qkv::reset_peak_bytes();
    qkv::Tensor loss = fused ? qkv::linear_cross_entropy(x, w, y) : qkv::cross_entropy(qkv::linear(x, w), y);
    loss.backward();
    benchmark::DoNotOptimize(w.grad().data());
    peak = std::max(peak, qkv::peak_allocated_bytes() - before);
    x.zero_grad(), w.zero_grad();
  }
  state.counters["peak_MB"] = static_cast<double>(peak) / (1 << 20);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 768, 50257})->Args({4096, 512, 8000})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(bm, unfused, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, fused, true)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
