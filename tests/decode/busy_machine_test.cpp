// Decoding and training on a busy machine (issues 27 and 47, core/thread_budget.h): with a sibling
// thread spinning on one core, the thread budget counts it, greedy decoding on 2 threads is not
// more than 1.5× slower than on 1 (without the budget it was 13–17× slower: docs/BENCHMARKS.md),
// and the trainer runs each step and each evaluation on the cores left.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "qkv/core/parallel.h"
#include "qkv/core/thread_budget.h"
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
      volatile uint64_t x = 0;
      while (!stop_.load(std::memory_order_relaxed)) x = x + 1;
    }) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~Spinner() {
    stop_ = true;
    t_.join();
  }

 private:
  std::atomic<bool> stop_{false};
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
  // the best of 5 each, alternated: what the machine's other tenants take comes and goes, the
  // budget's effect does not (ctest runs this test alone: tests/CMakeLists.txt)
  double one = 1e9, two = 1e9;
  for (int r = 0; r < 5; ++r) one = std::min(one, seconds(1)), two = std::min(two, seconds(2));
  set_num_threads(2);
  EXPECT_LE(two, 1.5 * one) << "best of 5: 1 thread " << one << " s, 2 threads " << two << " s";
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

}  // namespace
}  // namespace qkv
