// GEMM through cuBLAS (kernels/cpu/gemm.h's row-major contract). cuBLAS is column-major: a
// row-major C[M,N] is a column-major Cᵀ[N,M], and Cᵀ = op(B)ᵀ op(A)ᵀ, so the row-major product is
// cuBLAS's with the operands swapped and M, N exchanged — no data moves.
//
// f32 runs on the TF32 tensor cores (10-bit mantissa products, f32 accumulation: PyTorch's
// allow_tf32 = True, relative error ~3e-4); QKV_CUDA_TF32=0 in the environment keeps full f32.
// bf16: cublasGemmEx with bf16 operands, f32 compute and an f32 result.
#include <cublas_v2.h>

#include <compare>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

[[noreturn]] void cublas_fail(cublasStatus_t st, const char* call, const char* file, int line) {
  throw Error(detail::concat(call, " failed (", file, ":", line, "): ", cublas().status_name(st), ", ",
                             cublas().status_string(st)));
}
#define QKV_CUBLAS_CHECK(call)                                                   \
  do {                                                                           \
    const cublasStatus_t qkv_cublas_status_ = (call);                            \
    if (qkv_cublas_status_ != CUBLAS_STATUS_SUCCESS) cublas_fail(qkv_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

bool tf32_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("QKV_CUDA_TF32");
    return !(env && env[0] == '0');
  }();
  return on;
}

// A handle per device and host thread (`Handle` cuBLAS's or cuBLASLt's), made by `make` on first use (a
// cuBLAS handle must not be used by two threads at once — qkv serve decodes for several models on several
// threads). Never destroyed, as PyTorch's handle pool: destroying at exit could race the CUDA runtime's
// own teardown, and the threads that use them are few and long-lived.
template <typename Handle, typename Make>
Handle this_threads(Make make) {
  thread_local std::vector<Handle> handles;
  int device = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  if (static_cast<int>(handles.size()) <= device) handles.resize(device + 1, nullptr);
  Handle& h = handles[device];
  if (!h) make(&h);
  return h;
}

