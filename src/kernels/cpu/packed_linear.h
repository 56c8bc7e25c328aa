// A decoding model's linear layers with their weights reordered once, at load, into the blocked
// layout oneDNN's matmul primitive reads fastest (issue 47; what CTranslate2 does). oneDNN's GEMM
// functions (dnnl_sgemm, dnnl_gemm_u8s8s32) pack the weights again on every call, which a batch of
// a few dozen rows — a translation step — does not repay: on 1 core of the Xeon of
// docs/BENCHMARKS.md the packed matmul is 1.3–2.5× faster in f32 and 1.0–2.3× in int8 at
// M = 12–32 rows, K, N = 512–11,600.
//
//   f32    y[M,N] = x[M,K] · Wᵀ (+ b)                 (the same products, another summation order:
//                                                     equal to sgemm's to rounding, not bit for bit)
//   u8s8   acc[M,N] = Σ_k xq[m,k] · W8[n,k]           (exact in int32: equal to every other path)
//
// The weights are laid out as the primitive for 32 rows wants them (oneDNN's brgemm: blocks of K
// and N); a primitive per batch size M is made on first use and kept (oneDNN 2.6's matmul with M
// unknown until run time falls back to its packing GEMM, which is what this avoids).
#pragma once

#include <cstdint>
#include <memory>

namespace qkv::kernels::cpu {

struct PackedLinear;  // the primitive and the reordered weights (oneDNN objects)

// W: f32 [N, K] (row stride ldw) → its packed copy; null where oneDNN has no blocked (brgemm) layout
// for f32 on this CPU, which only its plain path then serves well.
std::shared_ptr<const PackedLinear> pack_linear_f32(int64_t N, int64_t K, const float* W, int64_t ldw);
// W8: int8 [N, K] (row stride ldw) → its packed copy, for u8 activations.
std::shared_ptr<const PackedLinear> pack_linear_s8(int64_t N, int64_t K, const int8_t* W8, int64_t ldw);

// x: f32 [M, K] dense, bias: f32 [N] or null → y: f32 [M, N] dense. A packed f32 weight. False
// (nothing written) where oneDNN has no matmul for M rows over this layout: the caller's plain GEMM.
bool packed_linear_f32(const PackedLinear& w, int64_t M, const float* x, const float* bias, float* y);
// xq: u8 [M, K] dense → acc: int32 [M, N] dense. A packed s8 weight. False as above.
bool packed_linear_u8s8(const PackedLinear& w, int64_t M, const uint8_t* xq, int32_t* acc);

}  // namespace qkv::kernels::cpu
