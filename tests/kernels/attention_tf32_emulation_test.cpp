// The f32 attention pair on the tensor cores (kernels/cuda/attention_tf32_kernels.cuh) run on the
// host, unchanged, through tests/kernels/cuda_emulation.h — every warp's fragments, shuffles and
// barriers as on a GPU — against qkv's CPU attention: forward (out, lse) and backward (dq, dk, dv),
// causal or not, boolean and additive masks, rows that see no key, GQA, Lq ≠ Lk, ragged tiles, heads
// split off a [B, L, H, D] projection, head dims 64 and 128. Within f32's noise (2e-5), which one
// TF32 product a term (~1e-3) would not be. Needs the CUDA toolkit's headers (a QKV_CUDA build).
#include <gtest/gtest.h>

#if __has_include(<cuda_runtime.h>)
#include "kernels/cuda_emulation.h"  // first: the CUDA headers, then the built-ins on the host

namespace qkv::kernels::cuda {
namespace {
// the blocks' shared memory (one block runs at a time): the largest the pair asks for is the
// backward's at head dim 128, 153 KB
alignas(128) unsigned char smem[160 * 1024];
}  // namespace
}  // namespace qkv::kernels::cuda

#include "kernels/cuda/attention_tf32_kernels.cuh"
#endif

#include <cmath>
#include <vector>

#include "qkv/ops/arith.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/compare.h"
#include "testing.h"

namespace {

#if __has_include(<cuda_runtime.h>)
using namespace qkv;
namespace kc = qkv::kernels::cuda;
using kernels::AttnMask;
using kernels::AttnProblem;
using kernels::HeadLayout;

Tensor randn(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(shape, g);
}

// max |got − want| over max |want|
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(double{got[i]} - want[i]));
    den = std::max(den, std::fabs(double{want[i]}));
  }
  return num / den;
}

struct Case {
  int64_t B, H, Hkv, Lq, Lk, D;
  bool causal;
  int mask;  // 0 none, 1 boolean, 2 additive, 3 every fifth query row sees nothing
  bool heads_inner;  // q, k, v as heads split off [B, L, H, D]
};

template <int D, bool General>
void run_kernels(const AttnProblem& p, float* out, float* lse, const float* dout, const float* Dsum, float* dq,
                 float* dk, float* dv) {
  constexpr int KN = D == 64 ? 64 : 32;  // as attention_tf32.cu launches them
  static_assert(kc::forward_smem_bytes<D, KN>() <= sizeof kc::smem && kc::backward_smem_bytes<D>() <= sizeof kc::smem);
  emulation::launch(dim3(static_cast<unsigned>((p.Lq + kc::kRows - 1) / kc::kRows), static_cast<unsigned>(p.B * p.H)),
                    kc::kThreads, [&] { kc::flash_tf32_forward_kernel<D, KN, General>(p, out, lse); });
  if (!dout) return;
  emulation::launch(dim3(static_cast<unsigned>((p.Lk + kc::kKeys - 1) / kc::kKeys), static_cast<unsigned>(p.B * p.Hkv)),
                    kc::kThreads, [&] { kc::flash_tf32_backward_kernel<D, General>(p, lse, Dsum, dout, dq, dk, dv); });
}

