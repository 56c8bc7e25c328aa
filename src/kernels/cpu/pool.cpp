#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

// Runs f(plane) over the planes, in parallel when there is enough work.
template <typename F>
void for_planes(int64_t planes, int64_t work_per_plane, F&& f) {
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(work_per_plane, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t c = lo; c < hi; ++c) f(c);
               });
}



}  // namespace

void max_pool2d_forward(const Pool2dProblem& p, const float* x, float* y, int32_t* argmax) {
  const int64_t OH = p.out_h(), OW = p.out_w();
  for_planes(p.planes, OH * OW * p.KH * p.KW, [&](int64_t c) {
    const float* xp = x + c * p.H * p.W;
    // the winner of one window: the largest real pixel, or the first NaN (as PyTorch)
    auto window = [&](int64_t i, int64_t j, float& best) {
      int64_t at = -1;
      best = -std::numeric_limits<float>::infinity();
      for (int64_t u = 0; u < p.KH; ++u) {
        const int64_t h = i * p.stride_h - p.pad_h + u * p.dilation_h;
        if (h < 0 || h >= p.H) continue;
        for (int64_t v = 0; v < p.KW; ++v) {
          const int64_t w = j * p.stride_w - p.pad_w + v * p.dilation_w;
          if (w < 0 || w >= p.W) continue;
          const float val = xp[h * p.W + w];
          if (std::isnan(val)) {
            best = val;
            return h * p.W + w;
          }
          if (at < 0 || val > best) best = val, at = h * p.W + w;
        }
      }
      return at;
    };
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t o = (c * OH + i) * OW + j;
        const int64_t at = window(i, j, y[o]);
        if (argmax) argmax[o] = static_cast<int32_t>(at);
      }
  });
}

void max_pool2d_backward(const Pool2dProblem& p, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t OH = p.out_h(), OW = p.out_w();
  for_planes(p.planes, p.H * p.W + OH * OW, [&](int64_t c) {
    float* dp = dx + c * p.H * p.W;
    std::memset(dp, 0, sizeof(float) * static_cast<size_t>(p.H * p.W));
    for (int64_t o = c * OH * OW; o < (c + 1) * OH * OW; ++o)
      if (argmax[o] >= 0) dp[argmax[o]] += dy[o];
  });
}

void avg_pool2d_forward(const Pool2dProblem& p, const float* x, float* y) {
  const int64_t OH = p.out_h(), OW = p.out_w();
  for_planes(p.planes, OH * OW * p.KH * p.KW, [&](int64_t c) {
    const float* xp = x + c * p.H * p.W;
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const AvgWindow a = avg_window(p, i, j);
        float s = 0.f;
        for (int64_t h = a.h0; h < a.h1; ++h)
          for (int64_t w = a.w0; w < a.w1; ++w) s += xp[h * p.W + w];
        y[(c * OH + i) * OW + j] = a.h0 < a.h1 && a.w0 < a.w1 ? s / a.divisor : 0.f;
      }
  });
}

void avg_pool2d_backward(const Pool2dProblem& p, const float* dy, float* dx) {
  const int64_t OH = p.out_h(), OW = p.out_w();
  for_planes(p.planes, p.H * p.W + OH * OW * p.KH * p.KW, [&](int64_t c) {
    float* dp = dx + c * p.H * p.W;
    std::memset(dp, 0, sizeof(float) * static_cast<size_t>(p.H * p.W));
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const AvgWindow a = avg_window(p, i, j);
        if (a.h0 >= a.h1 || a.w0 >= a.w1) continue;
        const float g = dy[(c * OH + i) * OW + j] / a.divisor;
        for (int64_t h = a.h0; h < a.h1; ++h)
          for (int64_t w = a.w0; w < a.w1; ++w) dp[h * p.W + w] += g;
      }
  });
}

void adaptive_avg_pool2d_forward(const float* x, float* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW) {
  for_planes(planes, H * W, [&](int64_t c) {
    const float* xp = x + c * H * W;
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = adaptive_start(i, H, OH), h1 = adaptive_end(i, H, OH);
        const int64_t w0 = adaptive_start(j, W, OW), w1 = adaptive_end(j, W, OW);
        float s = 0.f;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += xp[h * W + w];
        y[(c * OH + i) * OW + j] = s / static_cast<float>((h1 - h0) * (w1 - w0));
      }
  });
}

void adaptive_avg_pool2d_backward(const float* dy, float* dx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                  int64_t OW) {
  for_planes(planes, H * W, [&](int64_t c) {
    float* dp = dx + c * H * W;
    std::memset(dp, 0, sizeof(float) * static_cast<size_t>(H * W));
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const int64_t h0 = adaptive_start(i, H, OH), h1 = adaptive_end(i, H, OH);
        const int64_t w0 = adaptive_start(j, W, OW), w1 = adaptive_end(j, W, OW);
        const float g = dy[(c * OH + i) * OW + j] / static_cast<float>((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) dp[h * W + w] += g;
      }
  });
}

}  // namespace qkv::kernels::cpu
