// Decoding and training on a busy machine (issues 27 and 47, core/thread_budget.h): with a sibling
// thread spinning on one core, the thread budget counts it, greedy decoding on 2 threads puts no
// work on the second thread and is not more than 1.5× slower than on 1 (without the budget it was
// 13–17× slower when the budget was built: docs/BENCHMARKS.md; 1.43× on a Zen 4 in 2026-11),
// and the trainer runs each step and each evaluation on the cores left — oneDNN's convolutions
// included, which keep the thread count they were made with.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "qkv/core/parallel.h"
#include "qkv/core/thread_budget.h"
#include "qkv/ops/activation.h"
#include "qkv/ops/conv.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"
#include "qkv/train/lm_task.h"
#include "testing.h"

namespace qkv {
namespace {

// A thread that keeps one core busy until destroyed.
class Spinner {
 public:
  Spinner() : t_([this] {
      tid_ = gettid();
      volatile uint64_t x = 0;
      while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
    }) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~Spinner() {
    stop_ = true;
    t_.join();
  }
  pid_t tid() const { return tid_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<pid_t> tid_{0};
  std::thread t_;
};

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  return CPU_COUNT(&set);
}

TEST(ThreadBudget, CountsABusySiblingAndGivesItsCoreUp) {
  const int n = cores();
  if (n < 2) GTEST_SKIP() << "one core: nothing to share";
  Spinner busy;
  EXPECT_LE(threads_free_now(n), n - 1);
  EXPECT_GE(threads_free_now(n), 1);
  EXPECT_EQ(threads_free_now(1), 1);
  const int before = num_threads();
  {
    ThreadBudget budget;
    EXPECT_LE(num_threads(), std::max(1, before - 1));
  }
  EXPECT_EQ(num_threads(), before) << "the count is put back";
}

// Beside a busy core, an answer the ticks confirm holds for their 50 ms window: the asks in it read
// nothing (they took ~350 µs each: three looks 50 µs of sleep apart, 9 % of a greedy sentence asked
// batch by batch), while the first ask always takes at least those two sleeps. Once the busy task
// ends, the next ask after the window looks again (a quiet answer is never held; on a machine busy
// from outside, that ask's looks show it was not held).
TEST(ThreadBudget, ABusyAnswerHoldsForTheTicksWindowAndIsLetGoAfter) {
  const int n = cores();
  if (n < 2) GTEST_SKIP() << "one core: nothing to share";
  using clock = std::chrono::steady_clock;
  auto micros = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  {
    Spinner busy;
    // the ticks' window known (its team's first 50 ms have none) and a busy answer given
    bool busy_seen = false;
    for (const auto end = clock::now() + std::chrono::seconds(2); clock::now() < end && !busy_seen;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));  // past any hold: a fresh ask
      const auto t0 = clock::now();
      busy_seen = threads_free_now(n) <= n - 1;
      if (busy_seen) EXPECT_GE(micros(t0, clock::now()), 100) << "an unheld busy answer takes its three looks";
    }
    ASSERT_TRUE(busy_seen) << "the spinner was never counted";
    std::vector<double> asks;
    for (int i = 0; i < 21; ++i) {
      const auto t0 = clock::now();
      EXPECT_LE(threads_free_now(n), n - 1);
      asks.push_back(micros(t0, clock::now()));
    }
    std::nth_element(asks.begin(), asks.begin() + 10, asks.end());
    EXPECT_LT(asks[10], 50) << "the asks inside the window looked again (median " << asks[10] << " µs)";
  }
  // Let go: past the window the next ask looks again — it finds every core free, or, where something
  // outside the test keeps a core busy (a busy CI machine), it takes its three looks to say so, where
  // a held answer would come back at once.
  bool let_go = false;
  for (const auto end = clock::now() + std::chrono::seconds(2); clock::now() < end && !let_go;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    const auto t0 = clock::now();
    let_go = threads_free_now(n) == n || micros(t0, clock::now()) >= 100;
  }
  EXPECT_TRUE(let_go) << "the busy answer outlived the spinner (held past its window)";
}

