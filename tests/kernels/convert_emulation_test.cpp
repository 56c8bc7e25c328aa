// The list cast's GPU kernel (kernels/cuda/convert_kernels.cuh: autocast's weight copies, one launch
// for up to 64 weights) run on the host, unchanged, through tests/kernels/cuda_emulation.h, with the
// chunks and grids elementwise.cu's convert_to_bf16_list gives it: each tensor's bf16 bits are
// dtype.h's f32_to_bf16 (ties to even, NaN quiet) — the CPU's list kernel's — across a chunk
// boundary. Needs the CUDA toolkit's headers (a QKV_CUDA build), not a GPU.
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cuda/convert_kernels.cuh"
#include "kernels/emulated_kernels.h"

namespace {

using namespace qkv::testing::emulated;  // kc, cpu, launch, random_floats, rel

TEST(ConvertKernelsEmulated, TheListCastIsTheCpusBitForBit) {
  // 70 tensors (two chunks of the kernel's list: 64 and 6), sizes from 0 to a few thousand
  const int64_t count = 70;
  std::vector<int64_t> n(count);
  std::vector<std::vector<float>> src(count);
  std::vector<std::vector<qkv::bf16>> gpu(count), want(count);
  for (int64_t t = 0; t < count; ++t) {
    n[t] = t % 9 == 0 ? 0 : (t * 389) % 3001;
    src[t] = random_floats(static_cast<size_t>(n[t]), 100 + t, 3.f);
    if (t == 5) src[t][7] = std::nanf(""), src[t][8] = 1.f + std::ldexp(1.f, -8);  // NaN, a tie
    gpu[t].assign(n[t], qkv::bf16{0xdead});
    want[t].assign(n[t], qkv::bf16{0});
  }
  std::vector<const float*> sp(count);
  std::vector<qkv::bf16*> gp(count), wp(count);
  for (int64_t t = 0; t < count; ++t) sp[t] = src[t].data(), gp[t] = gpu[t].data(), wp[t] = want[t].data();
  cpu::convert_to_bf16_list(sp.data(), wp.data(), n.data(), count);
  kc::for_each_chunk<2>({sp.data(), reinterpret_cast<const float* const*>(gp.data())}, n.data(), count,
                        [&](const kc::TensorList<2>& list, int64_t, int tensors, int64_t most) {
                          const unsigned blocks = kc::blocks_for(most, 256, 4) > 1024 ? 1024 : kc::blocks_for(most, 256, 4);
                          launch(dim3(blocks, tensors), 256, 0, [&] { kc::convert_to_bf16_list_kernel(list); });
                        });
  for (int64_t t = 0; t < count; ++t)
    for (int64_t i = 0; i < n[t]; ++i) {
      ASSERT_EQ(gpu[t][i].bits, want[t][i].bits) << "tensor " << t << ", element " << i;
      ASSERT_EQ(gpu[t][i].bits, qkv::f32_to_bf16(src[t][i]).bits) << "tensor " << t << ", element " << i;
    }
}

}  // namespace
#endif
