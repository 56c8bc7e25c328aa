// The GPU kernels a training step's loss runs (kernels/cuda/embedding_kernels.cuh, sum_kernels.cuh) on
// the host, unchanged, through tests/kernels/cuda_emulation.h — each with the grid and block its
// launcher gives it — against the CPU's kernels: cross-entropy's forward, its reduction on the device
// (the mean's count and division, "sum"), its backward from a scalar or a per-row gradient; the
// deferred checks' words (the first bad position and its value, packed as core/cuda.h says); the
// embedding's lookup; a whole-tensor sum rounded once; the column sums in strips (the CPU's order). Needs the CUDA toolkit's headers (a QKV_CUDA
// build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/index.h"
#include "kernels/cuda/embedding_kernels.cuh"
#include "kernels/cuda/sum_kernels.cuh"
#include "kernels/column_order.h"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel
using qkv::testing::order_revealing;
using qkv::testing::serial_sums;
using qkv::testing::strip_order_sums;

unsigned long long word(int64_t position, int32_t value) {  // core/cuda.h's packing
  return static_cast<unsigned long long>(position) << 32 | static_cast<uint32_t>(value);
}

TEST(LossKernelsEmulated, CrossEntropyAndItsReductionMatchTheCpu) {
  const int64_t N = 37, C = 1003, ignore = -100;
  const float eps = 0.1f;
  const std::vector<float> x = random_floats(N * C, 71, 6.f);
  std::vector<int32_t> y(N);
  for (int64_t n = 0; n < N; ++n) y[n] = n % 7 == 3 ? static_cast<int32_t>(ignore) : static_cast<int32_t>((n * 131) % C);
  std::vector<float> lse_c(N), loss_c(N), lse_g(N), loss_g(N);
  cpu::cross_entropy_forward(x.data(), y.data(), N, C, eps, ignore, lse_c.data(), loss_c.data());
  launch(dim3(N), 256, 0, [&] { kc::cross_entropy_forward_kernel(x.data(), y.data(), C, eps, ignore, lse_g.data(), loss_g.data()); });
  EXPECT_LT(rel(lse_g, lse_c), 1e-6);
  EXPECT_LT(rel(loss_g, loss_c), 1e-5);
  for (int64_t n = 0; n < N; ++n)
    if (y[n] == ignore) {
      EXPECT_EQ(loss_g[n], 0.f) << n;
    }
  // a target outside [0, C) (check_targets reports it at the next wait, after the forward ran): a NaN
  // loss for its row, the others as before, and no read past the row (the emulation's threads read
  // host memory: an index of 2^31 − 1 would fault or read garbage)
  {
    std::vector<int32_t> yb = y;
    yb[1] = -5, yb[2] = static_cast<int32_t>(C), yb[4] = 2147483647;
    std::vector<float> lse_b(N), loss_b(N);
    launch(dim3(N), 256, 0,
           [&] { kc::cross_entropy_forward_kernel(x.data(), yb.data(), C, eps, ignore, lse_b.data(), loss_b.data()); });
    for (int64_t n = 0; n < N; ++n)
      if (n == 1 || n == 2 || n == 4)
        EXPECT_TRUE(std::isnan(loss_b[n])) << n;
      else
        EXPECT_EQ(loss_b[n], loss_g[n]) << n;
  }

  for (bool mean : {true, false}) {
    SCOPED_TRACE(mean ? "mean" : "sum");
    float out_c = 0, div_c = 0, out_g = -1, div_g = -1;
    cpu::cross_entropy_reduce(loss_c.data(), y.data(), N, ignore, mean, &out_c, &div_c);
    launch(dim3(1), 1024, 0, [&] {
      kc::cross_entropy_reduce_kernel(loss_c.data(), y.data(), N, ignore, mean, &out_g, &div_g);
    });
    EXPECT_EQ(div_g, div_c);
    EXPECT_EQ(div_g, mean ? 32.f : 1.f);  // the 37 rows less the 5 ignored (3, 10, 17, 24, 31)
    EXPECT_NEAR(out_g, out_c, 1e-6 * std::fabs(out_c));
    // the backward from the scalar gradient g = 0.7: scale_n = 0.7 / divisor
    const float g = 0.7f;
    std::vector<float> dx_c(N * C), dx_g(N * C);
    std::vector<bf16> dx16_c(N * C), dx16_g(N * C);  // dx's bf16 copies (ops/autocast.h)
    cpu::cross_entropy_backward(x.data(), y.data(), lse_c.data(), &g, 0, &div_c, N, C, eps, ignore, dx_c.data(),
                                dx16_c.data());
    launch(dim3(N), 256, 0, [&] {
      kc::cross_entropy_backward_kernel(x.data(), y.data(), lse_c.data(), &g, 0, &div_g, C, eps, ignore, dx_g.data(),
                                        dx16_g.data());
    });
    EXPECT_LT(rel(dx_g, dx_c), 1e-6);
    EXPECT_EQ(bits_of(dx16_c), converted_bits(dx_c)) << "the CPU's copy: convert_to_bf16's of its dx";
    EXPECT_EQ(bits_of(dx16_g), rounded_bits(dx_g)) << "the GPU's copy: its dx rounded";
  }
  // every row ignored: loss 0, divisor 0, and the backward's scale 0 (not NaN)
  const std::vector<int32_t> none(N, static_cast<int32_t>(ignore));
  float out = -1, div = -1;
  launch(dim3(1), 1024, 0, [&] { kc::cross_entropy_reduce_kernel(loss_c.data(), none.data(), N, ignore, true, &out, &div); });
  EXPECT_EQ(out, 0.f);
  EXPECT_EQ(div, 0.f);
  // reduction "none": the per-row gradient, no divisor
  const std::vector<float> gr = random_floats(N, 72, 1.f);
  std::vector<float> dx_c(N * C), dx_g(N * C);
  cpu::cross_entropy_backward(x.data(), y.data(), lse_c.data(), gr.data(), 1, nullptr, N, C, eps, ignore, dx_c.data());
  launch(dim3(N), 256, 0, [&] {
    kc::cross_entropy_backward_kernel(x.data(), y.data(), lse_c.data(), gr.data(), 1, nullptr, C, eps, ignore, dx_g.data(),
                                      nullptr);
  });
  EXPECT_LT(rel(dx_g, dx_c), 1e-6);
}

