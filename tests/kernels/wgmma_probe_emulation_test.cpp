// wgmma's shared-memory layouts on their own (kernels/wgmma_probe.h): one m64nNk32 product with each
// operand K-major or MN-major, run through tests/kernels/cuda_emulation.h against the product of the
// images' values — the emulation's reading of the matrix descriptors and transpose bits checked
// against the PTX ISA's canonical layouts as wgmma_probe.h writes them. The same probe runs on a
// Hopper GPU in tests/cuda/wgmma_probe_test.cpp. Needs the CUDA toolkit's headers, not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include "kernels/wgmma_probe.h"

namespace {

namespace probe = qkv::testing::wgmma_probe;
namespace kc = qkv::kernels::cuda;

template <int N, int TransA, int TransB>
std::vector<float> run(const probe::Images& im) {
  std::vector<float> d(probe::kM * N, -1.f);
  qkv::emulation::launch(dim3(1), 128, 32 * 1024 + 1024, [&] {
    kc::wgmma_probe_kernel<N, TransA, TransB>(im.a.data(), static_cast<int>(im.a.size()), im.a_lbo, im.b.data(),
                                              static_cast<int>(im.b.size()), im.b_lbo, im.b_start, d.data());
  });
  return d;
}

template <int N, int TransA, int TransB>
void check(uint64_t seed, int b_column = 0) {
  const probe::Case c{N, TransA != 0, TransB != 0, b_column};
  SCOPED_TRACE(::testing::Message() << "N " << N << (c.mn_a ? ", A M-major" : ", A K-major")
                                    << (c.mn_b ? ", B N-major" : ", B K-major") << ", B from column " << b_column);
  const probe::Images im = probe::make(c, seed);
  EXPECT_EQ((run<N, TransA, TransB>(im)), im.expected);
  // a descriptor off by one 8-row group reads other values: the comparison can fail
  probe::Images shifted = im;
  std::rotate(shifted.b.begin(), shifted.b.begin() + 1024, shifted.b.end());
  EXPECT_NE((run<N, TransA, TransB>(shifted)), im.expected);
}

TEST(WgmmaProbeEmulated, EveryOperandMajornessReadsAsThePtxIsaLaysItOut) {
  uint64_t seed = 70;
  check<64, 0, 0>(++seed);
  check<64, 0, 1>(++seed);
  check<64, 1, 0>(++seed);
  check<64, 1, 1>(++seed);
  check<128, 0, 1>(++seed);  // B N-major over two 64-wide blocks: the leading byte offset
  check<128, 1, 1>(++seed);
  check<32, 1, 1>(++seed, 32);  // B N-major from column 32: its start 64 bytes into the swizzled rows
  check<32, 0, 0>(++seed, 32);  // B K-major from row 32 (4 groups of 8 rows on)
}

}  // namespace

#else
TEST(WgmmaProbeEmulated, EveryOperandMajornessReadsAsThePtxIsaLaysItOut) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
