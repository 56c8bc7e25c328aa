// The CPU's copies, conversions and fills (kernels/copy.inc).
#include "kernels/cpu/copy.h"

#include <algorithm>
#include <cstring>

#include "kernels/strided.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

// out[Σ i·so] = src[Σ i·ss] for elements of type T. Size-1 dims are dropped and dims contiguous in
// both views merged first (strided.h's coalesce), so a transpose-copy runs as a few long inner
// loops: a dense one is memcpy, a broadcast row a fill.
template <typename T>
void copy_elements(const std::vector<int64_t>& shape, T* out, const std::vector<int64_t>& so, const T* src,
                   const std::vector<int64_t>& ss) {
  if (numel(shape) == 0) return;
  const StridedLoop L = coalesce(shape, {so, ss});
  const int nd = static_cast<int>(L.shape.size());
  const int64_t inner = L.shape[nd - 1], io = L.strides[0][nd - 1], is = L.strides[1][nd - 1];
  const int64_t outer = numel(L.shape) / inner;
  parallel_for(outer, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(inner, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      int64_t rem = o, offo = 0, offs = 0;
      for (int d = nd - 2; d >= 0; --d) {
        const int64_t i = rem % L.shape[d];
        rem /= L.shape[d];
        offo += i * L.strides[0][d], offs += i * L.strides[1][d];
      }
      T* __restrict__ y = out + offo;
      const T* __restrict__ x = src + offs;
      if (io == 1 && is == 1) {
        std::memcpy(y, x, static_cast<size_t>(inner) * sizeof(T));
      } else if (io == 1 && is == 0) {
        std::fill(y, y + inner, x[0]);
      } else {
        for (int64_t i = 0; i < inner; ++i) y[i * io] = x[i * is];
      }
    }
  });
}

}  // namespace

void copy_strided_to(const std::vector<int64_t>& shape, void* out, const std::vector<int64_t>& out_strides,
                     const void* src, const std::vector<int64_t>& src_strides, size_t elem_size) {
  switch (elem_size) {
    case 1:
      return copy_elements(shape, static_cast<uint8_t*>(out), out_strides, static_cast<const uint8_t*>(src), src_strides);
    case 2:
      return copy_elements(shape, static_cast<uint16_t*>(out), out_strides, static_cast<const uint16_t*>(src),
                           src_strides);
    case 4:
      return copy_elements(shape, static_cast<uint32_t*>(out), out_strides, static_cast<const uint32_t*>(src),
                           src_strides);
    case 8:
      return copy_elements(shape, static_cast<uint64_t*>(out), out_strides, static_cast<const uint64_t*>(src),
                           src_strides);
    default: QKV_CHECK(false, "copy_: elements of ", elem_size, " bytes");
  }
}

void copy_strided(const std::vector<int64_t>& shape, void* out, const void* src, const std::vector<int64_t>& strides,
                  size_t elem_size) {
  copy_strided_to(shape, out, dense_strides(shape), src, strides, elem_size);
}

void convert(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(to));
    return;
  }
  // the two that matter for speed (bf16 copies of weights and activations), in parallel
  if (from == DType::f32 && to == DType::bf16) {
    const auto* s = static_cast<const float*>(src);
    auto* d = static_cast<bf16*>(dst);
    return parallel_for(n, 1 << 14, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] = f32_to_bf16(s[i]);
    });
  }
  if (from == DType::bf16 && to == DType::f32) {
    const auto* s = static_cast<const bf16*>(src);
    auto* d = static_cast<float*>(dst);
    return parallel_for(n, 1 << 14, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] = bf16_to_f32(s[i]);
    });
  }
  if (from == DType::f8e4m3 && to == DType::f32) {  // a fp8 KV cache's pages gathered for the dense kernels
    const auto* s = static_cast<const f8e4m3*>(src);
    auto* d = static_cast<float*>(dst);
    return parallel_for(n, 1 << 14, [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) d[i] = f8e4m3_to_f32(s[i]);
    });
  }
  for (int64_t i = 0; i < n; ++i) store_from_f32(dst, to, i, load_as_f32(src, from, i));
}

void fill(void* p, DType dtype, int64_t n, float value) {
  if (dtype == DType::f32) {
    std::fill_n(static_cast<float*>(p), n, value);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_f32(p, dtype, i, value);
}

}  // namespace qkv::kernels::cpu
