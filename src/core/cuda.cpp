// The CUDA runtime seam of core (qkv/core/cuda.h): devices, streams, the caching device allocator
// and byte copies. Everything here is compiled only with -DQKV_CUDA=ON (QKV_WITH_CUDA); without it,
// the functions at the end answer that this build has no GPU backend.
#include "qkv/core/cuda.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "qkv/core/error.h"

#ifdef QKV_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace qkv::cuda {

#ifdef QKV_WITH_CUDA

void fail(int code, const char* call, const char* file, int line) {
  const auto e = static_cast<cudaError_t>(code);
  throw Error(detail::concat(call, " failed (", file, ":", line, "): ", cudaGetErrorName(e), ", ",
                             cudaGetErrorString(e)));
}

bool is_built() { return true; }

int device_count() {
  // Asked once: without a driver or a GPU this is 0, not an error (the CUDA build runs anywhere).
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return count;
  }();
  return n;
}

bool is_available() { return device_count() > 0; }

namespace {

void check_device(int device) {
  QKV_CHECK(device >= 0 && device < device_count(), "cuda:", device, ": no such device (",
            device_count() == 0 ? std::string("this machine shows no CUDA GPU")
                                : detail::concat("this machine has ", device_count(), " CUDA GPU(s)"),
            ")");
}

// qkv's own default stream of each device, created on first use and kept for the process.
StreamHandle default_stream(int device) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mu);
  if (streams.empty()) streams.assign(device_count(), nullptr);
  if (!streams[device]) {
    DeviceGuard guard(device);
    QKV_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  }
  return streams[device];
}

// The calling thread's current stream per device (nullptr: the device's default stream).
thread_local std::vector<StreamHandle> t_current;

}  // namespace

StreamHandle current_stream(int device) {
  check_device(device);
  if (static_cast<int>(t_current.size()) > device && t_current[device]) return t_current[device];
  return default_stream(device);
}

// ---- waiting for the GPU, and the checks read when it does ----------------------------------------

namespace {

std::atomic<int64_t> g_host_waits{0}, g_wait_ns{0};

// The calling thread's deferred checks: per device, kDeferredChecks words on the GPU; slot i of an
// arena is taken while its message is set.
struct PendingCheck {
  StreamHandle stream = nullptr;
  CheckMessage message;  // empty: the slot is free
  uint64_t order = 0;    // the order the checks were asked for: the first failed one is reported
};
struct CheckArena {
  unsigned long long* words = nullptr;
  std::array<PendingCheck, kDeferredChecks> slots;
  int used = 0;
};
struct ThreadChecks {
  std::map<int, CheckArena> arenas;  // device → its words
  uint64_t next_order = 0;
  ~ThreadChecks() {
    for (auto& [device, a] : arenas)
      if (a.words) cudaFree(a.words);  // (at exit the runtime may be gone: nothing to report)
  }
};
thread_local ThreadChecks t_checks;

}  // namespace

// A graph's deferred checks (Graph, below): words of its own, all ones until a replayed kernel
// lowers one, and the message of each. Watched by a thread from a replay to its next wait. (Not in the
// unnamed namespace: Graph::Impl holds one, and g++ warns of that where a unity build includes this.)
struct GraphChecks {
  static constexpr int kWords = 64;
  int device = 0;
  unsigned long long* words = nullptr;
  std::vector<CheckMessage> messages;  // word i's
  ~GraphChecks() {
    if (words) cudaFree(words);
  }
};

