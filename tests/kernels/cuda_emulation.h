// CUDA kernels run on the host, unchanged, for the tests: a block's threads are fibers (Boost.Context) on
// one OS thread, switched at every barrier, so a kernel runs exactly as written — its shared memory,
// its warps' shuffles, ldmatrix and tensor-core products (mma.sync m16n8k8 .tf32 and m16n8k16
// bf16/f16, from the PTX ISA's fragment tables; Hopper's warpgroup products, wgmma m64nNk16 bf16/f16,
// from shared memory through its matrix descriptors and 128-byte swizzle, and from registers), its
// __syncthreads, named barriers, mbarriers and TMA bulk tensor copies — and deterministically. A barrier
// some threads never reach (a warp collective under divergent control flow, a __syncthreads skipped
// by some) is reported, not hung. cp.async's copies land at the cp.async.wait_group that retires them
// (kernels/cuda/attention_tiles.cuh under QKV_CUDA_EMULATION), so a tile read before its wait is read
// stale; a TMA copy lands at once (its bytes complete on its mbarrier). wgmma is asynchronous, as
// on the GPU: computed at the wgmma.wait_group that retires it, from the shared memory and
// accumulators of that moment, so a buffer overwritten or an accumulator touched between a
// product's issue and its wait shows in the results. The fences a GPU needs and never reports
// missing (it computes with stale bytes: a wrong answer) are checked: shared memory the threads
// wrote (stores, cp.async: the generic proxy) that wgmma or a bulk copy (the async proxy) reads
// with no fence.proxy.async since, and registers a thread wrote after its last wgmma.fence that a
// product reads or writes, throw. Everything else a kernel computes is the GPU's arithmetic up to
// the order of the tensor core's sums.
//
// Use: include this first (it includes the CUDA headers, then defines the built-ins), then the kernel
// header; run a grid with emulation::launch(grid, threads, shared_bytes, [&] { kernel<…>(args…); }).
// Dynamic shared memory is the `smem` array defined below. Needs the CUDA toolkit's headers (a
// QKV_CUDA build), not a GPU.
#pragma once

#include <cublasLt.h>   // cuBLASLt's types (its calls: emulated below)
#include <cublas_v2.h>  // cuBLAS's types (its calls: emulated below)
#include <cuda.h>       // CUtensorMap (the header only)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>  // fmaxf, exp2f, INFINITY in the global namespace, as nvcc has them

// The threads' fibers: Boost.Context's own context switch (a few registers saved and restored, no system
// call), where ucontext's swapcontext made a system call each switch (the signal mask) — the emulation
// tests spent more time in the kernel than in their kernels.
#include <boost/context/fiber.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "qkv/core/cuda.h"   // CheckMessage (the deferred checks', emulated below)
#include "qkv/core/error.h"

#define QKV_CUDA_EMULATION 1

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define QKV_EMULATION_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define QKV_EMULATION_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define QKV_EMULATION_POISON(p, n) ((void)(p), (void)(n))
#define QKV_EMULATION_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

// AddressSanitizer told of each switch between the launch's stack and a fiber's (its fiber API): begin
// names the stack switched to and keeps the one left's fake frames (none where it ends: nullptr), end
// takes them back and learns the stack switched from. Nothing without ASan.
namespace qkv::emulation {
#if defined(__SANITIZE_ADDRESS__)
inline void stack_switch_begin(void** fake, const void* bottom, size_t size) {
  __sanitizer_start_switch_fiber(fake, bottom, size);
}
inline void stack_switch_end(void* fake, const void** bottom, size_t* size) {
  __sanitizer_finish_switch_fiber(fake, bottom, size);
}
#else
inline void stack_switch_begin(void**, const void*, size_t) {}
inline void stack_switch_end(void*, const void**, size_t*) {}
#endif
}  // namespace qkv::emulation

// The blocks' dynamic shared memory: what qkv's kernels declare by QKV_DYNAMIC_SHARED (launch.h: here a
// pointer to the launching runtime's), and a test's own kernels (in qkv::kernels::cuda's unnamed
// namespace) as `extern __shared__ … smem[]` — one block runs at a time; as much as Hopper gives a block;
// under AddressSanitizer the bytes past what the launch asked for are poisoned, so a kernel
// reading or writing past its own shared memory is reported. Each test file has its own (the
// kernels' declaration binds to their unnamed namespace); launch(), internal to each file too, hands
// it to the runtime, through which every other function reads it — those have external linkage and
// are one copy for all the files (as the kernels' helpers outside unnamed namespaces, which reach
// the runtime through blockIdx and threadIdx), so none may name a file's own `smem`.
namespace qkv::kernels::cuda {
namespace {
alignas(1024) unsigned char smem[227 * 1024];  // 1024: wgmma's swizzle atoms, as a GPU's
}  // namespace
}  // namespace qkv::kernels::cuda

namespace qkv::emulation {

constexpr size_t kSharedBytes = 227 * 1024;

struct Runtime {
  static constexpr size_t kStack = 256 * 1024;
  struct Fiber {
    // the thread while it waits (empty while it runs and once it ended). In a union, so that a thread
    // left waiting when its block stops on another's failure is dropped with the runtime, as a GPU drops
    // it, not unwound: ~fiber would throw through the kernel's frames from the barrier it waits at.
    union {
      boost::context::fiber ctx;
    };
    std::unique_ptr<char[]> stack = std::make_unique<char[]>(kStack);
    bool done = false;
    void* asan_frames = nullptr;  // its fake frames while it waits (AddressSanitizer)
    Fiber() : ctx() {}
    Fiber(Fiber&& o) noexcept
        : ctx(std::move(o.ctx)), stack(std::move(o.stack)), done(o.done), asan_frames(o.asan_frames) {}
    ~Fiber() {}
  };
  // a fiber's stack: the launch's, reused by each block (a fiber places its own record at the top)
  struct FiberStack {
    char* base;
    boost::context::stack_context allocate() const {
      boost::context::stack_context s;
      s.size = kStack;
      s.sp = base + kStack;
      return s;
    }
    void deallocate(boost::context::stack_context&) const noexcept {}
  };
  std::vector<Fiber> fibers;
  boost::context::fiber scheduler;     // the launch, while a thread runs
  void* launch_asan_frames = nullptr;  // the launch's stack, for AddressSanitizer
  const void* launch_stack = nullptr;
  size_t launch_stack_size = 0;
  int current = 0;
  uint3 block{0, 0, 0};
  dim3 grid{1, 1, 1};
  unsigned threads = 0;
  std::function<void()> body;
  // barriers: arrivals and generation (a barrier completes when the generation moves on)
  unsigned block_arrived = 0;
  uint64_t block_generation = 0;
  std::vector<unsigned> warp_arrived, warpgroup_arrived;
  std::vector<uint64_t> warp_generation, warpgroup_generation;
  uint64_t events = 0;  // arrivals, completions: a scheduler round without one is a deadlock
  // what a warp's lanes exchange at a collective
  struct Slots {
    float a[32][4], b[32][2];
    uint32_t ua[32][4], ub[32][2];  // 16-bit pairs
    const uint16_t* row[32];        // ldmatrix's row addresses
    unsigned char word[32][8];
  };
  std::vector<Slots> slots;
  struct WarpgroupSlots {  // what a warpgroup's 128 threads give a wgmma
    uint32_t a[128][4];    // A from registers
    uint64_t da[128], db[128];
    bool from_registers[128], accumulate[128], trans_a[128], trans_b[128];
  };
  std::vector<WarpgroupSlots> warpgroup_slots;
  // A thread's asynchronous operations by commit group (wgmma's and cp.async's groups): issue() queues
  // one in the open group, commit() closes it, retire(n, f) runs f on every operation of the groups but
  // the newest n, in issue order (n < 0: all of them, committed or not)
  template <typename Op>
  struct CommitGroups {
    struct Entry {
      Op op;
      uint64_t group;
    };
    std::vector<Entry> pending;
    uint64_t commits = 0;
    void issue(const Op& op) { pending.push_back({op, commits}); }
    void commit() { ++commits; }
    template <typename F>
    void retire(int n, F f) {
      size_t done = 0;
      for (; done < pending.size(); ++done) {
        if (n >= 0 && pending[done].group + n >= commits) break;
        f(pending[done].op);
      }
      pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(done));
    }
  };
  // each thread's wgmma products issued and not yet waited for: its part of the product (its accumulator
  // array, its two rows' A values if A came from registers), computed at the wgmma.wait_group that
  // retires its commit group — reading shared memory then, as the tensor cores may
  struct PendingWgmma {
    float (*value)(uint16_t bits);  // a 16-bit element's value (bf16 or f16)
    float* d;
    int n;  // accumulators (N / 2)
    bool accumulate, a_from_registers;
    float a[2][16];  // A's values of this thread's rows g and g + 8 (from registers)
    uint64_t da, db;
    bool trans_a, trans_b;  // A M-major, B N-major (the instruction's transpose bits)
  };
  std::vector<CommitGroups<PendingWgmma>> wgmma;
  // each thread's cp.async copies not yet landed (16 bytes each; invalid ones write zeros), by group
  struct PendingCopy {
    unsigned char* dst;
    const unsigned char* src;  // null: zeros
  };
  std::vector<CommitGroups<PendingCopy>> copies;
  // each thread's bulk reductions into global memory (cp.reduce.async.bulk .add.f32) not yet done, by
  // bulk group: done — their shared-memory source read — at the wait that retires them
  struct PendingReduce {
    float* dst;
    const float* src;
    uint32_t floats;
  };
  std::vector<CommitGroups<PendingReduce>> reduces;
  std::exception_ptr failure;  // the first exception a thread threw
  unsigned char* smem = nullptr;  // the launching file's shared memory (kSharedBytes)
  size_t shared = 0;              // the bytes of it the launch asked for
  // Shared memory as the async proxy (wgmma's operands, bulk copies' sources) sees it: the threads'
  // stores and cp.async's copies (the generic proxy) reach it only through fence.proxy.async — here
  // published at the first such read after a fence (`fenced`), every byte at once; TMA's copies (the
  // async proxy) write both. A read whose bytes differ between the two was written and not fenced.
  std::vector<unsigned char> async_view;
  bool fenced = false;
  // wgmma.fence, by thread: how many it has issued, and the register arrays (accumulators, A
  // fragments) its products have used, with their bytes as of its last fence or the last product
  // that wrote them — a product whose registers differ from those the thread wrote them after its
  // last fence (PTX ISA: wgmma.fence between a register access and a wgmma that accesses them)
  struct FencedRegisters {
    const void* at;
    std::vector<unsigned char> bytes;
  };
  std::vector<uint64_t> wgmma_fences;
  std::vector<std::vector<FencedRegisters>> fenced_registers;
  // Hopper's mbarriers, by shared-memory address: expected arrivals, arrivals still to come, bytes
  // announced and not yet landed, completed phases
  struct MBarrier {
    unsigned expected = 0, pending = 0;
    int64_t tx = 0;
    uint64_t phase = 0;
  };
  std::map<uint32_t, MBarrier> mbarriers;
  // named barriers 1–15 (bar.sync / bar.arrive; 0 is __syncthreads)
  struct Named {
    unsigned arrived = 0, threads = 0;
    uint64_t generation = 0;
  };
  Named named[16];
  // setmaxnreg: each warp's registers a thread, and the block's pool of registers released and not yet
  // taken back. A block starts with what its launch bound gives a thread (a warp-specialized kernel's
  // 384 threads: 168, as ptxas allots them), its pool empty.
  std::vector<unsigned> warp_registers;
  uint64_t register_pool = 0;
};

