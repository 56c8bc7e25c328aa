// qkv bench paged-attention — one decoding step's attention over a paged KV cache (ops/paged_attention.h:
// B sequences of L keys each in shuffled pages, one new token each) against the dense attention the
// same step takes with a contiguous cache (scaled_dot_product_attention, q [B, H, 1, D] over k, v
// [B, Hkv, L, D]), on the CPU or a GPU. A decoding step reads every key and value once, so the figure
// that counts is the bandwidth: bytes of keys and values read per second. On a GPU, few sequences
// with long contexts take the split over the keys (kernels/cuda/paged_attention_kernels.cuh;
// QKV_CUDA_PAGED_SPLIT=0 turns it off, to compare; QKV_CUDA_PAGED_KERNEL=warps runs the key-a-warp kernel
// the tiled one replaced, =mma the tensor-core kernels for bf16 and e4m3 caches at d 64 and 128: the
// figures name the knob's value, "paged_kernel"). --kv-dtype bf16 keeps the paged cache in bf16 (half
// the bytes read; the dense attention stays f32), --kv-dtype fp8 in e4m3 (a quarter). --shared-prefix N gives every sequence the same first
// pages (N keys): the cascade reads them once for all (kernels/cpu/paged_attention.cpp; on a GPU the
// groups found on the host once, as a step finds them for all its layers — paged_prefixes —, then
// paged_cascade_kernel; QKV_PAGED_CASCADE=0 turns it off, to compare).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_budget.h"
#include "qkv/nn/paged_kv_cache.h"
#include "qkv/ops.h"

