// The launchers of the bf16 / f16 wgmma pair (attention_wgmma_kernels.cuh: the kernels and their design;
// wgmma.cuh: the instruction and its layouts; tests/kernels/attention_wgmma_emulation_test.cpp runs
// them on the host): the pre-passes, the forward variant a head dim takes on an H200, and whether a
// problem is served at all.
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/sm90a/attention_wgmma_backward256.cuh"
#include "kernels/cuda/sm90a/attention_wgmma_kernels.cuh"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

template <typename T, int D, int KN, bool General, bool Overlap>
void launch(const AttnProblem& p, const T* qh, const T* kh, const T* vh, float* out, float* lse, cudaStream_t s) {
  constexpr size_t bytes = smem_bytes<D, KN, Overlap ? 4 : 2>();
  auto* kernel = [] {
    if constexpr (Overlap) return flash_wgmma_overlap_kernel<T, D, KN, General>;
    else return flash_wgmma_forward_kernel<T, D, KN, General>;
  }();
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lq + kRows - 1) / kRows), static_cast<unsigned>(p.B * p.H));
  QKV_LAUNCH(grid, kThreads, bytes, s, kernel)(p, qh, kh, vh, out, lse);
  QKV_CUDA_LAUNCHED(flash_wgmma_forward_kernel);
}

// The warp-specialized kernel's grid: persistent — a block an SM (its 384 threads × 168 registers are
// the SM's 64k), each taking items w, w + grid, … (forward_items), so that a block's next Q and key tiles
// come in while it writes the last item's rows (FlashAttention-3's persistent kernel) — or, with
// QKV_CUDA_ATTENTION_PERSISTENT=0, a block an item (as before 2026-12-04's fifth session, to compare).
unsigned ws_grid(const AttnProblem& p) {
  const int64_t n = forward_items(p);
  if (n > std::numeric_limits<int>::max()) throw std::invalid_argument("attention: too many rows for one launch");
  const char* e = std::getenv("QKV_CUDA_ATTENTION_PERSISTENT");
  if (e && e[0] == '0') return static_cast<unsigned>(n);
  int device = 0, sms = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned>(n < sms ? n : sms);
}

// The warp-specialized kernel: its tensor maps over the dense copies, then the kernel (3 warpgroups).
template <typename T, int D, bool General, bool Capped = false>
void launch_ws(const AttnProblem& p, const T* qh, const T* kh, const T* vh, float* out, float* lse, cudaStream_t s) {
  constexpr int KN = WsShape<D>::KN, Stages = WsShape<D>::Stages;
  constexpr size_t bytes = ws_smem_bytes<D, KN, Stages>();
  ForwardMaps maps;
  encode_forward_maps<T, D, KN>(maps, p, qh, kh, vh);
  auto* kernel = flash_wgmma_ws_kernel<T, D, KN, Stages, General, Capped>;
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  QKV_LAUNCH(ws_grid(p), kWsThreads, bytes, s, kernel)(p, maps.q, maps.k, maps.v, qh, kh, vh, out, lse);
  QKV_CUDA_LAUNCHED(flash_wgmma_ws_kernel);
}

// The variant QKV_CUDA_ATTENTION names — "wgmma64" / "wgmma128" one tile at a time with key tiles of
// 64 / 128, "wgmma-overlap" the overlapped kernel, "wgmma-ws" the warp-specialized one (TMA, producer
// and consumers, pingpong: emulated, not yet run on a GPU) — or by default (unset or "wgmma") the faster on an
// H200 at the head dim (docs/BENCHMARKS.md): at 64 one tile at a time (113 registers: two blocks an
// SM, where the overlapped kernel's 176 allow one; 1.3–1.45× at L = 2k–16k), at 128 the overlapped
// kernel (0.95–1.15× the one-tile kernels).
enum class Variant { overlap, tile64, tile128, ws };
Variant variant(int64_t D) {
  const char* e = std::getenv("QKV_CUDA_ATTENTION");
  if (e && std::strcmp(e, "wgmma64") == 0) return Variant::tile64;
  if (e && std::strcmp(e, "wgmma128") == 0) return Variant::tile128;
  if (e && std::strcmp(e, "wgmma-overlap") == 0) return Variant::overlap;
  if (e && std::strcmp(e, "wgmma-ws") == 0) return Variant::ws;
  return D == 64 ? Variant::tile64 : Variant::overlap;
}