inline Runtime*& runtime() {
  static Runtime* r = nullptr;
  return r;
}

// The order in which launch() runs a block's threads, each until it waits (a GPU gives none between
// warps): round_robin — thread 0 to the last, again, so that the warps advance about together;
// first_ahead / last_ahead — the warps of lower (higher) index run as far as they can before any other
// moves, so that a warp running ahead of another that still reads a buffer (through a product not yet
// waited for) overwrites it, and the race shows in the results; random_ahead — the warps in an order
// drawn again each time one moves (QKV_EMULATION_SEED, default 1: the same draws each run), the
// interleavings between those two. QKV_EMULATION_SCHEDULE=first_ahead / last_ahead / random_ahead
// sets the default for a run; a test sets one with ScheduleScope.
enum class Schedule { round_robin, first_ahead, last_ahead, random_ahead };
inline Schedule& schedule() {
  static Schedule s = [] {
    const char* e = std::getenv("QKV_EMULATION_SCHEDULE");
    if (e && std::strcmp(e, "first_ahead") == 0) return Schedule::first_ahead;
    if (e && std::strcmp(e, "last_ahead") == 0) return Schedule::last_ahead;
    if (e && std::strcmp(e, "random_ahead") == 0) return Schedule::random_ahead;
    return Schedule::round_robin;
  }();
  return s;
}
inline std::mt19937_64& schedule_draws() {
  static std::mt19937_64 g([] {
    const char* e = std::getenv("QKV_EMULATION_SEED");
    return e ? std::strtoull(e, nullptr, 10) : 1ull;
  }());
  return g;
}
struct ScheduleScope {
  Schedule saved;
  explicit ScheduleScope(Schedule s) : saved(schedule()) { schedule() = s; }
  ~ScheduleScope() { schedule() = saved; }
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;
};
inline const char* name(Schedule s) {
  return s == Schedule::first_ahead    ? "first_ahead"
         : s == Schedule::last_ahead   ? "last_ahead"
         : s == Schedule::random_ahead ? "random_ahead"
                                       : "round_robin";
}

inline void yield() {
  Runtime& r = *runtime();
  Runtime::Fiber& f = r.fibers[r.current];
  stack_switch_begin(&f.asan_frames, r.launch_stack, r.launch_stack_size);
  r.scheduler = std::move(r.scheduler).resume();
  stack_switch_end(f.asan_frames, &r.launch_stack, &r.launch_stack_size);
}

inline void wait_for(unsigned& arrived, uint64_t& generation, unsigned count) {
  Runtime& r = *runtime();
  const uint64_t mine = generation;
  ++r.events;
  if (++arrived == count) {
    arrived = 0;
    ++generation;
    return;
  }
  while (generation == mine) yield();
}

// __syncthreads(): every thread of the block
inline void sync_threads() {
  Runtime& r = *runtime();
  wait_for(r.block_arrived, r.block_generation, r.threads);
}
// every lane of the calling thread's warp (a .sync collective's convergence)
inline void sync_warp() {
  Runtime& r = *runtime();
  const int w = r.current / 32;
  wait_for(r.warp_arrived[w], r.warp_generation[w], 32);
}

// every thread of the calling thread's warpgroup (4 warps: wgmma's .sync.aligned)
inline void sync_warpgroup() {
  Runtime& r = *runtime();
  const int g = r.current / 128;
  wait_for(r.warpgroup_arrived[g], r.warpgroup_generation[g], 128);
}

inline Runtime::Slots& warp_slots() {
  Runtime& r = *runtime();
  return r.slots[r.current / 32];
}
inline int lane() { return runtime()->current % 32; }

// A warp's shuffle: each lane gives v and gets lane from(lane)'s (the .sync collectives' exchange)
template <typename T, typename From>
T shuffle(T v, From from) {
  static_assert(sizeof(T) <= 8);
  Runtime::Slots& s = warp_slots();
  std::memcpy(s.word[lane()], &v, sizeof v);
  sync_warp();
  T out;
  std::memcpy(&out, s.word[from(lane()) & 31], sizeof out);
  sync_warp();
  return out;
}
// __shfl_xor_sync(full mask, v, m): lane l gets lane l ^ m's value
template <typename T>
T shfl_xor(T v, int m) {
  return shuffle(v, [m](int l) { return l ^ m; });
}
// __shfl_sync(full mask, v, src): every lane gets lane src's value (src taken mod 32)
template <typename T>
T shfl(T v, int src) {
  return shuffle(v, [src](int) { return src; });
}
// __ballot_sync(full mask, p): every lane gets the warp's votes, bit l lane l's p
inline unsigned ballot(bool p) {
  Runtime::Slots& s = warp_slots();
  const uint32_t mine = p ? 1u : 0u;
  std::memcpy(s.word[lane()], &mine, sizeof mine);
  sync_warp();
  unsigned out = 0;
  for (int l = 0; l < 32; ++l) {
    uint32_t v;
    std::memcpy(&v, s.word[l], sizeof v);
    out |= (v & 1u) << l;
  }
  sync_warp();
  return out;
}

// What the tensor core reads of a .tf32 operand register: its 19 high bits
inline float tf32_operand(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, c += a·b over the warp. The PTX ISA's fragment
// tables (g = lane / 4, t = lane % 4): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g),
// b1 (t+4, g); c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1). Each lane computes its own
// four sums from the warp's fragments, k in order, in f32 (products of TF32 values are exact).
inline void mma_m16n8k8_tf32(float (&c)[4], const float (&a)[4], const float (&b)[2]) {
  Runtime::Slots& s = warp_slots();
  const int l = lane();
  std::memcpy(s.a[l], a, sizeof a);
  std::memcpy(s.b[l], b, sizeof b);
  sync_warp();
  auto A = [&](int m, int k) { return s.a[4 * (m % 8) + k % 4][m / 8 + 2 * (k / 4)]; };
  auto B = [&](int k, int n) { return s.b[4 * n + k % 4][k / 4]; };
  const int g = l / 4, t = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int m = g + 8 * (e / 2), n = 2 * t + e % 2;
    float sum = c[e];
    for (int k = 0; k < 8; ++k) sum += tf32_operand(A(m, k)) * tf32_operand(B(k, n));
    c[e] = sum;
  }
  sync_warp();
}