// cuBLAS's, bound to the current stream before each call
cublasHandle_t handle() {
  cublasHandle_t h = this_threads<cublasHandle_t>([](cublasHandle_t* made) {
    QKV_CUBLAS_CHECK(cublas().create(made));
    QKV_CUBLAS_CHECK(cublas().set_math_mode(*made, tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  });
  QKV_CUBLAS_CHECK(cublas().set_stream(h, stream()));
  return h;
}

int checked_int(int64_t v, const char* what) {
  QKV_CHECK(v >= 0 && v <= 2147483647, "gemm: ", what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// K = 0: C = beta·C, as the CPU's gemm (no product to add; cuBLAS is not asked, since the empty
// operands' leading dimensions may be 0, which it refuses).
void scale_only(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  if (beta == 1.f) return;
  if (beta == 0.f) {  // (C is not read: NaN there does not survive, as BLAS's beta = 0)
    QKV_CUDA_CHECK(cudaMemset2DAsync(C, static_cast<size_t>(ldc) * sizeof(float), 0,
                                     static_cast<size_t>(N) * sizeof(float), static_cast<size_t>(M), stream()));
    return;
  }
  const float zero = 0.f;  // column-major Cᵀ [N, M] = beta·Cᵀ, in place (B unused at beta 0)
  QKV_CUBLAS_CHECK(cublas().sgeam(handle(), CUBLAS_OP_N, CUBLAS_OP_N, checked_int(N, "N"), checked_int(M, "M"), &beta, C,
                               checked_int(ldc, "ldc"), &zero, C, checked_int(ldc, "ldc"), C, checked_int(ldc, "ldc")));
}

// ---- the bias in the GEMM's epilogue: cuBLASLt ---------------------------------------------------------

// cuBLASLt's (its stream is each call's argument)
cublasLtHandle_t lt_handle() {
  return this_threads<cublasLtHandle_t>([](cublasLtHandle_t* made) { QKV_CUBLAS_CHECK(cublas_lt().create(made)); });
}

// The largest power of two (≤ 256) that divides the address: what cuBLASLt's kernels may assume of it
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// cuBLASLt declined a bias product — `what` (a descriptor, or the call) answered `st` — so the bias rows
// and the GEMM onto them serve that shape: said on stderr once a process, unless `st` is NOT_SUPPORTED (a
// GPU's own answer for a problem it has no kernel for), so that a GPU run shows the epilogue unused.
void lt_refused(cublasStatus_t st, const char* what, int m, int n, int k) {
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return;
  static std::once_flag told;
  std::call_once(told, [&] {
    std::fprintf(stderr,
                 "qkv: cuBLASLt's bias epilogue refused %s of a %d x %d x %d product (%s): the bias rows "
                 "and the GEMM serve such linears\n",
                 what, m, n, k, cublas().status_name(st));
  });
}

// A problem's descriptors and the algorithm cuBLASLt's heuristic chose for it, made on its first call and
// kept (a model's linears repeat a few shapes every step): the heuristic's host time is paid once a shape,
// where PyTorch's addmm pays it every call. A thread keeps at most kLtPlans — a server's batches of every
// size would otherwise add a plan each — and drops them all when one more is asked.
struct LtPlan {
  bool usable = false;  // the heuristic found an algorithm
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;  // bytes the algorithm asks for
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // (host memory alone: no CUDA call, safe as a thread ends)
    const CublasLtLibrary& lt = cublas_lt();
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l) lt.layout_destroy(l);
    if (op) lt.desc_destroy(op);
  }
};
constexpr size_t kLtPlans = 256;

// What a plan depends on: the problem, its types, and the alignments cuBLASLt's kernels may assume
struct LtKey {
  int device, m, n, k, lda, ldb, ldd;
  bool bf16, tf32, ta, tb;
  uint32_t align_a, align_b, align_d, align_bias;
  auto operator<=>(const LtKey&) const = default;
};

constexpr uint64_t kLtWorkspace = 32u << 20;  // the most an algorithm may ask (PyTorch's on Hopper)

// Column-major, as cuBLAS (see sgemm below): D[m×n] = op_a(A) op_b(B) + bias[m] broadcast over D's columns,
// with m = N, n = M, A = the row-major B, B = the row-major A — so the bias runs along the row-major C's
// columns, one value an output feature. bf16: A and B bf16; else f32 (TF32 products unless QKV_CUDA_TF32=0).
LtPlan& lt_plan(bool bf16, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const void* A, int lda,
                const void* B, int ldb, const float* bias, const float* D, int ldd) {
  int device = 0;
  QKV_CUDA_CHECK(cudaGetDevice(&device));
  const bool tf32 = !bf16 && tf32_enabled();
  const uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
  const LtKey key{device,  m,       n,       k, lda, ldb, ldd, bf16, tf32, op_a == CUBLAS_OP_T, op_b == CUBLAS_OP_T,
                  align_a, align_b, align_d, alignment_of(bias)};
  thread_local std::map<LtKey, LtPlan> plans;
  if (plans.size() >= kLtPlans && !plans.count(key)) plans.clear();
  auto [at, made] = plans.try_emplace(key);
  LtPlan& plan = at->second;
  if (!made) return plan;
  const CublasLtLibrary& lt = cublas_lt();
  // The calls in order until one fails, whose status `failed` keeps: a cuBLASLt that rejects a descriptor
  // or a preference (one older than the attributes asked, or a layout it does not take) leaves the plan
  // unusable — the two passes serve the shape — rather than failing the linear (lt_refused says so once a
  // process)
  cublasStatus_t failed = CUBLAS_STATUS_SUCCESS;
  const auto ok = [&](cublasStatus_t st) {
    failed = st;
    return st == CUBLAS_STATUS_SUCCESS;
  };
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const int32_t bias_type = CUDA_R_32F;
  // the stored matrices: A is m×k (k×m transposed), B k×n (n×k), D m×n
  const cudaDataType ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const bool ta = op_a == CUBLAS_OP_T, tb = op_b == CUBLAS_OP_T;
  const uint64_t workspace = kLtWorkspace;
  const uint32_t align[4] = {align_a, align_b, align_d, align_d};  // (C is D)
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  cublasLtMatmulPreference_t pref = nullptr;
  const auto alignments = [&] {
    for (int i = 0; i < 4; ++i)
      if (!ok(lt.preference_set(pref, which[i], &align[i], sizeof align[i]))) return false;
    return true;
  };
  const bool made_all =
      ok(lt.desc_create(&plan.op, compute, CUDA_R_32F)) &&
      ok(lt.desc_set(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a)) &&
      ok(lt.desc_set(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b)) &&
      ok(lt.desc_set(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue)) &&
      ok(lt.desc_set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type)) &&
      ok(lt.desc_set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias)) &&
      ok(lt.layout_create(&plan.a, ab, ta ? k : m, ta ? m : k, lda)) &&
      ok(lt.layout_create(&plan.b, ab, tb ? n : k, tb ? k : n, ldb)) &&
      ok(lt.layout_create(&plan.c, CUDA_R_32F, m, n, ldd)) && ok(lt.preference_create(&pref)) &&
      ok(lt.preference_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace)) &&
      alignments();
  const std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(lt.preference_destroy)> held(
      pref, lt.preference_destroy);  // (the heuristic's alone; none where it was not made)
  if (!made_all) {
    lt_refused(failed, "a descriptor", m, n, k);
    plan.usable = false;
    return plan;
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      lt.heuristic(lt_handle(), plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &found);
  plan.usable = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  plan.algo = result.algo;
  plan.workspace = result.workspaceSize;
  return plan;
}

