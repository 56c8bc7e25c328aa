// One wgmma product, m64nNk32 (two k16 instructions) from shared memory, with each operand K-major or
// MN-major (the transpose bits): the layouts of sm90a/wgmma.cuh checked on their own, apart from any
// kernel. The host side (namespace qkv::testing::wgmma_probe) lays out A [64 × 32] and B [32 × N] as
// shared-memory images from the PTX ISA's canonical layouts — written here again, independently of the
// emulation's reader — with values exact in bf16 (multiples of 1/8 in [−4, 4]), so the product is
// exact in f32 and compared bit for bit. The device side (probe_kernel, one warpgroup) copies the
// images into shared memory, issues the two products through the descriptors, and writes the
// accumulators out by their register layout.
//
// Run under tests/kernels/cuda_emulation.h (wgmma_probe_emulation_test.cpp: the emulation's reading of
// the descriptors) and on a Hopper GPU (tests/cuda/wgmma_probe_test.cpp through
// tests/cuda/sm90a/wgmma_probe.cu: the hardware's) — where both pass, the emulation's MN-major layouts
// are the hardware's, which the kernels that read operands MN-major (the attention backward at head
// dim 256) depend on.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace qkv::testing::wgmma_probe {

constexpr int kM = 64, kK = 32;

struct Case {
  int n;             // N: 32, 64 or 128 (128 MN-major: two 64-wide blocks, the leading byte offset)
  bool mn_a, mn_b;   // A M-major, B N-major
  int b_column = 0;  // N-major B: the product reads columns b_column … of a 64-wide B (32: from +64
                     // bytes inside the swizzled rows, as a warpgroup's half of 64 dims is read)
};

// The shared-memory images (each from a 1024-byte boundary), the operands' leading byte offsets, B's
// start (bytes from its image's start), and the expected d = A·B[:, b_column …] [64][N]
struct Images {
  std::vector<unsigned char> a, b;
  uint32_t a_lbo = 0, b_lbo = 0, b_start = 0;
  std::vector<float> expected;
};

// Byte offset of 16-bit element e (< 64) of 128-byte row r in a 128-byte-swizzled block: 16-byte piece
// e / 8 of the row lands on piece (e / 8) ⊕ (r mod 8)
inline uint32_t swizzled_element(uint32_t r, uint32_t e) { return r * 128 + (((e / 8) ^ (r % 8)) << 4) + (e % 8) * 2; }

inline uint16_t bf16_bits(float x) {  // exact for the probe's values
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

inline Images make(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> eighths(-32, 32);
  const int width = c.n + c.b_column;  // B's columns in the image
  std::vector<float> A(kM * kK), B(kK * width);
  for (float& x : A) x = eighths(rng) / 8.f;
  for (float& x : B) x = eighths(rng) / 8.f;
  Images im;
  auto put = [](std::vector<unsigned char>& img, uint32_t at, float x) {
    const uint16_t v = bf16_bits(x);
    std::memcpy(img.data() + at, &v, 2);
  };
  // K-major: [rows][64] (the 32 k's in the first half of each 128-byte row); MN-major: [MN/64][32 k
  // rows][64], the 64-blocks LBO = 32 · 128 bytes apart
  if (c.mn_a) {
    im.a.assign(kK * 128, 0), im.a_lbo = kK * 128;
    for (int m = 0; m < kM; ++m)
      for (int k = 0; k < kK; ++k) put(im.a, swizzled_element(k, m), A[m * kK + k]);
  } else {
    im.a.assign(kM * 128, 0);
    for (int m = 0; m < kM; ++m)
      for (int k = 0; k < kK; ++k) put(im.a, swizzled_element(m, k), A[m * kK + k]);
  }
  if (c.mn_b) {
    im.b.assign((width + 63) / 64 * kK * 128, 0), im.b_lbo = kK * 128, im.b_start = 2 * c.b_column;
    for (int k = 0; k < kK; ++k)
      for (int n = 0; n < width; ++n) put(im.b, (n / 64) * im.b_lbo + swizzled_element(k, n % 64), B[k * width + n]);
  } else {
    im.b.assign(width * 128, 0), im.b_start = 128 * c.b_column;
    for (int k = 0; k < kK; ++k)
      for (int n = 0; n < width; ++n) put(im.b, swizzled_element(n, k), B[k * width + n]);
  }
  im.expected.assign(kM * c.n, 0.f);
  for (int m = 0; m < kM; ++m)
    for (int n = 0; n < c.n; ++n) {
      float s = 0.f;
      for (int k = 0; k < kK; ++k) s += A[m * kK + k] * B[k * width + c.b_column + n];
      im.expected[m * c.n + n] = s;
    }
  return im;
}

// On the GPU (tests/cuda/sm90a/wgmma_probe.cu, in builds with the CUDA backend): whether this machine's
// GPU is a compute capability 9.0 one (H100, H200), and the probe's d there.
bool gpu_is_hopper();
std::vector<float> run_on_gpu(const Case& c, const Images& im);

}  // namespace qkv::testing::wgmma_probe

#if defined(__CUDACC__) || defined(QKV_CUDA_EMULATION)
#include "kernels/cuda/sm90a/wgmma.cuh"

namespace qkv::kernels::cuda {
namespace {

// One warpgroup: the images into shared memory (A at 0, B at 16 KB), then d = A·B over k = 0…31 in
// two k16 products (B's descriptor from b_start) — K-major: +32 bytes of start address a step; MN-major: +2048 (16 rows of k) — and
// d [64][N] written out by the accumulators' layout.
template <int N, int TransA, int TransB>
__global__ void __launch_bounds__(128, 1)
    wgmma_probe_kernel(const unsigned char* a, int a_bytes, uint32_t a_lbo, const unsigned char* b, int b_bytes,
                       uint32_t b_lbo, uint32_t b_start, float* d) {
  extern __shared__ unsigned char smem[];
  unsigned char* As = smem + ((1024 - tiles::smem_address(smem) % 1024) % 1024);
  unsigned char* Bs = As + 16 * 1024;
  for (int i = threadIdx.x; i < a_bytes; i += 128) As[i] = a[i];
  for (int i = threadIdx.x; i < b_bytes; i += 128) Bs[i] = b[i];
  fence_proxy_async();
  __syncthreads();
  float acc[N / 2];
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  fence_registers(acc);
  wgmma_fence();
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const uint64_t da = TransA ? smem_descriptor_mn(As + s * 2048, a_lbo) : smem_descriptor(As + s * 32);
    const uint64_t db = TransB ? smem_descriptor_mn(Bs + b_start + s * 2048, b_lbo) : smem_descriptor(Bs + b_start + s * 32);
    wgmma_ss<__nv_bfloat16, N, TransA, TransB>(acc, da, db, s > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(acc);
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  for (int i = 0; i < N / 2; ++i)
    d[(16 * warp + g + 8 * (i % 4 / 2)) * N + 8 * (i / 4) + 2 * t + i % 2] = acc[i];
}

}  // namespace
}  // namespace qkv::kernels::cuda
#endif