// a 16-bit element of a register (the low half the lower-indexed element) as a float
inline float bf16_value(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
inline float f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float x = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                  : e == 31 ? (m ? NAN : INFINITY)
                            : std::ldexp(static_cast<float>(m | 0x400), e - 25);
  return h & 0x8000 ? -x : x;
}
template <typename T>
float half_of(uint32_t reg, int hi) {
  const uint16_t b = static_cast<uint16_t>(hi ? reg >> 16 : reg & 0xffffu);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return bf16_value(b);
  else return f16_value(b);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}, c += a·b over the warp (PTX ISA's tables, g = lane
// / 4, t = lane % 4, each register two elements, the lower-indexed in the low half): a0 (g; 2t, 2t+1),
// a1 (g+8; 2t, 2t+1), a2 (g; 2t+8, 2t+9), a3 (g+8; 2t+8, 2t+9); b0 (2t, 2t+1; g), b1 (2t+8, 2t+9; g);
// c as m16n8k8's. Products of 16-bit values are exact in f32; k summed in order.
template <typename T>
void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Runtime::Slots& s = warp_slots();
  const int l = lane();
  std::memcpy(s.ua[l], a, sizeof a);
  s.ub[l][0] = b0, s.ub[l][1] = b1;
  sync_warp();
  auto A = [&](int m, int k) { return half_of<T>(s.ua[4 * (m % 8) + (k % 8) / 2][m / 8 + 2 * (k / 8)], k % 2); };
  auto B = [&](int k, int n) { return half_of<T>(s.ub[4 * n + (k % 8) / 2][k / 8], k % 2); };
  const int g = l / 4, t = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int m = g + 8 * (e / 2), n = 2 * t + e % 2;
    float sum = c[e];
    for (int k = 0; k < 16; ++k) sum += A(m, k) * B(k, n);
    c[e] = sum;
  }
  sync_warp();
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8i + r gives the address of row r of 8 × 8
// matrix i; register i of lane l gets that matrix's elements (l/4; 2(l%4), 2(l%4)+1), or with .trans
// (2(l%4), 2(l%4)+1; l/4)
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p, bool trans) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0)  // shared memory starts 1024-aligned, as a GPU's
    throw std::logic_error("emulation: an ldmatrix row address not 16-byte aligned (a GPU's misaligned address)");
  Runtime::Slots& s = warp_slots();
  const int l = lane();
  s.row[l] = static_cast<const uint16_t*>(p);
  sync_warp();
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = trans ? s.row[8 * i + 2 * (l % 4)][l / 4] : s.row[8 * i + l / 4][2 * (l % 4)];
    const uint16_t hi = trans ? s.row[8 * i + 2 * (l % 4) + 1][l / 4] : s.row[8 * i + l / 4][2 * (l % 4) + 1];
    r[i] = lo | uint32_t{hi} << 16;
  }
  sync_warp();
}

// The address a kernel computes for shared memory (cvta to the shared window): the offset into the
// emulation's shared memory.
inline uint32_t shared_address(const void* p) {
  const unsigned char* smem = runtime()->smem;
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < smem || c > smem + kSharedBytes)
    throw std::logic_error("emulation: a shared-memory address outside shared memory");
  return static_cast<uint32_t>(c - smem);
}

// ---- the async proxy's view of shared memory (PTX ISA, "Proxies": fence.proxy.async) ---------------

// fence.proxy.async.shared::cta: what the threads wrote to shared memory so far becomes visible to the
// async proxy — published at its next read (publish_async_view), the writes of every thread up to
// then with it (so a thread that omits its fence while another fences is not caught: the emulation
// catches a fence missing from every thread, the usual slip)
inline void fence_proxy_async() { runtime()->fenced = true; }
inline void publish_async_view() {
  Runtime& r = *runtime();
  if (!r.fenced) return;
  std::memcpy(r.async_view.data(), r.smem, r.shared);
  r.fenced = false;
}
// An async-proxy read of shared memory bytes [a, a + n): they must lie inside the launch's shared
// memory and be as the async proxy sees them.
inline void check_async_read(uint32_t a, uint32_t n, const char* reader) {
  Runtime& r = *runtime();
  if (uint64_t{a} + n > r.shared)
    throw std::logic_error(std::string("emulation: ") + reader + " reads past the launch's shared memory");
  if (std::memcmp(r.smem + a, r.async_view.data() + a, n) != 0)
    throw std::logic_error(std::string("emulation: ") + reader +
                           " reads shared memory the threads wrote (stores, cp.async) with no fence.proxy.async "
                           "after it: the async proxy may read the old bytes (fence_proxy_async before the barrier "
                           "that precedes the read)");
}

template <typename T>
float element_value(uint16_t bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return bf16_value(bits);
  else return f16_value(bits);
}

// A wgmma operand in shared memory, read through its matrix descriptor (PTX ISA, "Matrix Descriptor
// Format" and "Canonical Layouts"): start address / 16 (bits 0–13), leading byte offset / 16 (16–29),
// stride byte offset / 16 (32–45), base offset (49–51), layout (62–63). Only what qkv's kernels use is
// emulated — the 128-byte swizzle (layout 1), base offset 0 — anything else throws. The swizzle XORs
// address bits 4–6 with bits 7–9, which puts 16-byte piece c of a 128-byte row r of a 1024-byte-aligned
// atom at piece c ⊕ (r mod 8). Element (i, k) of a product's operand — i its row of M (A) or N (B), k
// < 16 along the contraction — sits at, before the swizzle:
//   K-major (transpose bit 0): start + (i / 8)·SBO + (i mod 8)·128 + 2k — rows of 64 elements along
//     the contraction, 8 rows an atom, SBO from one 8-row group to the next (LBO unused); the kernel
//     steps along the contraction by +32 bytes of start;
//   MN-major (transpose bit 1, 16-bit types): start + (i / 64)·LBO + 2·(i mod 64) + (k / 8)·SBO +
//     (k mod 8)·128 — a 128-byte row holds 64 elements of M (or N) for one k, 8 rows of k an atom, SBO
//     from one 8-k group to the next, LBO from one 64-wide block of M (N) to the next (CuTe's canonical
//     ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) in 16-byte units, T = 8, and CUTLASS's make_gmma_desc,
//     which puts the 64-block stride in LBO and the 8-k stride in SBO).
struct WgmmaOperand {
  uint32_t start = 0, leading = 0, stride = 0;
  bool mn_major = false;
  WgmmaOperand(uint64_t desc, bool mn) : mn_major(mn) {
    if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0)
      throw std::invalid_argument("emulation: a wgmma descriptor other than 128-byte swizzle, base offset 0");
    start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
    leading = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
    stride = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  }
  // the shared-memory address of element (i, k)
  uint32_t address(int i, int k) const {
    const uint32_t a = mn_major ? start + static_cast<uint32_t>(i / 64) * leading + 2 * static_cast<uint32_t>(i % 64) +
                                      static_cast<uint32_t>(k / 8) * stride + static_cast<uint32_t>(k % 8) * 128
                                : start + static_cast<uint32_t>(i / 8) * stride + static_cast<uint32_t>(i % 8) * 128 +
                                      2 * static_cast<uint32_t>(k);
    const uint32_t swizzled = a ^ (((a >> 7) & 7u) << 4);
    if (swizzled + 2 > kSharedBytes) throw std::logic_error("emulation: a wgmma operand past shared memory");
    return swizzled;
  }
  uint16_t bits(int i, int k) const {
    uint16_t v;
    std::memcpy(&v, runtime()->smem + address(i, k), 2);
    return v;
  }
  // every element of rows [0, rows) × k [0, 16) as the async proxy sees it (check_async_read)
  void check_visible(int rows) const {
    for (int i = 0; i < rows; ++i)
      for (int k = 0; k < 16; ++k) check_async_read(address(i, k), 2, "a wgmma operand");
  }
  // an MN-major operand wider than one 64-element block needs its LBO; a stride of 0 is a kernel's slip
  void check(int extent) const {
    if (stride == 0) throw std::invalid_argument("emulation: a wgmma descriptor with no stride byte offset");
    if (mn_major && extent > 64 && leading == 0)
      throw std::invalid_argument("emulation: an MN-major wgmma operand wider than 64 with no leading byte offset");
  }
};