template <typename T, int D>
void forward(const AttnProblem& p, float* out, float* lse, cudaStream_t s) {
  const Variant which = D == 256 ? Variant::ws : variant(D);  // head dim 256: the warp-specialized kernel alone
  const int64_t nq = p.B * p.H * p.Lq * D, nk = p.B * p.Hkv * p.Lk * D;
  Scratch buf((nq + 2 * nk + 1) / 2, s);  // T copies of q, k and v (each a multiple of 8 elements)
  T* qh = reinterpret_cast<T*>(buf.p);
  T* kh = qh + nq;
  T* vh = kh + nk;
  round_forward_operands<T>(p, D, qh, kh, vh, s);
  const bool general = attention_general_code(p);
  if constexpr (D == 256)  // a soft cap: its own kernel (serves: head dim 256 alone)
    if (attention_softcapped(p)) return launch_ws<T, D, true, true>(p, qh, kh, vh, out, lse, s);
  if (which == Variant::ws)
    return general ? launch_ws<T, D, true>(p, qh, kh, vh, out, lse, s)
                   : launch_ws<T, D, false>(p, qh, kh, vh, out, lse, s);
  if constexpr (D != 256) {
    // a mask or dropout, the kernels' element-wise code (General): at head dim 64 one tile at a time, two
    // blocks an SM (ptxas serializes the overlapped kernel's products there: C7515), at 128 overlapped
    if constexpr (D == 64)
      if (general && which != Variant::overlap) return launch<T, D, 64, true, false>(p, qh, kh, vh, out, lse, s);
    if (general) return launch<T, D, 64, true, true>(p, qh, kh, vh, out, lse, s);
    if (which == Variant::tile128) return launch<T, D, 128, false, false>(p, qh, kh, vh, out, lse, s);
    if (which == Variant::tile64) return launch<T, D, 64, false, false>(p, qh, kh, vh, out, lse, s);
    launch<T, D, 64, false, true>(p, qh, kh, vh, out, lse, s);
  }
}

template <typename T, int D, int R, bool General>
void launch_backward(const AttnProblem& p, const T* qh, const T* gh, const T* kh, const T* vh, const float* lse,
                     const float* Dsum, float* dq, float* dk, float* dv, cudaStream_t s) {
  constexpr size_t bytes = backward_smem_bytes<D, R>();
  auto* kernel = flash_wgmma_backward_kernel<T, D, R, General>;
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lk + kBwdKeys - 1) / kBwdKeys), static_cast<unsigned>(p.B * p.Hkv));
  QKV_LAUNCH(grid, kBwdThreads, bytes, s, kernel)(p, qh, gh, kh, vh, lse, Dsum, dq, dk, dv);
  QKV_CUDA_LAUNCHED(flash_wgmma_backward_kernel);
}

// The warp-specialized backward: its tensor maps over the pre-pass's copies, then the kernel (3 warpgroups).
template <typename T, int D, int R, bool General>
void launch_ws_backward(const AttnProblem& p, const T* qh, const T* gh, const T* kh, const T* vh, const float* lse,
                        const float* Dsum, float* dq, float* dk, float* dv, cudaStream_t s) {
  constexpr size_t bytes = ws_backward_smem_bytes<D, R>();
  BackwardMaps maps;
  encode_backward_maps<T, D, R>(maps, p, qh, gh, kh, vh);
  auto* kernel = flash_wgmma_ws_backward_kernel<T, D, R, General>;
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lk + kBwdKeys - 1) / kBwdKeys), static_cast<unsigned>(p.B * p.Hkv));
  QKV_LAUNCH(grid, kBwdWsThreads, bytes, s, kernel)(p, maps, lse, Dsum, dq, dk, dv);
  QKV_CUDA_LAUNCHED(flash_wgmma_ws_backward_kernel);
}

