// wgmma's shared-memory layouts on a Hopper GPU (kernels/wgmma_probe.h): one m64nNk32 product with each
// operand K-major or MN-major (the transpose bits), bit for bit against the product of the images'
// values — the hardware's reading of the layouts the emulation models (the same probe passes under
// it: tests/kernels/wgmma_probe_emulation_test.cpp). A failure here with the emulated one passing
// says the emulation's layouts are not the hardware's, before any kernel built on them is suspected.
#include <gtest/gtest.h>

#include "kernels/wgmma_probe.h"

namespace {

namespace probe = qkv::testing::wgmma_probe;

TEST(WgmmaProbeOnAGpu, EveryOperandMajornessReadsAsTheEmulationReadsIt) {
#ifndef QKV_WGMMA_PROBE
  GTEST_SKIP() << "this build has no CUDA backend (scripts/build.sh builds one where the CUDA toolkit is)";
#else
  if (!probe::gpu_is_hopper()) GTEST_SKIP() << "this machine shows no compute capability 9.0 GPU (H100, H200)";
  uint64_t seed = 70;
  for (const probe::Case c : {probe::Case{64, false, false}, probe::Case{64, false, true}, probe::Case{64, true, false},
                              probe::Case{64, true, true}, probe::Case{128, false, true}, probe::Case{128, true, true},
                              probe::Case{32, true, true, 32}, probe::Case{32, false, false, 32}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.n << (c.mn_a ? ", A M-major" : ", A K-major")
                                      << (c.mn_b ? ", B N-major" : ", B K-major") << ", B from column " << c.b_column);
    const probe::Images im = probe::make(c, ++seed);
    EXPECT_EQ(probe::run_on_gpu(c, im), im.expected);
  }
#endif
}

}  // namespace
