// qkv_silu_mul_bench — SwiGLU's product silu(gate) · up (Llama's MLP) as the composition of three ops
// (silu = x·σ(x), then the product: what F.silu(gate) * up runs) and as one (ops/activation.h's
// silu_mul), forward (no grad) and forward+backward, f32, every thread (OMP_NUM_THREADS). Shapes:
// rows × intermediate features of a Qwen2.5-0.5B prefill (512 × 4,864) and of a small batch of a
// Llama-7B-sized MLP (64 × 11,008). bench/silu_mul_vs_pytorch.py runs it beside PyTorch.
//
// Counters:
//   GB/s   the bytes the fused forward must move (gate, up in; y out: 12 B an element) per second,
//          for both forms, so that the two read as one scale
//
//   build/bench/qkv_silu_mul_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "qkv/qkv.h"

namespace {

qkv::Tensor run(const qkv::Tensor& g, const qkv::Tensor& u, bool fused) {
  return fused ? qkv::silu_mul(g, u) : qkv::mul(qkv::silu(g), u);
}

void bm(benchmark::State& state, bool fused, bool backward) {
  const int64_t rows = state.range(0), n = state.range(1);
  qkv::Generator gen(0);
  qkv::Tensor g = qkv::Tensor::randn({rows, n}, gen, 0.f, 2.f), u = qkv::Tensor::randn({rows, n}, gen),
              dy = qkv::Tensor::randn({rows, n}, gen);
  if (backward) g.requires_grad_(), u.requires_grad_();
  for (auto _ : state) {
    if (backward) {
      qkv::Tensor y = run(g, u, fused);
      y.backward(dy);
      benchmark::DoNotOptimize(g.grad().data());
      g.zero_grad(), u.zero_grad();
    } else {
      qkv::NoGradGuard no_grad;
      qkv::Tensor y = run(g, u, fused);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.counters["GB/s"] = benchmark::Counter(12.0 * static_cast<double>(rows * n) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = qkv::num_threads();
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({512, 4864})->Args({64, 11008})->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK_CAPTURE(bm, composed_forward, false, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, silu_mul_forward, true, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, composed_forward_backward, false, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, silu_mul_forward_backward, true, true)->Apply(shapes);

BENCHMARK_MAIN();
