// Elementwise kernels over strided, broadcast operands (kernels/cpu/elementwise.h's contract): the
// shape is coalesced on the host (kernels/strided.h), then each thread maps its dense output index
// to every operand's offset through at most kMaxDims dims passed by value, dividing by each dim's size
// through its Divisor (divisor.cuh: no divide instruction a coordinate). Dense same-shape operands (one
// coalesced dim, unit strides) take a plain grid-stride loop.
#include <cmath>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/convert_kernels.cuh"
#include "kernels/cuda/divisor.cuh"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/sum_kernels.cuh"
#include "kernels/cuda/tensor_list.h"
#include "kernels/strided.h"
#include "qkv/core/error.h"

QKV_CUDA_LAUNCHERS_BEGIN
namespace {

constexpr int kMaxDims = 8;

// The loop of up to 3 operands (output first), coalesced.
template <int K>
struct Loop {
  int nd;
  Divisor shape[kMaxDims];  // the coalesced dims' sizes
  int64_t strides[K][kMaxDims];
};

template <int K>
Loop<K> make_loop(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides,
                  const char* op) {
  const StridedLoop L = coalesce(shape, strides);
  QKV_CHECK(L.shape.size() <= kMaxDims, op, ": ", L.shape.size(), " dims after merging; the CUDA kernels take at most ",
            kMaxDims);
  Loop<K> out{};
  out.nd = static_cast<int>(L.shape.size());
  for (int d = 0; d < out.nd; ++d) {
    out.shape[d] = Divisor::of_extent(L.shape[d]);
    for (int o = 0; o < K; ++o) out.strides[o][d] = L.strides[o][d];
  }
  return out;
}

// Offsets of dense index i (< the loop's numel) in operands First..K-1: its coordinates, innermost dim
// first; the outermost is what the inner dims leave (no division).
template <int K, int First>
__device__ inline void offsets(const Loop<K>& L, int64_t i, int64_t* off) {
  for (int o = First; o < K; ++o) off[o] = 0;
  for (int d = L.nd - 1; d > 0; --d) {
    int64_t idx;
    i = L.shape[d].divmod(i, idx);
    for (int o = First; o < K; ++o) off[o] += idx * L.strides[o][d];
  }
  for (int o = First; o < K; ++o) off[o] += i * L.strides[o][0];
}

template <typename TO, typename TA, typename F>
__global__ void map1_kernel(Loop<2> L, int64_t n, TO* out, const TA* a, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    offsets<2, 1>(L, i, off);  // (the output, operand 0, is dense: i itself)
    out[i] = f(a[off[1]]);
  }
}

// The dense maps take kUnroll elements a thread, blockDim apart (each load coalesced across the warp, all
// of a thread's issued before any is used: kUnroll times a one-element loop's bytes in flight, as PyTorch's
// unrolled elementwise kernel; no alignment asked), in a grid-stride loop over blocks of kUnroll·blockDim.
// Each element's f is the same: the same bits.
constexpr int kUnroll = 4;
template <class Body>
__device__ inline void for_unrolled(int64_t n, Body body) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x * kUnroll;
  for (int64_t base = blockIdx.x * int64_t{blockDim.x} * kUnroll + threadIdx.x; base < n; base += step)
    body(base, int64_t{blockDim.x});
}

template <typename TO, typename TA, typename F>
__global__ void map1_dense_kernel(int64_t n, TO* out, const TA* a, F f) {
  for_unrolled(n, [&](int64_t base, int64_t stride) {
    TA va[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) va[u] = a[base + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) out[base + u * stride] = f(va[u]);
  });
}

template <typename TO, typename TA, typename TB, typename F>
__global__ void map2_kernel(Loop<3> L, int64_t n, TO* out, const TA* a, const TB* b, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[3];
    offsets<3, 1>(L, i, off);
    out[i] = f(a[off[1]], b[off[2]]);
  }
}

template <typename TO, typename TA, typename TB, typename F>
__global__ void map2_dense_kernel(int64_t n, TO* out, const TA* a, const TB* b, F f) {
  for_unrolled(n, [&](int64_t base, int64_t stride) {
    TA va[kUnroll] = {};
    TB vb[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) va[u] = a[base + u * stride], vb[u] = b[base + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) out[base + u * stride] = f(va[u], vb[u]);
  });
}

// out[off0] = a[off1], both operands strided.
template <typename T>
__global__ void copy_to_kernel(Loop<2> L, int64_t n, T* out, const T* a) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t off[2];
    offsets<2, 0>(L, i, off);
    out[off[0]] = a[off[1]];
  }
}

