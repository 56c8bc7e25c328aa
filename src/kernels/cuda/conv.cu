// 2-D convolution on the GPU (the formula: kernels/cpu/conv.h), as im2col and cuBLAS GEMMs (TF32 as
// the other f32 GEMMs, kernels/cuda/gemm.cu). The batch goes in chunks of nb samples whose columns
// stand side by side, so each group is one GEMM per chunk:
//
//   col [C·KH·KW, nb·OH·OW]:  col[(c, u, v), (n, i, j)] = x[n, c, i·s_h − p_h + u·d_h, j·s_w − p_w + v·d_w]  (0 outside)
//   forward:          Y_g = W_g col_g            W_g [O/G, (C/G)·KH·KW]; Y [O, nb·OH·OW] → y (NCHW) + b
//   backward data:    col_g = W_gᵀ dY_g          dY: dy as [O, nb·OH·OW]; then dx = col2im(col)
//   backward weights: dW_g += dY_g col_gᵀ        over the chunks; db[o] = Σ_{n,i,j} dy[n, o, i, j]
//
// col2im gathers: each dx element sums the columns that read it, in a fixed order — no atomics, the
// same result every run. cuDNN would be faster on large convolutions; these are qkv's own, with no
// library beyond cuBLAS to carry to a GPU (docs/CUDA.md).
#include "kernels/conv.h"
#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/namespace.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxColumnFloats = int64_t{1} << 26;  // 256 MB of columns at most (one sample at least)

// The output's and col's sizes, and the Divisors (divisor.cuh) that split an element's index into its
// coordinates without a divide instruction.
struct Shape2 {
  int64_t OH, OW, OHW, rows;  // rows of col: C·KH·KW
  Divisor ow, oh, ohw, kw, kh, w, h, c, stride_h, stride_w;  // by OW, OH, OH·OW, KW, KH, W, H, C and the strides
};

__global__ void im2col_kernel(Conv2dProblem p, Shape2 s, int64_t n0, Divisor nb, const float* x, float* col) {
  const int64_t total = s.rows * nb.value() * s.OHW;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t ij, j, i, nk, v, u;
    const int64_t r = nb.divmod(s.ohw.divmod(e, ij), nk), n = n0 + nk;  // e = (r·nb + nk)·OH·OW + ij
    i = s.ow.divmod(ij, j);                                             // ij = i·OW + j
    const int64_t c = s.kh.divmod(s.kw.divmod(r, v), u);                // r = (c·KH + u)·KW + v
    const int64_t h = i * p.stride_h - p.pad_h + u * p.dilation_h, w = j * p.stride_w - p.pad_w + v * p.dilation_w;
    col[e] = h >= 0 && h < p.H && w >= 0 && w < p.W ? x[((n * p.C + c) * p.H + h) * p.W + w] : 0.f;
  }
}

// dx[n0 + n, c, h, w] = Σ_{u, v} col[(c, u, v), (n, i, j)] over the taps that read (h, w)
__global__ void col2im_kernel(Conv2dProblem p, Shape2 s, int64_t n0, Divisor nb, const float* col, float* dx) {
  const int64_t ncol = nb.value() * s.OHW, total = nb.value() * p.C * p.H * p.W;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t w, h, c;
    const int64_t n = s.c.divmod(s.h.divmod(s.w.divmod(e, w), h), c);  // e = ((n·C + c)·H + h)·W + w
    float g = 0.f;
    for (int64_t u = 0; u < p.KH; ++u) {
      const int64_t hi = h + p.pad_h - u * p.dilation_h;
      if (hi < 0) continue;
      int64_t off;
      const int64_t i = s.stride_h.divmod(hi, off);
      if (off || i >= s.OH) continue;
      for (int64_t v = 0; v < p.KW; ++v) {
        const int64_t wj = w + p.pad_w - v * p.dilation_w;
        if (wj < 0) continue;
        const int64_t j = s.stride_w.divmod(wj, off);
        if (off || j >= s.OW) continue;
        g += col[((c * p.KH + u) * p.KW + v) * ncol + n * s.OHW + i * s.OW + j];
      }
    }
    dx[(n0 * p.C) * p.H * p.W + e] = g;
  }
}

// y[n0 + n, o, ij] = Y[o, (n, ij)] + b[o]
__global__ void scatter_output_kernel(Shape2 s, int64_t O, int64_t n0, Divisor nb, const float* Y, const float* b,
                                      float* y) {
  const int64_t ncol = nb.value() * s.OHW, total = O * ncol;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t ij, n;
    const int64_t o = nb.divmod(s.ohw.divmod(e, ij), n);  // e = (o·nb + n)·OH·OW + ij
    y[((n0 + n) * O + o) * s.OHW + ij] = Y[e] + (b ? b[o] : 0.f);
  }
}

// dY[o, (n, ij)] = dy[n0 + n, o, ij]
__global__ void gather_grad_kernel(Shape2 s, int64_t O, int64_t n0, Divisor nb, const float* dy, float* dY) {
  const int64_t ncol = nb.value() * s.OHW, total = O * ncol;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t ij, n;
    const int64_t o = nb.divmod(s.ohw.divmod(e, ij), n);  // e = (o·nb + n)·OH·OW + ij
    dY[e] = dy[((n0 + n) * O + o) * s.OHW + ij];
  }
}

