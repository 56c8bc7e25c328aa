// qkv_gemm_bench — qkv::kernels::cpu::sgemm (oneDNN's dnnl_sgemm) at the shapes a Transformer
// runs, reporting GFLOP/s (2·M·N·K per call, wall time), and OpenBLAS's cblas_sgemm at the same
// shapes when the bench was built with it (docs/BENCHMARKS.md explains why oneDNN was chosen).
//
// Names: <lib>/<what>/M=..,N=..,K=../<op(A)op(B)>/threads:<n>   (row-major C = op(A)·op(B);
// N = as stored, T = transposed). "threads:0" means every thread (qkv::num_threads()).
//
// Run each library in its own process: OpenBLAS's pthreads and oneDNN's OpenMP threads both spin
// for a while after a call and slow the other down when they share one process:
//   build/bench/qkv_gemm_bench --benchmark_filter='^qkv/'
//   OPENBLAS_CORETYPE=Cooperlake build/bench/qkv_gemm_bench --benchmark_filter='^openblas/'
// (this environment sets OPENBLAS_CORETYPE=Haswell, which halves OpenBLAS on AVX-512 machines).
// bench/gemm_peak.py runs the three and prints them side by side.
//
// decode/…: one call of a decoding step's product at the shapes a translation step runs (M = beam ×
// batch rows; the Tatoeba model's d 256 / FFN 1,024 / vocabulary 8,000 and a Marian's d 512 / FFN
// 2,048), y = x Wᵀ through what `linear_inference` calls: int8 rows (kernels/cpu/gemm_int8.h: the
// activations quantized, oneDNN's packed u8·s8 matmul, the sums scaled back) and the f32 packed copy
// (kernels/cpu/packed_linear.h). µs per call show what a call costs beyond its arithmetic:
//   build/bench/qkv_gemm_bench --benchmark_filter='^decode/'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "qkv/core/parallel.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/packed_linear.h"

#if QKV_BENCH_HAVE_OPENBLAS
#include <cblas.h>
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
char* openblas_get_config(void);
}
#endif

namespace {

struct Shape {
  std::string what;
  int64_t M, N, K;
  bool ta, tb;
};

struct Buffers {
  std::vector<float> a, b, c;
  Buffers(const Shape& s) : a(s.M * s.K), b(s.K * s.N), c(s.M * s.N) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    for (float& x : c) x = u(rng);
  }
  // Leading dimensions of the row-major operands as stored.
  static int64_t lda(const Shape& s) { return s.ta ? s.M : s.K; }
  static int64_t ldb(const Shape& s) { return s.tb ? s.K : s.N; }
};

void set_counters(benchmark::State& state, const Shape& s, int threads) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * s.M * s.N * s.K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

void bm_qkv(benchmark::State& state, Shape s, int threads) {
  const int saved = qkv::num_threads();
  if (threads > 0) qkv::set_num_threads(threads);
  Buffers buf(s);
  for (auto _ : state) {
    qkv::kernels::cpu::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, buf.a.data(), Buffers::lda(s), buf.b.data(),
                             Buffers::ldb(s), 0.f, buf.c.data(), s.N);
    benchmark::ClobberMemory();
  }
  set_counters(state, s, qkv::num_threads());
  qkv::set_num_threads(saved);
}

#if QKV_BENCH_HAVE_OPENBLAS
void bm_openblas(benchmark::State& state, Shape s, int threads) {
  const int saved = openblas_get_num_threads();
  openblas_set_num_threads(threads > 0 ? threads : qkv::num_threads());
  Buffers buf(s);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K,
                1.f, buf.a.data(), Buffers::lda(s), buf.b.data(), Buffers::ldb(s), 0.f, buf.c.data(), s.N);
    benchmark::ClobberMemory();
  }
  set_counters(state, s, openblas_get_num_threads());
  openblas_set_num_threads(saved);
}
#endif