namespace {

struct Watch {
  int device;
  StreamHandle stream;  // where the replay was launched
  std::shared_ptr<GraphChecks> checks;
};
thread_local std::vector<Watch> t_watches;

// The calling thread's capture under way (Graph::capture), if any.
struct Capture {
  StreamHandle stream = nullptr;
  GraphChecks* checks = nullptr;
};
thread_local Capture* t_capture = nullptr;
// Captures under way on any thread: while there are some, the allocator returns no cached block to the
// driver — its device-wide wait (and cudaFree's own) would end another thread's capture as invalid
// (PyTorch's allocator skips its free-everything retry while captures are under way, for the same reason).
std::atomic<int> g_captures{0};

void refuse_in_capture(const char* what) {
  if (t_capture)
    throw Error(detail::concat(what, " during a CUDA graph capture: the captured work must not wait for the GPU or ",
                               "copy between the host and the GPU (nothing runs while a graph is recorded; its ",
                               "inputs are copied into the tensors it reads before each replay)"));
}

// Reads and frees the thread's words on `stream` (nullptr: every stream of `device`), whose work the
// host has just waited for, then throws the first registered check whose word moved.
void report_checks(int device, CheckArena& a, StreamHandle stream) {
  StreamHandle on = nullptr;
  for (const PendingCheck& c : a.slots)
    if (c.message && (!stream || c.stream == stream)) on = c.stream;
  if (!on) return;
  std::array<unsigned long long, kDeferredChecks> host{};
  {
    DeviceGuard guard(device);
    // (on `on`, after its work: the words of checks on other streams may still be moving; they are
    // not looked at)
    QKV_CUDA_CHECK(cudaMemcpyAsync(host.data(), a.words, sizeof host, cudaMemcpyDeviceToHost, on));
    QKV_CUDA_CHECK(cudaStreamSynchronize(on));
  }
  int first = -1;
  CheckMessage failed;
  for (int i = 0; i < kDeferredChecks; ++i) {
    PendingCheck& c = a.slots[i];
    if (!c.message || (stream && c.stream != stream)) continue;
    if (host[i] != ~0ull && (first < 0 || c.order < a.slots[first].order)) {
      first = i;
      failed = c.message;
    }
  }
  const unsigned long long word = first >= 0 ? host[first] : 0;
  for (PendingCheck& c : a.slots)
    if (c.message && (!stream || c.stream == stream)) {
      c = PendingCheck();
      --a.used;
    }
  if (failed) throw Error(failed(static_cast<int64_t>(word >> 32), static_cast<int32_t>(word & 0xffffffffu)));
}

// The thread's checks on `stream`, on whichever device they are.
void report_checks(StreamHandle stream) {
  for (auto& [device, a] : t_checks.arenas)
    if (a.used) report_checks(device, a, stream);
}

// A stream going away: the thread's checks on it are dropped, unread (a destructor does not throw).
void forget_checks(StreamHandle stream) {
  for (auto& [device, a] : t_checks.arenas)
    for (PendingCheck& c : a.slots)
      if (c.message && c.stream == stream) {
        c = PendingCheck();
        --a.used;
      }
}

// The thread's watched graphs on `stream` (nullptr: every stream of `device`), whose work the host
// has just waited for: each one's words are read; the first message of a moved word throws, after
// its words are set back to all ones (the graph is replayed again, checks and all).
void report_watches(int device, StreamHandle stream) {
  std::vector<Watch> due;
  for (auto it = t_watches.begin(); it != t_watches.end();) {
    if (it->device == device && (!stream || it->stream == stream)) {
      due.push_back(std::move(*it));
      it = t_watches.erase(it);
    } else {
      ++it;
    }
  }
  for (const Watch& w : due) {
    GraphChecks& g = *w.checks;
    const size_t n = g.messages.size();
    std::vector<unsigned long long> host(n);
    DeviceGuard guard(device);
    QKV_CUDA_CHECK(cudaMemcpyAsync(host.data(), g.words, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost, w.stream));
    QKV_CUDA_CHECK(cudaStreamSynchronize(w.stream));
    for (size_t i = 0; i < n; ++i)
      if (host[i] != ~0ull) {
        QKV_CUDA_CHECK(cudaMemsetAsync(g.words, 0xff, n * sizeof(unsigned long long), w.stream));
        QKV_CUDA_CHECK(cudaStreamSynchronize(w.stream));
        throw Error(g.messages[i](static_cast<int64_t>(host[i] >> 32), static_cast<int32_t>(host[i] & 0xffffffffu)));
      }
  }
}

// Counts a wait and its duration.
class Waiting {
 public:
  Waiting() : t0_(std::chrono::steady_clock::now()) { ++g_host_waits; }
  ~Waiting() {
    g_wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

void wait(StreamHandle stream) {
  refuse_in_capture("waiting for the GPU (cuda::wait)");
  {
    Waiting w;
    QKV_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  report_checks(stream);
  if (!t_watches.empty())
    for (int d = 0; d < device_count(); ++d) report_watches(d, stream);
}

int64_t host_waits() { return g_host_waits.load(); }
double host_wait_seconds() { return static_cast<double>(g_wait_ns.load()) * 1e-9; }

void synchronize(int device) {
  check_device(device);
  refuse_in_capture("waiting for the GPU (cuda::synchronize)");
  DeviceGuard guard(device);
  {
    Waiting w;
    QKV_CUDA_CHECK(cudaDeviceSynchronize());
  }
  auto it = t_checks.arenas.find(device);
  if (it != t_checks.arenas.end() && it->second.used) report_checks(device, it->second, nullptr);
  report_watches(device, nullptr);
}

// ---- timing marks -------------------------------------------------------------------------------

namespace {
std::mutex g_events_mu;
std::vector<std::pair<int, cudaEvent_t>>* g_free_events = new std::vector<std::pair<int, cudaEvent_t>>;  // kept
std::map<cudaEvent_t, int>* g_event_device = new std::map<cudaEvent_t, int>;
}  // namespace

EventHandle record_event(int device) {
  check_device(device);
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_events_mu);
    for (size_t i = 0; i < g_free_events->size(); ++i)
      if ((*g_free_events)[i].first == device) {
        e = (*g_free_events)[i].second;
        (*g_free_events)[i] = g_free_events->back();
        g_free_events->pop_back();
        break;
      }
  }
  if (!e) {
    QKV_CUDA_CHECK(cudaEventCreate(&e));
    std::lock_guard<std::mutex> lock(g_events_mu);
    (*g_event_device)[e] = device;
  }
  QKV_CUDA_CHECK(cudaEventRecord(e, current_stream(device)));
  return e;
}

float elapsed_ms(EventHandle start, EventHandle stop) {
  QKV_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  QKV_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

void release_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(g_events_mu);
  auto it = g_event_device->find(event);
  if (it != g_event_device->end()) g_free_events->push_back({it->second, event});
}

unsigned long long* deferred_check(StreamHandle stream, CheckMessage message) {
  int device = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  if (t_capture && stream == t_capture->stream) {  // a graph's own word, all ones since it was made
    GraphChecks& g = *t_capture->checks;
    QKV_CHECK(static_cast<int>(g.messages.size()) < GraphChecks::kWords, "a CUDA graph holds at most ",
              GraphChecks::kWords, " checked launches (an embedding's ids, a loss's targets)");
    g.messages.push_back(std::move(message));
    return g.words + (g.messages.size() - 1);
  }
  CheckArena& a = t_checks.arenas[device];
  if (!a.words) QKV_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&a.words), sizeof(unsigned long long) * kDeferredChecks));
  if (a.used == kDeferredChecks) synchronize(device);  // (reports and frees them all, or throws)
  int i = 0;
  while (a.slots[i].message) ++i;
  QKV_CUDA_CHECK(cudaMemsetAsync(a.words + i, 0xff, sizeof(unsigned long long), stream));
  a.slots[i] = PendingCheck{stream, std::move(message), t_checks.next_order++};
  ++a.used;
  return a.words + i;
}

