// The whole-tensor sums' kernels (elementwise.cu launches them: sum_f64, sum_squares_f64, sum_all;
// tests/kernels/loss_emulation_test.cpp runs them on the host through tests/kernels/cuda_emulation.h):
// each block's share in double, then — for a sum that stays on the device — the blocks' partial sums
// added by one block in a fixed order. And the column sums of a [rows, cols] (sum_to's leading rows
// onto dense columns, every bias's gradient: kernels/column_strips.h's order), in strips of rows.
#pragma once

#include <cstdint>

#include "kernels/column_strips.h"
#include "kernels/cuda/launch.h"

namespace qkv::kernels::cuda {
namespace {

template <bool Square>
__global__ void sum_kernel(const float* x, int64_t n, double* partial) {
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    acc += Square ? v * v : v;
  }
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: the partial sums in a fixed order, rounded once to f32.
__global__ void __launch_bounds__(1024) sum_partials_kernel(const double* partial, unsigned blocks, float* out) {
  double acc = 0;
  for (unsigned i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
  acc = block_reduce(acc, SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = static_cast<float>(acc);
}

// The column sums of a dense [rows, cols] (out[c] = Σ_r a[r, c]; sum_to when the leading dims are
// reduced onto dense trailing ones — every bias's gradient, [tokens, features] → [features] — and an
// activation's backward that writes its bias's gradient in its own pass) in kernels/column_strips.h's
// order (the CPU's bits), in two kernels (launch_column_sums), where one thread a column looping over every row kept
// cols / 256 blocks of a GPU's SMs busy:
//   column_strip_sums   grid (⌈cols/256⌉, strips), a thread a column of a strip: partial[s, c] = the
//                       strip's rows of column c in double, in row order (a warp reads — or makes —
//                       128 contiguous bytes of a row)
//   column_partials_sum out[c] = Σ_s partial[s, c] in strip order, rounded once to f32
// `value(i, c)` gives element i = r · cols + c: DenseColumns reads it; an activation's backward makes
// it (and writes it as dx: activation_kernels.cuh).
constexpr int kColumnsABlock = 256;

struct DenseColumns {
  const float* a;
  __device__ float operator()(int64_t i, int64_t) const { return a[i]; }
};

template <class Value>
__global__ void column_strip_sums(Value value, int64_t rows, int64_t cols, int64_t strip_rows, double* partial) {
  const int64_t c = blockIdx.x * int64_t{kColumnsABlock} + threadIdx.x, s = blockIdx.y;
  if (c >= cols) return;
  const int64_t r0 = s * strip_rows < rows ? s * strip_rows : rows;
  const int64_t r1 = r0 + strip_rows < rows ? r0 + strip_rows : rows;
  double acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += value(r * cols + c, c);
  partial[s * cols + c] = acc;
}

__global__ void column_partials_sum(const double* partial, int64_t strips, int64_t cols, float* out) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x) {
    double t = 0;
    for (int64_t s = 0; s < strips; ++s) t += partial[s * cols + c];
    out[c] = static_cast<float>(t);
  }
}

// The two kernels on the current stream, the partials in a stream-ordered scratch: out [cols] f32
template <class Value>
void launch_column_sums(Value value, int64_t rows, int64_t cols, float* out) {
  if (cols <= 0) return;
  cudaStream_t st = stream();
  const ColumnStrips S = column_strips(rows);
  Scratch partial(2 * S.strips * cols, st);  // strips × cols doubles
  double* p = reinterpret_cast<double*>(partial.p);
  const dim3 grid(static_cast<unsigned>((cols + kColumnsABlock - 1) / kColumnsABlock), static_cast<unsigned>(S.strips));
  QKV_LAUNCH(grid, kColumnsABlock, 0, st, column_strip_sums<Value>)(value, rows, cols, S.rows_each, p);
  QKV_CUDA_LAUNCHED(column_strip_sums);
  QKV_LAUNCH(blocks_for(cols), 256, 0, st, column_partials_sum)(p, S.strips, cols, out);
  QKV_CUDA_LAUNCHED(column_partials_sum);
}

}  // namespace
}  // namespace qkv::kernels::cuda