// The bytes of a register array noted at a fence: an array an earlier product used may lie in a frame
// of the fiber's stack that has since returned (its bytes are noted all the same, and compared only
// should the same address serve a product again) — a copy AddressSanitizer does not check.
__attribute__((no_sanitize("address"))) inline void note_bytes(unsigned char* dst, const void* src, size_t n) {
  const volatile unsigned char* s = static_cast<const volatile unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = s[i];
}
// wgmma.fence.sync.aligned: the thread's register accesses so far ordered before the products it issues
// next — here, the bytes of every register array its products have used, noted
inline void wgmma_fence() {
  Runtime& r = *runtime();
  ++r.wgmma_fences[r.current];
  for (auto& f : r.fenced_registers[r.current]) note_bytes(f.bytes.data(), f.at, f.bytes.size());
}
// The current thread's noted bytes of the `n` register bytes at `at`, or null where none are noted.
inline Runtime::FencedRegisters* noted_registers(const void* at, size_t n) {
  Runtime& r = *runtime();
  for (auto& f : r.fenced_registers[r.current])
    if (f.at == at && f.bytes.size() == n) return &f;
  return nullptr;
}
// A product's registers (`n` bytes at `at`): as the thread's last wgmma.fence (or the last product
// that wrote them) left them. Registers a product uses for the first time cannot be checked so —
// only that the thread has fenced at all.
inline void check_fenced(const void* at, size_t n) {
  Runtime& r = *runtime();
  if (r.wgmma_fences[r.current] == 0)
    throw std::logic_error("emulation: a wgmma issued before the thread's first wgmma.fence (wgmma_fence)");
  if (const Runtime::FencedRegisters* f = noted_registers(at, n)) {
    if (std::memcmp(f->bytes.data(), at, n) != 0)
      throw std::logic_error(
          "emulation: a wgmma reads or writes registers (accumulators, A fragments) the thread wrote after its "
          "last wgmma.fence (wgmma_fence after the last write, before the product)");
    return;
  }
  const auto* c = static_cast<const unsigned char*>(at);
  r.fenced_registers[r.current].push_back({at, std::vector<unsigned char>(c, c + n)});
}
// the product's own writes to its accumulators (at its wait) are no access by the thread
inline void note_product_wrote(const void* at, size_t n) {
  if (Runtime::FencedRegisters* f = noted_registers(at, n)) std::memcpy(f->bytes.data(), at, n);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}, d (+)= a·b over the warpgroup (128 threads):
// A 64 × 16 from shared memory (descriptor da; M-major where trans_a) or, where `a` is given, from
// registers; B 16 × N from shared memory (db: K-major, or N-major where trans_b); scale-d `accumulate`
// (false: d = a·b). Layouts (PTX ISA,
// warp w of the warpgroup owning rows 16w…16w+15, g = lane / 4, t = lane % 4): accumulator element i is
// row 16w + g + 8·((i mod 4) / 2), column 8·(i / 4) + 2t + i mod 2; A's registers are mma.sync
// m16n8k16's A fragment of the warp's 16 rows. k summed in order in f32 (products of 16-bit values are
// exact). Every thread must issue the same descriptors: the instruction is the warpgroup's.
//
// Asynchronous as on the GPU: the issue records the product (A's registers are read now), and
// wgmma_wait(N) computes every product of the thread's commit groups but the newest N — reading the
// shared-memory operands and the accumulators then. So a kernel that overwrites (or lets a producer
// overwrite) an operand's buffer, or reads or writes an accumulator, between a product's issue and
// its wait gets another answer, and a product never waited for is reported at the block's end.
template <typename T, int N>
void wgmma_m64nNk16(float (&d)[N / 2], const uint32_t* a, uint64_t da, uint64_t db, bool accumulate,
                    bool trans_a = false, bool trans_b = false) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256);
  Runtime& r = *runtime();
  if (r.threads % 128 != 0) throw std::logic_error("emulation: wgmma in a block that is not whole warpgroups");
  const int me = r.current % 128;
  Runtime::WarpgroupSlots& s = r.warpgroup_slots[r.current / 128];
  if (a) std::memcpy(s.a[me], a, sizeof s.a[me]);
  if (a && trans_a) throw std::logic_error("emulation: wgmma with A from registers has no transpose bit for A");
  s.da[me] = a ? 0 : da, s.db[me] = db, s.from_registers[me] = a != nullptr, s.accumulate[me] = accumulate;
  s.trans_a[me] = trans_a, s.trans_b[me] = trans_b;
  sync_warpgroup();
  for (int i = 1; i < 128; ++i)
    if (s.da[i] != s.da[0] || s.db[i] != s.db[0] || s.from_registers[i] != s.from_registers[0] ||
        s.accumulate[i] != s.accumulate[0] || s.trans_a[i] != s.trans_a[0] || s.trans_b[i] != s.trans_b[0])
      throw std::logic_error("emulation: a warpgroup's threads issued different wgmma operands");
  check_fenced(d, sizeof d);
  if (a) check_fenced(a, 4 * sizeof(uint32_t));
  WgmmaOperand(db, trans_b).check(N);  // a descriptor the emulation does not know throws at the issue
  if (!a) WgmmaOperand(da, trans_a).check(64);
  if (me == 0) {  // the operands' bytes as the async proxy sees them, once for the warpgroup
    publish_async_view();
    WgmmaOperand(db, trans_b).check_visible(N);
    if (!a) WgmmaOperand(da, trans_a).check_visible(64);
  }
  Runtime::PendingWgmma op{element_value<T>, d, N / 2, accumulate, a != nullptr, {}, da, db, trans_a, trans_b};
  const int w = me / 32, g = me % 32 / 4;
  if (a) {
    for (int e = 0; e < 2; ++e) {
      const int mm = g + 8 * e;
      for (int k = 0; k < 16; ++k)
        op.a[e][k] = half_of<T>(s.a[32 * w + 4 * (mm % 8) + (k % 8) / 2][mm / 8 + 2 * (k / 8)], k % 2);
    }
  }
  r.wgmma[r.current].issue(op);
  sync_warpgroup();  // every thread has read the others' registers before any issues again
}
// wgmma.commit_group: the products issued since the last commit form a group
inline void wgmma_commit() { runtime()->wgmma[runtime()->current].commit(); }
// wgmma.wait_group N: every product of the calling thread's groups but the newest N computed, in order
inline void wgmma_wait(int n) {
  Runtime& r = *runtime();
  const int me = r.current % 128, w = me / 32, g = me % 32 / 4, tt = me % 4;
  r.wgmma[r.current].retire(n, [&](const Runtime::PendingWgmma& op) {
    const WgmmaOperand A(op.a_from_registers ? uint64_t{1} << 62 : op.da, op.trans_a), B(op.db, op.trans_b);
    float a[2][16];  // this thread's two rows of A
    for (int e = 0; e < 2; ++e)
      for (int k = 0; k < 16; ++k) a[e][k] = op.a_from_registers ? op.a[e][k] : op.value(A.bits(16 * w + g + 8 * e, k));
    // accumulator i: row e = i % 4 / 2 of the two, column 8 (i / 4) + 2 tt + i % 2 — each column read once
    for (int j = 0; j < op.n / 4; ++j)
      for (int c = 0; c < 2; ++c) {
        float b[16];
        for (int k = 0; k < 16; ++k) b[k] = op.value(B.bits(8 * j + 2 * tt + c, k));
        for (int e = 0; e < 2; ++e) {
          float& d = op.d[4 * j + 2 * e + c];
          float sum = op.accumulate ? d : 0.f;
          for (int k = 0; k < 16; ++k) sum += a[e][k] * b[k];
          d = sum;
        }
      }
    note_product_wrote(op.d, op.n * sizeof(float));
  });
}

// ---- cp.async (kernels/cuda/attention_tiles.cuh) -----------------------------------------------------

// cp.async.cg.shared.global 16 bytes (src-size 0 where !valid: zeros), landing at the wait that
// retires its group — the latest a GPU may land it, so a tile read before its wait is read stale
inline void cp_async16(void* dst, const void* src, bool valid) {
  Runtime& r = *runtime();
  (void)shared_address(dst);  // inside shared memory
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || (valid && reinterpret_cast<uintptr_t>(src) % 16 != 0))
    throw std::logic_error(
        "emulation: a 16-byte cp.async from or to an address not 16-byte aligned (a GPU's misaligned address)");
  r.copies[r.current].issue(
      {static_cast<unsigned char*>(dst), valid ? static_cast<const unsigned char*>(src) : nullptr});
}
inline void cp_async_commit() { runtime()->copies[runtime()->current].commit(); }
// cp.async.wait_group N: every copy of the thread's groups but the newest N lands (N < 0: every copy,
// committed or not, as at the thread's end)
inline void cp_async_wait(int n) {
  runtime()->copies[runtime()->current].retire(n, [](const Runtime::PendingCopy& c) {
    if (c.src) std::memcpy(c.dst, c.src, 16);
    else std::memset(c.dst, 0, 16);
  });
}

// ---- Hopper's asynchronous copies and barriers (kernels/cuda/sm90a/tma.cuh) -------------------------

