// The pieces of data-parallel training that run in one process: the post-accumulate-grad hook the
// reducer listens to, the sharded random stream (each shard's dropout = its rows of one process's),
// the shard arithmetic, and the gradient reducer's buckets over stand-in communicators.
// tests/distributed/mpi_train_test.cpp runs the real thing under mpirun.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "qkv/train/data_parallel.h"
#include "qkv/train/trainer.h"
#include "testing.h"

namespace qkv::train {
namespace {

using testing::param;

TEST(PostAccumulateGradHook, RunsOnceWithTheWholeGradient) {
  // w is used twice; the hook must see both contributions summed, once per backward.
  Tensor w = param({3}, 1), x = param({3}, 2), unused = param({3}, 3);
  std::vector<std::vector<float>> seen;
  int unused_calls = 0;
  w.register_post_accumulate_grad_hook([&] { seen.push_back(w.grad().to_vector()); });
  const int h = unused.register_post_accumulate_grad_hook([&] { ++unused_calls; });
  Tensor y = add(sum(mul(w, x)), sum(mul(w, w)));  // dy/dw = x + 2w
  y.backward();
  ASSERT_EQ(seen.size(), 1u);
  const auto xv = x.detach().to_vector(), wv = w.detach().to_vector();
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(seen[0][i], xv[i] + 2 * wv[i]);
  EXPECT_EQ(unused_calls, 0);  // no gradient reached it: no hook
  // a second pass accumulates, and the hook sees the sum
  add(sum(mul(w, x)), sum(mul(w, w))).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FLOAT_EQ(seen[1][0], 2 * (xv[0] + 2 * wv[0]));
  // autograd::grad returns gradients instead of accumulating: no hook
  autograd::grad({sum(mul(w, x))}, {Tensor::ones({})}, {w});
  EXPECT_EQ(seen.size(), 2u);
  unused.remove_post_accumulate_grad_hook(h);
  EXPECT_TRUE(unused.impl().post_accumulate_grad_hooks.empty());
  EXPECT_NE(testing::error_of([&] { mul(w, x).register_post_accumulate_grad_hook([] {}); }).find("leaf"),
            std::string::npos);
}

TEST(PostAccumulateGradHook, RunsBeforeTheRestOfBackward) {
  // y = sum(b · (a · x)): backward reaches b's gradient before a's, and b's hook runs before a's
  // gradient exists — what lets the reducer send early buckets.
  Tensor a = param({4}, 1), b = param({4}, 2), x = param({4}, 3);
  bool a_had_grad_when_b_ready = true;
  b.register_post_accumulate_grad_hook([&] { a_had_grad_when_b_ready = a.grad().defined(); });
  sum(mul(b, mul(a, x))).backward();
  EXPECT_FALSE(a_had_grad_when_b_ready);
}

TEST(DataShard, RowsCoverTheBatchOnce) {
  for (int world : {1, 2, 3, 4, 7})
    for (int64_t B : {1, 5, 12, 100}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        DataShard s{r, world};
        EXPECT_EQ(s.first(B), next);
        next += s.count(B);
      }
      EXPECT_EQ(next, B);
    }
}

TEST(ShardedGenerator, EachShardDrawsItsRowsOfOneProcessDraws) {
  // dropout of a [6, 5] batch in one process vs rows [0, 2), [2, 4), [4, 6) on three shards,
  // twice in a row (the stream must move past the whole batch each time)
  Tensor x = Tensor::ones({6, 5});
  Generator whole(7);
  std::vector<float> one;
  for (int rep = 0; rep < 2; ++rep) {
    auto v = dropout(x, 0.5f, true, &whole).to_vector();
    one.insert(one.end(), v.begin(), v.end());
  }
  std::vector<float> sharded(one.size());
  for (int r = 0; r < 3; ++r) {
    Generator g(7);
    g.set_shard(static_cast<uint64_t>(2 * r), 2, 6);
    for (int rep = 0; rep < 2; ++rep) {
      auto v = dropout(Tensor::ones({2, 5}), 0.5f, true, &g).to_vector();
      std::copy(v.begin(), v.end(), sharded.begin() + rep * 30 + r * 10);
    }
    EXPECT_EQ(g.counter(), whole.counter());
  }
  EXPECT_EQ(sharded, one);
  Generator g(7);
  g.set_shard(0, 4, 6);
  EXPECT_NE(testing::error_of([&] { g.reserve(10); }).find("equal rows"), std::string::npos);
}

// A stand-in for N identical ranks: the sum of N copies is N times each value.
class Replicated final : public distributed::Communicator {
 public:
  explicit Replicated(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  int local_size() const override { return n_; }
  void all_reduce_sum(float* d, int64_t n, const std::atomic<bool>*) override {
    for (int64_t i = 0; i < n; ++i) d[i] *= static_cast<float>(n_);
    sizes.push_back(n);
    ++calls;
  }
  void all_reduce_sum(double* d, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) d[i] *= n_;
  }
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int) override { std::abort(); }
  std::string describe() const override { return "replicated"; }
  std::vector<int64_t> sizes;
  std::atomic<int> calls{0};