Stream::Stream(int device) : device_(device) {
  check_device(device);
  DeviceGuard guard(device);
  QKV_CUDA_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking));
}
// (~Stream: below the allocator, to which it hands its blocks)
void Stream::synchronize() const { wait(handle_); }

StreamGuard::StreamGuard(const Stream& stream) : device_(stream.device()) {
  if (static_cast<int>(t_current.size()) <= device_) t_current.resize(device_ + 1, nullptr);
  previous_ = t_current[device_];
  t_current[device_] = stream.handle();
}
StreamGuard::~StreamGuard() { t_current[device_] = previous_; }

DeviceGuard::DeviceGuard(int device) {
  QKV_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) QKV_CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

// ---- the caching device allocator ----------------------------------------------------------------
//
// cudaMalloc and cudaFree are slow (cudaFree synchronizes the whole device), and training frees
// and re-allocates the same activation buffers every step. Freed blocks are therefore kept, per
// device and per stream, and handed out again to the next request of their stream that they fit
// best, if they are at most 1.5× its size class: the scheme of PyTorch's CUDA caching allocator,
// without its block splitting. Sizes are rounded up to 512 bytes below 1 MiB and to classes 1/8 of
// a power of two apart above it. When cudaMalloc fails, the cache is returned to the driver and the
// allocation tried once more; if it fails again the error says how the device's memory is used.
//
// The kernels' own temporaries (kernels/cuda/launch.h's Scratch: attention's rounded copies, a
// reduction's partial sums) come from the device's stream-ordered pool (cudaMallocAsync). Its release
// threshold defaults to 0: at every wait — each training step's, each timed call's — the pool hands
// all its memory back to the driver, and the next call maps it again. The cache sets it to "keep
// everything" (as RMM and CCCL do), and gives the pool's unused memory back where it gives its own:
// empty_cache, and before its retry after cudaMalloc fails.