// db[o] = Σ_{n, ij} dy[n, o, ij]: a block per channel, summed in double
// (M = N·OH·OW: 0 where OH·OW is, and OHW then divides nothing)
__global__ void channel_sum_kernel(const float* dy, int64_t M, int64_t O, Divisor OHW, float* db) {
  const int64_t o = blockIdx.x;
  double s = 0;
  for (int64_t e = threadIdx.x; e < M; e += blockDim.x) {
    int64_t ij;
    const int64_t n = OHW.divmod(e, ij);
    s += dy[(n * O + o) * OHW.value() + ij];
  }
  s = block_reduce(s, SumOp{}, 0.0);
  if (threadIdx.x == 0) db[o] = static_cast<float>(s);
}

Shape2 shape_of(const Conv2dProblem& p) {
  const int64_t OH = p.out_h(), OW = p.out_w();
  auto by = Divisor::of_extent;
  return {OH,       OW,       OH * OW, p.C * p.KH * p.KW, by(OW),  by(OH),         by(OH * OW),
          by(p.KW), by(p.KH), by(p.W), by(p.H),           by(p.C), by(p.stride_h), by(p.stride_w)};
}

// Samples per chunk: as many as keep the columns within kMaxColumnFloats (one at least).
int64_t chunk_of(const Conv2dProblem& p, const Shape2& s) {
  const int64_t per_sample = s.rows * s.OHW > 0 ? s.rows * s.OHW : 1;
  const int64_t nb = kMaxColumnFloats / per_sample;
  return nb < 1 ? 1 : nb > p.N ? p.N : nb;
}

template <typename K, typename... Args>
void launch(K kernel, int64_t n, const char* name, Args... args) {
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream(), kernel)(args...);
  const cudaError_t st = cudaPeekAtLastError();
  if (st != cudaSuccess) ::qkv::cuda::fail(static_cast<int>(st), name, __FILE__, __LINE__);
}

}  // namespace

void conv2d_forward(const Conv2dProblem& p, const float* x, const float* w, const float* b, float* y) {
  const Shape2 s = shape_of(p);
  if (p.N == 0 || p.O == 0 || s.OHW == 0) return;
  const int64_t G = p.groups, Og = p.O / G, Kg = s.rows / G, nb = chunk_of(p, s);
  Scratch col(s.rows * nb * s.OHW, stream()), Y(p.O * nb * s.OHW, stream());
  for (int64_t n0 = 0; n0 < p.N; n0 += nb) {
    const int64_t m = nb < p.N - n0 ? nb : p.N - n0, ncol = m * s.OHW;
    launch(im2col_kernel, s.rows * ncol, "launch of im2col_kernel", p, s, n0, Divisor(m), x, col.p);
    for (int64_t g = 0; g < G; ++g)
      sgemm(false, false, Og, ncol, Kg, 1.f, w + g * Og * Kg, Kg, col.p + g * Kg * ncol, ncol, 0.f,
            Y.p + g * Og * ncol, ncol);
    launch(scatter_output_kernel, p.O * ncol, "launch of scatter_output_kernel", s, p.O, n0, Divisor(m), Y.p,
           p.bias ? b : nullptr, y);
  }
}

void conv2d_backward_data(const Conv2dProblem& p, const float* dy, const float* w, float* dx) {
  const Shape2 s = shape_of(p);
  if (p.N == 0 || p.C == 0) return;
  const int64_t G = p.groups, Og = p.O / G, Kg = s.rows / G, nb = chunk_of(p, s);
  Scratch col(s.rows * nb * s.OHW, stream()), dY(p.O * nb * s.OHW, stream());
  for (int64_t n0 = 0; n0 < p.N; n0 += nb) {
    const int64_t m = nb < p.N - n0 ? nb : p.N - n0, ncol = m * s.OHW;
    launch(gather_grad_kernel, p.O * ncol, "launch of gather_grad_kernel", s, p.O, n0, Divisor(m), dy, dY.p);
    for (int64_t g = 0; g < G; ++g)
      sgemm(true, false, Kg, ncol, Og, 1.f, w + g * Og * Kg, Kg, dY.p + g * Og * ncol, ncol, 0.f,
            col.p + g * Kg * ncol, ncol);
    launch(col2im_kernel, m * p.C * p.H * p.W, "launch of col2im_kernel", p, s, n0, Divisor(m), col.p, dx);
  }
}

void conv2d_backward_weights(const Conv2dProblem& p, const float* x, const float* dy, float* dw, float* db) {
  const Shape2 s = shape_of(p);
  const int64_t G = p.groups, Og = p.O / G, Kg = s.rows / G, nb = chunk_of(p, s);
  if (db && p.O > 0) {
    QKV_LAUNCH(static_cast<unsigned>(p.O), kThreads, 0, stream(), channel_sum_kernel)
    (dy, p.N * s.OHW, p.O, s.ohw, db);
    QKV_CUDA_LAUNCHED(channel_sum_kernel);
  }
  if (p.O == 0 || Kg == 0) return;
  if (p.N == 0 || s.OHW == 0) return fill_f32(dw, p.O * Kg, 0.f);
  Scratch col(s.rows * nb * s.OHW, stream()), dY(p.O * nb * s.OHW, stream());
  for (int64_t n0 = 0; n0 < p.N; n0 += nb) {
    const int64_t m = nb < p.N - n0 ? nb : p.N - n0, ncol = m * s.OHW;
    launch(im2col_kernel, s.rows * ncol, "launch of im2col_kernel", p, s, n0, Divisor(m), x, col.p);
    launch(gather_grad_kernel, p.O * ncol, "launch of gather_grad_kernel", s, p.O, n0, Divisor(m), dy, dY.p);
    for (int64_t g = 0; g < G; ++g)
      sgemm(false, true, Og, Kg, ncol, 1.f, dY.p + g * Og * ncol, ncol, col.p + g * Kg * ncol, ncol,
            n0 == 0 ? 0.f : 1.f, dw + g * Og * Kg, Kg);
  }
}

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
