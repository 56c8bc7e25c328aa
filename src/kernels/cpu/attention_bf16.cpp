// bf16 and f16 attention on the CPU (AttentionCompute::bf16 — what Autocast(bf16) trains with — and
// AttentionCompute::f16): the bf16 inference forward on AVX512_BF16 dot products where it can,
// everything else on the f32 flash kernels over dense copies of q, k, v and dout rounded to the
// 16-bit format — the rounding the GPU's tensor-core kernels (kernels/cuda/attention_bf16.cu) apply
// to their operands.
#include <algorithm>
#include <memory>

#include "qkv/core/dtype.h"
#include "qkv/core/parallel.h"
#include "kernels/cpu/attention_kernels.h"

namespace qkv::kernels::cpu {
namespace {

// x's bf16 value, as an f32 (IEEE f16's: core/dtype.h's round_to_f16)
float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Dense rounded copies ([B, heads, L, d], stored in f32) of q, k, v and, for the backward, dout;
// `p` reads them.
template <float (*Round)(float)>
struct Rounded {
  AttnProblem p;
  // every element is written below: not zero-filled first (a std::vector's resize was ~1 % of a bf16
  // Transformer training step, in memset)
  std::unique_ptr<float[]> q, k, v, dout;

  Rounded(const AttnProblem& src, const float* dout_src) : p(src) {
    auto dense = [&](std::unique_ptr<float[]>& to, const float* from, int64_t heads, int64_t L, int64_t d, int64_t sb,
                     int64_t sh, int64_t sl) {
      to.reset(new float[static_cast<size_t>(src.B * heads * L * d)]);
      float* t = to.get();
      parallel_for(src.B * heads * L, std::max<int64_t>(1, 4096 / std::max<int64_t>(d, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row) {
          const float* f = from + row / (heads * L) * sb + row / L % heads * sh + row % L * sl;
          for (int64_t c = 0; c < d; ++c) t[row * d + c] = Round(f[c]);
        }
      });
    };
    dense(q, src.q, src.H, src.Lq, src.D, src.q_sb, src.q_sh, src.q_sl);
    p.q = q.get(), p.q_sb = src.H * src.Lq * src.D, p.q_sh = src.Lq * src.D, p.q_sl = src.D;
    dense(k, src.k, src.Hkv, src.Lk, src.D, src.k_sb, src.k_sh, src.k_sl);
    p.k = k.get(), p.k_sb = src.Hkv * src.Lk * src.D, p.k_sh = src.Lk * src.D, p.k_sl = src.D;
    dense(v, src.v, src.Hkv, src.Lk, src.Dv, src.v_sb, src.v_sh, src.v_sl);
    p.v = v.get(), p.v_sb = src.Hkv * src.Lk * src.Dv, p.v_sh = src.Lk * src.Dv, p.v_sl = src.Dv;
    if (dout_src) {
      dense(dout, dout_src, src.H, src.Lq, src.Dv, src.dout_l.sb, src.dout_l.sh, src.dout_l.sl);
      p.dout_l = HeadLayout::dense(src.H, src.Lq, src.Dv);
    }
  }
};

}  // namespace

void attention_forward_flash_bf16(const AttnProblem& p, float* out, float* lse) {
  if (!lse && p.dropout_p == 0.f && p.softcap == 0.f && has_avx512_bf16())
    return attention_forward_flash_bf16_avx512(p, out);
  Rounded<round_bf16> r(p, nullptr);
  attention_forward_flash_f32(r.p, out, lse);
}

void attention_backward_flash_bf16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                   float* dq, float* dk, float* dv) {
  Rounded<round_bf16> r(p, dout);
  attention_backward_flash_f32(r.p, out, lse, r.dout.get(), dq, dk, dv);
}

void attention_forward_flash_f16(const AttnProblem& p, float* out, float* lse) {
  Rounded<round_to_f16> r(p, nullptr);
  attention_forward_flash_f32(r.p, out, lse);
}

void attention_backward_flash_f16(const AttnProblem& p, const float* out, const float* lse, const float* dout,
                                  float* dq, float* dk, float* dv) {
  Rounded<round_to_f16> r(p, dout);
  attention_backward_flash_f32(r.p, out, lse, r.dout.get(), dq, dk, dv);
}

}  // namespace qkv::kernels::cpu
