// qkv bench linear-cross-entropy — a language model's output layer and its loss, forward and backward
// (x and W requiring grad), two ways, on the CPU or a GPU:
//   unfused   cross_entropy(linear(x, W), y): the [N, V] logits written, then their gradient
//   fused     linear_cross_entropy(x, W, y) (ops/loss.h): a chunk of rows at a time, never the logits
//             whole — once for each --chunk-rows (0: the op's own choice)
// f32, or --dtype bf16 (autocast: the products in bf16, as a bf16 training step runs them); mean over
// the targets. Reported: the median time of a step and the most bytes qkv's tensors held at once
// during it past the inputs' (core/tensor.h's peak_allocated_bytes; on a GPU its memory). The shapes
// default to GPT-2 small's head on 8,192 tokens. bench/linear_cross_entropy_cuda_vs_pytorch.py runs it
// on a GPU beside PyTorch eager and torch.compile; bench/linear_cross_entropy_vs_pytorch.py on the CPU.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_budget.h"
#include "qkv/ops.h"

namespace qkv::cli {

namespace {

struct LossBenchArgs {
  int64_t tokens = 8192, dim = 768, vocab = 50257;
  std::vector<int64_t> chunk_rows{0};
  AutocastDType dtype = AutocastDType::f32;
  int repeats = 10, threads = 0;
  bool json = false, no_unfused = false;
  std::string device = "cpu";
};

struct Form {
  std::string name;
  int64_t chunk_rows = -1;  // −1: unfused
  double ms = 0, peak_mb = 0;
};

int run_bench_loss(const LossBenchArgs& a) {
  use_threads(a.threads);
  const Device device = device_from(a.device, "bench linear-cross-entropy");
  const int64_t N = a.tokens, d = a.dim, V = a.vocab;
  QKV_CHECK(V <= 2147483647, "bench linear-cross-entropy: --vocab ", V, " is past int32's targets (2^31 − 1)");
  // the inputs and their gradients (x, W: f32, and their bf16 copies), and the unfused form's logits and
  // their gradient
  const double Nd = static_cast<double>(N) * static_cast<double>(d), Vd = static_cast<double>(V) * static_cast<double>(d);
  const double inputs = 4.0 * 2.0 * (Nd + Vd) * (a.dtype == AutocastDType::bf16 ? 1.5 : 1.0);
  const double logits = a.no_unfused ? 0.0 : 2.0 * 4.0 * static_cast<double>(N) * static_cast<double>(V);
  if (device.is_cpu() && inputs + logits > 0.9 * static_cast<double>(machine_memory_bytes()))
    throw Error("bench linear-cross-entropy: --tokens " + std::to_string(N) + " × --vocab " + std::to_string(V) +
                " × --dim " + std::to_string(d) + " need " + memory_str(static_cast<int64_t>(inputs + logits)) +
                " for the inputs, their gradients and the unfused form's logits; this machine has " +
                memory_str(machine_memory_bytes()) + " (--no-unfused leaves the logits out)");
  Generator gen(0);
  Tensor x = Tensor::randn({N, d}, gen).to(device), w = Tensor::randn({V, d}, gen, 0.f, 0.02f).to(device);
  std::vector<int32_t> ids(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) ids[static_cast<size_t>(n)] = static_cast<int32_t>((n * 7919) % V);
  const Tensor y = Tensor::from_ints(ids, {N}).to(device);
  x.requires_grad_(), w.requires_grad_();

  std::vector<Form> forms;
  if (!a.no_unfused) forms.push_back({"unfused", -1});
  for (int64_t r : a.chunk_rows) forms.push_back({r == 0 ? "fused" : "fused, " + std::to_string(r) + " rows", r});
  double loss_seen[2] = {0, 0};  // the unfused form's loss and the last fused one's, for a glance
  for (Form& f : forms) {
    int64_t peak = 0;
    f.ms = median_ms(a.repeats, device, [&] {
      const int64_t before = allocated_bytes();
      reset_peak_bytes();
      Tensor loss;
      {
        Autocast autocast(a.dtype);
        loss = f.chunk_rows < 0 ? cross_entropy(linear(x, w), y)
                                : linear_cross_entropy(x, w, y, Tensor(), -100, 0.f, "mean", f.chunk_rows);
      }
      loss.backward();
      peak = std::max(peak, peak_allocated_bytes() - before);
      loss_seen[f.chunk_rows < 0 ? 0 : 1] = static_cast<double>(loss.item());
      x.zero_grad(), w.zero_grad();
    });
    f.peak_mb = static_cast<double>(peak) / (1 << 20);
  }

  const char* dt = a.dtype == AutocastDType::bf16 ? "bf16" : "f32";
  if (a.json) {
    std::printf("{\"impl\": \"qkv\", \"tokens\": %ld, \"dim\": %ld, \"vocab\": %ld, \"dtype\": \"%s\", \"device\": \"%s\", "
                "\"threads\": %d, \"forms\": [",
                (long)N, (long)d, (long)V, dt, device.str().c_str(), requested_threads());
    for (size_t i = 0; i < forms.size(); ++i)
      std::printf("%s{\"form\": \"%s\", \"chunk_rows\": %ld, \"ms\": %.4f, \"peak_mb\": %.1f}", i ? ", " : "",
                  forms[i].chunk_rows < 0 ? "unfused" : "fused", (long)forms[i].chunk_rows, forms[i].ms,
                  forms[i].peak_mb);
    std::printf("], \"loss_unfused\": %.6f, \"loss_fused\": %.6f}\n", loss_seen[0], loss_seen[1]);
  } else {
    std::printf("output layer + cross-entropy, forward and backward: N=%ld tokens, d=%ld, V=%ld, %s, on %s (%d threads)\n",
                (long)N, (long)d, (long)V, dt, device.str().c_str(), requested_threads());
    for (const Form& f : forms)
      std::printf("  %-22s %10.3f ms  %9.1f MB at the peak past the inputs\n", f.name.c_str(), f.ms, f.peak_mb);
    if (!a.no_unfused)
      for (size_t i = 1; i < forms.size(); ++i)
        std::printf("  unfused / %s time: %.2f\n", forms[i].name.c_str(), forms[0].ms / forms[i].ms);
  }
  return 0;
}

}  // namespace

void add_bench_loss(CLI::App* bench) {
  auto a = std::make_shared<LossBenchArgs>();
  CLI::App* app = bench->add_subcommand(
      "linear-cross-entropy",
      "Time the output layer and its cross-entropy, forward and backward: the logits whole against linear_cross_entropy's chunks");
  app->add_option("--tokens,-N", a->tokens, "rows of x (tokens)")->capture_default_str()->check(greater_than_zero());
  app->add_option("--dim,-d", a->dim, "the model's width")->capture_default_str()->check(greater_than_zero());
  app->add_option("--vocab,-V", a->vocab, "classes (the vocabulary)")->capture_default_str()->check(greater_than_zero());
  app->add_option("--chunk-rows", a->chunk_rows, "the fused form's rows a chunk, one run each (0: the op's choice)")
      ->capture_default_str()
      ->check(zero_or_more());
  add_choice(app, "--dtype", a->dtype, "f32, or bf16 for the products in bf16 (autocast, as a bf16 training step)");
  app->add_option("--repeats", a->repeats, "timed repetitions (the median reported)")
      ->capture_default_str()
      ->check(greater_than_zero());
  app->add_flag("--no-unfused", a->no_unfused, "time the fused form alone (the logits whole may not fit)");
  add_threads_option(app, a->threads);
  app->add_flag("--json", a->json, "print one JSON object");
  add_device_option(app, a->device, "run (cuda: time the GPU's kernels, waiting for each run)");
  register_runner(app, [a] { return run_bench_loss(*a); });
}

}  // namespace qkv::cli