// Ops called one by one, outside any scope (a C++ loop, a Python model): each CPU dispatch asks at
// most every 50 ms. Beside a busy core the count drops to the free cores while the count asked for
// stays the user's; a scope starts from the user's count and puts it back; with the budget off the
// next look after 50 ms gives the count asked for back.
TEST(ThreadBudget, OpsCalledOneByOneGiveABusyCoreUp) {
  const int n = cores();
  if (n < 2) GTEST_SKIP() << "one core: nothing to share";
  const int before = requested_threads();
  set_num_threads(n);
  EXPECT_EQ(num_threads(), n);
  const Tensor x = Tensor::ones({256, 1024});
  auto ops_for = [&](double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) relu(x);
  };
  {
    Spinner busy;
    ops_for(0.3);
    EXPECT_LE(num_threads(), n - 1) << "ops ran on the busy core too";
    EXPECT_EQ(requested_threads(), n) << "the count asked for is the user's";
    {
      const ThreadBudget scope;
      EXPECT_LE(scope.threads(), n - 1);
      EXPECT_EQ(requested_threads(), scope.threads()) << "inside a scope, the scope's count";
    }
    EXPECT_EQ(num_threads(), n) << "a scope puts back the count asked for, not the lowered one";
    ops_for(0.3);
    EXPECT_LE(num_threads(), n - 1);
    const FixedThreads fixed;
    ops_for(0.1);
    EXPECT_EQ(num_threads(), n) << "with the budget off, the count asked for";
  }
  set_num_threads(1);
  EXPECT_EQ(requested_threads(), 1);
  ops_for(0.1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(before);
}

// CPU time (clock ticks: utime + stime) of this process's threads other than the calling one
// (and than `besides`, when given).
long other_threads_ticks(pid_t besides = 0) {
  long sum = 0;
  const std::string self = std::to_string(gettid());
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    if (e.path().filename() == self || e.path().filename() == std::to_string(besides)) continue;
    std::ifstream f(e.path() / "stat");
    const std::string line((std::istreambuf_iterator<char>(f)), {});
    const size_t close = line.rfind(')');  // "tid (name) S …": fields 14 and 15 are utime, stime
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 15 && rest >> field; ++i)
      if (i >= 14) sum += std::atol(field.c_str());
  }
  return sum;
}

// The "steal" field of /proc/stat's "cpu" line: clock ticks the host ran something else while this
// machine's CPUs wanted to run (−1: unknown).
long long stolen_ticks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  long long v[8];
  if (!(f >> cpu) || cpu != "cpu") return -1;
  for (long long& x : v)
    if (!(f >> x)) return -1;
  return v[7];
}

TEST(ThreadBudget, TwoThreadsHoldTheirLatencyBesideABusyCore) {
  if (cores() != 2) GTEST_SKIP() << "the issue's case is a 2-core machine";
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const decode::Translator tr(*t.model, *t.tokenizer);
  const std::vector<std::string> lines = {"The cat sat on the mat.", "Where is the station?", "I love you.",
                                          "She reads a book every week.", "We have to go home now."};
  decode::TranslateOptions o;
  o.beam_size = 1, o.batch_size = 1;
  Spinner busy;
  auto seconds = [&](int threads) {
    set_num_threads(threads);
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& l : lines) tr.translate({l}, o);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  seconds(2);  // warm up
  // The budget's choice, seen without a clock: beside the busy core the 2-thread runs put no work on
  // a second thread — the process's threads but this one and the spinner run (almost) no ticks.
  // Then its effect, timed: the best of 5 each, alternated — what the machine's other tenants take
  // comes and goes, the budget's effect does not (ctest runs this test alone: tests/CMakeLists.txt).
  // A host that slows the VM for seconds (a loaded CI machine: seen once, best 1 thread 0.086 s,
  // 2 threads 0.189 s, with the budget counting 1 free core throughout) gets up to three rounds. The
  // ticks are what catch a budget that fails: with QKV_THREAD_BUDGET=off the second thread ran 47
  // ticks here while the time was only 1.43× slower (13–17× when the budget was built:
  // docs/BENCHMARKS.md). A failure says what the
  // budget saw: its count before each 2-thread run, the other threads' ticks and the machine's stolen
  // time (a host that takes the VM's cores away shows there, when it reports it).
  std::ostringstream rounds;
  bool held = false;
  long others_ran = 0;
  for (int round = 0; round < 3 && !held; ++round) {
    double one = 1e9, two = 1e9;
    std::ostringstream seen;
    const long long steal0 = stolen_ticks();
    for (int r = 0; r < 5; ++r) {
      one = std::min(one, seconds(1));
      set_num_threads(2);
      seen << threads_free_now(2) << ' ';
      const long ticks0 = other_threads_ticks(busy.tid());
      two = std::min(two, seconds(2));
      others_ran += other_threads_ticks(busy.tid()) - ticks0;
    }
    held = two <= 1.5 * one;
    rounds << "\n  round " << round + 1 << ": best of 5, 1 thread " << one << " s, 2 threads " << two
           << " s; the budget's counts before the 2-thread runs: " << seen.str()
           << "; ticks stolen by the host: " << stolen_ticks() - steal0;
  }
  set_num_threads(2);
  EXPECT_TRUE(held) << "2 threads more than 1.5× slower than 1 beside a busy core:" << rounds.str();
  EXPECT_LE(others_ran, 3) << "a second thread ran " << others_ran << " ticks of the 2-thread runs:" << rounds.str();
}