inline Runtime::MBarrier& mbarrier_at(uint32_t a) {
  auto it = runtime()->mbarriers.find(a);
  if (it == runtime()->mbarriers.end()) throw std::logic_error("emulation: an mbarrier used before mbarrier.init");
  return it->second;
}
// a phase completes when every expected arrival has arrived and every announced byte has landed
inline void mbarrier_settle(Runtime::MBarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.expected;
    ++runtime()->events;
  }
}
inline void mbarrier_init(uint32_t a, unsigned count) {
  if (a % 8 != 0) throw std::logic_error("emulation: an mbarrier not 8-byte aligned");
  if (count == 0 || count >= (1u << 20)) throw std::logic_error("emulation: an mbarrier expects 1 to 2^20 − 1 arrivals");
  runtime()->mbarriers[a] = Runtime::MBarrier{count, count, 0, 0};
}
// mbarrier.arrive (bytes 0) or mbarrier.arrive.expect_tx (`bytes` more to land in this phase)
inline void mbarrier_arrive(uint32_t a, unsigned bytes) {
  Runtime::MBarrier& b = mbarrier_at(a);
  if (b.pending == 0) throw std::logic_error("emulation: more arrivals at an mbarrier than it expects");
  b.tx += bytes;
  if (b.tx >= (int64_t{1} << 20))  // the PTX ISA's range of an mbarrier's transaction count
    throw std::logic_error("emulation: an mbarrier phase expecting 2^20 bytes or more (its tx-count's range)");
  --b.pending;
  ++runtime()->events;
  mbarrier_settle(b);
  yield();  // the others run now: what an arrival releases (a buffer to its producer) may happen at once
}
// a copy's bytes landed (complete_tx)
inline void mbarrier_complete_tx(uint32_t a, unsigned bytes) {
  Runtime::MBarrier& b = mbarrier_at(a);
  b.tx -= bytes;
  ++runtime()->events;
  mbarrier_settle(b);
}
// mbarrier.try_wait.parity in a loop: returns once the phase of parity `parity` has completed, i.e.
// while the current phase has the other parity (on a fresh barrier, parity 1 returns at once)
inline void mbarrier_wait(uint32_t a, unsigned parity) {
  while ((mbarrier_at(a).phase & 1) == (parity & 1)) yield();
}

// setmaxnreg.dec / .inc to `count` registers a thread (a multiple of 8, 24–256), by every thread of a
// warpgroup: .dec gives the warp's surplus to the block's pool; .inc waits until the pool holds what it
// asks — so warpgroups asking more than the others gave wait for ever, which launch() reports as a
// deadlock (on a GPU, a hang). Lane 0 of each warp keeps its warp's account.
inline void setmaxnreg(unsigned count, bool inc) {
  Runtime& r = *runtime();
  if (count % 8 != 0 || count < 24 || count > 256)
    throw std::logic_error("emulation: setmaxnreg takes a multiple of 8 from 24 to 256");
  if (r.current % 32 != 0) return;
  unsigned& held = r.warp_registers[r.current / 32];
  if (inc ? count < held : count > held)
    throw std::logic_error(inc ? "emulation: setmaxnreg.inc below the registers a warp holds"
                               : "emulation: setmaxnreg.dec above the registers a warp holds");
  ++r.events;
  if (!inc) {
    r.register_pool += uint64_t{held - count} * 32;
    held = count;
    return;
  }
  const uint64_t need = uint64_t{count - held} * 32;
  while (r.register_pool < need) yield();
  r.register_pool -= need;
  held = count;
}

// bar.sync (wait) / bar.arrive on named barrier id, completing at `threads` arrivals
inline void named_barrier(unsigned id, unsigned threads, bool wait) {
  Runtime& r = *runtime();
  if (id == 0 || id > 15 || threads == 0 || threads % 32 != 0 || threads > r.threads)
    throw std::logic_error("emulation: a named barrier 1-15 of whole warps");
  Runtime::Named& n = r.named[id];
  if (n.arrived == 0) n.threads = threads;
  else if (n.threads != threads) throw std::logic_error("emulation: one named barrier used with two thread counts");
  const uint64_t mine = n.generation;
  ++r.events;
  if (++n.arrived == threads) {
    n.arrived = 0;
    ++n.generation;
    return;
  }
  if (wait)
    while (r.named[id].generation == mine) yield();
}

// A tensor map as the emulation keeps it in CUtensorMap's 128 opaque bytes: a rank-3 tensor of 16-bit
// elements and the box a copy moves, {64, rows, 1}, with the 128-byte swizzle. encode_tensor_map
// checks what the driver's cuTensorMapEncodeTiled would refuse.
struct TensorMapFields {
  uint64_t magic;
  const unsigned char* base;
  uint64_t dims[3], strides[2];
  uint32_t rows, element_bytes;
};
static_assert(sizeof(TensorMapFields) <= sizeof(CUtensorMap));
constexpr uint64_t kTensorMapMagic = 0x716b76746d61ull;
inline void encode_tensor_map(CUtensorMap& map, const void* base, unsigned element_bytes, const uint64_t (&dims)[3],
                              const uint64_t (&strides)[2], uint32_t rows) {
  auto refuse = [](const char* why) { throw std::invalid_argument(std::string("emulation: a tensor map ") + why); };
  if (reinterpret_cast<uintptr_t>(&map) % 64 != 0) refuse("not 64-byte aligned");
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) refuse("over a base address not 16-byte aligned");
  for (uint64_t d : dims)
    if (d == 0 || d > (uint64_t{1} << 32)) refuse("with a dimension of 0 or past 2^32");
  for (uint64_t s : strides)
    if (s % 16 != 0 || s >= (uint64_t{1} << 40)) refuse("with a stride not a multiple of 16 bytes, or past 2^40");
  if (rows == 0 || rows > 256) refuse("with a box of 0 or more than 256 rows");
  if (64 * element_bytes > 128) refuse("whose box rows are wider than the 128-byte swizzle");
  TensorMapFields f{kTensorMapMagic, static_cast<const unsigned char*>(base), {dims[0], dims[1], dims[2]},
                    {strides[0], strides[1]}, rows, element_bytes};
  std::memset(&map, 0, sizeof map);
  std::memcpy(&map, &f, sizeof f);
}
// cp.async.bulk.tensor.3d …mbarrier::complete_tx::bytes [dst], [map, {c0, c1, c2}], [bar]: the box at
// element coordinates {c0, c1, c2}, zeros where it lies past the tensor, written row by row (128
// bytes each) with the 128-byte swizzle on the address (bits 4–6 ^= bits 7–9, as wgmma reads it); its
// bytes — all of the box's, the zeros too — complete on `bar`.
inline void tma_load(void* dst, const CUtensorMap& map, int c0, int c1, int c2, uint32_t bar) {
  unsigned char* smem = runtime()->smem;
  TensorMapFields f;
  std::memcpy(&f, &map, sizeof f);
  if (f.magic != kTensorMapMagic) throw std::logic_error("emulation: a TMA copy through a tensor map never encoded");
  const uint32_t a0 = shared_address(dst);
  if (a0 % 128 != 0) throw std::logic_error("emulation: a TMA copy into shared memory not 128-byte aligned");
  const unsigned eb = f.element_bytes;
  for (uint32_t r = 0; r < f.rows; ++r) {
    const int64_t i1 = int64_t{c1} + r;
    for (unsigned e = 0; e < 64; ++e) {
      const int64_t i0 = int64_t{c0} + e;
      const bool in = i0 >= 0 && i1 >= 0 && c2 >= 0 && uint64_t(i0) < f.dims[0] && uint64_t(i1) < f.dims[1] &&
                      uint64_t(c2) < f.dims[2];
      const uint32_t a = a0 + r * 128 + e * eb, swizzled = a ^ (((a >> 7) & 7u) << 4);
      if (swizzled + eb > kSharedBytes) throw std::logic_error("emulation: a TMA copy past shared memory");
      if (in) std::memcpy(smem + swizzled, f.base + uint64_t(c2) * f.strides[1] + uint64_t(i1) * f.strides[0] + i0 * eb, eb);
      else std::memset(smem + swizzled, 0, eb);
      std::memcpy(runtime()->async_view.data() + swizzled, smem + swizzled, eb);  // an async-proxy write
    }
  }
  mbarrier_complete_tx(bar, f.rows * 64 * eb);
}

// cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32: dst[i] += src[i] for `bytes` / 4 floats,
// both 16-byte aligned, bytes a multiple of 16, src in shared memory — done at the
// cp.async.bulk.wait_group(.read) that retires its bulk group, reading the source then (the latest a
// GPU may read it: a kernel that rewrites it before that wait gets another sum)
inline void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  Runtime& r = *runtime();
  (void)shared_address(src);
  if (bytes == 0 || bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(src) % 16 != 0)
    throw std::logic_error("emulation: a bulk reduction not of whole, aligned 16-byte pieces");
  (void)shared_address(reinterpret_cast<const unsigned char*>(src) + bytes - 1);
  publish_async_view();
  check_async_read(shared_address(src), bytes, "a bulk reduction's source");
  r.reduces[r.current].issue({dst, src, bytes / 4});
}
inline void bulk_commit() { runtime()->reduces[runtime()->current].commit(); }
// cp.async.bulk.wait_group(.read) N: every reduction of the thread's bulk groups but the newest N done
inline void bulk_wait(int n) {
  runtime()->reduces[runtime()->current].retire(n, [](const Runtime::PendingReduce& c) {
    for (uint32_t i = 0; i < c.floats; ++i) c.dst[i] += c.src[i];
  });
}