TEST(LossKernelsEmulated, ChecksLowerTheirWordToTheFirstBadPositionAndValue) {
  const int64_t N = 300, C = 50, ignore = -100;
  std::vector<int32_t> y(N, 7);
  y[3] = static_cast<int32_t>(ignore);
  unsigned long long bad = ~0ull;
  auto check = [&] {
    bad = ~0ull;
    launch(dim3(2), 256, 0, [&] { kc::check_targets_kernel(y.data(), N, C, ignore, &bad); });
  };
  check();
  EXPECT_EQ(bad, ~0ull) << "no bad target: the word is untouched";
  y[270] = -3, y[9] = 50;  // two bad ones: the first position wins, with its own value
  check();
  EXPECT_EQ(bad, word(9, 50));
  y[9] = 7;
  check();
  EXPECT_EQ(bad, word(270, -3));
  EXPECT_EQ(static_cast<int32_t>(bad & 0xffffffffu), -3) << "a negative value survives the packing";

  // the embedding: rows of the table; a bad id's row zeros and its word lowered
  const int64_t V = 50, E = 8;
  const std::vector<float> w = random_floats(V * E, 73, 1.f);
  const std::vector<int32_t> ids = {1, 50, 3, -7, 49};
  std::vector<float> out(ids.size() * E, -1.f);
  bad = ~0ull;
  const auto n = static_cast<int64_t>(ids.size());
  launch(dim3(kc::blocks_for(n * E)), 256, 0,
         [&] { kc::embedding_forward_kernel(w.data(), V, E, kc::Divisor(E), ids.data(), n, out.data(), &bad); });
  EXPECT_EQ(bad, word(1, 50));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < E; ++c) {
      const bool ok = ids[i] >= 0 && ids[i] < V;
      EXPECT_EQ(out[i * E + c], ok ? w[ids[i] * E + c] : 0.f) << i << ", " << c;
    }
}

