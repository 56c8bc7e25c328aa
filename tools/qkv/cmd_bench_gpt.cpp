// qkv bench gpt train|generate — the GPT workloads of ../shared/pytorch-reference (train_gpt.py,
// decode_gpt.py) on qkv, for a side-by-side run with PyTorch (bench/gpt_vs_pytorch.py).
//   train:    forward + backward + gradient clipping + AdamW on random tokens (vocab 65);
//             presets small (4 layers, 4 heads, 128 dims, block 64, batch 12) and
//             big (6 layers, 6 heads, 384 dims, block 256, batch 16)
//   generate: greedy decoding of the big model (block 512), batch 1, from one token, with the
//             KV cache and without (recomputing the whole prefix every step)
//   batched:  N requests at once (greedy, or sampled: --temperature, --top-k, --top-p) through continuous batching (decode/batching_generator.h)
//             over a paged KV cache, decoding graphs off and on (decode/paged_graphs.h; on the CPU
//             "on" is their emulation: the steps padded to buckets, no graph), runs alternating
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "commands.h"
#include "qkv/core/thread_budget.h"
#include "qkv/decode/batching_generator.h"
#include "qkv/decode/generate.h"
#include "qkv/models/registry.h"
#include "qkv/nn/gpt.h"
#include "qkv/ops/autocast.h"
#include "qkv/train/optim.h"

