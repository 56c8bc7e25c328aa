// sample_rows's GPU kernel (kernels/cuda/sample_kernels.cuh) run on the host, unchanged, through
// tests/kernels/cuda_emulation.h, by sample.cu's own launchers, against the CPU's kernel (decode::Sampler's
// draws): greedy rows (ties by the lower index, NaN never chosen, −0 equal to +0), tempered rows over
// vocabularies of 7 (fewer entries than threads), 1000 and 50,257 (GPT-2's; chunks of 197), logits
// of −∞ in them, draws near 0 and near 1 (the last positive token), and −1 for a row with no
// distribution. Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/sample.h"
#include "kernels/cuda/sample.cu"  // the launchers, on the emulated GPU
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats

TEST(SampleKernelsEmulated, TheGpusDrawsAreTheCpus) {
  const double ks[] = {0, 1, 5, 40};
  const double ps[] = {1.0, 0.9, 0.5, 0.01, 0.999};
  for (int64_t n : {7, 1000, 50257}) {
    SCOPED_TRACE(n);
    const int64_t rows = n == 50257 ? 16 : 60;
    std::vector<float> x = random_floats(static_cast<size_t>(rows * n), 500 + static_cast<uint64_t>(n), 6.f);
    std::vector<double> params;  // (T, k, p, u) a row
    for (int64_t r = 0; r < rows; ++r) {
      float* row = x.data() + r * n;
      if (r % 5 == 0) row[n / 2] = row[n - 1] = 40.f;  // ties
      if (r % 6 == 1) row[0] = -INFINITY, row[n / 3] = -INFINITY;
      if (r == 5) row[1] = NAN;  // greedy below: never chosen
      if (r == 10) row[2] = -0.f, row[3] = 0.f;
      if (r % 7 == 3)  // few distinct values: ties at the top-k and top-p cuts
        for (int64_t j = 0; j < n; ++j) row[j] = static_cast<float>((j * 5 + r) % 3);
      const double k = ks[(r / 2) % 4] < static_cast<double>(n) ? ks[(r / 2) % 4] : 0.0;
      params.insert(params.end(), {r % 5 == 0 ? 0.0 : 0.3 + 0.2 * static_cast<double>(r % 7), k, ps[(r / 3) % 5],
                                   r == 3 ? 0.0 : r == 4 ? 1.0 - 0x1.0p-53 : qkv::Generator::uniform(77, static_cast<uint64_t>(r))});
    }
    std::vector<int32_t> want(static_cast<size_t>(rows)), got(static_cast<size_t>(rows), -7);
    cpu::sample_rows(x.data(), rows, n, params.data(), want.data());
    kc::sample_rows(x.data(), rows, n, params.data(), got.data());
    EXPECT_EQ(got, want);
    EXPECT_EQ(want[0], n / 2) << "greedy: the first of the tied largest";
  }
  // the filters at their edges, over 1000 logits: every logit equal (top-k keeps all: ties; top-p cuts
  // by index), one finite logit among −∞, a nucleus as small as 1e-300 (one unit of the GPU's fixed
  // point), top-p past what two tied leaders hold
  {
    const int64_t n = 1000;
    std::vector<float> e(static_cast<size_t>(6 * n), 0.5f);
    for (int64_t j = 0; j < n; ++j) e[static_cast<size_t>(n + j)] = j == 417 ? 3.f : -INFINITY;
    for (int64_t j = 0; j < n; ++j) e[static_cast<size_t>(3 * n + j)] = static_cast<float>(j % 10) * 0.01f;
    e[static_cast<size_t>(5 * n + 10)] = e[static_cast<size_t>(5 * n + 900)] = 9.f;
    const std::vector<double> q = {1.0, 5, 1.0,   0.7005, 1.0, 0, 0.3, 0.9,  2.0, 0, 0.37, 0.4,
                                   0.5, 3, 1e-300, 0.99, 1.0, 0, 0.5, 0.999, 1.0, 1, 0.9,  0.5};
    std::vector<int32_t> want(6), got(6, -7);
    cpu::sample_rows(e.data(), 6, n, q.data(), want.data());
    kc::sample_rows(e.data(), 6, n, q.data(), got.data());
    EXPECT_EQ(got, want);
    EXPECT_EQ(want[0], 700) << "every logit tied: top-k 5 keeps all";
    EXPECT_EQ(want[1], 417) << "the one finite logit";
  }
  // rows with no distribution: a NaN among the logits, every logit −∞ (with and without the filters)
  std::vector<float> bad = {1.f, NAN, 2.f, -INFINITY, -INFINITY, -INFINITY, 1.f, NAN, 2.f, -INFINITY, -INFINITY, -INFINITY};
  const std::vector<double> p = {1, 0, 1, 0.5, 1, 0, 1, 0.5, 1, 2, 0.5, 0.5, 1, 2, 0.5, 0.5};
  std::vector<int32_t> want(4), got(4, 9);
  cpu::sample_rows(bad.data(), 4, 3, p.data(), want.data());
  kc::sample_rows(bad.data(), 4, 3, p.data(), got.data());
  EXPECT_EQ(want, (std::vector<int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(got, want);
}

// The penalties' kernel (apply_penalties_kernel: a thread an entry) against the CPU's, bit for bit:
// 3 rows of 5000 logits, 700 entries over them — in the prompt, in the output up to 9 times, both —,
// repetition penalties above and below 1, frequency and presence penalties of both signs.
TEST(SampleKernelsEmulated, ThePenaltiesAreTheCpus) {
  const int64_t n = 5000, rows = 3;
  std::vector<float> want = random_floats(static_cast<size_t>(rows * n), 31, 4.f), got = want;
  std::vector<int32_t> seen;
  for (int32_t e = 0; e < 700; ++e)
    seen.insert(seen.end(), {e % 3, 7 * e, e % 10, e % 4 == 0});  // (row, token: distinct, count, in prompt)
  const std::vector<float> penalties = {1.3f, 0.2f, 0.5f, 0.8f, -0.4f, 1.1f, 1.f, 0.f, -2.f};
  cpu::apply_penalties(want.data(), n, seen.data(), 700, penalties.data());
  kc::apply_penalties(got.data(), n, seen.data(), 700, penalties.data());
  EXPECT_EQ(got, want);
  EXPECT_NE(want, random_floats(static_cast<size_t>(rows * n), 31, 4.f)) << "the penalties changed nothing";
}

}  // namespace
#endif