// Head dim 256's backward (attention_wgmma_backward256.cuh: 64 keys a block, two warpgroups splitting the dims)
template <typename T, bool General, bool Capped = false>
void launch_backward256(const AttnProblem& p, const T* qh, const T* gh, const T* kh, const T* vh, const float* lse,
                        const float* Dsum, float* dq, float* dk, float* dv, cudaStream_t s) {
  constexpr size_t bytes = backward256_smem_bytes();
  auto* kernel = flash_wgmma_backward256_kernel<T, General, Capped>;
  QKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lk + kBwd256Keys - 1) / kBwd256Keys), static_cast<unsigned>(p.B * p.Hkv));
  QKV_LAUNCH(grid, kBwd256Threads, bytes, s, kernel)(p, qh, gh, kh, vh, lse, Dsum, dq, dk, dv);
  QKV_CUDA_LAUNCHED(flash_wgmma_backward256_kernel);
}

// The backward kernel: the one QKV_CUDA_ATTENTION_BACKWARD names — "wgmma-ws" the warp-specialized
// kernel, "wgmma" the two-warpgroup one, "mma" (or any other name) the mma.sync backward
// (attention_mma.cu) — or, unset, the fastest measured on an H200 (2026-12-04, bf16, the backward's
// time alone; docs/CUDA.md, "Measured"):
//   head dim 128: wgmma-ws — 1.47–1.72× mma.sync's at L = 2k and 16k, causal and not (wgmma 1.24–1.44×);
//   head dim 64, 2,048 keys or more: wgmma — 1.16–1.23× mma.sync's (wgmma-ws within 3% of it);
//   head dim 64, fewer keys: mma.sync — the GPT's step (256 keys, causal, dropout) 542 µs a call
//   against wgmma's 560 and wgmma-ws's 645;
//   head dim 256: its own kernel (backward256), whatever the name (mma.sync has none there).
// (The wgmma backwards at head dim 64 were timed in steps of 64 query rows; since 2026-12-05 they take
// 128 — kBwdRows — not yet timed: the choice at 64 stands until a GPU shows where they now win.)
enum class Backward { mma, wgmma, ws };
Backward backward_kernel(const AttnProblem& p) {
  const char* e = std::getenv("QKV_CUDA_ATTENTION_BACKWARD");
  if (e && std::strcmp(e, "wgmma-ws") == 0) return Backward::ws;
  if (e && std::strcmp(e, "wgmma") == 0) return Backward::wgmma;
  if (e && *e) return Backward::mma;
  if (p.D >= 128) return Backward::ws;
  return p.Lk >= 2048 ? Backward::wgmma : Backward::mma;
}

// Whether every row of dq starts on 16 bytes, as the warp-specialized backward's bulk reductions (a row
// of dQ_i at a time) need; where not, the two-warpgroup kernel (f32 atomics) serves
bool dq_rows_on_16_bytes(const AttnProblem& p, const float* dq) {
  const HeadLayout& l = p.dq_l;
  return reinterpret_cast<uintptr_t>(dq) % 16 == 0 && l.sb % 4 == 0 && l.sh % 4 == 0 && l.sl % 4 == 0;
}

// Steps of 64 query rows at head dim 64 (QKV_CUDA_ATTENTION_BACKWARD_ROWS=64), where 128 is the default
// (kBwdRows): to compare the two on a GPU
bool backward_rows_64() {
  const char* e = std::getenv("QKV_CUDA_ATTENTION_BACKWARD_ROWS");
  return e && std::strcmp(e, "64") == 0;
}

// The two-warpgroup or the warp-specialized kernel at steps of R query rows, the mask code or not
template <typename T, int D, int R>
auto pick_backward(const AttnProblem& p, const float* dq, bool general) {
  if (backward_kernel(p) == Backward::ws && dq_rows_on_16_bytes(p, dq))
    return general ? launch_ws_backward<T, D, R, true> : launch_ws_backward<T, D, R, false>;
  return general ? launch_backward<T, D, R, true> : launch_backward<T, D, R, false>;
}

