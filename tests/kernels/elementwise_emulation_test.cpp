// The elementwise launchers of the CUDA backend (kernels/cuda/elementwise.cu, compiled here with its
// kernels) run on the host through tests/kernels/cuda_emulation.h — their shape coalescing, the dense
// and strided loops, the copies into and out of strided views, the conversions, the reductions (sum_to's
// rows, columns and general paths; the whole-tensor sums through their partials' scratch, read back to
// the host), the list conversion's one launch for many tensors — against the CPU's kernels of the same
// declarations (kernels/elementwise.inc, copy.inc, gemm_bf16.inc), bit for bit where the CPU's loop
// rounds as the GPU's. Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/copy.h"
#pragma GCC diagnostic push  // GCC 12 at -O3: its own AVX-512 masked intrinsics' undefined pass-through
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/elementwise.h"
#pragma GCC diagnostic pop
#include "kernels/cuda/elementwise.cu"  // the launchers, on the emulated GPU
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, random_floats, rel
namespace qk = qkv::kernels;
using Shape = std::vector<int64_t>;

// a: [4, 6, 10] dense; aT: the same values read through a transpose (stored [10, 6, 4]); b: [1, 6, 1]
// broadcast (strides 0 along its size-1 dims); c: [4, 6, 10] dense
struct Operands {
  Shape shape{4, 6, 10};
  std::vector<float> a = random_floats(240, 11, 2.f), stored_t = random_floats(240, 12, 2.f),
                     b = random_floats(6, 13, 2.f), c = random_floats(240, 14, 2.f);
  Shape dense{60, 10, 1}, transposed{1, 4, 24}, broadcast{0, 1, 0};
};

template <typename F>
void expect_binary_alike(const Operands& o, const float* a, const Shape& sa, const float* b, const Shape& sb,
                         const char* what) {
  SCOPED_TRACE(what);
  std::vector<float> want(240), got(240, -1.f);
  cpu::binary(o.shape, want.data(), a, sa, b, sb, F{});
  kc::binary(o.shape, got.data(), a, sa, b, sb, F{});
  EXPECT_EQ(got, want);
}

TEST(ElementwiseLaunchersEmulated, BinaryAndUnaryOverDenseBroadcastAndTransposedOperandsMatchTheCpu) {
  const Operands o;
  // dense with dense (the plain grid-stride loop), dense with a broadcast, a transposed view with both
  expect_binary_alike<qk::Add>(o, o.a.data(), o.dense, o.c.data(), o.dense, "add, dense");
  expect_binary_alike<qk::Mul>(o, o.a.data(), o.dense, o.b.data(), o.broadcast, "mul, broadcast");
  expect_binary_alike<qk::Div>(o, o.stored_t.data(), o.transposed, o.b.data(), o.broadcast, "div, transposed");
  expect_binary_alike<qk::Sub>(o, o.stored_t.data(), o.transposed, o.c.data(), o.dense, "sub, transposed");
  for (const bool t : {false, true}) {
    SCOPED_TRACE(t ? "tanh of a transposed view" : "tanh, dense");
    std::vector<float> want(240), got(240, -1.f);
    const float* a = t ? o.stored_t.data() : o.a.data();
    const Shape& sa = t ? o.transposed : o.dense;
    cpu::unary(o.shape, want.data(), a, sa, qk::Tanh{});
    kc::unary(o.shape, got.data(), a, sa, qk::Tanh{});
    EXPECT_LT(rel(got, want), 1e-6);  // the CPU's tanh is its own vectorized one
  }
  std::vector<uint8_t> want(240), got(240, 7);  // map1 to another type: a comparison
  cpu::map1(o.shape, want.data(), o.stored_t.data(), o.transposed, qk::CompareScalar<float>{qk::Compare::gt, 0.5f});
  kc::map1(o.shape, got.data(), o.stored_t.data(), o.transposed, qk::CompareScalar<float>{qk::Compare::gt, 0.5f});
  EXPECT_EQ(got, want);
  EXPECT_TRUE(qkv::emulation::device().blocks.empty());
}