TEST(LossKernelsEmulated, GathersScattersAndTheCausalMaskMatchTheCpu) {
  // the embedding's backward: repeated ids add up (atomics: in the emulation in thread order, so
  // exactly the CPU's sums here), padding_idx gets nothing
  const int64_t V = 20, E = 24;
  const std::vector<int32_t> ids = {3, 0, 19, 3, 7, 3, 0, 12};
  const auto n = static_cast<int64_t>(ids.size());
  const std::vector<float> dout = random_floats(static_cast<size_t>(n * E), 75, 1.f);
  std::vector<float> dw_c(V * E, 0.f), dw_g(V * E, 0.f);
  cpu::embedding_backward(dout.data(), ids.data(), n, E, V, 0, dw_c.data());
  launch(dim3(kc::blocks_for(n * E)), 256, 0,
         [&] { kc::embedding_backward_kernel(dout.data(), ids.data(), n, kc::Divisor(E), V, 0, dw_g.data()); });
  EXPECT_LT(rel(dw_g, dw_c), 1e-7);
  for (int64_t c = 0; c < E; ++c) EXPECT_EQ(dw_g[c], 0.f) << "padding_idx 0, column " << c;
  // ids outside [0, V) (reported by the forward's deferred check, which a backward may run before)
  // add nothing anywhere: dweight sits inside a guard band that must stay untouched
  {
    const std::vector<int32_t> bad = {3, -1, 20, 2147483647, -2147483647 - 1, 7};
    const auto nb = static_cast<int64_t>(bad.size());
    std::vector<float> band((V + 2) * E, 0.f), want((V + 2) * E, 0.f);
    for (int64_t i : {0, 5})  // the good ids' rows (3 and 7), one row past the band's start
      for (int64_t c = 0; c < E; ++c) want[(bad[i] + 1) * E + c] += dout[i * E + c];
    launch(dim3(kc::blocks_for(nb * E)), 256, 0,
           [&] { kc::embedding_backward_kernel(dout.data(), bad.data(), nb, kc::Divisor(E), V, -1, band.data() + E); });
    EXPECT_EQ(band, want);
  }

  // rows of a [outer, n, inner] tensor picked by an index list: bytes, and whole 16-byte pieces
  const int64_t outer = 3, rows = 5, inner = 8;  // 8 floats: 32-byte rows
  const std::vector<float> src = random_floats(static_cast<size_t>(outer * rows * inner), 76, 1.f);
  const std::vector<int64_t> index = {4, 0, 0, 2};
  const auto m = static_cast<int64_t>(index.size());
  const int64_t bytes = inner * 4, total = outer * m * bytes;
  std::vector<float> want(outer * m * inner), got(want.size(), -1.f), got16(want.size(), -1.f);
  const auto* s8 = reinterpret_cast<const uint8_t*>(src.data());
  cpu::index_select(s8, outer, rows, bytes, index.data(), m, reinterpret_cast<uint8_t*>(want.data()));
  launch(dim3(kc::blocks_for(total)), 256, 0, [&] {
    kc::index_select_kernel(s8, outer, rows, kc::Divisor(bytes), index.data(), kc::Divisor(m),
                            reinterpret_cast<uint8_t*>(got.data()));
  });
  EXPECT_EQ(got, want);
  launch(dim3(kc::blocks_for(total / 16)), 256, 0, [&] {
    kc::index_select_16_kernel(reinterpret_cast<const uint4*>(src.data()), outer, rows, kc::Divisor(bytes / 16),
                               index.data(), kc::Divisor(m), reinterpret_cast<uint4*>(got16.data()));
  });
  EXPECT_EQ(got16, want);
  // and back: index_add of the picked rows (index 0 twice: its rows receive two)
  std::vector<float> add_c(src.size(), 0.f), add_g(src.size(), 0.f);
  cpu::index_add(add_c.data(), outer, rows, inner, index.data(), m, want.data());
  launch(dim3(kc::blocks_for(outer * m * inner)), 256, 0, [&] {
    kc::index_add_kernel(add_g.data(), outer, rows, kc::Divisor(inner), index.data(), kc::Divisor(m), want.data());
  });
  EXPECT_EQ(add_g, add_c);

  // the causal mask, bottom-right aligned after a cache (offset)
  for (int64_t offset : {int64_t{0}, int64_t{3}}) {
    const int64_t Lq = 5, Lk = 5 + offset;
    std::vector<uint8_t> mc(Lq * Lk), mg(Lq * Lk, 7);
    cpu::causal_mask(mc.data(), Lq, Lk, offset);
    launch(dim3(1), 256, 0, [&] { kc::causal_mask_kernel(mg.data(), Lq, kc::Divisor(Lk), offset); });
    EXPECT_EQ(mg, mc) << offset;
  }
}