namespace qkv::cli {

namespace {

struct PagedBenchArgs {
  int64_t batch = 1, kv_len = 4096, heads = 32, kv_heads = 8, head_dim = 128, page_size = 16, window = 0, shared = 0;
  int repeats = 20, threads = 0;
  bool json = false;
  std::string device = "cpu", kv_dtype = "f32";
};

int run_bench_paged(const PagedBenchArgs& a) {
  use_threads(a.threads);
  const Device device = device_from(a.device, "bench paged-attention");
  if (a.heads % a.kv_heads != 0)
    throw Error("bench paged-attention: --heads " + std::to_string(a.heads) + " is not a multiple of --kv-heads " +
                std::to_string(a.kv_heads));
  const int64_t B = a.batch, L = a.kv_len, H = a.heads, Hkv = a.kv_heads, D = a.head_dim, P = a.page_size;
  // lengths and page numbers are int32 in a block table
  constexpr int64_t kMax = 2147483647;
  if (L > kMax || B > kMax || L / P + 1 > kMax / B)
    throw Error("bench paged-attention: --batch " + std::to_string(B) + " × --kv-len " + std::to_string(L) +
                " need more pages than a block table numbers (2^31 − 1)");
  if (a.shared > L)
    throw Error("bench paged-attention: --shared-prefix " + std::to_string(a.shared) + " is longer than --kv-len " +
                std::to_string(L));
  const int64_t per = (L + P - 1) / P, pages = B * per, shared_pages = a.shared / P;
  // the tensors it makes: the paged caches, the dense ones (f32), the queries and the outputs
  const DType cache_dtype = nn::kv_cache_dtype(a.kv_dtype);
  const double need = 2.0 * static_cast<double>(pages * P * Hkv * D) * static_cast<double>(dtype_size(cache_dtype)) +
                      2.0 * 4.0 * static_cast<double>(B * Hkv * L * D) + 3.0 * 4.0 * static_cast<double>(B * H * D);
  if (device.is_cpu() && need > 0.9 * static_cast<double>(machine_memory_bytes()))
    throw Error("bench paged-attention: --batch " + std::to_string(B) + " × --kv-len " + std::to_string(L) + " × --kv-heads " +
                std::to_string(Hkv) + " × --head-dim " + std::to_string(D) + " need " + memory_str(static_cast<int64_t>(need)) +
                " of keys and values, paged and dense; this machine has " + memory_str(machine_memory_bytes()));
  // the pages in a shuffled order: sequence b's page i is order[b · per + i]
  std::vector<int32_t> order(static_cast<size_t>(pages)), seq(static_cast<size_t>(B)), len(static_cast<size_t>(B),
                                                                                             static_cast<int32_t>(L));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  // --shared-prefix: every row begins with row 0's first pages (a shared system prompt; the pages the
  // others would have had stay unused)
  for (int64_t b = 1; b < B; ++b)
    for (int64_t i = 0; i < shared_pages; ++i) order[static_cast<size_t>(b * per + i)] = order[static_cast<size_t>(i)];
  std::iota(seq.begin(), seq.end(), 0);
  Generator gen(0);
  NoGradGuard no_grad;
  const Tensor q = Tensor::randn({B, H, D}, gen).to(device);
  const Tensor k_cache = Tensor::randn({pages, Hkv, P, D}, gen).to(cache_dtype).to(device);
  const Tensor v_cache = Tensor::randn({pages, Hkv, P, D}, gen).to(cache_dtype).to(device);
  const Tensor host_table = Tensor::from_ints(order, {B, per}), host_seqs = Tensor::from_ints(seq, {B}),
               host_lens = Tensor::from_ints(len, {B});
  const Tensor table = host_table.to(device), seqs = host_seqs.to(device), lens = host_lens.to(device);
  // a GPU's cascade: the groups, found once (PagedStep::prefixes finds them once a step)
  const PagedPrefixes prefixes =
      device.is_cpu() ? PagedPrefixes{} : paged_prefixes(host_table, host_seqs, host_lens, P, a.window, device);
  // the same keys dense: k [B, Hkv, L, D] = the pages of each row in order, their first L slots
  const Tensor k = Tensor::randn({B, Hkv, L, D}, gen).to(device), v = Tensor::randn({B, Hkv, L, D}, gen).to(device);
  const Tensor q4 = q.reshape({B, H, 1, D});
  AttentionOptions opt;
  opt.enable_gqa = Hkv != H;
  const int64_t seen = a.window > 0 ? std::min(a.window, L) : L;
  if (a.window > 0) opt.attn_mask = sliding_window_mask(1, L, a.window, L - 1, device);

  const double paged = median_ms(a.repeats, device, [&] {
    paged_attention(q, k_cache, v_cache, table, seqs, lens, std::nullopt, a.window, &prefixes);
  });
  const double dense = median_ms(a.repeats, device, [&] { scaled_dot_product_attention(q4, k, v, opt); });
  // bytes of keys and values read: B · Hkv · keys seen · (D + Dv) · 4 (2 a bf16 cache's)
  const double bytes = 4.0 * static_cast<double>(B * Hkv * seen * 2 * D);
  const double paged_gbs = bytes * static_cast<double>(dtype_size(cache_dtype)) / 4 / paged / 1e6, dense_gbs = bytes / dense / 1e6;
  // the decoding kernel asked for on a GPU (QKV_CUDA_PAGED_KERNEL: the tiled one unless it names another)
  const char* knob = std::getenv("QKV_CUDA_PAGED_KERNEL");
  const std::string kernel = device.is_cpu() ? "cpu" : (knob && *knob ? knob : "tiled");
  if (a.json) {
    std::printf("{\"impl\": \"qkv\", \"paged_kernel\": \"%s\", \"batch\": %ld, \"kv_len\": %ld, \"heads\": %ld, \"kv_heads\": %ld, \"head_dim\": %ld, "
                "\"page_size\": %ld, \"window\": %ld, \"shared_prefix\": %ld, \"kv_dtype\": \"%s\", \"device\": \"%s\", \"threads\": %d, "
                "\"paged_ms\": %.4f, \"dense_ms\": %.4f, \"paged_gbs\": %.1f, \"dense_gbs\": %.1f}\n",
                kernel.c_str(), (long)B, (long)L, (long)H, (long)Hkv, (long)D, (long)P, (long)a.window,
                (long)(shared_pages * P), a.kv_dtype.c_str(), device.str().c_str(), requested_threads(), paged, dense,
                paged_gbs, dense_gbs);
  } else {
    std::printf("paged attention, one decoding step: B=%ld sequences of %ld keys (window %ld, the first %ld shared), "
                "H=%ld Hkv=%ld d=%ld, pages of %ld, a %s cache, on %s (%d threads)\n",
                (long)B, (long)L, (long)a.window, (long)(shared_pages * P), (long)H, (long)Hkv, (long)D, (long)P,
                a.kv_dtype.c_str(), device.str().c_str(), requested_threads());
    std::printf("  paged   %9.3f ms  %8.1f GB/s of keys and values (%s kernel)\n", paged, paged_gbs, kernel.c_str());
    std::printf("  dense   %9.3f ms  %8.1f GB/s (scaled_dot_product_attention over a contiguous cache)\n", dense,
                dense_gbs);
    std::printf("  paged / dense time: %.2f\n", paged / dense);
  }
  return 0;
}

}  // namespace

void add_bench_paged(CLI::App* bench) {
  auto a = std::make_shared<PagedBenchArgs>();
  CLI::App* app = bench->add_subcommand(
      "paged-attention", "Time one decoding step's attention over a paged KV cache against a dense cache's");
  app->add_option("--batch,-B", a->batch, "sequences decoding together")->capture_default_str()->check(greater_than_zero());
  app->add_option("--kv-len,-L", a->kv_len, "keys each sequence holds")->capture_default_str()->check(greater_than_zero());
  app->add_option("--heads", a->heads, "query heads")->capture_default_str()->check(greater_than_zero());
  app->add_option("--kv-heads", a->kv_heads, "key/value heads")->capture_default_str()->check(greater_than_zero());
  app->add_option("--head-dim,-d", a->head_dim, "head dimension")->capture_default_str()->check(greater_than_zero());
  app->add_option("--page-size", a->page_size, "key/value slots a page")->capture_default_str()->check(greater_than_zero());
  app->add_option("--window", a->window, "sliding window (0: every key)")->capture_default_str()->check(zero_or_more());
  app->add_option("--shared-prefix", a->shared,
                  "keys every sequence shares, in the same pages (a system prompt; whole pages): on the CPU, read "
                  "once for all of them (QKV_PAGED_CASCADE=0: once a sequence, to compare)")
      ->capture_default_str()
      ->check(zero_or_more());
  app->add_option("--repeats", a->repeats, "timed repetitions (the median reported)")
      ->capture_default_str()
      ->check(greater_than_zero());
  app->add_option("--kv-dtype", a->kv_dtype,
                  "what the paged cache keeps: f32, bf16 or fp8 (e4m3; also fp8_e4m3) — the dense one stays f32")
      ->capture_default_str()
      ->check(CLI::IsMember(nn::kv_cache_dtype_names()));
  add_threads_option(app, a->threads);
  app->add_flag("--json", a->json, "print one JSON object");
  add_device_option(app, a->device, "run (cuda: time the GPU's kernels, waiting for each run)");
  register_runner(app, [a] { return run_bench_paged(*a); });
}

}  // namespace qkv::cli
