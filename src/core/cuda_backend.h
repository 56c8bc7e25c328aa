// What core's device-neutral code (allocator.cpp: allocator_for, device_available, copy_bytes)
// asks of the CUDA backend (cuda.cpp). Private to core; compiled in every build, and in one
// without -DQKV_CUDA these say there is no backend.
#pragma once

#include <cstddef>

#include "qkv/core/allocator.h"

namespace qkv::cuda_detail {

Allocator& allocator(int device);  // the caching allocator of GPU `device`
// n bytes between any two of: the host, GPU i, GPU j (the host end is pageable memory). The call
// returns once the host may reuse its end: a copy to the host has arrived (the host waited, and the
// thread's deferred checks on the stream were reported: qkv/core/cuda.h); one from the host is in the
// driver's staging buffer, and it and one device-to-device on one GPU are queued on the current
// stream in order with the kernels that read them.
void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t n);

}  // namespace qkv::cuda_detail
