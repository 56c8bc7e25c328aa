// 2-D pooling on the GPU, NCHW (semantics: kernels/cpu/pool.h, PyTorch's). A thread per output
// (forward) or per input pixel (backward): each input pixel gathers the gradients of the windows that
// hold it, in the order the CPU adds them (output row, then column), so the backward needs no atomics
// and matches the CPU bit for bit. An element's coordinates, and a window's bounds over the stride, through
// Divisors (divisor.cuh).
#include <cmath>

#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kThreads = 256;

// What a launch divides by: a plane's rows and columns, in and out, and the strides
struct PoolDivisors {
  Divisor in_w, in_h, out_w, out_h, stride_h, stride_w;
};
PoolDivisors divisors(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t stride_h, int64_t stride_w) {
  auto by = Divisor::of_extent;
  return {by(W), by(H), by(OW), by(OH), by(stride_h), by(stride_w)};
}
// plane c, row i and column j of element e of [planes, rows, cols]
__device__ inline int64_t plane_of(int64_t e, const Divisor& cols, const Divisor& rows, int64_t& i, int64_t& j) {
  return rows.divmod(cols.divmod(e, j), i);
}

// The output rows (or columns) whose windows may hold input row h: i with i·s − p ≤ h − u·d for some
// tap u < k, i.e. ⌈(h + p − d(k − 1)) / s⌉ ≤ i ≤ ⌊(h + p) / s⌋, clipped to [0, out).
__device__ inline void windows_holding(int64_t h, int64_t k, const Divisor& s, int64_t p, int64_t d, int64_t out,
                                       int64_t& lo, int64_t& hi) {
  const int64_t top = h + p - d * (k - 1);
  lo = top <= 0 ? 0 : s.div(top + s.value() - 1);
  hi = s.div(h + p);
  if (hi > out - 1) hi = out - 1;
}

__global__ void max_pool_forward_kernel(Pool2dProblem p, PoolDivisors v, const float* x, float* y, int32_t* argmax) {
  const int64_t n = p.planes * v.out_h.value() * v.out_w.value();
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n; o += int64_t{gridDim.x} * blockDim.x) {
    int64_t i, j;
    const int64_t c = plane_of(o, v.out_w, v.out_h, i, j);
    const float* xp = x + c * p.H * p.W;
    int64_t at = -1;
    float best = -INFINITY;
    bool nan = false;
    for (int64_t u = 0; u < p.KH && !nan; ++u) {
      const int64_t h = i * p.stride_h - p.pad_h + u * p.dilation_h;
      if (h < 0 || h >= p.H) continue;
      for (int64_t v = 0; v < p.KW; ++v) {
        const int64_t w = j * p.stride_w - p.pad_w + v * p.dilation_w;
        if (w < 0 || w >= p.W) continue;
        const float val = xp[h * p.W + w];
        if (isnan(val)) {  // the first NaN wins, as PyTorch
          best = val, at = h * p.W + w, nan = true;
          break;
        }
        if (at < 0 || val > best) best = val, at = h * p.W + w;
      }
    }
    y[o] = best;
    if (argmax) argmax[o] = static_cast<int32_t>(at);
  }
}

__global__ void max_pool_backward_kernel(Pool2dProblem p, PoolDivisors v, const float* dy, const int32_t* argmax,
                                         float* dx) {
  const int64_t n = p.planes * p.H * p.W, OH = v.out_h.value(), OW = v.out_w.value();
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t h, w;
    const int64_t c = plane_of(e, v.in_w, v.in_h, h, w), at = h * p.W + w;
    int64_t i0, i1, j0, j1;
    windows_holding(h, p.KH, v.stride_h, p.pad_h, p.dilation_h, OH, i0, i1);
    windows_holding(w, p.KW, v.stride_w, p.pad_w, p.dilation_w, OW, j0, j1);
    float g = 0.f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t o = (c * OH + i) * OW + j;
        if (argmax[o] == at) g += dy[o];
      }
    dx[e] = g;
  }
}


__global__ void avg_pool_forward_kernel(Pool2dProblem p, PoolDivisors v, const float* x, float* y) {
  const int64_t n = p.planes * v.out_h.value() * v.out_w.value();
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n; o += int64_t{gridDim.x} * blockDim.x) {
    int64_t i, j;
    const int64_t c = plane_of(o, v.out_w, v.out_h, i, j);
    const float* xp = x + c * p.H * p.W;
    const AvgWindow a = avg_window(p, i, j);
    float s = 0.f;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t w = a.w0; w < a.w1; ++w) s += xp[h * p.W + w];
    y[o] = a.h0 < a.h1 && a.w0 < a.w1 ? s / a.divisor : 0.f;
  }
}

