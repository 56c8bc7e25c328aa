// Multi-tensor apply (PyTorch's TensorListMetadata): a list of tensors passed to a kernel as one
// by-value argument — K pointer arrays (param, grad, … of one tensor each) and the element counts —
// so that one launch covers up to kListTensors tensors; for_each_chunk launches once a chunk.
#pragma once

#include <cstdint>

namespace qkv::kernels::cuda {

// 64 tensors: 64 · (8K + 8) bytes, under the 4 KB that every GPU takes as kernel arguments.
constexpr int kListTensors = 64;

template <int K>
struct TensorList {
  float* ptr[K][kListTensors];
  int64_t n[kListTensors];
};

// Calls launch(list, first, tensors, most) for each run of ≤ kListTensors consecutive tensors of
// the list that holds any element: tensors first … first + tensors − 1 filled in, the largest
// holding `most` elements. ptr[k][i] is array k's
// i-th pointer (host arrays of device pointers), n[i] the i-th tensor's elements.
template <int K, typename Launch>
void for_each_chunk(const float* const* const (&ptr)[K], const int64_t* n, int64_t count, Launch&& launch) {
  for (int64_t first = 0; first < count; first += kListTensors) {
    TensorList<K> list{};
    const int tensors = static_cast<int>(count - first < kListTensors ? count - first : kListTensors);
    int64_t most = 0;
    for (int i = 0; i < tensors; ++i) {
      for (int k = 0; k < K; ++k) list.ptr[k][i] = const_cast<float*>(ptr[k][first + i]);
      list.n[i] = n[first + i];
      most = n[first + i] > most ? n[first + i] : most;
    }
    if (most > 0) launch(list, first, tensors, most);
  }
}

}  // namespace qkv::kernels::cuda
