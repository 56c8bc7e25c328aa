// What the tensor-core attention kernels share (attention_mma_kernels.cuh, attention_tf32_kernels.cuh,
// sm90a/attention_wgmma.cu, the paged decoding kernel): the 16-bit element packing, cp.async copies into shared memory,
// mma.sync and ldmatrix, and the pre-pass that writes dense T copies of the f32 operands. nvcc, or g++ under
// tests/kernels/cuda_emulation.h (QKV_CUDA_EMULATION: cp.async's copies landing at their wait). In an unnamed
// namespace, as every kernel header's: a test that runs these on the host defines its own, which must not stand in for
// the library's at link time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/attention_problem.h"
#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda::tiles {
namespace {

// e^x is computed as 2^(x·log2 e): ex2 is one instruction
constexpr float kLog2e = 1.4426950408889634f;

// Two floats → one 32-bit register of two T, `lo` in the low half (the lower-indexed element).
template <typename T>
__device__ inline uint32_t pack2(float lo, float hi);
template <>
__device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ inline uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

#ifdef QKV_CUDA_EMULATION
// On the host (tests/kernels/cuda_emulation.h): a shared-memory address is the offset into the
// emulation's shared memory; a copy lands at the wait that retires its group (the latest a GPU may
// land it), so a tile read before its wait is read stale.
__device__ inline uint32_t smem_address(const void* p) { return ::qkv::emulation::shared_address(p); }
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  ::qkv::emulation::cp_async16(dst, src, valid);
}
__device__ inline void cp_async_commit() { ::qkv::emulation::cp_async_commit(); }
template <int N>
__device__ inline void cp_async_wait() {
  ::qkv::emulation::cp_async_wait(N);
}
#else
__device__ inline uint32_t smem_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global → shared without passing through registers; `valid` false writes 16 zero bytes.
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {  // until at most N of this thread's groups are in flight
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// mma.sync m16n8k16 and ldmatrix (sm_80 and later; the mma.sync attention pair, attention_mma_kernels.cuh,
// and the paged decoding kernel on the tensor cores, paged_attention_kernels.cuh). Fragment layouts:
// attention_mma_kernels.cuh's head comment.
#ifdef QKV_CUDA_EMULATION  // on the host (tests/kernels/cuda_emulation.h): the PTX ISA's tables
// c += a·b on the tensor cores: a 16 × 16, b 16 × 8 (T), c 16 × 8 (f32)
template <typename T>
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::qkv::emulation::mma_m16n8k16<T>(c, a, b0, b1);
}
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ::qkv::emulation::ldmatrix_x4(r, p, false); }
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) { ::qkv::emulation::ldmatrix_x4(r, p, true); }
#else
// c += a·b on the tensor cores: a 16 × 16, b 16 × 8 (T), c 16 × 8 (f32)
template <typename T>
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ inline void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 × 8 matrices of 16-bit elements from shared memory; lane l gives the address of row l % 8 of
// matrix l / 8. .trans hands each lane the transposed pair (rows 2(l%4), 2(l%4)+1 of column l/4).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p))
               : "memory");
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p))
               : "memory");
}
#endif

// ---- pre-pass: strided f32 rows → dense T rows --------------------------------------------------------

// One operand of a pre-pass: src [B, heads, L, D] f32 (strides sb, sh, sl; unit along D) → dst, dense
// [B, heads, L, D] in T.
struct RowsToRound {
  const float* src;
  int64_t sb, sh, sl, heads, L;
  void* dst;
};

// The operands of one pre-pass (q, k, v forward; q, dO, k, v backward), for one launch: operand k's
// pieces of 8 elements are [end[k − 1], end[k]) of the launch's.
template <int N>
struct RoundList {
  const float* src[N];
  int64_t sb[N], sh[N], sl[N], end[N];
  Divisor heads[N], L[N];
  void* dst[N];
  bool vec[N];  // float4 loads: src and its strides 16-byte aligned
  int n;
};

// FlashAttention-2's preprocess, done by a backward's pre-pass on its dO operand (the list's operand k)
// as it reads it: for each row i of dO [B, H, Lq, D],
//   D_i = Σ_c dO[i][c] · O[i][c]      (f32, dO as given — not its rounded copy — as the CPU's backward)
// into dsum [B, H, Lq] (dense), and dq's row i zeroed, which the tile kernels add dQ into with atomics.
// Until 2026-12-04 two launches of their own before every backward (attention_row_dot, attention_zero_rows),
// the first reading dO a second time.
struct RowDots {
  int k = -1;                  // dO's place in the list; -1: no preprocess
  const float* out = nullptr;  // O, its rows laid out as out_l
  HeadLayout out_l, dq_l;
  float* dsum = nullptr;
  float* dq = nullptr;
  bool vec_out = false, vec_dq = false;  // float4 loads of O, float4 stores into dq
};