// A thread's body; what it throws (an emulation check, the kernel's own) is kept for launch() to
// rethrow on the host's stack — an exception cannot unwind past a fiber's first frame.
inline boost::context::fiber fiber_entry(boost::context::fiber&& launch) {
  Runtime& r = *runtime();
  stack_switch_end(nullptr, &r.launch_stack, &r.launch_stack_size);
  r.scheduler = std::move(launch);
  try {
    r.body();
    cp_async_wait(-1);  // copies a thread leaves in flight still land
    if (!r.wgmma[r.current].pending.empty())
      throw std::logic_error("emulation: a thread ended with wgmma products never waited for (wgmma.wait_group)");
    if (!r.reduces[r.current].pending.empty())
      throw std::logic_error("emulation: a thread ended with bulk reductions never waited for (cp.async.bulk.wait_group)");
  } catch (...) {
    if (!r.failure) r.failure = std::current_exception();
  }
  r.fibers[r.current].done = true;
  ++r.events;
  stack_switch_begin(nullptr, r.launch_stack, r.launch_stack_size);  // the fiber's frames end here
  return std::move(r.scheduler);
}

// Runs body() as every thread of every block of `grid` (blocks one after another, x fastest), with
// `threads` threads a block (a multiple of 32) and `shared_bytes` of dynamic shared memory. Throws if
// a block deadlocks at a barrier.
namespace {  // each file's own: it hands the runtime that file's `smem`
void launch(dim3 grid, unsigned threads, size_t shared_bytes, std::function<void()> body) {
  using ::qkv::kernels::cuda::smem;
  static_assert(sizeof smem == kSharedBytes);
  if (threads == 0 || threads % 32 != 0) throw std::invalid_argument("emulation::launch: threads a multiple of 32");
  // a GPU's own limits (compute capability 9.0): a launch past them fails there (invalid configuration)
  if (threads > 1024) throw std::invalid_argument("emulation::launch: more than 1,024 threads a block");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    throw std::invalid_argument("emulation::launch: a grid's y and z are 1 … 65,535 (x up to 2^31 − 1)");
  if (shared_bytes > sizeof smem) throw std::invalid_argument("emulation::launch: more shared memory than a block has");
  QKV_EMULATION_POISON(smem + shared_bytes, sizeof smem - shared_bytes);
  Runtime r;
  r.smem = smem;
  r.shared = shared_bytes;
  r.async_view.assign(kSharedBytes, 0);
  r.grid = grid;
  r.threads = threads;
  r.body = std::move(body);
  r.fibers.resize(threads);
  r.warp_arrived.assign(threads / 32, 0);
  r.warp_generation.assign(threads / 32, 0);
  r.warpgroup_arrived.assign(threads / 128, 0);
  r.warpgroup_generation.assign(threads / 128, 0);
  r.warpgroup_slots.resize(threads / 128);
  r.slots.resize(threads / 32);
  runtime() = &r;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        r.block = {x, y, z};
        r.mbarriers.clear();
        // the registers a thread at launch: all the launch bound allows (65536 a block, whole 8s, ≤ 256)
        r.warp_registers.assign(threads / 32, std::min(65536u / threads / 8 * 8, 256u));
        r.register_pool = 0;
        r.wgmma.assign(threads, {});
        r.copies.assign(threads, {});
        r.reduces.assign(threads, {});
        r.wgmma_fences.assign(threads, 0);
        r.fenced_registers.assign(threads, {});
        std::memcpy(r.async_view.data(), smem, shared_bytes);  // what the block finds, alike in both
        r.fenced = false;
        for (auto& n : r.named) n = Runtime::Named{};
        for (auto& f : r.fibers) {
          f.done = false;
          f.ctx = boost::context::fiber(std::allocator_arg, Runtime::FiberStack{f.stack.get()}, fiber_entry);
        }
        auto run = [&](unsigned i) {  // thread i until it waits or ends
          if (r.fibers[i].done) return;
          r.current = static_cast<int>(i);
          stack_switch_begin(&r.launch_asan_frames, r.fibers[i].stack.get(), Runtime::kStack);
          r.fibers[i].ctx = std::move(r.fibers[i].ctx).resume();
          stack_switch_end(r.launch_asan_frames, nullptr, nullptr);
          if (r.failure) {  // a thread threw: the block stops there (the other fibers are dropped)
            runtime() = nullptr;
            QKV_EMULATION_UNPOISON(smem, sizeof smem);
            std::rethrow_exception(r.failure);
          }
        };
        const Schedule order = schedule();
        std::vector<unsigned> ranks(threads / 32);  // random_ahead's order of the warps
        for (unsigned w = 0; w < ranks.size(); ++w) ranks[w] = w;
        for (;;) {
          const uint64_t before = r.events;
          if (order == Schedule::round_robin) {
            for (unsigned i = 0; i < threads; ++i) run(i);
          } else {  // a round of the first warp in the order that moves; then from the first again
            const unsigned warps = threads / 32;
            if (order == Schedule::random_ahead) std::shuffle(ranks.begin(), ranks.end(), schedule_draws());
            for (unsigned k = 0; k < warps; ++k) {
              const unsigned w = order == Schedule::first_ahead ? k : order == Schedule::last_ahead ? warps - 1 - k : ranks[k];
              const uint64_t at = r.events;
              for (unsigned lane = 0; lane < 32; ++lane) run(w * 32 + lane);
              if (r.events != at) break;
            }
          }
          bool all_done = true;
          for (const auto& f : r.fibers) all_done = all_done && f.done;
          if (all_done) break;
          if (r.events == before) {
            runtime() = nullptr;
            QKV_EMULATION_UNPOISON(smem, sizeof smem);
            throw std::runtime_error("emulation::launch: block (" + std::to_string(x) + ", " + std::to_string(y) +
                                     ") deadlocked: its threads wait at barriers that never complete");
          }
        }
      }
    }
  }
  runtime() = nullptr;
  QKV_EMULATION_UNPOISON(smem, sizeof smem);
}
}  // namespace

// ---- the runtime a .cu file's launchers call, on the host -----------------------------------------------
//
// A test may compile a launcher file (kernels/cuda/*.cu) after this header: its QKV_LAUNCH runs the
// kernel through launch() above, and its runtime calls — named below as the CUDA runtime names them —
// act on the host: one emulated GPU (device 0; an H200 — compute capability 9.0, 132 multiprocessors,
// 227 KB of shared memory a block on request — unless a test's ScopedArchitecture says otherwise), one
// stream in which everything happens at once, device memory that is host memory (cudaMallocAsync's
// blocks counted, so that a test sees each freed), the kernels launched recorded in order (so that a test
// sees which a launcher chose). A launch asking for more than 48 KB of dynamic shared memory fails, as on
// a GPU, unless cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, …) allowed
// that kernel as much.
struct Architecture {
  int major, minor;        // compute capability
  int multiprocessors;     // cudaDevAttrMultiProcessorCount
  int shared_optin_bytes;  // cudaDevAttrMaxSharedMemoryPerBlockOptin: the most a kernel may be allowed
};
constexpr Architecture kH200{9, 0, 132, 227 * 1024};
constexpr Architecture kA100{8, 0, 108, 163 * 1024};  // the sm_80 the portable kernels (mma.sync, cp.async) serve
constexpr Architecture kSm86{8, 6, 82, 99 * 1024};    // an RTX 3090, A10 or A40: 99 KB a block at most

struct Device {
  Architecture arch = kH200;
  std::map<const void*, int> shared_allowed;  // by kernel: the largest dynamic shared memory allowed
  std::map<void*, size_t> blocks;             // cudaMallocAsync's blocks not yet freed
  std::vector<const void*> launched;          // the kernels QKV_LAUNCH ran, in order
};
inline Device& device() {
  static Device d;
  return d;
}
constexpr int kDefaultSharedBytes = 48 * 1024;

// The emulated GPU is `a` for the scope's life (the attributes allowed forgotten at either end, as on
// another device)
class ScopedArchitecture {
 public:
  explicit ScopedArchitecture(Architecture a) : saved_(device().arch) {
    device().arch = a;
    device().shared_allowed.clear();
  }
  ~ScopedArchitecture() {
    device().arch = saved_;
    device().shared_allowed.clear();
  }
  ScopedArchitecture(const ScopedArchitecture&) = delete;
  ScopedArchitecture& operator=(const ScopedArchitecture&) = delete;

 private:
  Architecture saved_;
};

// Whether QKV_LAUNCH has run `kernel` since the record was last cleared (device().launched.clear())
template <typename Kernel>
bool launched(Kernel* kernel) {
  const std::vector<const void*>& l = device().launched;
  return std::find(l.begin(), l.end(), reinterpret_cast<const void*>(kernel)) != l.end();
}

