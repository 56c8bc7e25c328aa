// Signals during oneDNN's GEMMs (kernels/cpu/onednn_call.h). oneDNN 2.x's f32 GEMM kernels point the
// stack pointer at a heap workspace while they run, so a handled signal landing inside one wrote its
// frame over the heap: `qkv train` crashed after a Ctrl-C 1 run in 15–25 beside a busy core. Here a
// thread sends a handled signal every ~20 µs — to the process, and to each of its threads in turn,
// the GEMM's OpenMP workers among them — while this thread runs GEMMs on 2 threads and allocates:
// each product must keep its bits, the process must live, and the signals must be handled (between
// the calls, where they are not held). Without the caller's hold it died at once ("corrupted size
// vs. prev_size while consolidating"); the workers' frames, without theirs, land in the workspace
// oneDNN gives the thread before them, where this test saw no harm (held all the same).
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <sys/syscall.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {
namespace {

std::atomic<long> g_handled{0};
extern "C" void count_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

TEST(OneDnnCall, SignalsDuringGemmsLeaveTheHeapAndTheProductsIntact) {
  struct sigaction sa {}, before{};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &before), 0);

  const int threads_before = num_threads();
  set_num_threads(2);
  // m, n < ~1000: oneDNN 2.6 takes its "no copy" kernel, the one that moves the stack pointer
  const int64_t n = 192;
  std::vector<float> a(n * n), b(n * n), want(n * n);
  for (int64_t i = 0; i < n * n; ++i) a[i] = static_cast<float>(i % 17) - 8.f, b[i] = static_cast<float>(i % 13) * 0.25f;
  sgemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, want.data(), n);

  std::vector<long> tids;  // this process's threads, the GEMM's team among them (started above)
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) tids.push_back(std::stol(e.path().filename()));
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    sigset_t own;  // the sender never takes the signal itself: the process's other threads do
    sigemptyset(&own);
    sigaddset(&own, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &own, nullptr);
    for (size_t i = 0; !stop.load(); ++i) {
      if (i % 2 == 0) kill(getpid(), SIGUSR1);
      else syscall(SYS_tgkill, getpid(), tids[i / 2 % tids.size()], SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  int64_t calls = 0, wrong = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    std::vector<float> c(n * n);                 // the heap in use between and around the calls
    std::vector<std::vector<char>> churn(8);
    for (size_t i = 0; i < churn.size(); ++i) churn[i].assign(64 + 48 * i, static_cast<char>(i));
    sgemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    wrong += c != want;
    for (size_t i = 0; i < churn.size(); ++i)
      for (char x : churn[i]) wrong += x != static_cast<char>(i);
    ++calls;
  }
  stop = true;
  sender.join();
  sigaction(SIGUSR1, &before, nullptr);
  set_num_threads(threads_before);
  EXPECT_EQ(wrong, 0) << "of " << calls << " products and their neighbours on the heap";
  EXPECT_GT(calls, 10);
  EXPECT_GT(g_handled.load(), 0) << "the signals were handled between the calls";
}

}  // namespace
}  // namespace qkv::kernels::cpu