namespace {

size_t round_size(size_t n) {
  if (n < (size_t{1} << 20)) return (n + 511) / 512 * 512;
  const size_t p = size_t{1} << (63 - __builtin_clzll(n));
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

class DeviceCache final : public Allocator {
 public:
  explicit DeviceCache(int device) : device_(device) {}

  void* allocate(size_t n, size_t* capacity) override {
    const size_t c = round_size(n ? n : 1);
    StreamHandle stream = current_stream(device_);
    std::lock_guard<std::mutex> lock(mu_);
    auto& free = free_[stream];
    auto it = free.lower_bound(c);
    if (it != free.end() && it->first <= c + c / 2) {
      const size_t got = it->first;
      void* p = it->second;
      free.erase(it);
      cached_ -= got;
      take(p, got, stream);
      *capacity = got;
      return p;
    }
    DeviceGuard guard(device_);
    if (!scratch_kept_) keep_scratch();  // (the device's first block: before any kernel's scratch)
    void* p = nullptr;
    if (cudaMalloc(&p, c) != cudaSuccess) {
      cudaGetLastError();
      release_locked();
      trim_scratch();
      if (cudaMalloc(&p, c) != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw Error(detail::concat("cuda:", device_, ": out of memory allocating ", c >> 20, " MiB (",
                                   allocated_ >> 20, " MiB held by tensors, ", free_b >> 20, " MiB free of ",
                                   total_b >> 20, " MiB)"));
      }
    }
    reserved_ += c;
    take(p, c, stream);
    *capacity = c;
    return p;
  }

  void deallocate(void* p, size_t capacity) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: nothing to do (never throws: called by destructors)
    StreamHandle stream = it->second;
    live_.erase(it);
    allocated_ -= capacity;
    free_[stream].emplace(capacity, p);
    cached_ += capacity;
  }

  void empty() {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
    trim_scratch();
  }

  // The bytes the kernels' scratch pool holds from the driver (in use or kept)
  int64_t scratch_reserved() {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t bytes = 0;  // (none before the device's first block: no kernel has run here)
    if (scratch_pool_)
      QKV_CUDA_CHECK(cudaMemPoolGetAttribute(scratch_pool_, cudaMemPoolAttrReservedMemCurrent, &bytes));
    return static_cast<int64_t>(bytes);
  }

  // `stream` is a graph pool's (Graph): its free blocks are the temporaries its graphs' kernels write on
  // every replay, so they stay until the stream goes (forget).
  void keep_pool(StreamHandle stream) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_.insert(stream);
  }

  // `stream` is done with (synchronized, about to be destroyed): its blocks, kept or lent, belong to
  // the default stream from now on.
  void forget(StreamHandle stream) {
    std::lock_guard<std::mutex> lock(mu_);
    const StreamHandle to = default_stream(device_);
    if (stream == to) return;
    pools_.erase(stream);
    for (auto& [p, s] : live_)
      if (s == stream) s = to;
    auto it = free_.find(stream);
    if (it == free_.end()) return;
    free_[to].merge(it->second);
    free_.erase(it);
  }