// dst[(b·heads + h)·L + i][c] = T(src[b·sb + h·sh + i·sl + c]) for c < D (D a multiple of 8), for each
// operand of the list: a thread per 8 elements, one 16-byte store; float4 loads where the operand allows
// them. A piece's operand by its place among the ends, its row and head through Divisors (divisor.cuh):
// no divide instruction per piece. (Until 2026-12-04 a launch an operand: 3 a forward, 4 a backward.)
// T void: no copies (the preprocess alone). Dots: the preprocess on operand dots.k — a row's D/8 pieces
// (D/8 a power of two ≤ 32) lie in adjacent lanes of one warp, since every operand's pieces start at a
// multiple of D/8 and a warp's at a multiple of 32, and their products are summed by shuffles; so every lane
// goes round the loop while any lane of its warp has a piece.
template <typename T, int N, bool Dots>
__global__ void round_rows_kernel(RoundList<N> r, Divisor row_pieces, RowDots dots) {
  const int64_t pieces = r.end[r.n - 1];
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; (Dots ? e - lane : e) < pieces;
       e += int64_t{gridDim.x} * blockDim.x) {
    float part = 0.f;  // this piece's share of D_i
    int64_t row = -1;  // its row of dO, where it has one
    int64_t c = 0;
    if (!Dots || e < pieces) {
      // the piece's operand k and its place in it (compile-time indices: a parameter array read at a variable
      // index would be copied to local memory)
      int k = 0;
      int64_t at = e;
#pragma unroll
      for (int j = 1; j < N; ++j)
        if (j < r.n && e >= r.end[j - 1]) k = j, at = e - r.end[j - 1];
      const float* src = r.src[0];
      int64_t sb = r.sb[0], sh = r.sh[0], sl = r.sl[0];
      Divisor heads = r.heads[0], L = r.L[0];
      void* dst = r.dst[0];
      bool vec = r.vec[0];
#pragma unroll
      for (int j = 1; j < N; ++j)
        if (k == j) {
          src = r.src[j], sb = r.sb[j], sh = r.sh[j], sl = r.sl[j], heads = r.heads[j], L = r.L[j];
          dst = r.dst[j], vec = r.vec[j];
        }
      int64_t i, h;
      const int64_t rw = row_pieces.divmod(at, c);         // at = rw·D/8 + c
      const int64_t b = heads.divmod(L.divmod(rw, i), h);  // rw = (b·heads + h)·L + i
      const float* s = src + b * sb + h * sh + i * sl + c * 8;
      float x[8];
      if (vec) {
        const float4 lo = *reinterpret_cast<const float4*>(s), hi = *reinterpret_cast<const float4*>(s + 4);
        x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
      } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) x[u] = s[u];
      }
      if constexpr (!std::is_void_v<T>)
        static_cast<uint4*>(dst)[at] =
            make_uint4(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]), pack2<T>(x[4], x[5]), pack2<T>(x[6], x[7]));
      if constexpr (Dots) {
        if (k == dots.k) {
          row = rw;
          const float* o = dots.out + b * dots.out_l.sb + h * dots.out_l.sh + i * dots.out_l.sl + c * 8;
          float* g = dots.dq + b * dots.dq_l.sb + h * dots.dq_l.sh + i * dots.dq_l.sl + c * 8;
          float y[8];
          if (dots.vec_out) {
            const float4 lo = *reinterpret_cast<const float4*>(o), hi = *reinterpret_cast<const float4*>(o + 4);
            y[0] = lo.x, y[1] = lo.y, y[2] = lo.z, y[3] = lo.w, y[4] = hi.x, y[5] = hi.y, y[6] = hi.z, y[7] = hi.w;
          } else {
#pragma unroll
            for (int u = 0; u < 8; ++u) y[u] = o[u];
          }
#pragma unroll
          for (int u = 0; u < 8; ++u) part += x[u] * y[u];
          if (dots.vec_dq) {
            reinterpret_cast<float4*>(g)[0] = make_float4(0.f, 0.f, 0.f, 0.f);
            reinterpret_cast<float4*>(g)[1] = make_float4(0.f, 0.f, 0.f, 0.f);
          } else {
#pragma unroll
            for (int u = 0; u < 8; ++u) g[u] = 0.f;
          }
        }
      }
    }
    if constexpr (Dots) {
      // D_i over the row's D/8 lanes (a lane of another row, operand or none adds within its own group)
      for (int m = 1; m < row_pieces.value(); m <<= 1) part += __shfl_xor_sync(0xffffffffu, part, m);
      if (row >= 0 && c == 0) dots.dsum[row] = part;
    }
  }
}

// Rows of [B, heads, L, D] at x with strides sb, sh, sl (unit along D) start on 16 bytes
inline bool rows_on_16_bytes(const void* x, int64_t sb, int64_t sh, int64_t sl) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && sb % 4 == 0 && sh % 4 == 0 && sl % 4 == 0;
}

