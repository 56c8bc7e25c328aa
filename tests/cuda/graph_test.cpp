// CUDA graphs (qkv/core/cuda.h's Graph): a captured piece of work replayed with new inputs copied into
// the tensors it reads gives what running it again gives, bit for bit; its deferred checks (an id
// outside the vocabulary) are reported at the wait after the replay that failed them, and the graph
// goes on working; the work's memory stays the graph's while other work allocates; and a capture
// that waits for the GPU or copies from the host is refused, naming the call. Each test skips where
// this build has no CUDA backend or this machine no GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/core/cuda.h"
#include "qkv/ops.h"

namespace qkv {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class CudaGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_built()) GTEST_SKIP() << "this build has no CUDA backend (scripts/build.sh builds one where the CUDA toolkit is)";
    if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  }
  static std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).contiguous().to_vector(); }
};

// y = log_softmax(relu(x Wᵀ + b) + E[ids]): replays with new x and ids equal eager runs on them.
TEST_F(CudaGraph, ReplaysWithNewInputsAsRunningAgain) {
  Generator g(3);
  const Tensor W = Tensor::randn({24, 16}, g).to(Device::cuda()), b = Tensor::randn({24}, g).to(Device::cuda()),
               E = Tensor::randn({50, 24}, g).to(Device::cuda());
  Tensor x = Tensor::zeros({5, 16}, DType::f32, Device::cuda()), ids = Tensor::zeros({5}, DType::i32, Device::cuda());
  auto work = [&] { return log_softmax(relu(linear(x, W, b)) + embedding(ids, E), -1); };
  cuda::Graph graph;
  Tensor y;
  graph.capture([&] { y = work(); });
  EXPECT_TRUE(graph.captured());
  for (int round = 0; round < 3; ++round) {
    Generator r(10 + round);
    const Tensor x_now = Tensor::randn({5, 16}, r);
    const Tensor ids_now = Tensor::from_ints({round, 7, 49, 3 * round, 1}, {5});
    x.copy_(x_now), ids.copy_(ids_now);
    graph.replay();
    const std::vector<float> replayed = host(y);
    EXPECT_EQ(replayed, host(work())) << "round " << round;
    // and other work between replays (allocating and freeing) leaves the graph's tensors alone
    for (int i = 0; i < 4; ++i) Tensor scratch = Tensor::randn({64, 64}, r).to(Device::cuda()) * 2.f;
    graph.replay();
    EXPECT_EQ(host(y), replayed) << "round " << round << ", replayed again";
  }
  EXPECT_NE(error_of([&] { graph.capture([&] { work(); }); }).find("already captured"), std::string::npos);
}

// A replayed embedding's bad id is reported at the next wait (once), and later replays work.
TEST_F(CudaGraph, ChecksOfAReplayAreReportedAtTheNextWait) {
  Generator g(4);
  const Tensor E = Tensor::randn({50, 8}, g).to(Device::cuda());
  Tensor ids = Tensor::zeros({3}, DType::i32, Device::cuda());
  cuda::Graph graph;
  Tensor y;
  graph.capture([&] { y = embedding(ids, E); });
  ids.copy_(Tensor::from_ints({1, 2, 50}, {3}));
  graph.replay();
  const std::string bad = error_of([&] { host(y); });
  EXPECT_NE(bad.find("embedding: id 50 at position 2 is outside the vocabulary [0, 50)"), std::string::npos) << bad;
  EXPECT_EQ(error_of([&] { host(y); }), "") << "reported once";
  ids.copy_(Tensor::from_ints({4, 5, 6}, {3}));
  graph.replay();
  EXPECT_EQ(host(y), host(embedding(ids, E)));
  EXPECT_EQ(error_of([] { cuda::synchronize(); }), "");
}

// Emptying the cache (cuda::empty_cache, and the allocator's retry after cudaMalloc fails) returns no
// block of a live graph's pool: its temporaries, freed inside the capture, are what its kernels write at
// every replay. Before 2026-12-02 they went back to the driver, and the next replay wrote freed memory.
TEST_F(CudaGraph, EmptyingTheCacheKeepsALiveGraphsTemporaries) {
  Generator g(5);
  const Tensor W = Tensor::randn({256, 256}, g).to(Device::cuda());
  Tensor x = Tensor::zeros({64, 256}, DType::f32, Device::cuda());
  // three temporaries of 64 KB (h, relu(h), the product) between the input and y
  auto work = [&] { return sum(relu(linear(relu(linear(x, W)), W)), {-1}); };
  Tensor y;
  {
    cuda::Graph graph;
    graph.capture([&] { y = work(); });
    const int64_t kept = cuda::memory_reserved(0);
    cuda::empty_cache();
    EXPECT_EQ(cuda::memory_reserved(0), kept) << "the graph's pool went back to the driver";
    for (int round = 0; round < 3; ++round) {
      Generator r(20 + round);
      x.copy_(Tensor::randn({64, 256}, r));
      // other work that takes fresh memory where the freed blocks were
      std::vector<Tensor> scratch;
      for (int i = 0; i < 8; ++i) scratch.push_back(Tensor::full({64, 256}, 7.f).to(Device::cuda()));
      graph.replay();
      EXPECT_EQ(host(y), host(work())) << "round " << round;
      for (const Tensor& t : scratch) EXPECT_EQ(host(t), std::vector<float>(64 * 256, 7.f)) << "round " << round;
      cuda::empty_cache();
    }
  }
  // the graph gone, its pool is the default stream's cache, and emptying it returns it
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(0), cuda::memory_allocated(0));
}

// A capture that reads back to the host, or copies from it, is refused with the reason; nothing is
// captured, and the stream works on.
TEST_F(CudaGraph, WaitsAndHostCopiesAreRefused) {
  const Tensor x = Tensor::ones({4}).to(Device::cuda());
  for (auto work : std::vector<std::function<void()>>{[&] { (x * 2.f).to(Device::cpu()); },
                                                      [&] { Tensor::ones({4}).to(Device::cuda()); },
                                                      [&] { cuda::synchronize(); }}) {
    cuda::Graph graph;
    const std::string e = error_of([&] { graph.capture(work); });
    EXPECT_NE(e.find("during a CUDA graph capture"), std::string::npos) << e;
    EXPECT_FALSE(graph.captured());
    EXPECT_FALSE(cuda::is_capturing());
    EXPECT_NE(error_of([&] { graph.replay(); }).find("nothing captured"), std::string::npos);
  }
  EXPECT_EQ(host(x * 3.f), std::vector<float>(4, 3.f));
}

}  // namespace
}  // namespace qkv
