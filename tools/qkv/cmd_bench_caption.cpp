// qkv bench captioner — the captioner's training step, for a side-by-side run with its PyTorch twin
// (bench/captioner_vs_pytorch.py): forward (ConvNet grid, GRU decoder attending at every word),
// backward and AdamW on random 96×96 pictures and random captions of a fixed length → images/s.
#include <chrono>
#include <cstdio>

#include "bench_common.h"
#include "qkv/core/thread_budget.h"
#include "qkv/models/registry.h"
#include "qkv/ops.h"
#include "qkv/train/optim.h"

namespace qkv::cli {

namespace {

struct CaptionBenchArgs {
  std::string config = "configs/captions.json";
  std::vector<std::string> set;
  int64_t batch = 32, length = 16, vocab = 29, side = 96, iters = 20, warmup = 3;
  AutocastDType dtype = AutocastDType::f32;
  int threads = 0;
  bool json = false;
};

int run_caption_train(const CaptionBenchArgs& a) {
  use_threads(a.threads);
  nlohmann::json model = load_config(a.config, {}).value("model", nlohmann::json::object());
  model.erase("type");
  model.update({{"in_channels", 1}, {"image_height", a.side}, {"image_width", a.side}, {"vocab_size", a.vocab}});
  for (const std::string& kv : a.set) apply_override(model, kv);
  Generator gen(0);
  const auto m = models::build_seq2seq("captioner", model, &gen);
  m->module().train();
  train::AdamOptions o;
  o.lr = 1e-3f;
  train::Adam opt(train::decay_matrices_only(m->module().named_parameters(), 0.01f), o);
  const int64_t B = a.batch, T = a.length + 1;  // BOS w₁ … w_n | w₁ … w_n EOS
  std::vector<double> times;
  double loss_value = 0;
  for (int64_t it = 0; it < a.warmup + a.iters; ++it) {
    Generator g(static_cast<uint64_t>(it));
    const Tensor x = Tensor::rand({B, 1, a.side, a.side}, g);
    std::vector<int32_t> in(static_cast<size_t>(B * T)), out(static_cast<size_t>(B * T));
    for (int64_t i = 0; i < B; ++i)
      for (int64_t t = 0; t < T; ++t) {
        const auto w = static_cast<int32_t>(4 + Generator::bits(it, static_cast<uint64_t>(i * T + t)) % (a.vocab - 4));
        out[static_cast<size_t>(i * T + t)] = t + 1 == T ? 3 : w;
        if (t + 1 < T) in[static_cast<size_t>(i * T + t + 1)] = w;
      }
    for (int64_t i = 0; i < B; ++i) in[static_cast<size_t>(i * T)] = 2;
    const Tensor tin = Tensor::from_ints(in, {B, T}), tout = Tensor::from_ints(out, {B, T});
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      Autocast autocast(a.dtype);
      loss = m->loss(x, tin, tout);
      loss.backward();
    }
    opt.step();
    const double dt = seconds_since(t0);
    loss_value = loss.item();
    if (it >= a.warmup) times.push_back(dt);
  }
  const TimeStats st = time_stats(times);
  const double img = static_cast<double>(B);
  if (a.json) {
    nlohmann::json j = {{"impl", "qkv"},          {"model", m->describe()},   {"threads", requested_threads()},
                        {"params", m->module().num_parameters()},            {"batch", B},
                        {"length", a.length},     {"iters", a.iters},         {"mean_ms", st.mean * 1e3},
                        {"median_ms", st.median * 1e3}, {"images_per_s", img / st.mean},
                        {"images_per_s_median", img / st.median},           {"final_loss", loss_value}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("qkv captioner (%s) params=%.2fM threads=%d batch=%lld × %lld words: mean %.1f ms/step (median %.1f) "
                "-> %.0f images/s\n",
                m->describe().c_str(), static_cast<double>(m->module().num_parameters()) / 1e6, requested_threads(),
                static_cast<long long>(B), static_cast<long long>(a.length), st.mean * 1e3, st.median * 1e3,
                img / st.mean);
  }
  return 0;
}

}  // namespace

void add_bench_caption(CLI::App* bench) {
  auto a = std::make_shared<CaptionBenchArgs>();
  CLI::App* cap = bench->add_subcommand("captioner", "Time the captioner's training step (forward, backward, AdamW)");
  cap->add_option("--config", a->config, "the config whose model section to time")->capture_default_str();
  cap->add_option("--set", a->set, "override a model hyper-parameter, e.g. --set attention=none (repeatable)");
  cap->add_option("--batch", a->batch, "pictures per step")->capture_default_str()->check(greater_than_zero());
  cap->add_option("--length", a->length, "words per caption")->capture_default_str()->check(between(1, 200));
  cap->add_option("--vocab", a->vocab, "vocabulary size")->capture_default_str()->check(between(5, 100000));
  cap->add_option("--side", a->side, "picture height = width")->capture_default_str()->check(between(8, 1024));
  add_train_bench_options(cap, a->iters, a->warmup, a->dtype, a->threads, a->json);
  register_runner(cap, [a] { return run_caption_train(*a); });
}

}  // namespace qkv::cli
