// qkv_norm_bench — a residual add and the norm after it, as two ops and as one (ops/layer_norm.h's
// add_layer_norm, ops/rms_norm.h's add_rms_norm), forward (no grad) and forward+backward, f32, every
// thread (OMP_NUM_THREADS); and in training, the residual dropped first (p = 0.1): dropout, add and
// norm as three ops and as one. Shapes: rows × features of a Tatoeba batch (2,500 × 256) and of a
// Llama-family prefill (512 × 2,048).
//
// Counters:
//   GB/s   the bytes the fused forward must move (x, residual in; sum, normalized out: 16 B an
//          element) per second, for both forms, so that the two read as one scale
//
//   build/bench/qkv_norm_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "qkv/qkv.h"

namespace {

enum class Norm { layer, rms };

struct Inputs {
  qkv::Tensor x, r, w, b, dy;
  Inputs(int64_t rows, int64_t n, bool grad) {
    qkv::Generator gen(0);
    x = qkv::Tensor::randn({rows, n}, gen), r = qkv::Tensor::randn({rows, n}, gen);
    w = qkv::Tensor::randn({n}, gen), b = qkv::Tensor::randn({n}, gen), dy = qkv::Tensor::randn({rows, n}, gen);
    if (grad) x.requires_grad_(), r.requires_grad_(), w.requires_grad_(), b.requires_grad_();
  }
};

// p: the residual's dropout (0: none)
qkv::Tensor run(const Inputs& in, Norm norm, bool fused, float p) {
  const int64_t n = in.x.size(-1);
  if (fused)
    return norm == Norm::layer ? qkv::add_layer_norm(in.x, in.r, {n}, in.w, in.b, 1e-5f, p)
                               : qkv::add_rms_norm(in.x, in.r, in.w, 1e-6f, p);
  const qkv::Tensor s = in.x + qkv::dropout(in.r, p);
  return norm == Norm::layer ? qkv::layer_norm(s, {n}, in.w, in.b) : qkv::rms_norm(s, in.w, 1e-6f);
}

void bm(benchmark::State& state, Norm norm, bool fused, bool backward, float p = 0.f) {
  const int64_t rows = state.range(0), n = state.range(1);
  Inputs in(rows, n, backward);
  for (auto _ : state) {
    if (backward) {
      qkv::Tensor y = run(in, norm, fused, p);
      y.backward(in.dy);
      benchmark::DoNotOptimize(in.x.grad().data());
      for (qkv::Tensor* t : {&in.x, &in.r, &in.w, &in.b}) t->zero_grad();
    } else {
      qkv::NoGradGuard g;
      qkv::Tensor y = run(in, norm, fused, p);
      benchmark::DoNotOptimize(y.data());
    }
  }
  state.counters["GB/s"] = benchmark::Counter(16.0 * static_cast<double>(rows * n) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = qkv::num_threads();
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({2500, 256})->Args({512, 2048})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK_CAPTURE(bm, layer_norm_of_add, Norm::layer, false, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, add_layer_norm, Norm::layer, true, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, rms_norm_of_add, Norm::rms, false, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, add_rms_norm, Norm::rms, true, false)->Apply(shapes);
BENCHMARK_CAPTURE(bm, layer_norm_of_add_forward_backward, Norm::layer, false, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, add_layer_norm_forward_backward, Norm::layer, true, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, rms_norm_of_add_forward_backward, Norm::rms, false, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, add_rms_norm_forward_backward, Norm::rms, true, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, layer_norm_of_add_of_dropout_forward_backward, Norm::layer, false, true, 0.1f)->Apply(shapes);
BENCHMARK_CAPTURE(bm, add_layer_norm_dropout_forward_backward, Norm::layer, true, true, 0.1f)->Apply(shapes);
BENCHMARK_CAPTURE(bm, rms_norm_of_add_of_dropout_forward_backward, Norm::rms, false, true, 0.1f)->Apply(shapes);
BENCHMARK_CAPTURE(bm, add_rms_norm_dropout_forward_backward, Norm::rms, true, true, 0.1f)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