  int64_t allocated() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(allocated_);
  }
  int64_t reserved() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(reserved_);
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(peak_);
  }

 private:
  void take(void* p, size_t c, StreamHandle stream) {
    live_.emplace(p, stream);
    allocated_ += c;
    if (allocated_ > peak_) peak_ = allocated_;
  }
  // The device's stream-ordered pool, which the kernels' Scratch allocates from, found and told to keep
  // its memory once, on the device's first cudaMalloc (a cache made for a device never used —
  // empty_cache walks them all — touches no CUDA context); none where the device has no pools
  void keep_scratch() {
    int supported = 0;
    QKV_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device_));
    if (supported) {
      QKV_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&scratch_pool_, device_));
      uint64_t keep = UINT64_MAX;
      QKV_CUDA_CHECK(cudaMemPoolSetAttribute(scratch_pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    scratch_kept_ = true;
  }
  // The scratch pool's unused memory back to the driver (what queued work still reads stays)
  void trim_scratch() {
    if (scratch_pool_) cudaMemPoolTrimTo(scratch_pool_, 0);
  }
  // The cached blocks back to the driver — but for the graph pools' (keep_pool), and none while a
  // capture is under way on any thread (g_captures).
  void release_locked() {
    auto freeable = [this](const auto& stream_blocks) {
      return !stream_blocks.second.empty() && !pools_.count(stream_blocks.first);
    };
    if (cached_ == 0 || g_captures.load() > 0 || std::none_of(free_.begin(), free_.end(), freeable)) return;
    DeviceGuard guard(device_);
    cudaDeviceSynchronize();  // a cached block may still be read by queued work of its stream
    std::erase_if(free_, [&](const auto& stream_blocks) {
      if (!freeable(stream_blocks)) return false;
      for (const auto& [c, p] : stream_blocks.second) {
        cudaFree(p);
        reserved_ -= c;
        cached_ -= c;
      }
      return true;
    });
  }

  int device_;
  std::mutex mu_;
  std::map<StreamHandle, std::multimap<size_t, void*>> free_;  // stream → (capacity → block)
  std::unordered_map<void*, StreamHandle> live_;               // block → the stream it serves
  std::set<StreamHandle> pools_;                               // graph pools' streams (keep_pool)
  size_t allocated_ = 0, reserved_ = 0, cached_ = 0, peak_ = 0;
  bool scratch_kept_ = false;             // keep_scratch done
  cudaMemPool_t scratch_pool_ = nullptr;  // (a device-wide handle: no DeviceGuard to use it)
};

DeviceCache& cache_of(int device) {
  check_device(device);
  static std::mutex mu;
  static std::vector<DeviceCache*>* caches = new std::vector<DeviceCache*>;  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  if (caches->empty()) caches->assign(device_count(), nullptr);
  if (!(*caches)[device]) (*caches)[device] = new DeviceCache(device);
  return *(*caches)[device];
}

}  // namespace

// The stream's work is waited for, and the blocks the allocator keeps or lent for it go to the
// device's default stream — none is waiting on it any more — so that neither sits unused under a
// dead handle, nor serves a new stream that happens to get the same handle while the old one's
// work still runs.
Stream::~Stream() {  // never throws: a destructor
  if (!handle_) return;
  cudaStreamSynchronize(handle_);
  forget_checks(handle_);
  try {
    cache_of(device_).forget(handle_);
  } catch (...) {  // (a device that vanished has nothing to forget)
  }
  cudaStreamDestroy(handle_);
}


// ---- CUDA graphs ----------------------------------------------------------------------------------
//
// The graph's pool is its capture stream's: the allocator keeps blocks per stream, and no work but
// captures ever runs with that stream current, so what a capture allocated and freed stays the
// graph's (or, with a pool shared, its graphs'). When the last graph of a pool goes, its stream does
// (Stream::~Stream hands the blocks to the device's default stream), after the device finished every
// replay.

struct Graph::Impl {
  int device = 0;
  std::shared_ptr<Stream> stream;  // (shared by the graphs of one pool)
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t replayed = nullptr;  // recorded after each replay: the last one's end (launches of one exec are ordered)
  std::shared_ptr<GraphChecks> checks;
};

