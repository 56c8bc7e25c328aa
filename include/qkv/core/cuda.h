// The CUDA runtime as qkv's core sees it (torch.cuda's counterpart): whether GPUs are there, the
// stream work is queued on, waiting for it, and the device allocator's figures. Declared in every
// build; in a build without the CUDA backend (-DQKV_CUDA=OFF, the default) there are no devices and
// the rest says so.
//
// Streams: every device has one default stream of qkv's own (non-blocking, so it does not
// serialize with other libraries' work on CUDA's legacy stream); kernels, GEMMs and copies of a
// thread go to its current stream, which a StreamGuard replaces for a scope. Device memory is
// cached per (device, stream) the way PyTorch's CUDA caching allocator does it: a freed block is
// handed out again only to work on the stream it was allocated for.
//
// Errors: a failing CUDA call is a qkv::Error naming the call, its file and line, and CUDA's own
// name and text for the error ("cudaMalloc(&p, bytes) failed (src/core/cuda/allocator.cpp:88):
// cudaErrorMemoryAllocation, out of memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

struct CUstream_st;  // cudaStream_t is CUstream_st* (cuda_runtime_api.h); named here without it
struct CUevent_st;   // cudaEvent_t likewise

namespace qkv::cuda {

using StreamHandle = CUstream_st*;

bool is_built();        // whether this build has the CUDA backend
int device_count();     // GPUs the driver shows (0 without the backend, a driver or a GPU)
bool is_available();    // device_count() > 0

// Waits for all work queued on `device`'s streams (and reports the calling thread's deferred checks
// on them, below).
void synchronize(int device = 0);

// The host waits for `stream`'s queued work, then reports the calling thread's deferred checks on it.
// Every wait of qkv's goes through here or synchronize(): a copy to the host, Stream::synchronize, a
// kernel reading back a result.
void wait(StreamHandle stream);

// How many times this process's host has waited for a GPU (torch.cuda.set_sync_debug_mode's question
// as a number): a training or decoding step with no wait between its launches keeps the GPU fed while
// the host queues the next kernels. A copy from the host's (pageable) memory is not a wait.
int64_t host_waits();
// The seconds the host has spent in those waits.
double host_wait_seconds();

// Marks for timing a GPU's work (the op profiler's, QKV_PROFILE=1: ops/dispatch.h): an event recorded
// now on the calling thread's current stream of `device` (from a pool); the milliseconds between two
// marks, once the second has been reached (the host waits for it; not counted above); a mark back to
// the pool.
using EventHandle = CUevent_st*;
EventHandle record_event(int device);
float elapsed_ms(EventHandle start, EventHandle stop);
void release_event(EventHandle event);

// Checks of inputs that live on a GPU — an id outside the vocabulary, a target outside the classes —
// made without waiting for the GPU. deferred_check returns a device word (all ones); a kernel on
// `stream` lowers it with atomicMin to (position << 32) | (uint32_t) value for each bad element, so
// the word holds the first one (positions below 2^32, values 32-bit). At the calling thread's next
// wait on that stream, every such word it holds is read and freed, and if one moved, the first
// registered that did throws qkv::Error(message(position, value)). A thread holds at most
// kDeferredChecks words at a time; asking for one more waits first.
constexpr int kDeferredChecks = 64;
using CheckMessage = std::function<std::string(int64_t position, int32_t value)>;
unsigned long long* deferred_check(StreamHandle stream, CheckMessage message);

// The calling thread's current stream on `device` (qkv's default stream for it unless a
// StreamGuard says otherwise).
StreamHandle current_stream(int device);

// A stream of its own (torch.cuda.Stream): created on `device`, destroyed with the object.
class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamHandle handle() const { return handle_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  StreamHandle handle_ = nullptr;
  int device_ = 0;
};

// Makes `stream` the calling thread's current stream on its device for this scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  StreamHandle previous_;
};

