// What the emulation tests of the small kernels share (loss_, norm_, rms_norm_emulation_test.cpp):
// inputs drawn from qkv's counter-based generator, the error measure, and the names they use — the
// two devices' kernel namespaces and the emulated launch. Included after kernels/cuda_emulation.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/dropout_mask.h"
#include "qkv/core/rng.h"

namespace qkv::testing {

// n floats uniform in [−scale, scale), the same for a seed on every machine
inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (2.f * Generator::uniform(seed, i) - 1.f);
  return v;
}

// max |got − want| / max |want| (infinite when the sizes differ)
inline double rel(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::fabs(static_cast<double>(want[i])));
  }
  return num / den;
}

// x + drop(res) as the unfused ops make it: the CPU's dropout_apply, then an addition (drop inactive:
// x + res) — what a fused norm's sum must equal bit for bit
inline std::vector<float> added_after_dropout(const std::vector<float>& x, const std::vector<float>& res,
                                              const kernels::DropoutMask& drop) {
  std::vector<float> s(res);
  if (drop.active())
    kernels::cpu::dropout_apply(res.data(), s.data(), static_cast<int64_t>(res.size()), drop);
  for (size_t i = 0; i < s.size(); ++i) s[i] = x[i] + s[i];
  return s;
}

// The residual's part of a fused norm's backward (kernels/residual_gradient.h) as the unfused ops make
// it from the norm's dx: ds = dx + dsum, then dres = dropout_apply(ds) — what the GPU kernel's dx and
// dres must equal bit for bit
struct ResidualGradients {
  std::vector<float> ds, dres;
};
inline ResidualGradients residual_gradients_of(const std::vector<float>& dx, const std::vector<float>& dsum,
                                               const kernels::DropoutMask& drop) {
  ResidualGradients r{dx, dx};
  for (size_t i = 0; i < dx.size(); ++i) r.ds[i] = dx[i] + dsum[i];
  kernels::cpu::dropout_apply(r.ds.data(), r.dres.data(), static_cast<int64_t>(dx.size()), drop);
  return r;
}

// The bits of a bf16 copy (ops/autocast.h's activation copies): as a kernel wrote it, as the GPU's
// rounding makes it (dtype.h's f32_to_bf16), and as the CPU's convert_to_bf16 makes it (the same
// but for f32 subnormals, which AVX-512 BF16's conversion flushes)
inline std::vector<uint16_t> bits_of(const std::vector<bf16>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
  return b;
}
inline std::vector<uint16_t> rounded_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]).bits;
  return b;
}
inline std::vector<uint16_t> converted_bits(const std::vector<float>& v) {
  std::vector<bf16> h(v.size());
  kernels::cpu::convert_to_bf16(v.data(), h.data(), static_cast<int64_t>(v.size()));
  return bits_of(h);
}

}  // namespace qkv::testing

// The names the tests use: `using namespace qkv::testing::emulated;`
namespace qkv::testing::emulated {
namespace kc = ::qkv::kernels::cuda;
namespace cpu = ::qkv::kernels::cpu;
using ::qkv::emulation::launch;
using ::qkv::bf16;
using ::qkv::testing::added_after_dropout;
using ::qkv::testing::bits_of;
using ::qkv::testing::converted_bits;
using ::qkv::testing::rounded_bits;
using ::qkv::testing::random_floats;
using ::qkv::testing::residual_gradients_of;
using ::qkv::testing::rel;
}  // namespace qkv::testing::emulated
