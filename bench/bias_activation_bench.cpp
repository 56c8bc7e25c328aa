// qkv_bias_activation_bench — an FFN's first layer, Dropout(gelu(x W₁ᵀ + b₁)), two ways: the bias
// filled into the GEMM's output and accumulated into (linear with its bias, then the activation:
// what the FFN ran before) and the bias added in the activation's pass (the GEMM without it:
// nn::feed_forward now, ops/activation.h's gelu(…, bias)), forward (no grad) and forward+backward
// (every gradient: x, W₁, b₁), f32, dropout 0.1, every thread (OMP_NUM_THREADS). Shapes (rows, d,
// hidden): nanoGPT's Shakespeare GPU config's micro-batch halved (8,192 × 384 → 1,536) and a GPT-2
// small sequence batch (2,048 × 768 → 3,072). bench/bias_activation_vs_pytorch.py runs it beside
// PyTorch.
//
// Counters:
//   GB/s   the bytes the fused forward must move past the GEMM's inputs (the product written and read,
//          the output written: 12 B an element of [rows, hidden]) per second, for both forms alike
//
//   build/bench/qkv_bias_activation_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "qkv/qkv.h"

namespace {

qkv::Tensor run(const qkv::Tensor& x, const qkv::Tensor& w, const qkv::Tensor& b, bool fused, qkv::Generator* g) {
  return fused ? qkv::gelu(qkv::linear(x, w), "none", 0.1f, g, b) : qkv::gelu(qkv::linear(x, w, b), "none", 0.1f, g);
}

void bm(benchmark::State& state, bool fused, bool backward) {
  const int64_t rows = state.range(0), d = state.range(1), hidden = state.range(2);
  qkv::Generator gen(0);
  qkv::Tensor x = qkv::Tensor::randn({rows, d}, gen), w = qkv::Tensor::randn({hidden, d}, gen, 0.f, 0.05f),
              b = qkv::Tensor::randn({hidden}, gen), dy = qkv::Tensor::randn({rows, hidden}, gen);
  if (backward) x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
  for (auto _ : state) {
    if (backward) {
      qkv::Tensor y = run(x, w, b, fused, &gen);
      y.backward(dy);
      benchmark::DoNotOptimize(b.grad().data());
      x.zero_grad(), w.zero_grad(), b.zero_grad();
    } else {
      qkv::NoGradGuard no_grad;
      qkv::Tensor y = run(x, w, b, fused, &gen);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.counters["GB/s"] = benchmark::Counter(12.0 * static_cast<double>(rows * hidden) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = qkv::num_threads();
}

// The bias's gradient alone, Σ over rows of dy [rows, d_ff] (sum_to: since 2026-12-02 in
// kernels/column_strips.h's strips of rows, split over the threads)
void bias_gradient(benchmark::State& state) {
  const int64_t rows = state.range(0), hidden = state.range(2);
  qkv::Generator gen(0);
  const qkv::Tensor dy = qkv::Tensor::randn({rows, hidden}, gen);
  for (auto _ : state) {
    qkv::Tensor db = qkv::sum_to(dy, {hidden});
    benchmark::DoNotOptimize(db.data());
  }
  state.counters["GB/s"] = benchmark::Counter(4.0 * static_cast<double>(rows * hidden) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = qkv::num_threads();
}

// The activation's backward with the bias's gradient (the forward outside the timing): the bias added
// by its own op, whose backward sums dx's columns after the activation's backward wrote dx (what ran
// before 2026-12-02's second change), and the bias in the activation, whose backward writes its gradient
// in its own pass (kernels/activation.inc's dbias) — f32, dropout 0.1, the GELU's Φ kept
void activation_backward(benchmark::State& state, bool fused) {
  const int64_t rows = state.range(0), hidden = state.range(2);
  qkv::Generator gen(0);
  qkv::Tensor h = qkv::Tensor::randn({rows, hidden}, gen), b = qkv::Tensor::randn({hidden}, gen),
              dy = qkv::Tensor::randn({rows, hidden}, gen);
  h.requires_grad_(), b.requires_grad_();
  for (auto _ : state) {
    state.PauseTiming();
    qkv::Tensor y = fused ? qkv::gelu(h, "none", 0.1f, &gen, b) : qkv::gelu(qkv::add(h, b), "none", 0.1f, &gen);
    state.ResumeTiming();
    y.backward(dy);
    benchmark::DoNotOptimize(b.grad().data());
    state.PauseTiming();
    h.zero_grad(), b.zero_grad();
    state.ResumeTiming();
  }
  state.counters["threads"] = qkv::num_threads();
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({8192, 384, 1536})->Args({2048, 768, 3072})->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK_CAPTURE(bm, bias_in_gemm_forward, false, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, bias_in_activation_forward, true, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, bias_in_gemm_forward_backward, false, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, bias_in_activation_forward_backward, true, true)->Apply(shapes);
BENCHMARK(bias_gradient)->Apply(shapes);
BENCHMARK_CAPTURE(activation_backward, bias_gradient_after_activation, false)->Apply(shapes);
BENCHMARK_CAPTURE(activation_backward, bias_gradient_in_activation, true)->Apply(shapes);

BENCHMARK_MAIN();