// Makes `device` the calling thread's current CUDA device for this scope (cudaSetDevice), and
// restores the previous one: ops run their kernels under one for their operands' device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A CUDA graph (torch.cuda.CUDAGraph): the kernels, GEMMs and copies a piece of work queues,
// recorded once and then replayed with one launch — no host work per kernel, the cure for a step
// of many small kernels whose launches cost more than their arithmetic (decoding: nn/static_decoding.h).
//
// capture(work) runs `work` with a stream of the graph's own as the thread's current one, recording
// what it queues instead of running it. Its memory comes from the graph's own pool: a block freed
// during the capture serves later allocations of the same capture, never other work, and all stay
// the graph's while it lives, so every replay finds its tensors where the capture left them. Inputs
// change between replays by writing into tensors the work read (copy_), never by making new ones;
// a tensor the work returned holds the last replay's result. The work must not wait for the GPU
// (a copy to the host, synchronize) or copy from the host: that is a qkv::Error naming the call, and
// nothing is captured. Deferred checks asked for during the capture (an id outside a vocabulary)
// get words of the graph's own, read at the first wait after a replay.
//
// replay() launches the graph on the calling thread's current stream, in order with the work queued
// there before and after it.
//
// Graphs made with one `pool` (a stream: PyTorch's graph_pool_handle) capture on it and share its
// memory: what one capture freed serves the next one's temporaries, so many graphs of one model
// (decode/paged_graphs.h's buckets) cost about one's. They must never replay at once; a tensor a
// capture returned stays its graph's while held.
class Graph {
 public:
  explicit Graph(int device = 0);
  explicit Graph(std::shared_ptr<Stream> pool);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void capture(const std::function<void()>& work);
  void replay();
  bool captured() const;
  int device() const;

 private:
  struct Impl;
  Impl* impl_;
};

// `work` captured as a graph on `pool` (null: a pool of its own on `device`), or null where the
// capture failed — a wait, a host copy, a call a graph cannot hold —, the reason written to stderr
// as "qkv: <what> without CUDA graphs: …" (the caller goes on without graphs, as eager work).
std::unique_ptr<Graph> capture_or_explain(std::shared_ptr<Stream> pool, int device, const std::function<void()>& work,
                                          const char* what);

// What QKV_CUDA_GRAPHS asks of a GPU (the CPU never replays graphs; its tests emulate them):
//   unset or ""  decoding: the translator's static decoding (nn/static_decoding.h) and the decoder-only
//                models' buckets (decode/paged_graphs.h) replay each step from a CUDA graph — 2.3× the
//                eager translator (f32) and 1.4–1.6× GPT-2's batched decoding on an H200 (docs/CUDA.md,
//                "Measured", 2026-12-04), the same tokens —, a training step eagerly
//   "1"          a training step recorded and replayed as well (train/step_graph.h: opt-in until a GPU
//                times it)
//   "0"          no graphs: every step launched kernel by kernel
// Any other value is a qkv::Error naming the variable and the value.
enum class GraphUse : uint8_t { none, decoding, decoding_and_training };
GraphUse graph_use();

// Whether the calling thread is capturing a graph now (what must not wait for the GPU).
bool is_capturing();

// The CPU's stand-in for a capture (train/step_graph.h's emulated recording; any build): while one
// lives on the calling thread, reading a tensor's values on the host — Tensor::item, to_vector,
// to_ints, what inside a real capture would wait for the GPU — is a qkv::Error naming the call, as a
// capture's refusal is. So a step the CPU's tests record would not wait inside a GPU's capture either.
class EmulatedCapture {
 public:
  EmulatedCapture();
  ~EmulatedCapture();
  EmulatedCapture(const EmulatedCapture&) = delete;
  EmulatedCapture& operator=(const EmulatedCapture&) = delete;

 private:
  bool before_;
};
// Throws, naming `what`, inside an EmulatedCapture (core's host reads call it).
void refuse_in_emulated_capture(const char* what);

// The device allocator (torch.cuda.memory_allocated / memory_reserved / empty_cache).
int64_t memory_allocated(int device = 0);  // bytes in blocks held by tensors
int64_t memory_reserved(int device = 0);   // bytes taken from the driver: held + cached
int64_t max_memory_allocated(int device = 0);
void empty_cache();                        // returns every cached, unused block to the driver
// Bytes the kernels' temporaries pool (cudaMallocAsync's, apart from the tensors') holds from the
// driver: kept across waits, returned by empty_cache.
int64_t scratch_reserved(int device = 0);

// A failing CUDA runtime call → qkv::Error (used through QKV_CUDA_CHECK by core and the kernels).
[[noreturn]] void fail(int code, const char* call, const char* file, int line);

}  // namespace qkv::cuda

// QKV_CUDA_CHECK(cudaMalloc(&p, n)): the call, and a qkv::Error naming it if it did not succeed.
#define QKV_CUDA_CHECK(call)                                                        \
  do {                                                                              \
    const int qkv_cuda_status_ = static_cast<int>(call);                            \
    if (qkv_cuda_status_ != 0) ::qkv::cuda::fail(qkv_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)