Graph::Graph(int device) : Graph(std::make_shared<Stream>(device)) {}

Graph::Graph(std::shared_ptr<Stream> pool) {
  QKV_CHECK(pool != nullptr, "cuda::Graph: no pool (a stream) given");
  const int device = pool->device();
  DeviceGuard guard(device);
  auto impl = std::make_unique<Impl>();  // (freed, with its stream, where a call below throws)
  impl->device = device;
  impl->stream = std::move(pool);
  cache_of(device).keep_pool(impl->stream->handle());
  impl->checks = std::make_shared<GraphChecks>();
  impl->checks->device = device;
  QKV_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&impl->checks->words),
                            GraphChecks::kWords * sizeof(unsigned long long)));
  QKV_CUDA_CHECK(cudaMemsetAsync(impl->checks->words, 0xff, GraphChecks::kWords * sizeof(unsigned long long),
                                 impl->stream->handle()));
  QKV_CUDA_CHECK(cudaStreamSynchronize(impl->stream->handle()));
  QKV_CUDA_CHECK(cudaEventCreateWithFlags(&impl->replayed, cudaEventDisableTiming));
  impl_ = impl.release();
}

Graph::~Graph() {  // never throws: a destructor
  {
    DeviceGuard guard(impl_->device);
    // the last replay's end (and so every earlier one's): a wait for this graph alone — a device-wide
    // wait would end a capture that another thread has under way (the serving workers': one model's
    // graphs dropped while the other's bucket is recorded)
    if (impl_->replayed) cudaEventSynchronize(impl_->replayed);
    if (impl_->exec) cudaGraphExecDestroy(impl_->exec);
    if (impl_->graph) cudaGraphDestroy(impl_->graph);
    if (impl_->replayed) cudaEventDestroy(impl_->replayed);
  }
  delete impl_;  // the stream (with the last graph of its pool), then its blocks to the default stream
}

bool Graph::captured() const { return impl_->exec != nullptr; }
int Graph::device() const { return impl_->device; }

void Graph::capture(const std::function<void()>& work) {
  QKV_CHECK(!impl_->exec, "cuda::Graph::capture: this graph is already captured (make another)");
  QKV_CHECK(!t_capture, "cuda::Graph::capture: this thread is already capturing a graph");
  DeviceGuard guard(impl_->device);
  const StreamHandle s = impl_->stream->handle();
  StreamGuard current(*impl_->stream);
  Capture c{s, impl_->checks.get()};
  const size_t checks_before = impl_->checks->messages.size();
  // Relaxed: the allocator's cudaMalloc may run while the capture does (the CUDA runtime's
  // "potentially unsafe" calls); a wait on the capturing stream is still refused (and qkv's own
  // waits say why before they reach CUDA).
  QKV_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  t_capture = &c;
  ++g_captures;
  struct Underway {  // (g_captures counts this capture until it ends, however it ends)
    ~Underway() { --g_captures; }
  } underway;
  cudaGraph_t g = nullptr;
  try {
    work();
  } catch (...) {
    t_capture = nullptr;
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    impl_->checks->messages.resize(checks_before);
    throw;
  }
  t_capture = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &g);
  if (ended != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    impl_->checks->messages.resize(checks_before);
    throw Error(detail::concat("cuda::Graph::capture: the work could not be recorded (", cudaGetErrorName(ended), ", ",
                               cudaGetErrorString(ended), "): it queued work on another stream than the current "
                               "one, or made a call a graph cannot hold"));
  }
  impl_->graph = g;
  QKV_CUDA_CHECK(cudaGraphInstantiate(&impl_->exec, g, 0));
}

void Graph::replay() {
  QKV_CHECK(impl_->exec, "cuda::Graph::replay: nothing captured yet");
  refuse_in_capture("cuda::Graph::replay");
  DeviceGuard guard(impl_->device);
  const StreamHandle s = current_stream(impl_->device);
  QKV_CUDA_CHECK(cudaGraphLaunch(impl_->exec, s));
  QKV_CUDA_CHECK(cudaEventRecord(impl_->replayed, s));
  if (impl_->checks->messages.empty()) return;
  for (const Watch& w : t_watches)
    if (w.checks == impl_->checks && w.stream == s) return;  // (the words keep the first failure)
  t_watches.push_back(Watch{impl_->device, s, impl_->checks});
}

