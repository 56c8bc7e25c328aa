// The WMMA attention pair (attention_bf16.cu, QKV_CUDA_ATTENTION=wmma: the portable tensor-core
// kernels the others are measured beside) run on the host, unchanged, through cuda_emulation.h and
// wmma_emulation.h — the WMMA API's fragments as whole tiles a lane, its loads and stores checked as
// warp collectives — by attention_bf16.cu's own launchers (the shared memory each kernel is allowed
// past 48 KB, the grids), against qkv's CPU attention at the same precision: forward (out, lse) and
// backward (dq over zeros, as attention_16bit.cu hands it, dk, dv), bf16 and f16, head dims 64 and
// 128, causal or not, boolean and additive masks, rows that see no key, GQA, Lq ≠ Lk, ragged tiles,
// heads split off [B, L, H, D], dropout. The kernels round P and dS to the 16-bit type, which the CPU
// does not: within bf16's 2e-2 (f16's 2.5e-3), as AttentionMmaEmulated. Which GPU takes this pair is
// AttentionMmaEmulated's test (attention_16bit.cu). Needs the CUDA toolkit's headers (a QKV_CUDA build).
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host
#include "kernels/wmma_emulation.h"  // nvcuda::wmma, which <mma.h> leaves out for a host compiler

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/attention_emulation.h"
#include "kernels/cuda/attention_bf16.cu"  // the WMMA pair and its launchers, on the emulated H200

namespace {

using namespace qkv;
namespace qt = qkv::testing;
namespace kc = qkv::kernels::cuda;
namespace em = qkv::emulation;

template <typename T, int D>
void check(const qt::AttentionCase& c, uint64_t seed) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  SCOPED_TRACE(qt::describe(c) << (bf16 ? " bf16" : " f16"));
  ASSERT_EQ(c.D, D);
  const qt::EmulatedAttention e =
      qt::emulated_attention(c, seed, bf16 ? AttentionCompute::bf16 : AttentionCompute::f16);
  const kernels::AttnProblem& p = e.p;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(e.nq(), nan), lse(p.B * p.H * p.Lq, nan);
  em::device().launched.clear();
  (bf16 ? kc::attention_forward_wmma_bf16 : kc::attention_forward_wmma_f16)(p, out.data(), lse.data());
  const std::vector<float> Dsum = e.row_dot(out);
  std::vector<float> dq(e.nq(), 0.f), dk(e.nk(), nan), dv(e.nk(), nan);
  (bf16 ? kc::attention_backward_wmma_bf16 : kc::attention_backward_wmma_f16)(p, lse.data(), Dsum.data(), e.dout.data(),
                                                                              dq.data(), dk.data(), dv.data());
  EXPECT_TRUE(em::launched(kc::flash_bf16_forward_kernel<T, D>)) << "not the WMMA forward";
  EXPECT_TRUE(em::launched(kc::flash_bf16_backward_kernel<T, D>)) << "not the WMMA backward";
  const double tol = bf16 ? 2e-2 : 2.5e-3;
  EXPECT_LT(qt::max_rel_error(out, e.out), tol) << "out";
  EXPECT_LT(qt::max_rel_error(dq, e.dq), tol) << "dq";
  EXPECT_LT(qt::max_rel_error(dk, e.dk), tol) << "dk";
  EXPECT_LT(qt::max_rel_error(dv, e.dv), tol) << "dv";
}

TEST(AttentionWmmaEmulated, ThePortablePairMatchesTheCpu) {
  uint64_t seed = 5000;
  check<__nv_bfloat16, 64>({1, 2, 2, 70, 90, 64, false, 0, false}, seed += 10);     // ragged tiles both ways
  check<__nv_bfloat16, 64>({1, 2, 1, 130, 70, 64, true, 1, false}, seed += 10);     // causal, boolean, GQA, Lq > Lk
  check<__nv_bfloat16, 128>({1, 2, 2, 65, 129, 128, false, 2, true}, seed += 10);   // additive, heads inner
  check<__nv_bfloat16, 128>({1, 2, 1, 100, 100, 128, true, 3, false}, seed += 10);  // rows that see no key
  check<__half, 64>({1, 2, 1, 130, 70, 64, true, 1, false}, seed += 10);
  check<__half, 128>({1, 1, 1, 64, 64, 128, false, 0, false}, seed += 10);              // whole tiles
  check<__nv_bfloat16, 64>({1, 2, 2, 90, 101, 64, false, 2, false, 0.1f}, seed += 10);  // dropout, Lk odd
}

// The WMMA API's rules, which a GPU breaks silently or faults on: one tile for the warp, 256-bit
// aligned, and a store's parts read by another lane only after the warp's __syncwarp
TEST(AttentionWmmaEmulated, TheApisRulesAreChecked) {
  using namespace nvcuda;
  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
  alignas(64) static __nv_bfloat16 a[16 * 32];
  alignas(64) static float c[16 * 16];
  for (auto& x : a) x = __float2bfloat16(1.f);
  const auto warp = [](std::function<void()> body) { em::launch(dim3(1), 32, 0, std::move(body)); };
  EXPECT_NO_THROW(warp([&] {
    FragA f;
    wmma::load_matrix_sync(f, a + 16, 32);
  }));
  EXPECT_THROW(warp([&] {  // lanes giving different columns of a: not the warp's one tile
                 FragA f;
                 wmma::load_matrix_sync(f, a + (em::lane() % 2) * 16, 32);
               }),
               std::logic_error);
  EXPECT_THROW(warp([&] {  // an address off 256 bits
                 FragA f;
                 wmma::load_matrix_sync(f, a + 8, 32);
               }),
               std::logic_error);
  for (bool sync : {false, true}) {
    std::fill(std::begin(c), std::end(c), 0.f);
    float seen = -1.f;
    warp([&] {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 2.f);
      wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
      if (sync) __syncwarp();
      if (em::lane() == 0) {
        float s = 0.f;
        for (float x : c) s += x;
        seen = s;
      }
    });
    if (sync)
      EXPECT_EQ(seen, 512.f) << "with the __syncwarp, lane 0 sees the whole tile";
    else
      EXPECT_LT(seen, 512.f) << "without the __syncwarp, lane 0 saw every lane's part";
  }
}

}  // namespace
#else
TEST(AttentionWmmaEmulated, ThePortablePairMatchesTheCpu) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
TEST(AttentionWmmaEmulated, TheApisRulesAreChecked) {
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
}
#endif