 private:
  int n_;
};

TEST(GradientReducer, SumsEveryGradientAndKeepsUnreachedOnesUndefined) {
  Tensor a = param({300}, 1), b = param({200}, 2), c = param({100}, 3), unused = param({50}, 4);
  Replicated comm(3);
  // 1 KB buckets, in reverse order: [unused 200 B, c 400 B] [b 800 B] [a 1200 B]
  GradientReducer r({a, b, c, unused}, comm, 1024);
  EXPECT_EQ(r.buckets(), 3);
  for (int step = 0; step < 2; ++step) {
    a.zero_grad(), b.zero_grad(), c.zero_grad();
    r.sync_next_backward(true);
    add(add(sum(mul(a, a)), sum(mul(b, b))), sum(mul(c, c))).backward();
    r.finish();
    EXPECT_TENSOR_NEAR(a.grad(), mul(a.detach(), 6.f), 1e-6);  // 3 ranks × 2a
    EXPECT_TENSOR_NEAR(c.grad(), mul(c.detach(), 6.f), 1e-6);
    EXPECT_FALSE(unused.grad().defined());
  }
  EXPECT_EQ(r.gradient_bytes(), static_cast<int64_t>((650 + 4) * sizeof(float)));  // + one flag per parameter
}

TEST(GradientReducer, SendsBucketsDuringBackwardOnlyInOverlapMode) {
  for (auto mode : {GradientReducer::Mode::overlap, GradientReducer::Mode::after_backward}) {
    Tensor a = param({256}, 1), b = param({256}, 2);
    Replicated comm(2);
    GradientReducer r({a, b}, comm, 1024, mode);  // one bucket each
    r.sync_next_backward(true);
    sum(mul(b, mul(a, a))).backward();
    // overlap: both buckets were complete when backward returned, so the thread sends them
    // without finish(); after_backward: nothing goes before finish()
    const auto t0 = std::chrono::steady_clock::now();
    const auto patience = std::chrono::milliseconds(mode == GradientReducer::Mode::overlap ? 2000 : 100);
    while (comm.calls < 2 && std::chrono::steady_clock::now() - t0 < patience)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(comm.calls.load(), mode == GradientReducer::Mode::overlap ? 2 : 0);
    r.finish();
    EXPECT_EQ(comm.calls.load(), 2);
  }
}

TEST(GradientReducer, AccumulationSumsOnlyOnTheLastMicroBatch) {
  Tensor w = param({10}, 1);
  Replicated comm(2);
  GradientReducer r({w}, comm);
  r.sync_next_backward(false);
  sum(w).backward();
  r.sync_next_backward(true);
  sum(w).backward();
  r.finish();
  EXPECT_EQ(comm.calls.load(), 1);
  EXPECT_TENSOR_NEAR(w.grad(), Tensor::full({10}, 4.f), 0);  // (1 + 1) × 2 ranks
}

}  // namespace
}  // namespace qkv::train