bool is_capturing() { return t_capture != nullptr; }

std::unique_ptr<Graph> capture_or_explain(std::shared_ptr<Stream> pool, int device, const std::function<void()>& work,
                                          const char* what) {
  try {
    auto g = pool ? std::make_unique<Graph>(std::move(pool)) : std::make_unique<Graph>(device);
    g->capture(work);
    return g;
  } catch (const std::exception& e) {  // (qkv's errors, and a library's: TMA's encoding, an allocation)
    std::fprintf(stderr, "qkv: %s without CUDA graphs: %s\n", what, e.what());
    return nullptr;
  }
}

int64_t memory_allocated(int device) { return cache_of(device).allocated(); }
int64_t memory_reserved(int device) { return cache_of(device).reserved(); }
int64_t max_memory_allocated(int device) { return cache_of(device).peak(); }
int64_t scratch_reserved(int device) { return cache_of(device).scratch_reserved(); }
void empty_cache() {
  for (int d = 0; d < device_count(); ++d) cache_of(d).empty();
}

#else  // ---- a build without the CUDA backend ------------------------------------------------------

namespace {
[[noreturn]] void not_built(const char* what) {
  throw Error(detail::concat(what, ": this build of qkv has no CUDA backend (configure with -DQKV_CUDA=ON; "
                             "docs/ARCHITECTURE.md, \"Adding a device\")"));
}
}  // namespace

