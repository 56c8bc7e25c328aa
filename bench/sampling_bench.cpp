// qkv_sampling_bench — drawing the next token of R rows of logits over GPT-2's vocabulary (50,257),
// as a batching step samples them: ops/sample.h's sample_rows (every row in one call, the CPU kernel)
// against the filters written plainly a row at a time (decode/sampling.h: top_k_filter, top_p_filter,
// softmax_probs, sample_from — what Sampler ran before it drew through sample_rows: a full stable sort
// for top-p). Cases: temperature alone, top-k 50, top-p 0.9, top-k 50 with top-p 0.95, and that with
// the history's penalties (repetition 1.2, frequency 0.5, presence 0.5; 256 tokens seen, 64 of them in
// the prompt) (temperature 1; logits ~ N(0, 2²)). Every thread (OMP_NUM_THREADS). bench/sampling_vs_pytorch.py runs it beside
// PyTorch's Hugging Face warpers.
//
//   build/bench/qkv_sampling_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "qkv/decode/sampling.h"
#include "qkv/qkv.h"

namespace {

constexpr int64_t kVocab = 50257;

struct Case {
  int64_t top_k;
  double top_p;
  bool penalties;  // repetition 1.2, frequency 0.5, presence 0.5 over 256 tokens seen (64 in the prompt)
};
constexpr Case kCases[] = {{0, 1.0, false}, {50, 1.0, false}, {0, 0.9, false}, {50, 0.95, false}, {50, 0.95, true}};

void bm(benchmark::State& state, bool op) {
  const int64_t rows = state.range(0);
  const Case c = kCases[state.range(1)];
  qkv::Generator gen(0);
  const qkv::Tensor logits = qkv::Tensor::randn({rows, kVocab}, gen, 0.f, 2.f);
  std::vector<qkv::RowSampling> params;
  for (int64_t r = 0; r < rows; ++r) {
    qkv::RowSampling s;
    s.temperature = 1.0, s.top_k = c.top_k, s.top_p = c.top_p, s.u = qkv::Generator::uniform(5, static_cast<uint64_t>(r));
    if (c.penalties) {
      s.repetition_penalty = 1.2f, s.frequency_penalty = 0.5f, s.presence_penalty = 0.5f;
      for (int32_t t = 0; t < 256; ++t) s.seen.push_back({(t * 193 + static_cast<int32_t>(r)) % 50257, t % 3, t < 64});
    }
    params.push_back(s);
  }
  for (auto _ : state) {
    if (op) {
      benchmark::DoNotOptimize(qkv::sample_rows(logits, params).data<int32_t>());
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {  // the reference, a row at a time
      std::vector<float> row(logits.data() + r * kVocab, logits.data() + (r + 1) * kVocab);
      for (const qkv::SeenToken& t : params[static_cast<size_t>(r)].seen) {  // (the penalties, written plainly)
        float& v = row[static_cast<size_t>(t.token)];
        v = v > 0 ? v / 1.2f : v * 1.2f;
        if (t.count > 0) v = (v - 0.5f * static_cast<float>(t.count)) - 0.5f;
      }
      qkv::decode::top_k_filter(row, c.top_k);
      qkv::decode::top_p_filter(row, c.top_p);
      benchmark::DoNotOptimize(qkv::decode::sample_from(qkv::decode::softmax_probs(row), params[static_cast<size_t>(r)].u));
    }
  }
  state.counters["threads"] = qkv::num_threads();
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t rows : {1, 32})
    for (int64_t c = 0; c < 5; ++c) b->Args({rows, c});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK_CAPTURE(bm, sample_rows, true)->Apply(shapes);
BENCHMARK_CAPTURE(bm, reference, false)->Apply(shapes);

BENCHMARK_MAIN();
