// The CPU's column sums (kernels/cpu/column_sums.h) add in kernels/column_strips.h's order — the GPU's
// (loss_ and activation_emulation_test.cpp hold its kernels to the same reference) — at every thread
// count: sum_to of leading rows onto dense columns (every bias's gradient) and of a whole tensor onto
// one number, and an activation's backward that writes its bias's gradient in its own pass (its dx
// the backward's without it, its dbias sum_to(dx)). The inputs (column_order.h) make a sum's bits
// show the order it was added in. And the GELU's vector code gives an element the same bits wherever
// its range starts (the thread count moves where ranges start).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/column_order.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/dropout_mask.h"
#include "qkv/core/parallel.h"

namespace qkv {
namespace {

namespace cpu = kernels::cpu;
using testing::order_revealing;
using testing::serial_sums;
using testing::strip_order_sums;

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<uint32_t>(v[i]);
  return b;
}

// f at 1, 2 and 3 threads (the count restored after)
template <class F>
void at_thread_counts(F f) {
  const int before = num_threads();
  for (int t : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << t << " threads");
    set_num_threads(t);
    f();
  }
  set_num_threads(before);
}

// One row, rows below a strip, a strip and one, 3.1 strips; 512 strips with empty ones at the end
// (32,769 rows of 65 each: the last 8 strips hold nothing); a column of 50,000 rows.
TEST(ColumnSums, SumToAddsInTheStripsOrder) {
  bool order_shows = false;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 5}, {7, 3}, {65, 40}, {200, 33}, {32769, 2}, {50000, 1}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const std::vector<float> a = order_revealing(static_cast<size_t>(rows * cols), 17 + rows);
    const std::vector<float> want = strip_order_sums(a, rows, cols);
    order_shows = order_shows || bits(want) != bits(serial_sums(a, rows, cols));
    at_thread_counts([&] {
      std::vector<float> got(static_cast<size_t>(cols), -1.f);
      cpu::sum_to({rows, cols}, a.data(), {cols}, got.data());
      EXPECT_EQ(bits(got), bits(want));
      // [2, rows / 2 …] onto [1, cols]: the same rows (the leading dims coalesce)
      if (rows % 2 == 0) {
        cpu::sum_to({2, rows / 2, cols}, a.data(), {1, cols}, got.data());
        EXPECT_EQ(bits(got), bits(want));
      }
      // the whole tensor onto one number: rows of one column
      float all = -1.f;
      cpu::sum_to({rows, cols}, a.data(), {1, 1}, &all);
      EXPECT_EQ(std::bit_cast<uint32_t>(all), bits(strip_order_sums(a, rows * cols, 1))[0]);
    });
  }
  EXPECT_TRUE(order_shows) << "the inputs never tell the strips' order from the serial one: the test could not fail";
}

enum class Act { relu, gelu, gelu_tanh };

// dx and dbias of the backward with its bias's gradient in its pass (dbias given)
void backward(Act a, const std::vector<float>& x, const std::vector<float>& dy, const std::vector<float>& bias,
              const float* cdf, const kernels::DropoutMask& drop, std::vector<float>& dx, float* dbias) {
  const auto n = static_cast<int64_t>(x.size()), cols = static_cast<int64_t>(bias.size());
  dx.assign(x.size(), -1.f);
  if (a == Act::relu)
    cpu::relu_backward(x.data(), dy.data(), dx.data(), n, drop, nullptr, bias.data(), cols, dbias);
  else
    cpu::gelu_backward(x.data(), dy.data(), dx.data(), n, a == Act::gelu_tanh, cdf, drop, nullptr, bias.data(), cols,
                       dbias);
}