void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "B" << c.B << " H" << c.H << "/" << c.Hkv << " Lq" << c.Lq << " Lk" << c.Lk
                                    << " D" << c.D << (c.causal ? " causal" : "") << " mask" << c.mask
                                    << (c.heads_inner ? " heads inner" : ""));
  // operands in their base layout, and the [B, H, L, D] view the op and the kernels read
  auto base = [&](int64_t heads, int64_t L) {
    return c.heads_inner ? ::qkv::testing::param({c.B, L, heads, c.D}, seed++) : ::qkv::testing::param({c.B, heads, L, c.D}, seed++);
  };
  auto view = [&](const Tensor& t) { return c.heads_inner ? t.transpose(1, 2) : t; };
  Tensor qb = base(c.H, c.Lq), kb = base(c.Hkv, c.Lk), vb = base(c.Hkv, c.Lk);
  const Tensor r = randn({c.B, c.H, c.Lq, c.D}, seed++);
  AttentionOptions o;
  o.is_causal = c.causal;
  o.enable_gqa = c.H != c.Hkv;
  if (c.mask == 1) o.attn_mask = gt(randn({c.B, 1, c.Lq, c.Lk}, seed++), -1.f);
  if (c.mask == 2) o.attn_mask = randn({1, c.H, c.Lq, c.Lk}, seed++);
  if (c.mask == 3) {
    std::vector<bool> see(c.Lq * c.Lk, true);
    for (int64_t i = 0; i < c.Lq; i += 5) std::fill(see.begin() + i * c.Lk, see.begin() + (i + 1) * c.Lk, false);
    o.attn_mask = Tensor::from_bools(see, {c.Lq, c.Lk});
  }
  const Tensor want = scaled_dot_product_attention(view(qb), view(kb), view(vb), o);
  sum(mul(want, r)).backward();

  // the same problem for the kernels, on host memory
  AttnProblem p;
  p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.Lq = c.Lq, p.Lk = c.Lk, p.D = p.Dv = c.D;
  const Tensor q = view(qb), k = view(kb), v = view(vb);
  p.q = qb.data(), p.q_sb = q.stride(0), p.q_sh = q.stride(1), p.q_sl = q.stride(2);
  p.k = kb.data(), p.k_sb = k.stride(0), p.k_sh = k.stride(1), p.k_sl = k.stride(2);
  p.v = vb.data(), p.v_sb = v.stride(0), p.v_sh = v.stride(1), p.v_sl = v.stride(2);
  p.causal = c.causal;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;  // [B or 1, 1 or H, Lq, Lk] or [Lq, Lk]: broadcast strides 0
    const bool four = m.dim() == 4;
    p.mask.kind = m.dtype() == DType::boolean ? AttnMask::Kind::boolean : AttnMask::Kind::additive;
    p.mask.data = m.dtype() == DType::boolean ? static_cast<const void*>(m.data<uint8_t>()) : m.data();
    p.mask.sb = four && m.size(0) > 1 ? m.stride(0) : 0;
    p.mask.sh = four && m.size(1) > 1 ? m.stride(1) : 0;
    p.mask.sq = m.stride(-2), p.mask.sk = m.stride(-1);
  }
  p.out_l = p.dout_l = p.dq_l = HeadLayout::dense(c.H, c.Lq, c.D);
  p.dk_l = p.dv_l = HeadLayout::dense(c.Hkv, c.Lk, c.D);

  const size_t nq = c.B * c.H * c.Lq * c.D, nk = c.B * c.Hkv * c.Lk * c.D;
  std::vector<float> out(nq), lse(c.B * c.H * c.Lq), dq(nq, 0.f), dk(nk), dv(nk), Dsum(c.B * c.H * c.Lq);
  const std::vector<float> dout = r.to_vector();
  const bool general = p.mask.kind != AttnMask::Kind::none;
  // the forward first: D_i = dout_i · out_i from its out, then the backward
  auto forward = c.D == 64 ? (general ? run_kernels<64, true> : run_kernels<64, false>)
                           : (general ? run_kernels<128, true> : run_kernels<128, false>);
  forward(p, out.data(), lse.data(), nullptr, nullptr, nullptr, nullptr, nullptr);
  for (size_t i = 0; i < Dsum.size(); ++i) {
    double s = 0;
    for (int64_t d = 0; d < c.D; ++d) s += double{dout[i * c.D + d]} * out[i * c.D + d];
    Dsum[i] = static_cast<float>(s);
  }
  forward(p, out.data(), lse.data(), dout.data(), Dsum.data(), dq.data(), dk.data(), dv.data());

  EXPECT_LT(rel_error(out, want.contiguous().to_vector()), 2e-5) << "out";
  // dq, dk, dv against the gradients of the views, in [B, H, L, D]
  EXPECT_LT(rel_error(dq, view(qb.grad()).contiguous().to_vector()), 2e-5) << "dq";
  EXPECT_LT(rel_error(dk, view(kb.grad()).contiguous().to_vector()), 2e-5) << "dk";
  EXPECT_LT(rel_error(dv, view(vb.grad()).contiguous().to_vector()), 2e-5) << "dv";
}
#endif

TEST(AttentionTf32Emulated, TheTensorCorePairMatchesTheCpu) {
#if __has_include(<cuda_runtime.h>)
  const Case cases[] = {
      {1, 2, 2, 70, 90, 64, false, 0, false},   // ragged tiles both ways, no mask: the maskless kernels
      {1, 2, 1, 130, 70, 64, true, 1, false},   // causal, boolean mask, GQA, Lq > Lk, 3 row blocks
      {1, 2, 2, 65, 129, 128, false, 2, true},  // head dim 128, additive mask, heads split off [B, L, H, D]
      {1, 2, 2, 64, 64, 128, true, 0, false},   // whole tiles, causal
      {1, 2, 2, 70, 70, 64, false, 3, true},    // every fifth row sees no key: zeros, no NaN
      {2, 2, 2, 128, 128, 64, false, 0, false}, // whole tiles, two batches
  };
  uint64_t seed = 1000;
  for (const Case& c : cases) check(c, seed += 10);
#else
  GTEST_SKIP() << "this build has no CUDA toolkit headers (scripts/build.sh builds the CUDA backend where it is)";
#endif
}

}  // namespace
