// qkv bench attention — times scaled_dot_product_attention forward and forward+backward at a
// shape the user picks, on this machine, and reports useful GFLOP/s and peak memory.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/thread_budget.h"
#include "qkv/ops.h"

namespace qkv::cli {

namespace {

struct BenchArgs {
  int64_t seq_len = 1024, kv_len = 0, batch = 1, heads = 8, kv_heads = 0, head_dim = 64;
  bool causal = false, json = false, no_backward = false;
  float dropout = 0.f, softcap = 0.f;
  AttentionCompute dtype = AttentionCompute::f32;
  AttentionBackend backend = AttentionBackend::flash;
  int repeats = 0, threads = 0;
  std::string device = "cpu";
};

double rss_mib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * 4096.0 / (1 << 20);
}

int run_bench_attention(const BenchArgs& a) {
  use_threads(a.threads);
  const Device device = device_from(a.device, "bench attention");
  const int64_t Lk = a.kv_len ? a.kv_len : a.seq_len, Hkv = a.kv_heads ? a.kv_heads : a.heads;
  Generator gen(0);
  Tensor q = Tensor::randn({a.batch, a.heads, a.seq_len, a.head_dim}, gen).to(device);
  Tensor k = Tensor::randn({a.batch, Hkv, Lk, a.head_dim}, gen).to(device);
  Tensor v = Tensor::randn({a.batch, Hkv, Lk, a.head_dim}, gen).to(device);
  Tensor dout = Tensor::randn({a.batch, a.heads, a.seq_len, a.head_dim}, gen).to(device);
  const double base_rss = rss_mib();
  const int64_t base_bytes = allocated_bytes();
  reset_peak_bytes();
  AttentionOptions opt;
  opt.is_causal = a.causal;
  opt.enable_gqa = Hkv != a.heads;
  opt.compute_dtype = a.dtype;
  opt.backend = a.backend;
  opt.dropout_p = a.dropout;
  opt.softcap = a.softcap;
  const std::string dtype(enum_name(a.dtype)), backend(enum_name(a.backend));
  const double work = 4.0 * a.batch * a.heads * a.seq_len * Lk * a.head_dim * (a.causal ? 0.5 : 1.0);
  const int reps = a.repeats > 0 ? a.repeats : (a.seq_len <= 1024 ? 10 : a.seq_len <= 4096 ? 4 : 2);

  double fwd = median_ms(reps, device, [&] {
    NoGradGuard g;
    scaled_dot_product_attention(q, k, v, opt);
  });
  const int64_t fwd_peak = peak_allocated_bytes() - base_bytes;
  double fwdbwd = 0;
  if (!a.no_backward) {
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
    fwdbwd = median_ms(reps, device, [&] {
      Tensor o = scaled_dot_product_attention(q, k, v, opt);
      o.backward(dout);
      q.zero_grad(), k.zero_grad(), v.zero_grad();
    });
  }
  const double peak_rss = peak_rss_mib() - base_rss;
  // What the op needs beyond its inputs and outputs (the output, and dq, dk, dv with a backward).
  const double out_mib = 4.0 * a.batch * a.heads * a.seq_len * a.head_dim / (1 << 20);
  const double in_kv_mib = 4.0 * a.batch * Hkv * Lk * a.head_dim / (1 << 20);
  const double outputs_mib = out_mib + (fwdbwd > 0 ? out_mib + 2 * in_kv_mib : 0.0);
  const double peak_extra = std::max(0.0, peak_rss - outputs_mib);
  const double peak_tensor =
      device.is_cpu() ? static_cast<double>(peak_allocated_bytes() - base_bytes) / (1 << 20)
                      : static_cast<double>(cuda::max_memory_allocated(device.index)) / (1 << 20);  // (GPU: all of it)
  if (a.json) {
    std::printf(
        "{\"impl\": \"qkv\", \"seq_len\": %ld, \"kv_len\": %ld, \"batch\": %ld, \"heads\": %ld, \"kv_heads\": %ld, "
        "\"head_dim\": %ld, \"causal\": %s, \"dropout\": %g, \"softcap\": %g, \"dtype\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"forward_ms\": %.3f, "
        "\"forward_backward_ms\": %.3f, \"gflops\": %.1f, \"gflops_backward\": %.1f, \"peak_extra_mib\": %.1f, "
        "\"peak_rss_growth_mib\": %.1f, \"peak_tensor_mib\": %.1f, \"forward_peak_tensor_mib\": %.1f, \"device\": \"%s\"}\n",
        (long)a.seq_len, (long)Lk, (long)a.batch, (long)a.heads, (long)Hkv, (long)a.head_dim,
        a.causal ? "true" : "false", static_cast<double>(a.dropout), static_cast<double>(a.softcap), dtype.c_str(), backend.c_str(), requested_threads(), fwd, fwdbwd, work / fwd / 1e6,
        fwdbwd > 0 ? 3 * work / fwdbwd / 1e6 : 0.0, peak_extra, peak_rss, peak_tensor, static_cast<double>(fwd_peak) / (1 << 20),
        device.str().c_str());
  } else {
    std::printf("attention B=%ld H=%ld Hkv=%ld Lq=%ld Lk=%ld d=%ld %s, dropout %g, softcap %g, %s %s, on %s (%d threads)\n",
                (long)a.batch, (long)a.heads, (long)Hkv, (long)a.seq_len, (long)Lk, (long)a.head_dim,
                a.causal ? "causal" : "full", static_cast<double>(a.dropout), static_cast<double>(a.softcap), backend.c_str(), dtype.c_str(), device.str().c_str(), requested_threads());
    std::printf("  forward          %9.2f ms  %7.1f GFLOP/s useful\n", fwd, work / fwd / 1e6);
    if (fwdbwd > 0)
      std::printf("  forward+backward %9.2f ms  %7.1f GFLOP/s useful\n", fwdbwd, 3 * work / fwdbwd / 1e6);
    std::printf("  peak memory beyond inputs: %.1f MiB RSS (%.1f MiB beyond the outputs too), %.1f MiB in tensors\n",
                peak_rss, peak_extra, peak_tensor);
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure qkv's kernels on this machine");
  bench->require_subcommand(1);
  add_bench_gpt(bench);
  add_bench_seq2seq(bench);
  add_bench_vision(bench);
  add_bench_caption(bench);
  add_bench_paged(bench);
  add_bench_loss(bench);
  add_bench_tokenizer(bench);
  auto args = std::make_shared<BenchArgs>();
  CLI::App* att = bench->add_subcommand("attention", "Time scaled_dot_product_attention forward and forward+backward");
  att->add_option("--seq-len,-L", args->seq_len, "query length")->capture_default_str()->check(greater_than_zero());
  att->add_option("--kv-len", args->kv_len, "key/value length (default: = seq-len)")->check(zero_or_more());
  att->add_option("--batch,-B", args->batch, "batch size")->capture_default_str()->check(greater_than_zero());
  att->add_option("--heads", args->heads, "query heads")->capture_default_str()->check(greater_than_zero());
  att->add_option("--kv-heads", args->kv_heads, "key/value heads (grouped-query attention; default: = heads)")
      ->check(zero_or_more());
  att->add_option("--head-dim,-d", args->head_dim, "head dimension")->capture_default_str()->check(greater_than_zero());
  att->add_flag("--causal", args->causal, "causal mask");
  att->add_option("--dropout", args->dropout, "dropout on the attention weights, as in training (dropout_p)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  att->add_option("--softcap", args->softcap,
                  "soft-cap the scores, c·tanh(s/c) before the mask (Gemma 2's attn_logit_softcapping: 50; 0: none)")
      ->capture_default_str()
      ->check(zero_or_more());
  add_choice(att, "--dtype", args->dtype, "what the products compute in (bf16, f16: operands rounded to the 16-bit format, f32 accumulation; a GPU's tensor cores)");
  add_choice(att, "--backend", args->backend, "flash: tiled, the default path; reference: materializes Lq×Lk",
             {AttentionBackend::flash, AttentionBackend::reference});
  att->add_option("--repeats", args->repeats, "timed repetitions (median reported; default by size)");
  add_threads_option(att, args->threads);
  att->add_flag("--no-backward", args->no_backward, "time the forward only");
  att->add_flag("--json", args->json, "print one JSON object");
  add_device_option(att, args->device, "run (cuda: time the GPU's kernels, waiting for each run)");
  register_runner(att, [args] { return run_bench_attention(*args); });
}

}  // namespace qkv::cli