bool dense(const std::vector<int64_t>& shape, const std::vector<int64_t>& st) { return st == dense_strides(shape); }

struct Identity {
  template <typename T>
  __device__ T operator()(T x) const { return x; }
};

}  // namespace

template <typename TO, typename TA, typename F>
void map1(const std::vector<int64_t>& shape, TO* out, const TA* a, const std::vector<int64_t>& sa, F f) {
  const int64_t n = numel(shape);
  if (n == 0) return;
  if (dense(shape, sa)) {
    QKV_LAUNCH(blocks_for(n, 256, kUnroll), 256, 0, stream(), map1_dense_kernel<TO, TA, F>)(n, out, a, f);
  } else {
    const Loop<2> L = make_loop<2>(shape, {dense_strides(shape), sa}, "map1");
    QKV_LAUNCH(blocks_for(n), 256, 0, stream(), map1_kernel<TO, TA, F>)(L, n, out, a, f);
  }
  QKV_CUDA_LAUNCHED(map1_kernel);
}

template <typename TO, typename TA, typename TB, typename F>
void map2(const std::vector<int64_t>& shape, TO* out, const TA* a, const std::vector<int64_t>& sa, const TB* b,
          const std::vector<int64_t>& sb, F f) {
  const int64_t n = numel(shape);
  if (n == 0) return;
  if (dense(shape, sa) && dense(shape, sb)) {
    QKV_LAUNCH(blocks_for(n, 256, kUnroll), 256, 0, stream(), map2_dense_kernel<TO, TA, TB, F>)(n, out, a, b, f);
  } else {
    const Loop<3> L = make_loop<3>(shape, {dense_strides(shape), sa, sb}, "map2");
    QKV_LAUNCH(blocks_for(n), 256, 0, stream(), map2_kernel<TO, TA, TB, F>)(L, n, out, a, b, f);
  }
  QKV_CUDA_LAUNCHED(map2_kernel);
}

template <typename F>
void binary(const std::vector<int64_t>& shape, float* out, const float* a, const std::vector<int64_t>& sa,
            const float* b, const std::vector<int64_t>& sb, F f) {
  map2(shape, out, a, sa, b, sb, f);
}

template <typename F>
void unary(const std::vector<int64_t>& shape, float* out, const float* a, const std::vector<int64_t>& sa, F f) {
  map1(shape, out, a, sa, f);
}

// The functors ops pass (ops/arith.cpp, ops/compare.cpp).
#define QKV_BINARY(F)                                                                                          \
  template void binary<F>(const std::vector<int64_t>&, float*, const float*, const std::vector<int64_t>&, \
                          const float*, const std::vector<int64_t>&, F);
#define QKV_UNARY(F) \
  template void unary<F>(const std::vector<int64_t>&, float*, const float*, const std::vector<int64_t>&, F);
QKV_BINARY(Add) QKV_BINARY(Sub) QKV_BINARY(Mul) QKV_BINARY(Div) QKV_BINARY(NegDiv) QKV_BINARY(TanhGrad)
QKV_BINARY(SigmoidGrad) QKV_BINARY(SqrtGrad) QKV_BINARY(MaskedFill)
QKV_UNARY(AddScalar) QKV_UNARY(MulScalar) QKV_UNARY(Exp) QKV_UNARY(Log) QKV_UNARY(Tanh) QKV_UNARY(Sigmoid)
QKV_UNARY(Sqrt)
#undef QKV_BINARY
#undef QKV_UNARY
template void map1<uint8_t, float, CompareScalar<float>>(const std::vector<int64_t>&, uint8_t*, const float*,
                                                         const std::vector<int64_t>&, CompareScalar<float>);
template void map1<uint8_t, int32_t, CompareScalar<int32_t>>(const std::vector<int64_t>&, uint8_t*, const int32_t*,
                                                             const std::vector<int64_t>&, CompareScalar<int32_t>);
template void map1<uint8_t, uint8_t, CompareScalar<uint8_t>>(const std::vector<int64_t>&, uint8_t*, const uint8_t*,
                                                             const std::vector<int64_t>&, CompareScalar<uint8_t>);
template void map1<uint8_t, uint8_t, LogicalNot>(const std::vector<int64_t>&, uint8_t*, const uint8_t*,
                                                 const std::vector<int64_t>&, LogicalNot);