TEST(LossKernelsEmulated, AWholeTensorSumStaysOnTheDeviceRoundedOnce) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{100003}}) {
    const std::vector<float> x = random_floats(static_cast<size_t>(n), 74 + n, 3.f);
    const unsigned blocks = kc::blocks_for(n, 256, 16) > 1024 ? 1024 : kc::blocks_for(n, 256, 16);  // as sum_all
    std::vector<double> partial(blocks);
    float out = 0;
    launch(dim3(blocks), 256, 0, [&] { kc::sum_kernel<false>(x.data(), n, partial.data()); });
    launch(dim3(1), 1024, 0, [&] { kc::sum_partials_kernel(partial.data(), blocks, &out); });
    const double want = cpu::sum_f64(x.data(), n);
    // the same double sum in another order, rounded once: the f32 result within one ulp
    EXPECT_LE(std::fabs(out - static_cast<float>(want)), std::nextafter(std::fabs(static_cast<float>(want)), INFINITY) -
                                                             std::fabs(static_cast<float>(want)))
        << n;
  }
}

// The column sums in strips (sum_to's leading rows onto dense columns: a bias's gradient) as
// elementwise.cu launches them: kernels/column_strips.h's order exactly — on inputs whose sums show the
// order (column_order.h) — and so the CPU's sum_to bit for bit; on random inputs each column's double
// sum in row order, rounded (the strips' order differs by a rounding of ~1e-16 that never reaches f32
// here). Columns 1 to 300 (blocks past the edge); rows 1 to 40,000 (the strips capped at 512, empty
// ones at the end for 32,769).
std::vector<float> column_sums_gpu(const std::vector<float>& a, int64_t rows, int64_t cols) {
  const qkv::kernels::ColumnStrips S = qkv::kernels::column_strips(rows);
  std::vector<double> partial(static_cast<size_t>(S.strips * cols), -1.0);
  std::vector<float> got(static_cast<size_t>(cols), -1.f);
  launch(dim3(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(S.strips)), 256, 0, [&] {
    kc::column_strip_sums(kc::DenseColumns{a.data()}, rows, cols, S.rows_each, partial.data());
  });
  launch(dim3(kc::blocks_for(cols)), 256, 0,
         [&] { kc::column_partials_sum(partial.data(), S.strips, cols, got.data()); });
  return got;
}

TEST(LossKernelsEmulated, ColumnSumsInStripsAreTheColumnsDoubleSums) {
  bool order_shows = false;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 3}, {9, 40}, {128, 1}, {1000, 31}, {1000, 300},
                                   {32769, 2}, {40000, 33}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const qkv::kernels::ColumnStrips S = qkv::kernels::column_strips(rows);
    EXPECT_EQ(S.strips, std::max<int64_t>(1, std::min<int64_t>(512, (rows + 63) / 64)));
    const std::vector<float> r = order_revealing(static_cast<size_t>(rows * cols), 29 + cols);
    const std::vector<float> want = strip_order_sums(r, rows, cols);
    order_shows = order_shows || want != serial_sums(r, rows, cols);
    EXPECT_EQ(column_sums_gpu(r, rows, cols), want);
    std::vector<float> cpu_sum(static_cast<size_t>(cols));
    cpu::sum_to({rows, cols}, r.data(), {cols}, cpu_sum.data());
    EXPECT_EQ(cpu_sum, want);
    const std::vector<float> a = random_floats(static_cast<size_t>(rows * cols), 61 + cols, 2.f);
    EXPECT_EQ(column_sums_gpu(a, rows, cols), serial_sums(a, rows, cols));
  }
  EXPECT_TRUE(order_shows) << "the inputs never tell the strips' order from the serial one: the test could not fail";
}

}  // namespace
#endif