__global__ void avg_pool_backward_kernel(Pool2dProblem p, PoolDivisors v, const float* dy, float* dx) {
  const int64_t n = p.planes * p.H * p.W, OH = v.out_h.value(), OW = v.out_w.value();
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t h, w;
    const int64_t c = plane_of(e, v.in_w, v.in_h, h, w);
    int64_t i0, i1, j0, j1;
    windows_holding(h, p.KH, v.stride_h, p.pad_h, 1, OH, i0, i1);
    windows_holding(w, p.KW, v.stride_w, p.pad_w, 1, OW, j0, j1);
    float g = 0.f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) {
        const AvgWindow a = avg_window(p, i, j);
        if (h >= a.h0 && h < a.h1 && w >= a.w0 && w < a.w1) g += dy[(c * OH + i) * OW + j] / a.divisor;
      }
    dx[e] = g;
  }
}


// (a window's bounds divide as the CPU's adaptive_start and adaptive_end: kernels/pool.h)
__global__ void adaptive_forward_kernel(const float* x, float* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                        int64_t OW, PoolDivisors v) {
  const int64_t n = planes * OH * OW;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n; o += int64_t{gridDim.x} * blockDim.x) {
    int64_t i, j;
    const int64_t c = plane_of(o, v.out_w, v.out_h, i, j);
    const float* xp = x + c * H * W;
    const int64_t h0 = adaptive_start(i, H, OH), h1 = adaptive_end(i, H, OH);
    const int64_t w0 = adaptive_start(j, W, OW), w1 = adaptive_end(j, W, OW);
    float s = 0.f;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += xp[h * W + w];
    y[o] = s / static_cast<float>((h1 - h0) * (w1 - w0));
  }
}

__global__ void adaptive_backward_kernel(const float* dy, float* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                         int64_t OW, PoolDivisors v) {
  const int64_t n = planes * H * W;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t h, w;
    const int64_t c = plane_of(e, v.in_w, v.in_h, h, w);
    float g = 0.f;
    for (int64_t i = 0; i < OH; ++i) {
      const int64_t h0 = adaptive_start(i, H, OH), h1 = adaptive_end(i, H, OH);
      if (h < h0 || h >= h1) continue;
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t w0 = adaptive_start(j, W, OW), w1 = adaptive_end(j, W, OW);
        if (w >= w0 && w < w1) g += dy[(c * OH + i) * OW + j] / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    dx[e] = g;
  }
}

}  // namespace

void max_pool2d_forward(const Pool2dProblem& p, const float* x, float* y, int32_t* argmax) {
  const int64_t OH = p.out_h(), OW = p.out_w(), n = p.planes * OH * OW;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), max_pool_forward_kernel)(
      p, divisors(p.H, p.W, OH, OW, p.stride_h, p.stride_w), x, y, argmax);
  QKV_CUDA_LAUNCHED(max_pool_forward_kernel);
}

void max_pool2d_backward(const Pool2dProblem& p, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t n = p.planes * p.H * p.W;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), max_pool_backward_kernel)(
      p, divisors(p.H, p.W, p.out_h(), p.out_w(), p.stride_h, p.stride_w), dy, argmax, dx);
  QKV_CUDA_LAUNCHED(max_pool_backward_kernel);
}

void avg_pool2d_forward(const Pool2dProblem& p, const float* x, float* y) {
  const int64_t OH = p.out_h(), OW = p.out_w(), n = p.planes * OH * OW;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), avg_pool_forward_kernel)(
      p, divisors(p.H, p.W, OH, OW, p.stride_h, p.stride_w), x, y);
  QKV_CUDA_LAUNCHED(avg_pool_forward_kernel);
}

void avg_pool2d_backward(const Pool2dProblem& p, const float* dy, float* dx) {
  const int64_t n = p.planes * p.H * p.W;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), avg_pool_backward_kernel)(
      p, divisors(p.H, p.W, p.out_h(), p.out_w(), p.stride_h, p.stride_w), dy, dx);
  QKV_CUDA_LAUNCHED(avg_pool_backward_kernel);
}

void adaptive_avg_pool2d_forward(const float* x, float* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW) {
  const int64_t n = planes * OH * OW;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), adaptive_forward_kernel)(
      x, y, planes, H, W, OH, OW, divisors(H, W, OH, OW, 1, 1));
  QKV_CUDA_LAUNCHED(adaptive_forward_kernel);
}

void adaptive_avg_pool2d_backward(const float* dy, float* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW) {
  const int64_t n = planes * H * W;
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), adaptive_backward_kernel)(
      dy, dx, planes, H, W, OH, OW, divisors(H, W, OH, OW, 1, 1));
  QKV_CUDA_LAUNCHED(adaptive_backward_kernel);
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
