// Gathering rows, and the causal mask.
//
//   index_select:  out[o, i, :] = src[o, index[i], :]    (src [outer, n, inner], any element size)
//   index_add:     dst[o, index[i], :] += src[o, i, :]   (f32: index_select's backward, repeats add up)
//   causal_mask:   m[i, j] = j ≤ i + offset              (true = may attend; offset Lk − Lq aligns the
//                                                          last query with the last key, as decoding steps)
#pragma once

#include <cstdint>

namespace qkv::kernels::cpu {

// src and out dense; `inner_bytes` bytes per (o, i) row; every index in [0, n) (checked by the op).
void index_select(const uint8_t* src, int64_t outer, int64_t n, int64_t inner_bytes, const int64_t* index,
                  int64_t n_index, uint8_t* out);
void index_add(float* dst, int64_t outer, int64_t n, int64_t inner, const int64_t* index, int64_t n_index,
               const float* src);
void causal_mask(uint8_t* out, int64_t Lq, int64_t Lk, int64_t offset);

}  // namespace qkv::kernels::cpu