inline cudaError_t get_device(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t device_get_attribute(int* value, cudaDeviceAttr attribute, int) {
  const Architecture& a = device().arch;
  switch (attribute) {
    case cudaDevAttrMultiProcessorCount: *value = a.multiprocessors; break;
    case cudaDevAttrComputeCapabilityMajor: *value = a.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = a.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = a.shared_optin_bytes; break;
    default: throw std::logic_error("emulation: cudaDeviceGetAttribute(" + std::to_string(attribute) + ") not emulated");
  }
  return cudaSuccess;
}
template <typename Kernel>
cudaError_t func_set_attribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize)
    throw std::logic_error("emulation: cudaFuncSetAttribute(" + std::to_string(attribute) + ") not emulated");
  if (value < 0 || value > device().arch.shared_optin_bytes) return cudaErrorInvalidValue;  // the GPU's refusal
  device().shared_allowed[reinterpret_cast<const void*>(kernel)] = value;
  return cudaSuccess;
}
// what cudaMalloc gives for a request: whole 256-byte units, at least one
inline size_t allocated_bytes(size_t bytes) { return std::max<size_t>(256, (bytes + 255) / 256 * 256); }
inline cudaError_t malloc_async(void** p, size_t bytes, cudaStream_t) {
  *p = std::aligned_alloc(256, allocated_bytes(bytes));  // cudaMalloc's 256-byte alignment
  if (!*p) return cudaErrorMemoryAllocation;
  QKV_EMULATION_POISON(static_cast<char*>(*p) + bytes, allocated_bytes(bytes) - bytes);  // past the request
  device().blocks[*p] = bytes;
  return cudaSuccess;
}
inline cudaError_t free_async(void* p, cudaStream_t) {
  if (!p) return cudaSuccess;
  auto it = device().blocks.find(p);
  if (it == device().blocks.end()) throw std::logic_error("emulation: cudaFreeAsync of memory cudaMallocAsync never gave");
  QKV_EMULATION_UNPOISON(p, allocated_bytes(it->second));
  device().blocks.erase(it);
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t memset_async(void* p, int value, size_t bytes, cudaStream_t) {
  if (bytes) std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t memset_2d_async(void* p, size_t pitch, int value, size_t width, size_t height, cudaStream_t) {
  for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, value, width);
  return cudaSuccess;
}
inline cudaError_t peek_at_last_error() { return cudaSuccess; }  // a failed launch has thrown

// cuBLAS's calls that kernels/cuda/gemm.cu makes (cublas_library.h's table: under the emulation these),
// column-major as cuBLAS: C[m×n] = α op(A)[m×k] op(B)[k×n] + β C (β = 0: C not read), each sum in f32
// in k's order; with the TF32 math mode set (gemm.cu's default) each f32 operand first rounded to
// TF32's 10-bit mantissa (to nearest, ties away: cvt.rna.tf32.f32), as the tensor cores read it.
struct CublasHandle {
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
inline float tf32_rounded(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // (not for infinities and NaN)
  std::memcpy(&x, &u, 4);
  return x;
}
inline cublasStatus_t cublas_create(cublasHandle_t* h) {
  // one a host thread, never destroyed (as gemm.cu's), held here until the process ends
  static std::vector<std::unique_ptr<CublasHandle>> handles;
  handles.push_back(std::make_unique<CublasHandle>());
  *h = reinterpret_cast<cublasHandle_t>(handles.back().get());
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_set_math_mode(cublasHandle_t h, cublasMath_t mode) {
  reinterpret_cast<CublasHandle*>(h)->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_set_stream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
// element (i, j) of op(X) for a column-major X with leading dimension ld
template <typename T>
inline float op_at(const T* x, cublasOperation_t op, int ld, int i, int j) {
  const T v = op == CUBLAS_OP_N ? x[i + static_cast<int64_t>(j) * ld] : x[j + static_cast<int64_t>(i) * ld];
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}
template <typename TA, typename TB>
cublasStatus_t cublas_product(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              float alpha, const TA* A, int lda, const TB* B, int ldb, float beta, float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0 || ldc < std::max(1, m) || lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, tb == CUBLAS_OP_N ? k : n))
    return CUBLAS_STATUS_INVALID_VALUE;  // cuBLAS's own refusals of sizes and leading dimensions
  const bool tf32 = reinterpret_cast<CublasHandle*>(h)->math == CUBLAS_TF32_TENSOR_OP_MATH;
  auto in = [&](float x) { return tf32 && !std::is_same_v<TA, __nv_bfloat16> ? tf32_rounded(x) : x; };
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.f;
      for (int l = 0; l < k; ++l) acc = std::fma(in(op_at(A, ta, lda, i, l)), in(op_at(B, tb, ldb, l, j)), acc);
      float& c = C[i + static_cast<int64_t>(j) * ldc];
      c = beta == 0.f ? alpha * acc : alpha * acc + beta * c;
    }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const float* alpha, const float* A, int lda, const float* B, int ldb,
                                   const float* beta, float* C, int ldc) {
  return cublas_product(h, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}
inline cublasStatus_t cublas_gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                     int k, const void* alpha, const void* A, cudaDataType a_type, int lda,
                                     const void* B, cudaDataType b_type, int ldb, const void* beta, void* C,
                                     cudaDataType c_type, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (a_type != CUDA_R_16BF || b_type != CUDA_R_16BF || c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
    throw std::logic_error("emulation: cublasGemmEx with other types than bf16 × bf16 → f32 not emulated");
  return cublas_product(h, ta, tb, m, n, k, *static_cast<const float*>(alpha),
                        static_cast<const __nv_bfloat16*>(A), lda, static_cast<const __nv_bfloat16*>(B), ldb,
                        *static_cast<const float*>(beta), static_cast<float*>(C), ldc);
}
// C = α op(A) + β op(B), element by element (C may be A or B: in place)
inline cublasStatus_t cublas_sgeam(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                   const float* alpha, const float* A, int lda, const float* beta, const float* B,
                                   int ldb, float* C, int ldc) {
  if (m < 0 || n < 0 || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float a = *alpha == 0.f ? 0.f : *alpha * op_at(A, ta, lda, i, j);  // (a zero factor: not read)
      const float b = *beta == 0.f ? 0.f : *beta * op_at(B, tb, ldb, i, j);
      C[i + static_cast<int64_t>(j) * ldc] = a + b;
    }
  return CUBLAS_STATUS_SUCCESS;
}
// cuBLASLt's calls that gemm.cu's bias GEMMs make: descriptors as the attributes set on them, the
// heuristic's one algorithm (asking for a workspace, so that the caller's is exercised), and the product
// as cuBLAS's above — D = α op(A) op(B) + β C, then + bias[i] down each column (CUBLASLT_EPILOGUE_BIAS:
// the bias as long as D's rows) — with FAST_TF32's rounding of f32 operands, bf16 operands widened.
struct LtDesc {
  cublasComputeType_t compute;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t bias_type = -1;
  const float* bias = nullptr;
};
struct LtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct LtPreference {
  uint64_t workspace = 0;
};
constexpr size_t kLtEmulatedWorkspace = 1024;  // what the emulated heuristic's algorithm asks for
inline int& lt_matmuls() {  // cublasLtMatmul's calls so far (a test tells the epilogue's path from the fallback)
  static int calls = 0;
  return calls;
}
inline bool& lt_refuses() {  // set: cublasLtMatmul answers lt_refusal(), as a GPU's may
  static bool refuses = false;
  return refuses;
}
inline cublasStatus_t& lt_refusal() {  // what a refusing cublasLtMatmul answers (CUBLAS_STATUS_NOT_SUPPORTED)
  static cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  return st;
}
// Not SUCCESS: what cublasLtMatmulDescSetAttribute answers for the bias's data type (a cuBLASLt older than
// the attribute, or one that takes no f32 bias with these operands)
inline cublasStatus_t& lt_bias_type_answer() {
  static cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  return st;
}
// The descriptors made and not yet destroyed, by their address (a test sees gemm.cu destroy what it drops)
inline std::map<const void*, std::shared_ptr<void>>& lt_descriptors() {
  static std::map<const void*, std::shared_ptr<void>> live;
  return live;
}
template <typename T>
T* lt_keep(std::unique_ptr<T> made) {
  T* p = made.get();
  lt_descriptors()[p] = std::shared_ptr<T>(std::move(made));
  return p;
}
inline cublasStatus_t lt_destroy(const void* d) {
  return lt_descriptors().erase(d) == 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublas_lt_desc_destroy(cublasLtMatmulDesc_t d) { return lt_destroy(d); }
inline cublasStatus_t cublas_lt_layout_destroy(cublasLtMatrixLayout_t l) { return lt_destroy(l); }
inline cublasStatus_t cublas_lt_preference_destroy(cublasLtMatmulPreference_t p) { return lt_destroy(p); }
inline cublasStatus_t cublas_lt_create(cublasLtHandle_t* h) {
  static int handle;
  *h = reinterpret_cast<cublasLtHandle_t>(&handle);
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_lt_desc_create(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType scale) {
  if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(lt_keep(std::make_unique<LtDesc>(LtDesc{compute})));
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_lt_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t what, const void* v,
                                         size_t size) {
  LtDesc& x = *reinterpret_cast<LtDesc*>(d);
  auto take = [&](auto& field) {
    if (size != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, v, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (what) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(x.ta);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(x.tb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(x.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return lt_bias_type_answer() != CUBLAS_STATUS_SUCCESS ? lt_bias_type_answer() : take(x.bias_type);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(x.bias);
    default:
      throw std::logic_error("emulation: a cuBLASLt matmul attribute not emulated");
  }
}
inline cublasStatus_t cublas_lt_layout_create(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows,
                                              uint64_t cols, int64_t ld) {
  if (ld < static_cast<int64_t>(std::max<uint64_t>(rows, 1))) return CUBLAS_STATUS_INVALID_VALUE;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(lt_keep(std::make_unique<LtLayout>(LtLayout{type, rows, cols, ld})));
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_lt_preference_create(cublasLtMatmulPreference_t* p) {
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(lt_keep(std::make_unique<LtPreference>()));
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_lt_preference_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t what,
                                               const void* v, size_t size) {
  if (what == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&reinterpret_cast<LtPreference*>(p)->workspace, v, size);
  } else if (size != sizeof(uint32_t)) {  // the alignments
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_lt_heuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                          cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                          cublasLtMatmulPreference_t p, int asked, cublasLtMatmulHeuristicResult_t* r,
                                          int* found) {
  if (asked < 1) return CUBLAS_STATUS_INVALID_VALUE;
  *r = {};
  const bool fits = reinterpret_cast<LtPreference*>(p)->workspace >= kLtEmulatedWorkspace;
  r->workspaceSize = kLtEmulatedWorkspace;
  r->state = fits ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
  *found = fits ? 1 : 0;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublas_lt_matmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                                       cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb,
                                       const void* beta, const void* C, cublasLtMatrixLayout_t lc, void* D,
                                       cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*, void* workspace,
                                       size_t workspace_size, cudaStream_t) {
  ++lt_matmuls();
  if (lt_refuses()) return lt_refusal();
  const LtDesc& x = *reinterpret_cast<const LtDesc*>(d);
  const LtLayout &a = *reinterpret_cast<const LtLayout*>(la), &b = *reinterpret_cast<const LtLayout*>(lb),
                 &c = *reinterpret_cast<const LtLayout*>(lc), &o = *reinterpret_cast<const LtLayout*>(ld);
  if (workspace_size < kLtEmulatedWorkspace || !workspace) return CUBLAS_STATUS_INVALID_VALUE;
  if (x.epilogue != CUBLASLT_EPILOGUE_BIAS || x.bias_type != CUDA_R_32F || !x.bias)
    throw std::logic_error("emulation: a cuBLASLt matmul without its f32 bias epilogue not emulated");
  const bool ta = x.ta == CUBLAS_OP_T, tb = x.tb == CUBLAS_OP_T;
  const uint64_t m = o.rows, n = o.cols, k = ta ? a.rows : a.cols;
  if ((ta ? a.cols : a.rows) != m || (tb ? b.rows : b.cols) != n || (tb ? b.cols : b.rows) != k || c.rows != m ||
      c.cols != n || a.type != b.type || o.type != CUDA_R_32F || c.ld != o.ld || C != D)
    return CUBLAS_STATUS_INVALID_VALUE;  // (gemm.cu writes D over C, its layout the same)
  const bool bf16 = a.type == CUDA_R_16BF;
  const bool tf32 = x.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  auto at = [&](const void* p, const LtLayout& l, bool t, uint64_t i, uint64_t j) {  // op(X)[i, j]
    const uint64_t e = t ? j + i * l.ld : i + j * l.ld;
    const float v = bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[e]) : static_cast<const float*>(p)[e];
    return tf32 ? tf32_rounded(v) : v;
  };
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  float* out = static_cast<float*>(D);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      float acc = 0.f;
      for (uint64_t l = 0; l < k; ++l) acc = std::fma(at(A, a, ta, i, l), at(B, b, tb, l, j), acc);
      float& y = out[i + j * o.ld];
      y = (be == 0.f ? al * acc : al * acc + be * y) + x.bias[i];
    }
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublas_status_name(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE (emulated)";
}
inline const char* cublas_status_string(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "success" : "an invalid size or leading dimension (emulated)";
}
// The deferred checks (qkv/core/cuda.h's contract): a word all ones that a kernel lowers with
// atomicMin to (position << 32) | value; at the next wait every word is read and dropped, and the
// first registered that moved throws qkv::Error(message(position, value)).
struct DeferredCheck {
  std::unique_ptr<unsigned long long> word;
  ::qkv::cuda::CheckMessage message;
};
inline std::vector<DeferredCheck>& deferred_checks() {
  static std::vector<DeferredCheck> checks;
  return checks;
}
inline unsigned long long* deferred_check(cudaStream_t, ::qkv::cuda::CheckMessage message) {
  deferred_checks().push_back({std::make_unique<unsigned long long>(~0ull), std::move(message)});
  return deferred_checks().back().word.get();
}
inline void wait(cudaStream_t) {
  std::vector<DeferredCheck> checks = std::move(deferred_checks());
  deferred_checks().clear();
  for (const DeferredCheck& c : checks)
    if (*c.word != ~0ull)
      throw ::qkv::Error(c.message(static_cast<int64_t>(*c.word >> 32), static_cast<int32_t>(*c.word & 0xffffffffu)));
}

namespace {  // each file's own, as launch()
// QKV_LAUNCH(grid, block, shared, stream, kernel)(arguments…): the launch's limits, then the kernel on the host
template <typename Kernel>
struct KernelLaunch {
  dim3 grid, block;
  size_t shared;
  Kernel* kernel;
  template <typename... Args>
  void operator()(Args&&... args) const {
    if (block.y != 1 || block.z != 1) throw std::logic_error("emulation: blocks of one dimension only");
    if (shared > static_cast<size_t>(kDefaultSharedBytes)) {
      auto it = device().shared_allowed.find(reinterpret_cast<const void*>(kernel));
      if (it == device().shared_allowed.end() || static_cast<size_t>(it->second) < shared)
        throw std::invalid_argument("emulation: a launch with " + std::to_string(shared) +
                                    " bytes of dynamic shared memory, past 48 KB, where "
                                    "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) allowed this kernel less");
    }
    device().launched.push_back(reinterpret_cast<const void*>(kernel));
    launch(grid, block.x, shared, [&] { kernel(args...); });
  }
};
template <typename Kernel>
KernelLaunch<Kernel> launch_of(dim3 grid, dim3 block, size_t shared, Kernel* kernel) {
  return {grid, block, shared, kernel};
}
}  // namespace

}  // namespace qkv::emulation

// ---- the built-ins, for the kernel code that follows ---------------------------------------------------

#define threadIdx (::uint3{static_cast<unsigned>(::qkv::emulation::runtime()->current), 0u, 0u})
#define blockIdx (::qkv::emulation::runtime()->block)
#define gridDim (::qkv::emulation::runtime()->grid)
#define blockDim (::dim3{::qkv::emulation::runtime()->threads, 1u, 1u})
#define __syncthreads() ::qkv::emulation::sync_threads()
#define __launch_bounds__(...)
#undef __grid_constant__  // the toolkit's is an attribute the host compiler does not know
#define __grid_constant__
// the runtime calls of the launcher files (above: the emulated device)
#define cudaGetDevice ::qkv::emulation::get_device
#define cudaDeviceGetAttribute ::qkv::emulation::device_get_attribute
#define cudaFuncSetAttribute ::qkv::emulation::func_set_attribute
#define cudaMallocAsync ::qkv::emulation::malloc_async
#define cudaFreeAsync ::qkv::emulation::free_async
#define cudaMemcpyAsync ::qkv::emulation::memcpy_async
#define cudaMemsetAsync ::qkv::emulation::memset_async
#define cudaMemset2DAsync ::qkv::emulation::memset_2d_async
#define cudaPeekAtLastError ::qkv::emulation::peek_at_last_error

inline void __syncwarp(unsigned mask = 0xffffffffu) {  // the whole warp (the kernels' one use)
  if (mask != 0xffffffffu) throw std::logic_error("emulation: __syncwarp of part of a warp");
  ::qkv::emulation::sync_warp();
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int m) {
  return ::qkv::emulation::shfl_xor(v, m);
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
  return ::qkv::emulation::shfl(v, src);
}
inline unsigned __ballot_sync(unsigned mask, int p) {  // the whole warp
  if (mask != 0xffffffffu) throw std::logic_error("emulation: __ballot_sync of part of a warp");
  return ::qkv::emulation::ballot(p != 0);
}
inline float atomicAdd(float* p, float v) {  // one OS thread: plain
  const float old = *p;
  *p = old + v;
  return old;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;
  return old;
}
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = v < old ? v : old;
  return old;
}
// The rounded operations nvcc leaves uncontracted (the host's may not contract them either: the
// operands pass through memory, so a product computed as an argument is rounded before the add, as
// nvcc rounds it), the reciprocal square root, and the read-only load.
inline float __fadd_rn(float a, float b) {
  volatile float va = a, vb = b;
  volatile float r = va + vb;
  return r;
}
inline float __fmul_rn(float a, float b) {
  volatile float va = a, vb = b;
  volatile float r = va * vb;
  return r;
}
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {  // the high 64 bits of a·b
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
