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

// The fences a GPU wants and would not report missing — it computes with stale bytes or registers, a
// wrong answer, not an error — are checked by the emulation: the threads' stores to shared memory made
// visible to wgmma by fence.proxy.async, registers a thread writes ordered before a product by
// wgmma.fence. A kernel with each slip, and without any.
namespace qkv::kernels::cuda {
namespace {
enum class Slip { none, no_proxy_fence, no_first_wgmma_fence, registers_written_after_the_fence };

// One warpgroup: A and B (K-major, 64 × 32 each) stored into shared memory by the threads, then two
// products over k 0…15 and 16…31 into the same accumulators, one of them written by the thread between.
template <Slip S>
__global__ void __launch_bounds__(128, 1)
    fence_slip_kernel(const unsigned char* a, const unsigned char* b, int bytes, float* d) {
  extern __shared__ unsigned char smem[];
  unsigned char* As = smem + ((1024 - tiles::smem_address(smem) % 1024) % 1024);
  unsigned char* Bs = As + 16 * 1024;
  for (int i = threadIdx.x; i < bytes; i += 128) As[i] = a[i], Bs[i] = b[i];
  if (S != Slip::no_proxy_fence) fence_proxy_async();
  __syncthreads();
  float acc[32];
  for (float& x : acc) x = 0.f;
  if (S != Slip::no_first_wgmma_fence) wgmma_fence();
  wgmma_ss<__nv_bfloat16, 64>(acc, smem_descriptor(As), smem_descriptor(Bs), 0);
  wgmma_commit();
  wgmma_wait<0>();
  acc[0] += 1.f;  // the thread writes an accumulator the next product reads
  if (S != Slip::registers_written_after_the_fence) wgmma_fence();
  wgmma_ss<__nv_bfloat16, 64>(acc, smem_descriptor(As + 32), smem_descriptor(Bs + 32), 1);
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) d[threadIdx.x * 32 + i] = acc[i];
}
}  // namespace
}  // namespace qkv::kernels::cuda

namespace {

// what the emulation reports of the kernel with slip S ("" where it runs through)
template <kc::Slip S>
std::string reported(const probe::Images& im) {
  std::memset(kc::smem, 0xA5, sizeof kc::smem);  // other bytes than the images' (an unfenced store must change some)
  std::vector<float> d(128 * 32);
  try {
    qkv::emulation::launch(dim3(1), 128, 32 * 1024 + 1024, [&] {
      kc::fence_slip_kernel<S>(im.a.data(), im.b.data(), static_cast<int>(im.a.size()), d.data());
    });
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "";
}

TEST(WgmmaProbeEmulated, AMissingFenceIsReported) {
  const probe::Images im = probe::make({64, false, false}, 90);
  ASSERT_EQ(im.a.size(), im.b.size());
  EXPECT_EQ(reported<kc::Slip::none>(im), "");
  const auto says = [](const std::string& report, const char* what) {
    EXPECT_NE(report.find(what), std::string::npos) << report;
  };
  says(reported<kc::Slip::no_proxy_fence>(im), "no fence.proxy.async after it");
  says(reported<kc::Slip::no_first_wgmma_fence>(im), "before the thread's first wgmma.fence");
  says(reported<kc::Slip::registers_written_after_the_fence>(im), "the thread wrote after its last wgmma.fence");
}

}  // namespace

#else
TEST(WgmmaProbeEmulated, EveryOperandMajornessReadsAsThePtxIsaLaysItOut) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(WgmmaProbeEmulated, AMissingFenceIsReported) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