void fail(int code, const char* call, const char* file, int line) {
  throw Error(detail::concat(call, " failed (", file, ":", line, "): CUDA error ", code));
}
bool is_built() { return false; }
int device_count() { return 0; }
bool is_available() { return false; }
void synchronize(int) { not_built("cuda::synchronize"); }
StreamHandle current_stream(int) { not_built("cuda::current_stream"); }
Stream::Stream(int) { not_built("cuda::Stream"); }
Stream::~Stream() = default;
void Stream::synchronize() const { not_built("cuda::Stream::synchronize"); }
void wait(StreamHandle) { not_built("cuda::wait"); }
int64_t host_waits() { return 0; }
double host_wait_seconds() { return 0; }
EventHandle record_event(int) { not_built("cuda::record_event"); }
float elapsed_ms(EventHandle, EventHandle) { not_built("cuda::elapsed_ms"); }
void release_event(EventHandle) {}
unsigned long long* deferred_check(StreamHandle, CheckMessage) { not_built("cuda::deferred_check"); }
StreamGuard::StreamGuard(const Stream&) : device_(0), previous_(nullptr) { not_built("cuda::StreamGuard"); }
StreamGuard::~StreamGuard() = default;
DeviceGuard::DeviceGuard(int) { not_built("cuda::DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
struct Graph::Impl {};
Graph::Graph(int) : impl_(nullptr) { not_built("cuda::Graph"); }
Graph::Graph(std::shared_ptr<Stream>) : impl_(nullptr) { not_built("cuda::Graph"); }
Graph::~Graph() = default;
void Graph::capture(const std::function<void()>&) { not_built("cuda::Graph::capture"); }
void Graph::replay() { not_built("cuda::Graph::replay"); }
bool Graph::captured() const { return false; }
int Graph::device() const { return 0; }
bool is_capturing() { return false; }
std::unique_ptr<Graph> capture_or_explain(std::shared_ptr<Stream>, int, const std::function<void()>&, const char* what) {
  std::fprintf(stderr, "qkv: %s without CUDA graphs: this build has no CUDA backend\n", what);
  return nullptr;
}
int64_t memory_allocated(int) { return 0; }
int64_t memory_reserved(int) { return 0; }
int64_t max_memory_allocated(int) { return 0; }
int64_t scratch_reserved(int) { return 0; }
void empty_cache() {}

#endif

// ---- what QKV_CUDA_GRAPHS asks for (any build) ---------------------------------------------------

GraphUse graph_use() {
  const char* v = std::getenv("QKV_CUDA_GRAPHS");
  if (!v || !*v) return GraphUse::decoding;
  if (std::strcmp(v, "0") == 0) return GraphUse::none;
  if (std::strcmp(v, "1") == 0) return GraphUse::decoding_and_training;
  throw Error(detail::concat("QKV_CUDA_GRAPHS must be 0 (no CUDA graphs) or 1 (decoding and training steps ",
                             "as graphs; unset: decoding steps only), got '", v, "'"));
}

// ---- the CPU's stand-in for a capture (any build) ----------------------------------------------

namespace {
thread_local bool t_emulated_capture = false;
}  // namespace

EmulatedCapture::EmulatedCapture() : before_(std::exchange(t_emulated_capture, true)) {}
EmulatedCapture::~EmulatedCapture() { t_emulated_capture = before_; }

void refuse_in_emulated_capture(const char* what) {
  if (t_emulated_capture)
    throw Error(detail::concat(what, " during a recorded step (the CPU's emulation of a CUDA graph capture): the ",
                               "recorded work must not read tensors on the host — on a GPU that waits for it, ",
                               "which a capture refuses"));
}

}  // namespace qkv::cuda

namespace qkv::cuda_detail {

#ifdef QKV_WITH_CUDA

Allocator& allocator(int device) { return cuda::cache_of(device); }

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
  // The GPU end's stream orders the copy after the kernels that wrote the source.
  if (!src_device.is_cpu()) cuda::check_device(src_device.index);
  if (!dst_device.is_cpu()) cuda::check_device(dst_device.index);
  if (src_device.is_cpu() || dst_device.is_cpu())
    cuda::refuse_in_capture(dst_device.is_cpu() ? "a copy to the host" : "a copy from the host");
  const int gpu = src_device.is_cpu() ? dst_device.index : src_device.index;
  cuda::DeviceGuard guard(gpu);
  cudaStream_t stream = cuda::current_stream(gpu);
  if (src_device.is_cpu()) {
    // From pageable memory (qkv's own host tensors are), cudaMemcpyAsync returns once the bytes are
    // in the driver's staging buffer, so the source may go when we return and the host need not
    // wait for the GPU (a batch uploaded while the last step still runs). Pinned memory (someone
    // else's cudaHostRegister) is read by the copy engine later: then the host waits.
    cudaPointerAttributes attr{};
    const bool pinned = cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost;
    cudaGetLastError();  // (older runtimes answer an unregistered pointer with an error)
    QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
    if (pinned) cuda::wait(stream);
  } else if (dst_device.is_cpu()) {
    QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
    cuda::wait(stream);  // the host reads it next
  } else if (src_device.index == dst_device.index) {
    QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
  } else {
    // The destination block may have come from the destination's cache while that GPU's stream still
    // has work reading its previous tensor (blocks are reused in stream order): the copy, on the
    // source's stream, waits for that stream first.
    cudaEvent_t ready = nullptr;
    cudaError_t recorded;
    {
      cuda::DeviceGuard on_dst(dst_device.index);
      QKV_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      recorded = cudaEventRecord(ready, cuda::current_stream(dst_device.index));
    }
    const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(stream, ready, 0) : recorded;
    cudaEventDestroy(ready);  // (released once the wait is done)
    QKV_CUDA_CHECK(waited);
    QKV_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, n, stream));
    cuda::wait(stream);  // the destination's own stream knows nothing of it
  }
}

#else

Allocator& allocator(int device) {
  throw Error(detail::concat("no allocator for device cuda:", device, ": this build of qkv has no CUDA backend "
                             "(configure with -DQKV_CUDA=ON; docs/ARCHITECTURE.md, \"Adding a device\")"));
}

void copy(void*, Device dst_device, const void*, Device src_device, size_t) {
  throw Error(detail::concat("copy from ", src_device.str(), " to ", dst_device.str(),
                             ": this build of qkv has no CUDA backend (configure with -DQKV_CUDA=ON)"));
}

#endif

}  // namespace qkv::cuda_detail