// The LM task, noting the threads each micro-step and evaluation runs on.
class CountingTask : public train::LMTask {
 public:
  using LMTask::LMTask;
  train::StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override {
    step_threads.push_back(num_threads());
    return LMTask::train_micro_step(step, micro, accum);
  }
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override {
    eval_threads.push_back(num_threads());
    return LMTask::evaluate(step);
  }
  std::vector<int> step_threads, eval_threads;
};

TEST(ThreadBudget, TrainingStepsAndEvaluationsGiveABusyCoreUp) {
  const int n = cores();
  if (n < 2) GTEST_SKIP() << "one core: nothing to share";
  testing::TempDir d("busy-training");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "abcdefgh\n";
  std::ofstream(d.path / "text.txt") << text;
  const nlohmann::json cfg = {
      {"task", "lm"},
      {"data", {{"path", (d.path / "text.txt").string()}}},
      {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 16}}},
      {"train", {{"max_iters", 6}, {"batch_size", 4}, {"eval_interval", 3}, {"eval_iters", 1}, {"log_interval", 1},
                 {"checkpoint_interval", 0}}}};
  CountingTask task(cfg, "");
  train::TrainerOptions o;
  o.out_dir = (d.path / "run").string(), o.full_config = cfg, o.quiet = true;
  const int before = num_threads();
  set_num_threads(n);
  {
    Spinner busy;
    train::run_training(task, task.train_config(), o);
  }
  set_num_threads(before);
  ASSERT_EQ(task.step_threads.size(), 6u);
  ASSERT_EQ(task.eval_threads.size(), 3u);  // steps 0, 3 and the end
  for (int t : task.step_threads) EXPECT_LE(t, n - 1) << "a step ran on the busy core too";
  for (int t : task.eval_threads) EXPECT_LE(t, n - 1) << "an evaluation ran on the busy core too";
}


// A convolution made while 2 threads were allowed runs on 1 once only 1 is (the thread budget's
// choice beside a busy core): its primitives are kept per thread count (kernels/cpu/conv.cpp).
// Before, the cached oneDNN convolution went on splitting its work over the 2 threads it was made
// for, and a ConvNet trained beside a busy core at 0.80× its 1-thread speed.
TEST(ThreadBudget, AConvolutionRunsOnTheThreadsAllowedWhenItRuns) {
  if (cores() < 2) GTEST_SKIP() << "one core: nothing to share";
  autograd::NoGradGuard no_grad;
  Generator g(5);
  const Tensor x = Tensor::randn({32, 16, 28, 28}, g), w = Tensor::randn({32, 16, 3, 3}, g);
  const int before = num_threads();
  set_num_threads(2);
  const Tensor two = conv2d(x, w, Tensor(), 1, 1);  // its primitives made for 2 threads
  set_num_threads(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (the team's spin-wait long over)
  const long t0 = other_threads_ticks();
  Tensor one;
  for (int i = 0; i < 100; ++i) one = conv2d(x, w, Tensor(), 1, 1);  // ~0.3 s on 1 thread
  const long used = other_threads_ticks() - t0;
  set_num_threads(before);
  EXPECT_LE(used, 2) << "another thread ran " << used << " ticks of 100 convolutions on 1 thread";
  EXPECT_TENSOR_NEAR(one, two, 1e-4);
}

}  // namespace
}  // namespace qkv