// A decoding step's product y[M, N] = x[M, K] · Wᵀ (W [N, K]): int8 rows or the f32 packed copy.
void bm_decode(benchmark::State& state, Shape s, bool int8, int threads) {
  const int saved = qkv::num_threads();
  qkv::set_num_threads(threads);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(s.M * s.K), w(s.N * s.K), bias(s.N), y(s.M * s.N);
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  for (float& v : bias) v = u(rng);
  std::vector<int8_t> w8(w.size());
  std::vector<float> scale(s.N);
  std::vector<int32_t> sums(s.N);
  namespace k = qkv::kernels::cpu;
  k::quantize_rows_int8(s.N, s.K, w.data(), w8.data(), scale.data(), sums.data());
  const auto packed = int8 ? k::pack_linear_s8(s.N, s.K, w8.data(), s.K) : k::pack_linear_f32(s.N, s.K, w.data(), s.K);
  for (auto _ : state) {
    if (int8)
      k::linear_int8(s.M, s.N, s.K, x.data(), s.K, w8.data(), s.K, scale.data(), sums.data(), bias.data(), y.data(),
                     s.N, packed.get());
    else if (!k::packed_linear_f32(*packed, s.M, x.data(), bias.data(), y.data()))
      state.SkipWithError("no packed f32 matmul for this M");
    benchmark::ClobberMemory();
  }
  state.counters["GOP"] = benchmark::Counter(2.0 * s.M * s.N * s.K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["act_bits"] = int8 ? k::int8_activation_bits() : 32;
  qkv::set_num_threads(saved);
}

std::vector<Shape> decode_shapes() {
  std::vector<Shape> out;
  for (int64_t M : {32, 128}) {
    for (auto [what, N, K] : {std::tuple<const char*, int64_t, int64_t>{"qkv_proj", 768, 256}, {"out_proj", 256, 256},
                              {"ffn_up", 1024, 256}, {"ffn_down", 256, 1024}, {"logits", 8000, 256},
                              {"marian_ffn_up", 2048, 512}, {"marian_ffn_down", 512, 2048}})
      out.push_back(Shape{what, M, N, K, false, true});
  }
  return out;
}

std::vector<std::pair<Shape, int>> shapes() {
  std::vector<std::pair<Shape, int>> out;
  auto add = [&](std::string what, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int threads = 0) {
    out.push_back({Shape{std::move(what), M, N, K, ta, tb}, threads});
  };
  // Peak: big squares.
  for (int64_t n : {1024, 2048, 4096}) add("square", n, n, n, false, false);
  // Transformer layer, d_model 512, d_ff 2048, as nn::Linear runs them: y = x Wᵀ (NT), and in the
  // backward dx = dy W (NN), dW = dyᵀ x (TN, K = tokens).
  for (int64_t t : {512, 1024, 2048, 4096}) {
    add("qkv_proj", t, 1536, 512, false, false);  // [tokens,512]x[512,1536]
    add("qkv_proj", t, 1536, 512, false, true);   // x Wᵀ, W [1536,512]
    add("out_proj", t, 512, 512, false, true);
    add("ffn_up", t, 2048, 512, false, false);    // [tokens,512]x[512,2048]
    add("ffn_up", t, 2048, 512, false, true);
    add("ffn_down", t, 512, 2048, false, false);  // [tokens,2048]x[2048,512]
    add("ffn_down", t, 512, 2048, false, true);
  }
  add("ffn_up_dx", 2048, 512, 2048, false, false);  // dx = dy W, W [2048,512]
  add("ffn_up_dw", 2048, 512, 2048, true, false);   // dW = dyᵀ x: [2048,tokens]x[tokens,512]
  add("qkv_proj_dw", 1536, 512, 2048, true, false);
  // N, K sweep at 2048 tokens.
  for (int64_t n : {256, 512, 1024, 2048})
    for (int64_t k : {256, 512, 1024, 2048}) add("sweep", 2048, n, k, false, false);
  // One attention head (d = 64): S = Q Kᵀ (NT), O = P V (NN), and the backward's dV = Pᵀ dO (TN).
  // The reference attention runs heads in parallel, each GEMM on one thread: threads:1 is what it
  // sees; threads:0 is a single head using every core.
  for (int64_t L : {512, 1024, 2048, 4096})
    for (int thr : {1, 0}) {
      add("attn_qk", L, L, 64, false, true, thr);   // [L,64]x[64,L]
      add("attn_pv", L, 64, L, false, false, thr);  // [L,L]x[L,64]
      add("attn_dv", L, 64, L, true, false, thr);   // [L,L]ᵀx[L,64]
    }
  add("attn_qk", 2048, 2048, 64, false, false, 0);  // [2048x64]x[64x2048] as stored
  return out;
}

std::string name(const char* lib, const Shape& s, int threads) {
  return std::string(lib) + "/" + s.what + "/M=" + std::to_string(s.M) + ",N=" + std::to_string(s.N) +
         ",K=" + std::to_string(s.K) + "/" + (s.ta ? "T" : "N") + (s.tb ? "T" : "N") +
         "/threads:" + std::to_string(threads);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
#if QKV_BENCH_HAVE_OPENBLAS
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
#endif
  // Wall time (UseRealTime): the GEMMs are multi-threaded, CPU time would add the threads up.
  for (const auto& [s, thr] : shapes())
    benchmark::RegisterBenchmark(name("qkv", s, thr).c_str(), bm_qkv, s, thr)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
#if QKV_BENCH_HAVE_OPENBLAS
  for (const auto& [s, thr] : shapes())
    benchmark::RegisterBenchmark(name("openblas", s, thr).c_str(), bm_openblas, s, thr)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
#endif
  for (const Shape& s : decode_shapes())
    for (const bool int8 : {true, false})
      benchmark::RegisterBenchmark(("decode/" + std::string(int8 ? "int8/" : "f32/") + s.what + "/M=" +
                                    std::to_string(s.M) + ",N=" + std::to_string(s.N) + ",K=" + std::to_string(s.K) +
                                    "/threads:1")
                                       .c_str(),
                                   bm_decode, s, int8, 1)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
