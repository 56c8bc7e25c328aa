// QKV_HOST_DEVICE marks a function that every device's kernels call: __host__ __device__ when nvcc
// compiles it (src/kernels/cuda/*.cu), nothing otherwise. The elementwise functors
// (kernels/functors.h) and the random bits of Generator (core/rng.h) use it, so the CPU and the
// GPU compute the same function — dropout draws the same mask on both.
#pragma once

#ifdef __CUDACC__
#define QKV_HOST_DEVICE __host__ __device__
#else
#define QKV_HOST_DEVICE
#endif