template void map2<uint8_t, uint8_t, uint8_t, LogicalAnd>(const std::vector<int64_t>&, uint8_t*, const uint8_t*,
                                                          const std::vector<int64_t>&, const uint8_t*,
                                                          const std::vector<int64_t>&, LogicalAnd);
template void map2<uint8_t, uint8_t, uint8_t, LogicalOr>(const std::vector<int64_t>&, uint8_t*, const uint8_t*,
                                                         const std::vector<int64_t>&, const uint8_t*,
                                                         const std::vector<int64_t>&, LogicalOr);

void copy_strided(const std::vector<int64_t>& shape, void* out, const void* src, const std::vector<int64_t>& strides,
                  size_t elem_size) {
  switch (elem_size) {
    case 1: map1(shape, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(src), strides, Identity{}); break;
    case 2: map1(shape, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(src), strides, Identity{}); break;
    case 4: map1(shape, static_cast<uint32_t*>(out), static_cast<const uint32_t*>(src), strides, Identity{}); break;
    case 8: map1(shape, static_cast<uint64_t*>(out), static_cast<const uint64_t*>(src), strides, Identity{}); break;
    default: QKV_CHECK(false, "copy_strided: elements of ", elem_size, " bytes");
  }
}

void copy_strided_to(const std::vector<int64_t>& shape, void* out, const std::vector<int64_t>& out_strides,
                     const void* src, const std::vector<int64_t>& src_strides, size_t elem_size) {
  const int64_t n = numel(shape);
  if (n == 0) return;
  const Loop<2> L = make_loop<2>(shape, {out_strides, src_strides}, "copy_");
  const unsigned blocks = blocks_for(n);
  cudaStream_t s = stream();
  switch (elem_size) {
    case 1:
      QKV_LAUNCH(blocks, 256, 0, s, copy_to_kernel<uint8_t>)(
          L, n, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(src));
      break;
    case 2:
      QKV_LAUNCH(blocks, 256, 0, s, copy_to_kernel<uint16_t>)(
          L, n, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(src));
      break;
    case 4:
      QKV_LAUNCH(blocks, 256, 0, s, copy_to_kernel<uint32_t>)(
          L, n, static_cast<uint32_t*>(out), static_cast<const uint32_t*>(src));
      break;
    case 8:
      QKV_LAUNCH(blocks, 256, 0, s, copy_to_kernel<uint64_t>)(
          L, n, static_cast<uint64_t*>(out), static_cast<const uint64_t*>(src));
      break;
    default: QKV_CHECK(false, "copy_: elements of ", elem_size, " bytes");
  }
  QKV_CUDA_LAUNCHED(copy_to_kernel);
}

// ---- conversions -----------------------------------------------------------------------------------

