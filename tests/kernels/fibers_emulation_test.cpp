// The emulation's own runtime (tests/kernels/cuda_emulation.h), on which every *_emulation_test rests: a
// block's threads are fibers on one OS thread, each with its own stack, switched at every barrier. What
// the kernels' tests take for granted is checked here: a thread's locals survive the switches; the
// threads of one barrier meet there whatever order they arrive in; a barrier some never reach is
// reported, not hung; a thread's exception reaches the launch's caller while the other threads, left
// waiting, are dropped (not unwound: nothing of theirs runs again); and after either the runtime
// launches again as new. Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"  // QKV_SHARED

namespace {

namespace em = qkv::emulation;

// Each thread fills a local array, then 16 rounds: each adds its array into a shared row, the block
// meets, each reads back its neighbour's slot and folds it into its own locals, the block meets again.
// Out: each thread's final sum. The host computes the same rounds in lockstep.
__global__ void locals_across_barriers(int64_t* out, int threads) {
  QKV_SHARED int64_t row[1024];
  const int t = static_cast<int>(threadIdx.x);
  int64_t v[32];  // the fiber's own stack
  for (int i = 0; i < 32; ++i) v[i] = (blockIdx.x + 1) * 1000 + t * 32 + i;
  for (int round = 0; round < 16; ++round) {
    int64_t s = 0;
    for (int i = 0; i < 32; ++i) s += v[i];
    row[t] = s;
    __syncthreads();
    const int64_t neighbour = row[(t + 1) % threads];
    __syncthreads();  // before the next round rewrites the row
    v[round % 32] += neighbour % 997;
  }
  int64_t s = 0;
  for (int i = 0; i < 32; ++i) s += v[i];
  out[blockIdx.x * threads + t] = s;
}

std::vector<int64_t> locals_on_the_host(unsigned blocks, int threads) {
  std::vector<int64_t> out(blocks * threads);
  for (unsigned b = 0; b < blocks; ++b) {
    std::vector<std::vector<int64_t>> v(threads, std::vector<int64_t>(32));
    for (int t = 0; t < threads; ++t)
      for (int i = 0; i < 32; ++i) v[t][i] = (b + 1) * 1000 + t * 32 + i;
    for (int round = 0; round < 16; ++round) {
      std::vector<int64_t> row(threads);
      for (int t = 0; t < threads; ++t)
        for (int i = 0; i < 32; ++i) row[t] += v[t][i];
      for (int t = 0; t < threads; ++t) v[t][round % 32] += row[(t + 1) % threads] % 997;
    }
    for (int t = 0; t < threads; ++t)
      for (int i = 0; i < 32; ++i) out[b * threads + t] += v[t][i];
  }
  return out;
}

TEST(FibersEmulated, EachThreadKeepsItsLocalsAcrossBarriersInEveryOrder) {
  const unsigned blocks = 3;
  const int threads = 256;
  const std::vector<int64_t> want = locals_on_the_host(blocks, threads);
  for (em::Schedule order :
       {em::Schedule::round_robin, em::Schedule::first_ahead, em::Schedule::last_ahead, em::Schedule::random_ahead}) {
    em::ScheduleScope scope(order);
    std::vector<int64_t> got(want.size(), -1);
    em::launch(dim3(blocks), threads, 0, [&] { locals_across_barriers(got.data(), threads); });
    EXPECT_EQ(got, want) << em::name(order);
  }
}

// a thread whose object is destroyed counts it
struct Counted {
  int* destroyed;
  ~Counted() { ++*destroyed; }
};

TEST(FibersEmulated, ADeadlockOrAThreadsExceptionStopsTheBlockAndTheNextLaunchRunsAsNew) {
  // warp 1 skips the block's barrier: the others wait there for ever — reported, not hung
  int destroyed = 0;
  try {
    em::launch(dim3(2), 128, 0, [&] {
      Counted c{&destroyed};
      if (threadIdx.x / 32 != 1) __syncthreads();
    });
    ADD_FAILURE() << "a barrier warp 1 never reaches did not stop the launch";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("block (0, 0) deadlocked"), std::string::npos) << e.what();
  }
  // warp 1's 32 threads ended (their objects destroyed); the 96 left waiting were dropped, not unwound
  EXPECT_EQ(destroyed, 32);

  // thread 37 throws after the first barrier, while the others wait at the second: its exception,
  // as thrown, reaches the caller; nothing of the waiting threads runs again
  destroyed = 0;
  int after_second = 0;
  try {
    em::launch(dim3(1), 128, 0, [&] {
      Counted c{&destroyed};
      __syncthreads();
      if (threadIdx.x == 37) throw std::domain_error("thread 37");
      __syncthreads();
      ++after_second;
    });
    ADD_FAILURE() << "thread 37's exception did not reach the caller";
  } catch (const std::domain_error& e) {
    EXPECT_STREQ(e.what(), "thread 37");
  }
  EXPECT_EQ(after_second, 0);
  EXPECT_EQ(destroyed, 1);  // thread 37's own, as its exception left its frames

  // an exception a thread throws and catches itself is its own business: it unwinds the thread's own
  // frames (thrown after a switch, caught on the fiber's stack) and the thread meets the others again
  std::vector<int> caught(64, 0), met(64, 0);
  em::launch(dim3(1), 64, 0, [&] {
    try {
      __syncthreads();
      if (threadIdx.x % 2) throw std::out_of_range("odd");
    } catch (const std::out_of_range&) {
      caught[threadIdx.x] = 1;
    }
    __syncthreads();
    met[threadIdx.x] = 1;
  });
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(caught[t], t % 2) << "thread " << t;
    EXPECT_EQ(met[t], 1) << "thread " << t;
  }

  // and the runtime launches again as new, after both failures
  const std::vector<int64_t> want = locals_on_the_host(2, 64);
  std::vector<int64_t> got(want.size(), -1);
  em::launch(dim3(2), 64, 0, [&] { locals_across_barriers(got.data(), 64); });
  EXPECT_EQ(got, want);
}

}  // namespace
#endif