TEST(ElementwiseLaunchersEmulated, CopiesConversionsAndFillsMatchTheCpu) {
  const Operands o;
  {  // a transposed view made dense, 4- and 2-byte elements
    std::vector<float> want(240), got(240, -1.f);
    cpu::copy_strided(o.shape, want.data(), o.stored_t.data(), o.transposed, 4);
    kc::copy_strided(o.shape, got.data(), o.stored_t.data(), o.transposed, 4);
    EXPECT_EQ(got, want);
    std::vector<uint16_t> h(240), want16(240), got16(240, 1);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
    cpu::copy_strided(o.shape, want16.data(), h.data(), o.transposed, 2);
    kc::copy_strided(o.shape, got16.data(), h.data(), o.transposed, 2);
    EXPECT_EQ(got16, want16);
  }
  {  // a broadcast row written into a transposed view (copy_strided_to: out strided, src strides 0)
    std::vector<float> want(240, 0.f), got(240, 0.f);
    cpu::copy_strided_to(o.shape, want.data(), o.transposed, o.b.data(), o.broadcast, 4);
    kc::copy_strided_to(o.shape, got.data(), o.transposed, o.b.data(), o.broadcast, 4);
    EXPECT_EQ(got, want);
  }
  {  // f32 → bf16 → f32, i32 → f32
    std::vector<uint16_t> want16(240), got16(240, 1);
    cpu::convert(o.a.data(), qkv::DType::f32, want16.data(), qkv::DType::bf16, 240);
    kc::convert(o.a.data(), qkv::DType::f32, got16.data(), qkv::DType::bf16, 240);
    EXPECT_EQ(got16, want16);
    std::vector<float> want(240), got(240, -1.f);
    cpu::convert(want16.data(), qkv::DType::bf16, want.data(), qkv::DType::f32, 240);
    kc::convert(want16.data(), qkv::DType::bf16, got.data(), qkv::DType::f32, 240);
    EXPECT_EQ(got, want);
    std::vector<int32_t> ints(240);
    for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(i * 2654435761u) >> 3;
    cpu::convert(ints.data(), qkv::DType::i32, want.data(), qkv::DType::f32, 240);
    kc::convert(ints.data(), qkv::DType::i32, got.data(), qkv::DType::f32, 240);
    EXPECT_EQ(got, want);
  }
  {  // fill, f32 with any value and bf16 with zeros (what the GPU's fill takes)
    std::vector<float> want(37), got(37);
    cpu::fill(want.data(), qkv::DType::f32, 37, 2.75f);
    kc::fill(got.data(), qkv::DType::f32, 37, 2.75f);
    EXPECT_EQ(got, want);
    std::vector<uint16_t> want16(37, 5), got16(37, 5);
    cpu::fill(want16.data(), qkv::DType::bf16, 37, 0.f);
    kc::fill(got16.data(), qkv::DType::bf16, 37, 0.f);
    EXPECT_EQ(got16, want16);
  }
  {  // a list of tensors to bf16 in one launch (autocast's weight copies), sizes not multiples of 4
    const std::vector<float> x0 = random_floats(1001, 21, 3.f), x1 = random_floats(7, 22, 3.f),
                             x2 = random_floats(4096, 23, 3.f);
    const float* src[3] = {x0.data(), x1.data(), x2.data()};
    const int64_t n[3] = {1001, 7, 4096};
    std::vector<bf16> g0(1001), g1(7), g2(4096), c0(1001), c1(7), c2(4096);
    bf16* got[3] = {g0.data(), g1.data(), g2.data()};
    bf16* want[3] = {c0.data(), c1.data(), c2.data()};
    kc::convert_to_bf16_list(src, got, n, 3);
    cpu::convert_to_bf16_list(src, want, n, 3);
    EXPECT_EQ(bits_of(g0), bits_of(c0));
    EXPECT_EQ(bits_of(g1), bits_of(c1));
    EXPECT_EQ(bits_of(g2), bits_of(c2));
  }
  EXPECT_TRUE(qkv::emulation::device().blocks.empty());
}

TEST(ElementwiseLaunchersEmulated, ReductionsMatchTheCpu) {
  const Operands o;
  // sum_to onto each kind of output: the leading dims (column sums in strips), the trailing dim (rows),
  // the middle dim, and a scalar
  for (const Shape& out_shape : {Shape{1, 1, 10}, Shape{4, 6, 1}, Shape{1, 6, 1}, Shape{1, 1, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(out_shape));
    const int64_t n = out_shape[0] * out_shape[1] * out_shape[2];
    std::vector<float> want(n), got(n, -1.f);
    cpu::sum_to(o.shape, o.a.data(), out_shape, want.data());
    kc::sum_to(o.shape, o.a.data(), out_shape, got.data());
    EXPECT_LT(rel(got, want), 1e-6);
  }
  {  // many rows: several strips of the column sums
    const std::vector<float> x = random_floats(3000 * 5, 31, 1.f);
    std::vector<float> want(5), got(5, -1.f);
    cpu::sum_to({3000, 5}, x.data(), {1, 5}, want.data());
    kc::sum_to({3000, 5}, x.data(), {1, 5}, got.data());
    EXPECT_LT(rel(got, want), 1e-6);
  }
  // the whole tensor: in double, and to one f32
  const std::vector<float> x = random_floats(70000, 32, 1.f);
  EXPECT_NEAR(kc::sum_f64(x.data(), 70000), cpu::sum_f64(x.data(), 70000), 1e-9);
  EXPECT_NEAR(kc::sum_squares_f64(x.data(), 70000), cpu::sum_squares_f64(x.data(), 70000), 1e-9);
  float want = 0, got = -1;
  cpu::sum_all(x.data(), 70000, &want);
  kc::sum_all(x.data(), 70000, &got);
  EXPECT_NEAR(got, want, 1e-5f * std::fabs(want) + 1e-6f);
  {  // a row broadcast to every row, and a scaling in place
    std::vector<float> want_rows(7 * 33), got_rows(7 * 33, -1.f);
    const std::vector<float> row = random_floats(33, 33, 1.f);
    cpu::broadcast_rows(want_rows.data(), row.data(), 7, 33);
    kc::broadcast_rows(got_rows.data(), row.data(), 7, 33);
    EXPECT_EQ(got_rows, want_rows);
    cpu::scale_inplace(want_rows.data(), 7 * 33, -0.3f);
    kc::scale_inplace(got_rows.data(), 7 * 33, -0.3f);
    EXPECT_EQ(got_rows, want_rows);
  }
  EXPECT_TRUE(qkv::emulation::device().blocks.empty());
}

}  // namespace

#else
TEST(ElementwiseLaunchersEmulated, BinaryAndUnaryOverDenseBroadcastAndTransposedOperandsMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(ElementwiseLaunchersEmulated, CopiesConversionsAndFillsMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(ElementwiseLaunchersEmulated, ReductionsMatchTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
