// f32 flash attention on the tensor cores at f32's accuracy (3xTF32): the launches of
// attention_tf32_kernels.cuh's forward and backward, and which problems they serve.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_tf32_kernels.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

// ---- launching ----------------------------------------------------------------------------------------
// (attention_tf32_kernels.cuh's names qualified, tf32_pair::, since a test compiles other pairs' in one file)

template <int D, int KN, bool General>
void launch_forward(const AttnProblem& p, float* out, float* lse, cudaStream_t s) {
  constexpr size_t bytes = tf32_pair::forward_smem_bytes<D, KN>();
  QKV_CUDA_CHECK(cudaFuncSetAttribute(tf32_pair::flash_tf32_forward_kernel<D, KN, General>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lq + tf32_pair::kRows - 1) / tf32_pair::kRows),
                  static_cast<unsigned>(p.B * p.H));
  QKV_LAUNCH(grid, tf32_pair::kThreads, bytes, s, tf32_pair::flash_tf32_forward_kernel<D, KN, General>)(p, out, lse);
  QKV_CUDA_LAUNCHED(tf32_pair::flash_tf32_forward_kernel);
}

template <int D, int R, bool General, bool Capped = false>
void launch_backward(const AttnProblem& p, const float* lse, const float* Dsum, const float* dout, float* dq, float* dk,
                     float* dv, cudaStream_t s) {
  constexpr size_t bytes = tf32_pair::backward_smem_bytes<D, R>();
  QKV_CUDA_CHECK(cudaFuncSetAttribute(tf32_pair::flash_tf32_backward_kernel<D, R, General, Capped>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.Lk + tf32_pair::kKeys - 1) / tf32_pair::kKeys),
                  static_cast<unsigned>(p.B * p.Hkv));
  QKV_LAUNCH(grid, tf32_pair::kThreads, bytes, s, tf32_pair::flash_tf32_backward_kernel<D, R, General, Capped>)
  (p, lse, Dsum, dout, dq, dk, dv);
  QKV_CUDA_LAUNCHED(tf32_pair::flash_tf32_backward_kernel);
}

// The backward's query rows a step: QKV_CUDA_ATTENTION_TF32_ROWS=32 or 64, or (unset, anything else) the
// head dim's default, tf32_pair::kStepRows (64 at head dim 64, 32 at 128) — to compare them on a GPU
int tf32_step_rows(int64_t D) {
  const char* e = std::getenv("QKV_CUDA_ATTENTION_TF32_ROWS");
  if (e && std::strcmp(e, "32") == 0) return 32;
  if (e && std::strcmp(e, "64") == 0) return 64;
  return D == 64 ? tf32_pair::kStepRows<64> : tf32_pair::kStepRows<128>;
}

// The backward kernel a problem at head dim D takes — its step's rows (tf32_step_rows), the mask code or
// not, a soft cap's kernel (its head dim's default rows alone: two kernels compiled, not four) — and the
// shared memory it asks
struct BackwardLaunch {
  void (*run)(const AttnProblem&, const float*, const float*, const float*, float*, float*, float*, cudaStream_t);
  size_t bytes;
};
template <int D, int R>
BackwardLaunch backward_launch_at(bool general) {
  return {general ? launch_backward<D, R, true> : launch_backward<D, R, false>, tf32_pair::backward_smem_bytes<D, R>()};
}
template <int D>
BackwardLaunch backward_launch(const AttnProblem& p) {
  constexpr int R = tf32_pair::kStepRows<D>;
  if (attention_softcapped(p)) return {launch_backward<D, R, true, true>, tf32_pair::backward_smem_bytes<D, R>()};
  const bool general = attention_general_code(p);
  return tf32_step_rows(D) == 32 ? backward_launch_at<D, 32>(general) : backward_launch_at<D, 64>(general);
}

// Whether this GPU gives one block `bytes` of shared memory (opted in: 227 KB on sm_90, 163 KB on
// sm_80, 99 KB on sm_86 and sm_89 — where head dim 128 stays on the CUDA cores)
bool fits_shared(size_t bytes) {
  int device = 0, optin = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  QKV_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes <= static_cast<size_t>(optin);
}

// What both kernels need of the problem: head dims 64 or 128 (D = Dv), q, k, v rows on 16 bytes (cp.async's
// copies), a grid of B·H (B·Hkv) blocks in y, and the selection (attention_uses_tf32).
bool tf32_serves(const AttnProblem& p) {
  return attention_uses_tf32() && p.D == p.Dv && (p.D == 64 || p.D == 128) && p.B * p.H <= 65535 &&
         tiles::rows_on_16_bytes(p.q, p.q_sb, p.q_sh, p.q_sl) && tiles::rows_on_16_bytes(p.k, p.k_sb, p.k_sh, p.k_sl) &&
         tiles::rows_on_16_bytes(p.v, p.v_sb, p.v_sh, p.v_sl);
}

}  // namespace

bool attention_uses_tf32() {
  const char* e = std::getenv("QKV_CUDA_ATTENTION_F32");
  return !(e && std::strcmp(e, "simt") == 0);
}

bool attention_forward_tf32(const AttnProblem& p, float* out, float* lse) {
  // a decoding step (≤ 16 query rows, no lse) is bound by reading the cache: the split-KV kernels
  if (!tf32_serves(p) || (!lse && p.Lq <= 16) || p.B * p.H * p.Lq == 0) return false;
  if (!fits_shared(p.D == 64 ? tf32_pair::forward_smem_bytes<64, 64>() : tf32_pair::forward_smem_bytes<128, 32>()))
    return false;
  cudaStream_t s = stream();
  const bool gen = attention_general_code(p);
  if (p.D == 64) {
    if (gen) launch_forward<64, 64, true>(p, out, lse, s);
    else launch_forward<64, 64, false>(p, out, lse, s);
  } else {
    if (gen) launch_forward<128, 32, true>(p, out, lse, s);
    else launch_forward<128, 32, false>(p, out, lse, s);
  }
  return true;
}

bool attention_backward_tf32(const AttnProblem& p, const float* out, const float* lse, const float* dout, float* dq,
                             float* dk, float* dv) {
  if (!tf32_serves(p) || !tiles::rows_on_16_bytes(dout, p.dout_l.sb, p.dout_l.sh, p.dout_l.sl)) return false;
  const BackwardLaunch launch = p.D == 64 ? backward_launch<64>(p) : backward_launch<128>(p);
  if (!fits_shared(launch.bytes)) return false;
  cudaStream_t s = stream();
  Scratch Dsum(p.B * p.H * p.Lq, s);
  tiles::backward_preprocess(p, out, dout, Dsum.p, dq, s);  // D_i = dO_i · O_i, dq zeroed: one launch
  launch.run(p, lse, Dsum.p, dout, dq, dk, dv, s);
  return true;
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