namespace {
struct ToBf16 {
  __device__ uint16_t operator()(float x) const { return to_bf16_bits(x); }
};
struct RoundBf16 {
  __device__ float operator()(float x) const { return __uint_as_float(static_cast<uint32_t>(to_bf16_bits(x)) << 16); }
};
struct RoundF16 {  // to the nearest IEEE f16 (ties to even; beyond 65504: ±inf), as an f32
  __device__ float operator()(float x) const { return __half2float(__float2half_rn(x)); }
};
struct FromBf16 {
  __device__ float operator()(uint16_t h) const { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
};
struct ToF8e4m3 {  // dtype.h's f32_to_f8e4m3: the CPU's function, bit for bit
  __device__ f8e4m3 operator()(float x) const { return f32_to_f8e4m3(x); }
};
struct FromF8e4m3 {
  __device__ float operator()(f8e4m3 x) const { return f8e4m3_to_f32(x); }
};
struct ToF32 {
  template <typename T>
  __device__ float operator()(T x) const { return static_cast<float>(x); }
};
template <typename TO, typename TA, typename F>
void dense_map(const TA* src, TO* dst, int64_t n, F f) {
  if (n == 0) return;
  QKV_LAUNCH(blocks_for(n), 256, 0, stream(), map1_dense_kernel<TO, TA, F>)(n, dst, src, f);
  QKV_CUDA_LAUNCHED(map1_dense_kernel);
}
}  // namespace

void convert_to_bf16(const float* src, bf16* dst, int64_t n) { dense_map(src, reinterpret_cast<uint16_t*>(dst), n, ToBf16{}); }
void round_to_bf16(const float* src, float* dst, int64_t n) { dense_map(src, dst, n, RoundBf16{}); }

void convert_to_bf16_list(const float* const* src, bf16* const* dst, const int64_t* n, int64_t count) {
  // (the bf16 destinations ride in the list's float pointers; the kernel writes them as bf16 bits)
  for_each_chunk<2>({src, reinterpret_cast<const float* const*>(dst)}, n, count,
                    [&](const TensorList<2>& list, int64_t, int tensors, int64_t most) {
                      const unsigned blocks = blocks_for(most, 256, 4) > 1024 ? 1024 : blocks_for(most, 256, 4);
                      QKV_LAUNCH(dim3(blocks, tensors), 256, 0, stream(), convert_to_bf16_list_kernel)(list);
                      QKV_CUDA_LAUNCHED(convert_to_bf16_list_kernel);
                    });
}
void round_to_f16(const float* src, float* dst, int64_t n) { dense_map(src, dst, n, RoundF16{}); }
void convert(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == to) {
    if (n) QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(to), cudaMemcpyDeviceToDevice,
                                          stream()));
  } else if (from == DType::f32 && to == DType::bf16) {
    convert_to_bf16(static_cast<const float*>(src), static_cast<bf16*>(dst), n);
  } else if (from == DType::bf16 && to == DType::f32) {
    dense_map(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n, FromBf16{});
  } else if (from == DType::f32 && to == DType::f8e4m3) {
    dense_map(static_cast<const float*>(src), static_cast<f8e4m3*>(dst), n, ToF8e4m3{});
  } else if (from == DType::f8e4m3 && to == DType::f32) {
    dense_map(static_cast<const f8e4m3*>(src), static_cast<float*>(dst), n, FromF8e4m3{});
  } else if (from == DType::boolean && to == DType::f32) {
    dense_map(static_cast<const uint8_t*>(src), static_cast<float*>(dst), n, ToF32{});
  } else if (from == DType::i32 && to == DType::f32) {
    dense_map(static_cast<const int32_t*>(src), static_cast<float*>(dst), n, ToF32{});
  } else {
    QKV_CHECK(false, "to(", dtype_name(to), "): ", dtype_name(from), " → ", dtype_name(to),
              " has no CUDA kernel yet (f32 ↔ bf16, f32 ↔ f8e4m3, boolean → f32 and i32 → f32 do)");
  }
}

void fill_zero(void* p, size_t bytes) {
  if (bytes) QKV_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream()));
}

namespace {
struct Constant {
  float v;
  __device__ float operator()(float) const { return v; }
};
}  // namespace

void fill_f32(float* p, int64_t n, float value) {
  if (n) dense_map(p, p, n, Constant{value});
}

void fill(void* p, DType dtype, int64_t n, float value) {
  if (value == 0.f && !std::signbit(value)) return fill_zero(p, static_cast<size_t>(n) * dtype_size(dtype));
  QKV_CHECK(dtype == DType::f32, "fill_(", value, "): a ", dtype_name(dtype),
            " tensor on a GPU is filled with 0 only so far (f32 with any value)");
  fill_f32(static_cast<float*>(p), n, value);
}

void scale_inplace(float* x, int64_t n, float c) {
  if (n) dense_map(x, x, n, MulScalar{c});
}

namespace {
__global__ void broadcast_rows_kernel(float* out, const float* row, int64_t total, Divisor n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t col;
    n.divmod(i, col);
    out[i] = row[col];
  }
}
}  // namespace

void broadcast_rows(float* out, const float* row, int64_t rows, int64_t n) {
  if (rows * n == 0) return;
  QKV_LAUNCH(blocks_for(rows * n), 256, 0, stream(), broadcast_rows_kernel)(out, row, rows * n, Divisor(n));
  QKV_CUDA_LAUNCHED(broadcast_rows_kernel);
}

// ---- reductions -----------------------------------------------------------------------------------

namespace {

// sum_to: out (dense, out_shape) = Σ of in (dense, in_shape) over the broadcast dims. Each thread
// owns one output element and walks the reduced elements: out_shape is padded on the left to
// in_shape's rank; the reduced dims are enumerated by a second index space.
struct ReduceShape {
  int nd;
  int64_t in_shape[kMaxDims];
  int64_t in_strides[kMaxDims];
  bool reduced[kMaxDims];
};

__global__ void sum_to_kernel(ReduceShape R, int64_t n_out, int64_t n_red, const float* in, float* out) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n_out; o += int64_t{gridDim.x} * blockDim.x) {
    // The input offset of output o with every reduced index at 0.
    int64_t base = 0, rem = o;
    for (int d = R.nd - 1; d >= 0; --d) {
      if (R.reduced[d]) continue;
      base += (rem % R.in_shape[d]) * R.in_strides[d];
      rem /= R.in_shape[d];
    }
    double acc = 0;
    for (int64_t r = 0; r < n_red; ++r) {
      int64_t off = base, rr = r;
      for (int d = R.nd - 1; d >= 0; --d) {
        if (!R.reduced[d]) continue;
        off += (rr % R.in_shape[d]) * R.in_strides[d];
        rr /= R.in_shape[d];
      }
      acc += in[off];
    }
    out[o] = static_cast<float>(acc);
  }
}