TEST(ColumnSums, AnActivationsBackwardWritesItsBiasGradientInItsPass) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{5, 37}, {300, 37}, {2000, 129}, {9, 3001}}) {
    const auto n = static_cast<size_t>(rows * cols);
    std::vector<float> x(n), bias(static_cast<size_t>(cols));
    for (size_t i = 0; i < n; ++i) x[i] = 3.f * (2.f * Generator::uniform(5, i) - 1.f);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 2.f * Generator::uniform(6, i) - 1.f;
    const std::vector<float> dy = order_revealing(n, 7);
    for (const kernels::DropoutMask& drop : {kernels::DropoutMask{}, kernels::dropout_mask(0.25f, 9, 3)})
      for (Act a : {Act::relu, Act::gelu, Act::gelu_tanh}) {
        SCOPED_TRACE(::testing::Message() << rows << " x " << cols << ", act " << static_cast<int>(a)
                                          << (drop.active() ? ", dropped" : ""));
        // the exact GELU's Φ(x̂) as its forward keeps it
        std::vector<float> y(n), cdf(n);
        if (a == Act::gelu)
          cpu::gelu_forward(x.data(), y.data(), static_cast<int64_t>(n), false, cdf.data(), {}, nullptr, bias.data(),
                            cols);
        const float* c = a == Act::gelu ? cdf.data() : nullptr;
        std::vector<float> dx_plain, dx, db(static_cast<size_t>(cols), -1.f), db_want(static_cast<size_t>(cols));
        backward(a, x, dy, bias, c, drop, dx_plain, nullptr);
        cpu::sum_to({rows, cols}, dx_plain.data(), {cols}, db_want.data());
        EXPECT_EQ(bits(db_want), bits(strip_order_sums(dx_plain, rows, cols)));
        at_thread_counts([&] {
          backward(a, x, dy, bias, c, drop, dx, db.data());
          EXPECT_EQ(bits(dx), bits(dx_plain));
          EXPECT_EQ(bits(db), bits(db_want));
        });
      }
  }
}

// 70,001 elements: two threads' ranges meet at 35,001 (mid-vector), the kernel's blocks of 8,192 end
// mid-vector past it; the range from 13 starts mid-vector. Every element's bits the same.
TEST(ColumnSums, AGeluElementsBitsDoNotDependOnWhereItsRangeStarts) {
  const int64_t n = 70001;
  std::vector<float> x(static_cast<size_t>(n)), dy(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 4.f * (2.f * Generator::uniform(11, i) - 1.f);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 2.f * Generator::uniform(12, i) - 1.f;
  std::vector<float> y1(x.size()), c1(x.size()), d1(x.size()), d1k(x.size());
  const int before = num_threads();
  set_num_threads(1);
  cpu::gelu_forward(x.data(), y1.data(), n, false, c1.data());
  cpu::gelu_backward(x.data(), dy.data(), d1.data(), n, false);
  cpu::gelu_backward(x.data(), dy.data(), d1k.data(), n, false, c1.data());
  at_thread_counts([&] {
    std::vector<float> y(x.size()), c(x.size()), d(x.size()), dk(x.size());
    cpu::gelu_forward(x.data(), y.data(), n, false, c.data());
    cpu::gelu_backward(x.data(), dy.data(), d.data(), n, false);
    cpu::gelu_backward(x.data(), dy.data(), dk.data(), n, false, c.data());
    EXPECT_EQ(bits(y), bits(y1));
    EXPECT_EQ(bits(c), bits(c1));
    EXPECT_EQ(bits(d), bits(d1));
    EXPECT_EQ(bits(dk), bits(d1k));
  });
  const int64_t k = 13;
  std::vector<float> y(x.size()), d(x.size());
  cpu::gelu_forward(x.data() + k, y.data() + k, n - k, false);
  cpu::gelu_backward(x.data() + k, dy.data() + k, d.data() + k, n - k, false);
  for (int64_t i = k; i < n; ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(y1[i])) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(d[i]), std::bit_cast<uint32_t>(d1[i])) << i;
  }
  set_num_threads(before);
}

}  // namespace
}  // namespace qkv