// The backward's pre-pass — q, dO, k, v rounded to dense T rows, which its kernels read both K-major
// and MN-major (no transposed copies), D_i = dO_i · O_i, and dq zeroed, in one launch — then the kernel:
// at head dim 256 its own, otherwise the two-warpgroup or the warp-specialized one.
template <typename T, int D>
void backward(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq, float* dk,
              float* dv, cudaStream_t s) {
  const int64_t nq = p.B * p.H * p.Lq * D, nk = p.B * p.Hkv * p.Lk * D, copies = (2 * nq + 2 * nk + 1) / 2;
  Scratch buf(copies + p.B * p.H * p.Lq, s);  // the T copies (each a multiple of 8 elements), then D_i in f32
  T* qh = reinterpret_cast<T*>(buf.p);
  T* gh = qh + nq;
  T* kh = gh + nq;
  T* vh = kh + nk;
  float* Dsum = buf.p + copies;
  round_backward_operands<T>(p, out, dout, D, qh, gh, kh, vh, Dsum, dq, s);
  const bool general = attention_general_code(p);
  auto* run = [&] {
    if constexpr (D == 256)
      return attention_softcapped(p) ? launch_backward256<T, true, true>
             : general               ? launch_backward256<T, true>
                                     : launch_backward256<T, false>;
    else if constexpr (D == 64)
      return backward_rows_64() ? pick_backward<T, D, 64>(p, dq, general) : pick_backward<T, D, 128>(p, dq, general);
    else
      return pick_backward<T, D, kBwdRows<D>>(p, dq, general);
  }();
  run(p, qh, gh, kh, vh, lse, Dsum, dq, dk, dv, s);
}

// Whether these kernels serve the problem at all: head dims 64, 128 and 256, D = Dv, a
// compute capability 9.0 GPU.
bool serves_shape(const AttnProblem& p) {
  if ((p.D != 64 && p.D != 128 && p.D != 256) || p.Dv != p.D) return false;
  int device = 0, major = 0, minor = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
}

// The forward: QKV_CUDA_ATTENTION unset or naming a wgmma variant ("wgmma", "wgmma64", "wgmma128",
// "wgmma-overlap", "wgmma-ws"); head dim 256 the warp-specialized kernel whatever the variant (its
// tests passed on an H200, 2026-12-04; not yet timed there). A soft cap: head dim 256 alone, in the
// warp-specialized kernel's Capped form (at 64 and 128 mma.sync's forward takes it; ptxas, sm_90a: the
// cap's code in the one-tile kernel's mask code at head dim 64 spilled 12 bytes a thread rather than 4).
bool serves(const AttnProblem& p) {
  if (attention_softcapped(p) && p.D != 256) return false;
  const char* e = std::getenv("QKV_CUDA_ATTENTION");
  if (e && std::strncmp(e, "wgmma", 5) != 0) return false;
  return serves_shape(p);
}

// The backward: unless QKV_CUDA_ATTENTION_BACKWARD or the problem picks mma.sync's (backward_kernel)
bool serves_backward(const AttnProblem& p) {  // (a soft cap: head dim 256's Capped kernel alone)
  return (attention_softcapped(p) ? p.D == 256 : p.D == 256 || backward_kernel(p) != Backward::mma) && serves_shape(p);
}

// A call of the pair's forward or backward, run at the problem's head dim (64, 128, 256: serves_shape).
struct ForwardCall {
  float *out, *lse;
  template <typename T, int D>
  void run(const AttnProblem& p) const { forward<T, D>(p, out, lse, stream()); }
};
struct BackwardCall {
  const float *out, *lse, *dout;
  float *dq, *dk, *dv;
  template <typename T, int D>
  void run(const AttnProblem& p) const {
    backward<T, D>(p, out, lse, dout, dq, dk, dv, stream());
  }
};
template <typename T, typename Call>
void by_head_dim(const AttnProblem& p, const Call& call) {
  if (p.D == 64) call.template run<T, 64>(p);
  else if (p.D == 128) call.template run<T, 128>(p);
  else call.template run<T, 256>(p);
}

}  // namespace

bool attention_forward_wgmma_bf16(const AttnProblem& p, float* out, float* lse) {
  return serves(p) && (by_head_dim<__nv_bfloat16>(p, ForwardCall{out, lse}), true);
}
bool attention_backward_wgmma_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv) {
  return serves_backward(p) && (by_head_dim<__nv_bfloat16>(p, BackwardCall{out, lse, dout, dq, dk, dv}), true);
}
bool attention_forward_wgmma_f16(const AttnProblem& p, float* out, float* lse) {
  return serves(p) && (by_head_dim<__half>(p, ForwardCall{out, lse}), true);
}
bool attention_backward_wgmma_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv) {
  return serves_backward(p) && (by_head_dim<__half>(p, BackwardCall{out, lse, dout, dq, dk, dv}), true);
}
bool attention_backward_wgmma_serves(const AttnProblem& p) { return serves_backward(p); }

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