// D = op(A) op(B) + bias through cuBLASLt (column-major, as lt_plan); false, nothing done, where it has no
// algorithm for the problem or the bias does not start on 16 bytes. QKV_CUDA_BIAS_EPILOGUE=0: never (the
// bias rows and the GEMM onto them, to compare the two on a GPU).
bool lt_bias_product(bool bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                     const void* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  static const bool on = [] {
    const char* env = std::getenv("QKV_CUDA_BIAS_EPILOGUE");
    return !(env && env[0] == '0');
  }();
  if (!on || reinterpret_cast<uintptr_t>(bias) % 16 != 0) return false;
  const cublasOperation_t op_a = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = checked_int(N, "N"), n = checked_int(M, "M"), k = checked_int(K, "K");
  LtPlan& plan = lt_plan(bf16, op_a, op_b, m, n, k, B, checked_int(ldb, "ldb"), A, checked_int(lda, "lda"), bias, C,
                         checked_int(ldc, "ldc"));
  if (!plan.usable) return false;
  const CublasLtLibrary& lt = cublas_lt();
  QKV_CUBLAS_CHECK(lt.desc_set(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  std::optional<Scratch> workspace;  // (in stream order, as every kernel's scratch: safe in a graph's capture)
  if (plan.workspace)
    workspace.emplace(static_cast<int64_t>((plan.workspace + sizeof(float) - 1) / sizeof(float)), stream());
  const float one = 1.f, zero = 0.f;
  const cublasStatus_t st = lt.matmul(lt_handle(), plan.op, &one, B, plan.a, A, plan.b, &zero, C, plan.c, C, plan.c,
                                      &plan.algo, workspace ? workspace->p : nullptr, plan.workspace, stream());
  // an algorithm the heuristic offered and the call then refuses — unsupported, or a problem this
  // cuBLASLt rejects (an invalid value, another architecture's algorithm): the two passes, for this shape
  // from now on (nothing was launched); a failure of the work itself (memory, execution) is an error
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH) {
    lt_refused(st, "the call", m, n, k);
    return plan.usable = false;
  }
  if (st != CUBLAS_STATUS_SUCCESS) cublas_fail(st, "cublasLtMatmul", __FILE__, __LINE__);
  return true;
}

// Where cuBLASLt does not serve: the bias rows, then the product accumulated onto them (the CPU's way)
void fill_bias_rows(const float* bias, int64_t M, int64_t N, float* C, int64_t ldc) {
  if (ldc == N) return broadcast_rows(C, bias, M, N);
  copy_strided_to({M, N}, C, {ldc, 1}, bias, {0, 1}, sizeof(float));  // (rows ldc apart)
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
  // Row-major C = op(A) op(B)  ≡  column-major Cᵀ = op(B)ᵀ op(A)ᵀ, with B's and A's stored forms.
  QKV_CUBLAS_CHECK(cublas().sgemm(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                               checked_int(N, "N"), checked_int(M, "M"), checked_int(K, "K"), &alpha, B,
                               checked_int(ldb, "ldb"), A, checked_int(lda, "lda"), &beta, C,
                               checked_int(ldc, "ldc")));
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
               const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
  const float alpha = 1.f;
  QKV_CUBLAS_CHECK(cublas().gemm_ex(handle(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                checked_int(N, "N"), checked_int(M, "M"), checked_int(K, "K"), &alpha, B,
                                CUDA_R_16BF, checked_int(ldb, "ldb"), A, CUDA_R_16BF, checked_int(lda, "lda"), &beta,
                                C, CUDA_R_32F, checked_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K > 0 && lt_bias_product(false, trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc)) return;
  fill_bias_rows(bias, M, N, C, ldc);
  sgemm(trans_a, trans_b, M, N, K, 1.f, A, lda, B, ldb, 1.f, C, ldc);
}

void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                    const bf16* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K > 0 && lt_bias_product(true, trans_a, trans_b, M, N, K, A, lda, B, ldb, bias, C, ldc)) return;
  fill_bias_rows(bias, M, N, C, ldc);
  gemm_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, 1.f, C, ldc);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
