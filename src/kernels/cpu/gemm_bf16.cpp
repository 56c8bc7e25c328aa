#include "kernels/cpu/gemm_bf16.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn_call.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

using dnnl::memory;
constexpr int64_t kRuntime = DNNL_RUNTIME_DIM_VAL;

// One oneDNN matmul primitive per (trans_a, trans_b, beta), with every size and stride given at
// run time: training batches come in hundreds of shapes, and a primitive per shape would mean
// hundreds of JIT compilations. Measured on this machine, the run-time-shaped primitive is as
// fast as shape-specialised ones at transformer sizes (docs/BENCHMARKS.md).
//
// oneDNN 2.x implements the bf16 matmul only on AVX-512 CPUs; on others (AVX2: Zen 2/3, most
// laptops) creating the primitive fails, and `get` returns null: gemm_bf16 then computes the same
// product with sgemm on the operands widened to f32 (exact): gemm_bf16_widened.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mutex;
  dnnl::matmul cache[2][2][2];  // built on first use
  bool unsupported = false;     // this CPU has no oneDNN bf16 matmul

  const dnnl::matmul* get(bool ta, bool tb, bool accumulate) {
    std::lock_guard<std::mutex> lock(mutex);
    if (unsupported) return nullptr;
    dnnl::matmul& m = cache[ta][tb][accumulate];
    if (m) return &m;
    const memory::dims any2{kRuntime, kRuntime};
    const memory::dims row_major{kRuntime, 1}, col_major{1, kRuntime};
    const memory::desc a(any2, memory::data_type::bf16, ta ? col_major : row_major);
    const memory::desc b(any2, memory::data_type::bf16, tb ? col_major : row_major);
    const memory::desc c(any2, memory::data_type::f32, row_major);
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      attr.set_post_ops(po);
    }
    try {
      m = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine));
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
      unsupported = true;
      std::fprintf(stderr,
                   "qkv: this CPU has no bf16 matmul in oneDNN (it needs AVX-512); bf16 GEMMs run as f32 "
                   "GEMMs of the bf16-rounded operands: the same numbers, without the bf16 speed-up\n");
      return nullptr;
    }
    return &m;
  }
};

// rows × cols of a row-major bf16 matrix with leading dimension ld, widened (exactly) into a packed
// f32 buffer.
const float* widen(const bf16* src, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(rows * cols));
  float* dst = buf.data();
  parallel_for(rows, 1 + (1 << 14) / cols, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const bf16* s = src + r * ld;
      float* d = dst + r * cols;
      for (int64_t c = 0; c < cols; ++c) d[c] = bf16_to_f32(s[c]);
    }
  });
  return dst;
}

Context& context() {
  static Context ctx;
  return ctx;
}

}  // namespace

// op(A) is stored K×M when transposed, M×K otherwise; likewise B.
void gemm_bf16_widened(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                       const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  thread_local std::vector<float> wa, wb;  // reused across calls: no page faults per step
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const float* a = widen(A, a_rows, a_cols, lda, wa);
  const float* b = widen(B, b_rows, b_cols, ldb, wb);
  sgemm(ta, tb, M, N, K, 1.f, a, a_cols, b, b_cols, beta, C, ldc);
}

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  QKV_CHECK(beta == 0.f || beta == 1.f, "gemm_bf16: beta must be 0 or 1, got ", beta);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.f)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return;
  }
  Context& ctx = context();
  try {
    const dnnl::matmul* m = ctx.get(ta, tb, beta == 1.f);
    if (!m) return gemm_bf16_widened(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    // The actual shapes and strides of this call (op(A) is M×K, op(B) is K×N).
    memory::desc a({M, K}, memory::data_type::bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
    memory::desc b({K, N}, memory::data_type::bf16, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
    memory::desc c({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
    memory ma(a, ctx.engine, const_cast<bf16*>(A)), mb(b, ctx.engine, const_cast<bf16*>(B)), mc(c, ctx.engine, C);
    const OneDnnCall call;  // (kernels/cpu/onednn_call.h)
    m->execute(ctx.stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    ctx.stream.wait();
  } catch (const dnnl::error& e) {
    QKV_CHECK(false, "gemm_bf16: oneDNN failed (", e.what(), ") for M=", M, " N=", N, " K=", K, " lda=", lda,
              " ldb=", ldb, " ldc=", ldc);
  }
}

void gemm_bf16_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
                    int64_t ldb, const float* bias, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  fill_bias_rows(C, ldc, bias, M, N);  // then the product accumulated onto them (cpu/gemm.cpp's sgemm_bias)
  gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, 1.f, C, ldc);
}

void convert_to_bf16(const float* src, bf16* dst, int64_t n) {
  parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) { bf16_row(src + lo, dst + lo, hi - lo); });
}

// The list's elements as one range split over the threads: each piece converts the parts of the
// tensors it covers (the single tensor's kernel on each part, so the bits are convert_to_bf16's).
void convert_to_bf16_list(const float* const* src, bf16* const* dst, const int64_t* n, int64_t count) {
  std::vector<int64_t> start(static_cast<size_t>(count) + 1, 0);  // start[t]: tensor t's first element in the range
  for (int64_t t = 0; t < count; ++t) start[t + 1] = start[t] + n[t];
  parallel_for(start[count], 1 << 14, [&](int64_t lo, int64_t hi) {
    int64_t t = std::upper_bound(start.begin(), start.end(), lo) - start.begin() - 1;
    for (; t < count && start[t] < hi; ++t) {
      const int64_t a = std::max(lo, start[t]) - start[t], b = std::min(hi, start[t + 1]) - start[t];
      if (b > a) bf16_row(src[t] + a, dst[t] + a, b - a);
    }
  });
}

// One pass, in place if dst == src (f32_to_bf16 is branch-free, so the loop vectorizes).
void round_to_bf16(const float* src, float* dst, int64_t n) {
  parallel_for(n, 1 << 14, [src, dst](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
  });
}

}  // namespace qkv::kernels::cpu