template <bool Square>
double sum_impl(const float* x, int64_t n) {
  if (n == 0) return 0;
  const unsigned blocks = blocks_for(n, 256, 16) > 1024 ? 1024 : blocks_for(n, 256, 16);
  double* partial = nullptr;
  cudaStream_t s = stream();
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), blocks * sizeof(double), s));
  QKV_LAUNCH(blocks, 256, 0, s, sum_kernel<Square>)(x, n, partial);
  QKV_CUDA_LAUNCHED(sum_kernel);
  std::vector<double> host(blocks);
  QKV_CUDA_CHECK(cudaMemcpyAsync(host.data(), partial, blocks * sizeof(double), cudaMemcpyDeviceToHost, s));
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
  wait_for_stream(s);  // (the host reads the partial sums next)
  double total = 0;
  for (double v : host) total += v;
  return total;
}

}  // namespace

void sum_all(const float* x, int64_t n, float* out) {
  cudaStream_t s = stream();
  const unsigned blocks = n == 0 ? 1 : blocks_for(n, 256, 16) > 1024 ? 1024 : blocks_for(n, 256, 16);
  double* partial = nullptr;
  QKV_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial), blocks * sizeof(double), s));
  QKV_LAUNCH(blocks, 256, 0, s, sum_kernel<false>)(x, n, partial);
  QKV_CUDA_LAUNCHED(sum_kernel);
  QKV_LAUNCH(1, 1024, 0, s, sum_partials_kernel)(partial, blocks, out);
  QKV_CUDA_LAUNCHED(sum_partials_kernel);
  QKV_CUDA_CHECK(cudaFreeAsync(partial, s));
}

void sum_to(const std::vector<int64_t>& in_shape, const float* in, const std::vector<int64_t>& out_shape, float* out) {
  const int nd = static_cast<int>(in_shape.size());
  QKV_CHECK(nd <= kMaxDims, "sum_to: ", nd, " dims; the CUDA kernel takes at most ", kMaxDims);
  QKV_CHECK(out_shape.size() <= in_shape.size(), "sum_to: cannot reduce to a higher rank");
  ReduceShape R{};
  R.nd = nd;
  const std::vector<int64_t> st = dense_strides(in_shape);
  const int lead = nd - static_cast<int>(out_shape.size());
  int64_t n_out = 1, n_red = 1;
  for (int d = 0; d < nd; ++d) {
    R.in_shape[d] = in_shape[d];
    R.in_strides[d] = st[d];
    const int64_t o = d < lead ? 1 : out_shape[d - lead];
    QKV_CHECK(o == in_shape[d] || o == 1, "sum_to: ", in_shape[d], " does not reduce to ", o);
    R.reduced[d] = d < lead || o != in_shape[d];
    (R.reduced[d] ? n_red : n_out) *= in_shape[d];
  }
  if (n_out == 0) return;
  if (n_red == 0) {
    fill_zero(out, static_cast<size_t>(n_out) * sizeof(float));
    return;
  }
  // The leading dims reduced onto the dense trailing ones ([rows, cols] → [cols]: a bias's gradient):
  // the column sums in strips of rows (sum_kernels.cuh; kernels/column_strips.h's order, the CPU's bits)
  int kept_from = 0;
  while (kept_from < nd && R.reduced[kept_from]) ++kept_from;
  bool leading = true;
  for (int d = kept_from; d < nd; ++d) leading = leading && !R.reduced[d];
  if (leading) {
    launch_column_sums(DenseColumns{in}, n_red, n_out, out);
    return;
  }
  QKV_LAUNCH(blocks_for(n_out), 256, 0, stream(), sum_to_kernel)(R, n_out, n_red, in, out);
  QKV_CUDA_LAUNCHED(sum_to_kernel);
}

double sum_f64(const float* x, int64_t n) { return sum_impl<false>(x, n); }
double sum_squares_f64(const float* x, int64_t n) { return sum_impl<true>(x, n); }

QKV_CUDA_LAUNCHERS_END  // qkv::kernels::cuda
