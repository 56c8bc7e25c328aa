// The CUDA WMMA API (nvcuda::wmma, <mma.h>) for kernels run on the host by cuda_emulation.h — the
// 16 × 16 × 16 shape, 16-bit operands (bf16, f16) and f32 accumulators, which attention_bf16.cu uses.
//
// A GPU's fragments are opaque: which lane holds which element is unspecified, so a kernel may only
// load, multiply, store and fill them (it has no `x[i]` here, and no `num_elements`: a kernel that
// touched a fragment's elements would not compile). Whatever layout this emulation picks is then as
// good as the GPU's, and the simplest one serves: every lane holds the whole 16 × 16 tile as floats
// (16-bit values are exact in f32). What the API asks of a warp is checked as a GPU would fault or
// go wrong:
//   load_matrix_sync   a warp collective: every lane gives the same address and stride (checked
//                      by a shuffle, which is also the collective's convergence), the address 32-byte
//                      aligned (256 bits) and the stride a multiple of 16 bytes; then each lane reads
//                      the whole tile, after every lane arrived;
//   mma_sync           a warp collective: d = a·b + c on each lane's tile, k summed in order in f32
//                      (mma_m16n8k16's order; a GPU's is unspecified, within f32's rounding);
//   store_matrix_sync  a warp collective with the same checks; lane l writes the tile's elements
//                      e ≡ l (mod 32) only, so a lane that reads another's part before a __syncwarp
//                      reads what was there before, as on a GPU;
//   fill_fragment      each lane its own tile.
// Included after cuda_emulation.h, before the kernel's .cu file (whose <mma.h> defines nothing for
// a host compiler).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kernels/cuda_emulation.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// The tile of rows × columns: A's m × k, B's k × n, the accumulator's m × n
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "emulation: WMMA's 16 x 16 x 16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "emulation: 16-bit operands (bf16, f16) and f32 accumulators only");
  float tile[16][16];
};

namespace emulated {

template <typename T>
float value(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}

// A warp collective's operand: the same address and stride from every lane (the shuffles are its
// convergence), 256-bit aligned, the stride a multiple of 16 bytes.
template <typename T>
void check_operand(const T* p, unsigned ldm, const char* what) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  if (::qkv::emulation::shfl(at, 0) != at || ::qkv::emulation::shfl(ldm, 0) != ldm)
    throw std::logic_error(std::string("emulation: the lanes of a ") + what +
                           " gave different addresses or strides (the warp's one tile)");
  if (at % 32 != 0)
    throw std::logic_error(std::string("emulation: a ") + what + "'s address not 256-bit aligned (a GPU's fault)");
  if (ldm * sizeof(T) % 16 != 0)
    throw std::logic_error(std::string("emulation: a ") + what + "'s stride not a multiple of 16 bytes");
}

// element (r, c) of a tile stored row-major (row r at p + r·ldm) or column-major
inline size_t offset(int r, int c, unsigned ldm, bool row_major) {
  return row_major ? size_t(r) * ldm + c : size_t(c) * ldm + r;
}

// a load's whole tile, as every lane reads it once the warp has arrived
template <typename T>
void read_tile(float (&tile)[16][16], const T* p, unsigned ldm, bool row_major) {
  check_operand(p, ldm, "wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) tile[r][c] = value(p[offset(r, c, ldm, row_major)]);
}

}  // namespace emulated

// A's or B's tile from memory, stored as Layout says
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator's load names its memory layout");
  emulated::read_tile(f.tile, p, ldm, std::is_same_v<Layout, row_major>);
}

// an accumulator's tile from memory
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  emulated::read_tile(f.tile, p, ldm, l == mem_row_major);
}

// an accumulator's tile to memory: lane l the elements r·16 + c ≡ l (mod 32)
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  emulated::check_operand(p, ldm, "wmma::store_matrix_sync");
  for (int e = ::qkv::emulation::lane(); e < 256; e += 32)
    p[emulated::offset(e / 16, e % 16, ldm, l == mem_row_major)] = f.tile[e / 16][e % 16];
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, float v) {
  if constexpr (!std::is_same_v<T, float>) v = emulated::value(T(v));  // A's and B's elements are T's
  for (auto& row : f.tile)
    for (float& x : row) x = v;
}

// d = a·b + c (d may be c)
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  ::qkv::emulation::sync_warp();  // every lane of the warp, as the .sync.aligned instruction
  float out[16][16];
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float sum = c.tile[m][n];
      for (int k = 0; k < 16; ++k) sum += a.tile[m][k] * b.tile[k][n];
      out[m][n] = sum;
    }
  std::memcpy(d.tile, out, sizeof out);
}

}  // namespace nvcuda::wmma
