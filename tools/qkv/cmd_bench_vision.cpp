// qkv bench conv2d | convnet — the image workloads, for a side-by-side run with PyTorch
// (bench/convnet_vs_pytorch.py):
//
//   conv2d:         one convolution [N, C, H, W] * [O, C/groups, k, k] forward, and forward +
//                   backward (input and weight gradients); useful GFLOP/s = 2·N·O·H'·W'·C/groups·k²
//                   per pass, ×3 with the backward
//   convnet train:  the training step (forward, backward, AdamW) of the ConvNet a config describes
//                   (default: configs/fashion-mnist.json's) on random 28×28 images → images/s
#include <chrono>
#include <cstdio>
#include <fstream>

#include "bench_common.h"
#include "qkv/autograd/grad_mode.h"
#include "qkv/core/thread_budget.h"
#include "qkv/models/registry.h"
#include "qkv/ops.h"
#include "qkv/train/optim.h"

namespace qkv::cli {

namespace {

struct ConvBenchArgs {
  int64_t batch = 128, in = 32, out = 32, size = 28, kernel = 3, stride = 1, groups = 1;
  int64_t iters = 20, warmup = 3;
  int threads = 0;
  bool json = false;
};

int run_conv(const ConvBenchArgs& a) {
  use_threads(a.threads);
  Generator gen(0);
  const int64_t pad = a.kernel / 2;
  Tensor x = Tensor::randn({a.batch, a.in, a.size, a.size}, gen);
  Tensor w = Tensor::randn({a.out, a.in / a.groups, a.kernel, a.kernel}, gen, 0.f, 0.1f);
  const int64_t ho = (a.size + 2 * pad - a.kernel) / a.stride + 1;
  const double flop = 2.0 * a.batch * a.out * ho * ho * (a.in / a.groups) * a.kernel * a.kernel;
  std::vector<double> fwd, both;
  for (int64_t i = 0; i < a.warmup + a.iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    {
      NoGradGuard g;
      conv2d(x, w, Tensor(), a.stride, pad, 1, a.groups);
    }
    const double f = seconds_since(t0);
    x.requires_grad_(), w.requires_grad_();
    t0 = std::chrono::steady_clock::now();
    Tensor y = conv2d(x, w, Tensor(), a.stride, pad, 1, a.groups);
    y.backward(Tensor::ones(y.shape()));
    const double b = seconds_since(t0);
    x.zero_grad(), w.zero_grad();
    x = x.detach(), w = w.detach();
    if (i >= a.warmup) fwd.push_back(f), both.push_back(b);
  }
  const double tf = time_stats(fwd).median, tb = time_stats(both).median;
  if (a.json) {
    nlohmann::json j = {{"impl", "qkv"},       {"batch", a.batch},         {"in", a.in},
                        {"out", a.out},        {"size", a.size},           {"kernel", a.kernel},
                        {"stride", a.stride},  {"groups", a.groups},       {"threads", requested_threads()},
                        {"forward_ms", tf * 1e3}, {"forward_backward_ms", tb * 1e3},
                        {"gflops", flop / tf * 1e-9}, {"gflops_backward", 3 * flop / tb * 1e-9}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("conv2d N=%lld %lld→%lld %lldx%lld k=%lld stride %lld groups %lld, %d threads\n",
                (long long)a.batch, (long long)a.in, (long long)a.out, (long long)a.size, (long long)a.size,
                (long long)a.kernel, (long long)a.stride, (long long)a.groups, requested_threads());
    std::printf("  forward          %9.2f ms  %7.1f GFLOP/s\n", tf * 1e3, flop / tf * 1e-9);
    std::printf("  forward+backward %9.2f ms  %7.1f GFLOP/s\n", tb * 1e3, 3 * flop / tb * 1e-9);
  }
  return 0;
}

struct ConvNetBenchArgs {
  std::string config = "configs/fashion-mnist.json";
  std::vector<std::string> set;
  int64_t batch = 128, iters = 20, warmup = 3;
  AutocastDType dtype = AutocastDType::f32;
  int threads = 0;
  bool json = false;
};

int run_convnet_train(const ConvNetBenchArgs& a) {
  use_threads(a.threads);
  nlohmann::json config = load_config(a.config, {});
  nlohmann::json model = config.value("model", nlohmann::json::object());
  model.erase("type");
  model.update({{"in_channels", 1}, {"image_height", 28}, {"image_width", 28}, {"num_classes", 10}});
  for (const std::string& kv : a.set) apply_override(model, kv);
  Generator gen(0);
  const auto m = models::build_image_classifier("convnet", model, &gen);
  m->module().train();
  train::AdamOptions o;
  o.lr = 1e-3f;
  train::Adam opt(train::decay_matrices_only(m->module().named_parameters(), 0.05f), o);
  std::vector<double> times;
  double loss_value = 0;
  for (int64_t it = 0; it < a.warmup + a.iters; ++it) {
    Generator g(static_cast<uint64_t>(it));
    const Tensor x = Tensor::rand({a.batch, 1, 28, 28}, g);
    std::vector<int32_t> y(static_cast<size_t>(a.batch));
    for (int64_t i = 0; i < a.batch; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>(Generator::bits(it, i) % 10);
    const Tensor labels = Tensor::from_ints(y, {a.batch});
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss;
    {
      Autocast autocast(a.dtype);
      loss = m->loss(x, labels, 0.1f);
      loss.backward();
    }
    opt.step();
    const double dt = seconds_since(t0);
    loss_value = loss.item();
    if (it >= a.warmup) times.push_back(dt);
  }
  const TimeStats st = time_stats(times);
  const double img = static_cast<double>(a.batch);
  if (a.json) {
    nlohmann::json j = {{"impl", "qkv"},          {"model", m->describe()},   {"threads", requested_threads()},
                        {"params", m->module().num_parameters()},            {"batch", a.batch},
                        {"iters", a.iters},       {"mean_ms", st.mean * 1e3}, {"median_ms", st.median * 1e3},
                        {"images_per_s", img / st.mean}, {"images_per_s_median", img / st.median},
                        {"final_loss", loss_value}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("qkv convnet (%s) params=%.2fM threads=%d batch=%lld: mean %.1f ms/step (median %.1f) -> %.0f images/s\n",
                m->describe().c_str(), static_cast<double>(m->module().num_parameters()) / 1e6, requested_threads(),
                static_cast<long long>(a.batch), st.mean * 1e3, st.median * 1e3, img / st.mean);
  }
  return 0;
}

}  // namespace

void add_bench_vision(CLI::App* bench) {
  auto c = std::make_shared<ConvBenchArgs>();
  CLI::App* conv = bench->add_subcommand("conv2d", "Time one conv2d forward and forward+backward");
  conv->add_option("--batch,-N", c->batch, "images")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--in", c->in, "input channels")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--out", c->out, "output channels")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--size", c->size, "height = width")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--kernel,-k", c->kernel, "kernel size (padding k/2)")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--stride", c->stride, "stride")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--groups", c->groups, "groups")->capture_default_str()->check(greater_than_zero());
  conv->add_option("--iters", c->iters, "timed iterations (median reported)")->capture_default_str()->check(greater_than_zero());
  add_threads_option(conv, c->threads);
  conv->add_flag("--json", c->json, "one JSON object on stdout");
  register_runner(conv, [c] { return run_conv(*c); });

  CLI::App* net = bench->add_subcommand("convnet", "Time the ConvNet's training step");
  net->require_subcommand(1);
  auto n = std::make_shared<ConvNetBenchArgs>();
  CLI::App* tr = net->add_subcommand("train", "forward, backward and AdamW on random 28×28 images");
  tr->add_option("--config", n->config, "the config whose model section to time")->capture_default_str();
  tr->add_option("--set", n->set, "override a model hyper-parameter, e.g. --set non_local=[1] (repeatable)");
  tr->add_option("--batch", n->batch, "images per step")->capture_default_str()->check(greater_than_zero());
  add_train_bench_options(tr, n->iters, n->warmup, n->dtype, n->threads, n->json);
  register_runner(tr, [n] { return run_convnet_train(*n); });
}

}  // namespace qkv::cli