namespace qkv::cli {

namespace {

struct GptBenchArgs {
  std::string preset = "small";
  AutocastDType dtype = AutocastDType::f32;  // train
  DecodeArgs decode;                         // generate: the weights the steps read, threads
  int64_t iters = 50, warmup = 5, new_tokens = 500, repeats = 3;
  float dropout = 0.f;  // train: the model's dropout (nanoGPT's GPU recipe: 0.2)
  int threads = 0;
  bool json = false, no_naive = false;
  // batched
  std::string model = "big", device = "cpu";
  int64_t requests = 32, prompt_tokens = 16;
  double temperature = 0;  // 0: greedy
  int64_t top_k = 0;       // 0: off
  double top_p = 1;        // 1: off
};

nn::GPTConfig preset(const std::string& name, int64_t& batch) {
  nn::GPTConfig c;
  c.vocab_size = 65, c.dropout = 0.f, c.bias = false;
  if (name == "small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 128, c.block_size = 64, batch = 12;
  } else {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.block_size = 256, batch = 16;
  }
  return c;
}

int run_train(const GptBenchArgs& a) {
  use_threads(a.threads);
  int64_t B = 0;
  nn::GPTConfig c = preset(a.preset, B);
  c.dropout = a.dropout;
  Generator gen(1337);
  nn::GPT gpt(c, &gen);
  train::AdamOptions o;
  o.beta2 = 0.99f;
  train::Adam opt(train::decay_matrices_only(gpt.named_parameters(), 0.1f), o);
  const int64_t T = c.block_size;
  AutocastWeights casts(gpt.parameters());  // bf16: the weights' copies, as the trainer's
  std::vector<double> times;
  double loss_value = 0;
  for (int64_t it = 0; it < a.warmup + a.iters; ++it) {
    std::vector<int32_t> x(static_cast<size_t>(B * T)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(Generator::bits(7, 2 * (it * B * T + i)) % 65);
      y[i] = static_cast<int32_t>(Generator::bits(7, 2 * (it * B * T + i) + 1) % 65);
    }
    Tensor xt = Tensor::from_ints(x, {B, T}), yt = Tensor::from_ints(y, {B, T});
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      const AutocastWeights::Scope weights_bf16 = casts.scope(a.dtype);
      Autocast autocast(a.dtype);  // bf16: mixed precision
      loss = gpt.loss(xt, yt);
      loss.backward();
    }
    train::clip_grad_norm_(gpt.parameters(), 1.0);
    opt.step(Tensor(), &casts);  // bf16: the weights' copies written by the update, as the trainer's
    const double dt = seconds_since(t0);
    loss_value = loss.item();
    if (it >= a.warmup) times.push_back(dt);
  }
  const TimeStats st = time_stats(times);
  const double mean = st.mean, median = st.median;
  const double tok = static_cast<double>(B * T);
  if (a.json) {
    nlohmann::json j = {{"preset", a.preset},          {"threads", requested_threads()},     {"params", gpt.num_parameters()},
                        {"batch", B},                  {"block", T},                   {"iters", a.iters},
                        {"mean_ms", mean * 1e3},       {"median_ms", median * 1e3},    {"tokens_per_s", tok / mean},
                        {"tokens_per_s_median", tok / median}, {"final_loss", loss_value},
                        {"dtype", std::string(enum_name(a.dtype))}, {"dropout", a.dropout}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("qkv gpt-%s %s params=%.2fM threads=%d batch=%lld block=%lld: mean %.2f ms/iter (median %.2f) -> %.0f tokens/s\n",
                a.preset.c_str(), std::string(enum_name(a.dtype)).c_str(), static_cast<double>(gpt.num_parameters()) / 1e6,
                requested_threads(),
                static_cast<long long>(B), static_cast<long long>(T), mean * 1e3, median * 1e3, tok / mean);
  }
  return 0;
}

int run_generate(const GptBenchArgs& a) {
  use_threads_for_decoding(a.decode.threads);
  int64_t B = 0;
  nn::GPTConfig c = preset("big", B);
  c.block_size = 512;  // as decode_gpt.py: 1 + 500 tokens fit without cropping
  Generator gen(0);
  std::unique_ptr<models::LanguageModel> model = models::build_language_model("gpt", c.to_json(), &gen);
  model->module().eval();
  model->set_inference_weights(a.decode.weights);
  const models::LanguageModel& gpt = *model;
  const std::string dtype(enum_name(a.decode.weights));
  nlohmann::json j = {{"threads", requested_threads()}, {"new_tokens", a.new_tokens},
                      {"params", gpt.module().num_parameters()}, {"dtype", dtype}};
  std::vector<int32_t> reference;
  for (bool cache : {true, false}) {
    if (!cache && a.no_naive) continue;
    decode::GenerateOptions o;
    o.sampling.temperature = 0;  // greedy
    o.use_cache = cache;
    o.max_new_tokens = 20;
    decode::generate(gpt, {0}, o);  // warm-up
    o.max_new_tokens = a.new_tokens;
    std::vector<double> ts;
    std::vector<int32_t> out;
    for (int64_t r = 0; r < (cache ? a.repeats : 1); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      out = decode::generate(gpt, {0}, o);
      ts.push_back(seconds_since(t0));
    }
    const double med = time_stats(ts).median;
    const char* name = cache ? "kv_cache" : "naive";
    j[name] = {{"median_s", med}, {"tokens_per_s", static_cast<double>(a.new_tokens) / med}};
    if (!a.json)
      std::printf("qkv decode %-8s %s threads=%d %lld tokens: median %.3f s -> %.1f tokens/s\n", name, dtype.c_str(), requested_threads(),
                  static_cast<long long>(a.new_tokens), med, static_cast<double>(a.new_tokens) / med);
    if (cache) reference = out;
    else j["identical"] = out == reference;
  }
  if (a.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

// N requests of random prompts, each generating new_tokens (greedy or sampled; no stop token), all at once
// through one BatchingGenerator per mode; the first run of each mode (untimed) captures its graphs.
int run_batched(const GptBenchArgs& a) {
  use_threads_for_decoding(a.decode.threads);
  const Device device = device_from(a.device, "bench gpt batched");
  int64_t unused = 0;
  nn::GPTConfig c = preset("big", unused);
  c.block_size = 512;
  if (a.model == "gpt2") c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.vocab_size = 50257, c.block_size = 1024;
  if (a.prompt_tokens + a.new_tokens > c.block_size)
    throw Error(detail::concat("bench gpt batched: --prompt-tokens ", a.prompt_tokens, " + --new-tokens ", a.new_tokens,
                               " exceed the model's block of ", c.block_size));
  Generator gen(0);
  std::unique_ptr<models::LanguageModel> model = models::build_language_model("gpt", c.to_json(), &gen);
  model->module().eval();
  model->module().to(device);
  model->set_inference_weights(a.decode.weights);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a.requests));
  for (size_t r = 0; r < prompts.size(); ++r)
    for (int64_t t = 0; t < a.prompt_tokens; ++t)
      prompts[r].push_back(static_cast<int32_t>(Generator::bits(11, r * 1000 + static_cast<uint64_t>(t)) %
                                                static_cast<uint64_t>(c.vocab_size)));
  std::vector<decode::GenerateOptions> opts(prompts.size());
  for (size_t r = 0; r < opts.size(); ++r)
    opts[r].sampling.temperature = a.temperature, opts[r].sampling.top_k = a.top_k, opts[r].sampling.top_p = a.top_p,
    opts[r].sampling.seed = r, opts[r].max_new_tokens = a.new_tokens;
  using G = decode::BatchingGeneratorOptions::DecodeGraphs;
  struct Mode {
    const char* name;
    std::unique_ptr<decode::BatchingGenerator> gen;
    std::vector<double> seconds;
    std::vector<std::vector<int32_t>> out;
  };
  std::vector<Mode> modes;
  for (G g : {G::off, G::on}) {
    decode::BatchingGeneratorOptions bo;
    bo.max_batch = a.requests, bo.decode_graphs = g;
    modes.push_back({g == G::off ? "graphs-off" : "graphs-on", std::make_unique<decode::BatchingGenerator>(*model, bo), {}, {}});
    modes.back().out = modes.back().gen->generate_all(prompts, opts);  // (warm-up: captures the buckets)
  }
  for (int64_t r = 0; r < a.repeats; ++r)
    for (Mode& m : modes) {
      const auto t0 = std::chrono::steady_clock::now();
      m.out = m.gen->generate_all(prompts, opts);
      m.seconds.push_back(seconds_since(t0));
    }
  const double tokens = static_cast<double>(a.requests * a.new_tokens);
  nlohmann::json j = {{"model", a.model},       {"params", model->module().num_parameters()}, {"device", device.str()},
                      {"requests", a.requests}, {"prompt_tokens", a.prompt_tokens},           {"new_tokens", a.new_tokens},
                      {"threads", requested_threads()}, {"dtype", std::string(enum_name(a.decode.weights))},
                      {"temperature", a.temperature}, {"top_k", a.top_k}, {"top_p", a.top_p}};
  for (const Mode& m : modes) {
    const double med = time_stats(m.seconds).median;
    j[m.name] = {{"median_s", med}, {"tokens_per_s", tokens / med}, {"graph_steps", m.gen->graph_steps()},
                 {"graphs_captured", m.gen->graphs_captured()}, {"steps", m.gen->steps()}};
    if (!a.json)
      std::printf("qkv batched %-10s %s %s %lld requests x %lld tokens: median %.3f s -> %.0f tokens/s (%lld of %lld steps "
                  "bucketed, %lld graphs)\n",
                  m.name, a.model.c_str(), device.str().c_str(), static_cast<long long>(a.requests),
                  static_cast<long long>(a.new_tokens), med, tokens / med, static_cast<long long>(m.gen->graph_steps()),
                  static_cast<long long>(m.gen->steps()), static_cast<long long>(m.gen->graphs_captured()));
  }
  const double ratio = time_stats(modes[0].seconds).median / time_stats(modes[1].seconds).median;
  j["speedup"] = ratio;
  j["identical"] = modes[0].out == modes[1].out;
  if (a.json) std::printf("%s\n", j.dump().c_str());
  else std::printf("graphs on / off: %.2fx, tokens %s\n", ratio, modes[0].out == modes[1].out ? "identical" : "DIFFER");
  return 0;
}

}  // namespace

void add_bench_gpt(CLI::App* bench) {
  auto a = std::make_shared<GptBenchArgs>();
  CLI::App* gpt = bench->add_subcommand("gpt", "GPT training and generation throughput (the PyTorch reference workloads)");
  gpt->require_subcommand(1);
  CLI::App* tr = gpt->add_subcommand("train", "forward + backward + clip + AdamW tokens/s on random tokens");
  tr->add_option("--preset", a->preset, "small (nanoGPT CPU recipe) or big (6 layers, 384 dims, block 256)")
      ->capture_default_str()
      ->check(CLI::IsMember({"small", "big"}));
  add_train_bench_options(tr, a->iters, a->warmup, a->dtype, a->threads, a->json);
  tr->add_option("--dropout", a->dropout, "the model's dropout (0: none; nanoGPT's GPU recipe 0.2)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  register_runner(tr, [a] { return run_train(*a); });
  CLI::App* ge = gpt->add_subcommand("generate", "greedy decoding tokens/s, big model, batch 1, with and without KV cache");
  ge->add_option("--new-tokens", a->new_tokens, "tokens to generate")->capture_default_str()->check(greater_than_zero());
  ge->add_option("--repeats", a->repeats, "timed runs (median)")->capture_default_str()->check(greater_than_zero());
  add_decode_bench_options(ge, a->decode, a->no_naive, a->json);
  register_runner(ge, [a] { return run_generate(*a); });
  CLI::App* ba = gpt->add_subcommand(
      "batched", "continuous batching tokens/s: N requests at once, decoding graphs off and on (CUDA graphs on a GPU)");
  ba->add_option("--model", a->model, "big (6 layers, 384 dims, vocab 65) or gpt2 (GPT-2 small's shape: 12 layers, 768 dims, vocab 50257)")
      ->capture_default_str()
      ->check(CLI::IsMember({"big", "gpt2"}));
  ba->add_option("--requests", a->requests, "requests at once (the batch)")->capture_default_str()->check(CLI::Range(1, 4096));
  ba->add_option("--prompt-tokens", a->prompt_tokens, "each prompt's tokens (random)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  ba->add_option("--new-tokens", a->new_tokens, "tokens each request generates")->capture_default_str()->check(CLI::Range(1, 1000000));
  ba->add_option("--temperature", a->temperature, "0: greedy; > 0: sampled, each request with its own seed")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  ba->add_option("--top-k", a->top_k, "sampled: keep the k most likely tokens (0: off)")->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  ba->add_option("--top-p", a->top_p, "sampled: keep the nucleus of this probability (1: off)")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 1.0));
  ba->add_option("--repeats", a->repeats, "timed runs of each mode, alternating (median)")
      ->capture_default_str()
      ->check(greater_than_zero());
  add_device_option(ba, a->device, "decode");
  add_decode_options(ba, a->decode, kWeights | kThreads);
  ba->add_flag("--json", a->json, "one JSON object on stdout");
  register_runner(ba, [a] { return run_batched(*a); });
}

}  // namespace qkv::cli