// The operands' rows, of B batches and D dims each (D a multiple of 8), rounded to dense T copies in one
// launch (T void: none); Dots: with the preprocess on the operand at place dots.k of `ops`.
template <typename T, bool Dots = false, int N>
void round_rows(const RowsToRound (&ops)[N], int64_t B, int64_t D, cudaStream_t s, RowDots dots = {}) {
  if constexpr (Dots)
    QKV_CHECK(D % 8 == 0 && D / 8 <= 32 && (D / 8 & (D / 8 - 1)) == 0, "attention backward pre-pass: head dim ", D,
              " is not 8, 16, 32, 64, 128 or 256");
  RoundList<N> r{};
  int64_t pieces = 0;
  r.n = 0;
  const int dots_at = dots.k;
  dots.k = -1;
  for (int j = 0; j < N; ++j) {
    const RowsToRound& o = ops[j];
    const int64_t n = B * o.heads * o.L * D / 8;
    if (n == 0) continue;  // (an empty operand: no piece falls in it)
    const int k = r.n++;
    if (j == dots_at) dots.k = k;
    r.src[k] = o.src, r.sb[k] = o.sb, r.sh[k] = o.sh, r.sl[k] = o.sl, r.dst[k] = o.dst;
    r.heads[k] = Divisor(o.heads), r.L[k] = Divisor(o.L);
    r.vec[k] = rows_on_16_bytes(o.src, o.sb, o.sh, o.sl);
    r.end[k] = pieces += n;
  }
  if (pieces == 0) return;
  QKV_LAUNCH(blocks_for(pieces), 256, 0, s, round_rows_kernel<T, N, Dots>)(r, Divisor(D / 8), dots);
  QKV_CUDA_LAUNCHED(round_rows_kernel);
}

// FlashAttention-2's preprocess for dO's rows (the list's operand at place k) of problem p: D_i into dsum
// [B, H, Lq], dq zeroed where it lies.
inline RowDots row_dots(const AttnProblem& p, int k, const float* out, float* dsum, float* dq) {
  RowDots d;
  d.k = k, d.out = out, d.out_l = p.out_l, d.dq_l = p.dq_l, d.dsum = dsum, d.dq = dq;
  d.vec_out = rows_on_16_bytes(out, p.out_l.sb, p.out_l.sh, p.out_l.sl);
  d.vec_dq = rows_on_16_bytes(dq, p.dq_l.sb, p.dq_l.sh, p.dq_l.sl);
  return d;
}

// The tensor-core pairs' pre-passes (D = Dv, a multiple of 8): a forward's q, k, v as dense T copies in one
// launch; a backward's q, dO (laid out as p.dout_l), k, v likewise, with the preprocess on dO's rows —
// D_i = dO_i · O_i into dsum [B, H, Lq] and dq zeroed — in the same launch (D = 64, 128 or 256).
template <typename T>
void round_forward_operands(const AttnProblem& p, int64_t D, T* qh, T* kh, T* vh, cudaStream_t s) {
  round_rows<T>({{p.q, p.q_sb, p.q_sh, p.q_sl, p.H, p.Lq, qh},
                 {p.k, p.k_sb, p.k_sh, p.k_sl, p.Hkv, p.Lk, kh},
                 {p.v, p.v_sb, p.v_sh, p.v_sl, p.Hkv, p.Lk, vh}},
                p.B, D, s);
}
template <typename T>
void round_backward_operands(const AttnProblem& p, const float* out, const float* dout, int64_t D, T* qh, T* gh, T* kh,
                             T* vh, float* dsum, float* dq, cudaStream_t s) {
  const HeadLayout& g = p.dout_l;
  round_rows<T, true>({{p.q, p.q_sb, p.q_sh, p.q_sl, p.H, p.Lq, qh},
                       {dout, g.sb, g.sh, g.sl, p.H, p.Lq, gh},
                       {p.k, p.k_sb, p.k_sh, p.k_sl, p.Hkv, p.Lk, kh},
                       {p.v, p.v_sb, p.v_sh, p.v_sl, p.Hkv, p.Lk, vh}},
                      p.B, D, s, row_dots(p, 1, out, dsum, dq));
}
// The preprocess alone, one launch (the 3xTF32 backward, which reads the f32 operands as they are)
inline void backward_preprocess(const AttnProblem& p, const float* out, const float* dout, float* dsum, float* dq,
                                cudaStream_t s) {
  const HeadLayout& g = p.dout_l;
  round_rows<void, true>({{dout, g.sb, g.sh, g.sl, p.H, p.Lq, nullptr}}, p.B, p.Dv, s, row_dots(p, 0, out, dsum, dq));
}

}  // namespace
}  // namespace qkv::kernels::cuda::tiles
