// f32 products on the tensor cores to f32's accuracy ("3xTF32"), for the f32 attention pair
// (attention_tf32.cu): the fragments of mma.sync m16n8k8 .tf32 (sm_80 and later), their loads from
// shared memory, and the split of an f32 into two TF32 halves. Plain C++ marked QKV_HOST_DEVICE, so
// that tests/kernels/mma_tf32_test.cpp runs these very loads and splits on the host, lane by lane,
// through an emulation of the instruction written from the PTX ISA's tables — the kernels' index
// arithmetic is checked before they first run on a GPU.
//
// The split (CUTLASS's OpMultiplyAddFastF32, which PyTorch's f32 memory-efficient attention runs on
// sm_80 and later): x = big + small with big = tf32(x), small = tf32(x − big) (tf32: 10 stored
// mantissa bits, rounded to nearest with ties away from zero, cvt.rna), and
//     x·y ≈ small·big' + big·small' + big·big'
// — the small·small' term, 2^-22 of the product, dropped; each TF32 product is exact in the f32 sum.
#pragma once

#include <cstdint>
#include <cstring>

#include "qkv/core/host_device.h"

namespace qkv::kernels::cuda::tf32 {

// Fragments of mma.m16n8k8.row.col.f32.tf32.tf32.f32 (PTX ISA, "Matrix fragments for mma.m16n8k8"),
// lane = 4g + t, element e of the lane's registers:
//   A (16 × 8, m × k):  a[e] = A(g + 8·(e % 2), t + 4·(e / 2))
//   B (8 × 8,  k × n):  b[e] = B(t + 4·e, g)
//   C (16 × 8, m × n):  c[e] = C(g + 8·(e / 2), 2t + e % 2)
QKV_HOST_DEVICE constexpr int a_row(int lane, int e) { return lane / 4 + 8 * (e % 2); }
QKV_HOST_DEVICE constexpr int a_col(int lane, int e) { return lane % 4 + 4 * (e / 2); }
QKV_HOST_DEVICE constexpr int b_row(int lane, int e) { return lane % 4 + 4 * e; }
QKV_HOST_DEVICE constexpr int b_col(int lane, int /*e*/) { return lane / 4; }
QKV_HOST_DEVICE constexpr int c_row(int lane, int e) { return lane / 4 + 8 * (e / 2); }
QKV_HOST_DEVICE constexpr int c_col(int lane, int e) { return 2 * (lane % 4) + e % 2; }

// An accumulator tile as the A fragment of the next product, without moving a value: a lane's C
// holds columns 2t and 2t + 1 where A wants t and t + 4, so A's column c is C's column kperm(c)
// (0 2 4 6 1 3 5 7) — and the next product's B reads its rows in that order, kperm(c) for row c.
// The product is the same: Σ_c A(m, c)·B(c, n) = Σ_c C(m, kperm(c))·Y(kperm(c), n).
QKV_HOST_DEVICE constexpr int kperm(int c) { return c < 4 ? 2 * c : 2 * c - 7; }
QKV_HOST_DEVICE inline void accumulators_as_a(float (&a)[4], const float (&c)[4]) {
  a[0] = c[0], a[1] = c[2], a[2] = c[1], a[3] = c[3];
}

// A(m, k) = X[m·ms + k'·ks] for the 16 × 8 tile at X, k' = kperm(k) when Perm (the k order of an
// accumulator tile, see above). Row-major X: ms = its stride, ks = 1; X stored transposed: ms = 1.
template <bool Perm>
QKV_HOST_DEVICE inline void load_a(float (&a)[4], const float* X, int ms, int ks, int lane) {
  for (int e = 0; e < 4; ++e) {
    const int k = a_col(lane, e);
    a[e] = X[a_row(lane, e) * ms + (Perm ? kperm(k) : k) * ks];
  }
}
// B(k, n) = Y[k'·ks + n·ns] for the 8 × 8 tile at Y, k' = kperm(k) when Perm. Y = rows of keys whose
// transpose is B (Kᵀ in S = Q Kᵀ): ks = 1, ns = the rows' stride; Y = V in O = P V: ks = V's stride,
// ns = 1.
template <bool Perm>
QKV_HOST_DEVICE inline void load_b(float (&b)[2], const float* Y, int ks, int ns, int lane) {
  for (int e = 0; e < 2; ++e) {
    const int k = b_row(lane, e);
    b[e] = Y[(Perm ? kperm(k) : k) * ks + b_col(lane, e) * ns];
  }
}

// Shared-memory row strides (floats) of the f32 attention pair's tiles (attention_tf32.cu): D + 4 for
// rows of q, k, v and dO — ≡ 4 (mod 32 banks), so that the 8 rows × 4 columns an A or B load reads
// (row g, column t) fall in 32 banks, 4g + t, and B's rows 2t, 2t + 1 in kperm order in 8t + g, 8t +
// 4 + g — and rows + 4 (68 for a backward step of 64 query rows, 36 for 32) for dS' stored as [key][row]
// and read as an A fragment of keys in kperm order (2t·68 ≡ 2t·36 ≡ 8t). tests/kernels/mma_tf32_test.cpp
// counts the banks of every load the kernels make.
QKV_HOST_DEVICE constexpr int row_stride(int D) { return D + 4; }
QKV_HOST_DEVICE constexpr int ds_stride(int rows) { return rows + 4; }
constexpr int kDsStride = ds_stride(64);

// x rounded to TF32: the 13 low mantissa bits cleared, to nearest, ties away from zero (cvt.rna);
// infinities and NaN as they are.
QKV_HOST_DEVICE inline float round_tf32(float x) {
#ifdef __CUDA_ARCH__
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  // half a TF32 ulp added to the magnitude (sign-magnitude bits), then the 13 bits cut
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
#endif
}

// x = big + small, each TF32 (small holds the 11 to 21 bits under big's: |small| ≤ 2^-11·|x|)
template <int N>
QKV_HOST_DEVICE inline void split(const float (&x)[N], float (&big)[N], float (&small)[N]) {
  for (int e = 0; e < N; ++e) big[e] = round_tf32(x[e]), small[e] = round_tf32(x[e] - big[e]);
}

}  // namespace qkv::kernels::cuda::tf32
