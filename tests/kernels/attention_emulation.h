// What the tests that run CUDA attention kernels on the host (kernels/cuda_emulation.h) share: a
// problem — q, k, v, the output's gradient, mask, causality — as the CPU's attention op takes it and
// as the kernels' AttnProblem describes it on host memory, and the CPU's out, dq, dk, dv for it.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention_problem.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/compare.h"
#include "testing.h"

namespace qkv::testing {

struct AttentionCase {
  int64_t B, H, Hkv, Lq, Lk, D;
  bool causal;
  int mask;          // 0 none, 1 boolean, 2 additive, 3 every fifth query row sees nothing
  bool heads_inner;  // q, k, v as heads split off [B, L, H, D]
  float dropout = 0.f;
  float scale = 0.f;    // 0: 1/√D (the op's default)
  float softcap = 0.f;  // > 0: the scores soft-capped (Gemma 2's)
};

inline ::testing::Message describe(const AttentionCase& c) {
  return ::testing::Message() << "B" << c.B << " H" << c.H << "/" << c.Hkv << " Lq" << c.Lq << " Lk" << c.Lk << " D"
                              << c.D << (c.causal ? " causal" : "") << " mask" << c.mask
                              << (c.heads_inner ? " heads inner" : "") << (c.dropout > 0.f ? " dropout" : "")
                              << (c.scale != 0.f ? " scale " + std::to_string(c.scale) : std::string())
                              << (c.softcap != 0.f ? " softcap " + std::to_string(c.softcap) : std::string());
}

struct EmulatedAttention {
  Tensor qb, kb, vb, mask;  // the operands' bases (alive while p points into them)
  std::shared_ptr<uint64_t> offset;  // dropout's counter offset word (p.counter_offset points here)
  std::vector<float> dout;  // [B, H, Lq, D]
  kernels::AttnProblem p;   // q, k, v as the views of the bases; outputs and gradients dense
  // the CPU's attention at `compute`: out, and the gradients of sum(out ∘ dout), all [B, H, L, D]
  std::vector<float> out, dq, dk, dv;
  bool general() const { return p.mask.kind != kernels::AttnMask::Kind::none || p.dropout_p > 0.f; }
  size_t nq() const { return static_cast<size_t>(p.B * p.H * p.Lq * p.D); }
  size_t nk() const { return static_cast<size_t>(p.B * p.Hkv * p.Lk * p.D); }
  // D_i = dout_i · out_i over the rows of `o` (the backward's first pass)
  std::vector<float> row_dot(const std::vector<float>& o) const {
    std::vector<float> d(nq() / p.D);
    for (size_t i = 0; i < d.size(); ++i) {
      double s = 0;
      for (int64_t c = 0; c < p.D; ++c) s += double{dout[i * p.D + c]} * o[i * p.D + c];
      d[i] = static_cast<float>(s);
    }
    return d;
  }
};

inline EmulatedAttention emulated_attention(const AttentionCase& c, uint64_t seed,
                                            AttentionCompute compute = AttentionCompute::f32) {
  EmulatedAttention e;
  auto base = [&](int64_t heads, int64_t L) {
    return c.heads_inner ? param({c.B, L, heads, c.D}, seed++) : param({c.B, heads, L, c.D}, seed++);
  };
  auto view = [&](const Tensor& t) { return c.heads_inner ? t.transpose(1, 2) : t; };
  auto randn = [&](const Shape& s) {
    Generator g(seed++);
    return Tensor::randn(s, g);
  };
  e.qb = base(c.H, c.Lq), e.kb = base(c.Hkv, c.Lk), e.vb = base(c.Hkv, c.Lk);
  const Tensor r = randn({c.B, c.H, c.Lq, c.D});
  e.dout = r.to_vector();
  AttentionOptions o;
  o.is_causal = c.causal;
  o.enable_gqa = c.H != c.Hkv;
  o.compute_dtype = compute;
  if (c.scale != 0.f) o.scale = c.scale;
  o.softcap = c.softcap;
  if (c.mask == 1) o.attn_mask = gt(randn({c.B, 1, c.Lq, c.Lk}), -1.f);
  if (c.mask == 2) o.attn_mask = randn({1, c.H, c.Lq, c.Lk});
  if (c.mask == 3) {
    std::vector<bool> see(c.Lq * c.Lk, true);
    for (int64_t i = 0; i < c.Lq; i += 5) std::fill(see.begin() + i * c.Lk, see.begin() + (i + 1) * c.Lk, false);
    o.attn_mask = Tensor::from_bools(see, {c.Lq, c.Lk});
  }
  e.mask = o.attn_mask;
  const uint64_t dropout_seed = seed++;
  // The op draws from counter 1001; the kernels are given counter 0 and an offset word of 1001, as a
  // step graph's replay gives them (kernels/dropout_mask.h): the same mask.
  constexpr uint64_t kOffset = 1001;
  Generator drop(dropout_seed);
  drop.set_counter(kOffset);
  if (c.dropout > 0.f) o.dropout_p = c.dropout, o.generator = &drop;
  const Tensor out = scaled_dot_product_attention(view(e.qb), view(e.kb), view(e.vb), o);
  sum(mul(out, r)).backward();
  e.out = out.contiguous().to_vector();
  e.dq = view(e.qb.grad()).contiguous().to_vector();
  e.dk = view(e.kb.grad()).contiguous().to_vector();
  e.dv = view(e.vb.grad()).contiguous().to_vector();

  kernels::AttnProblem& p = e.p;
  p.B = c.B, p.H = c.H, p.Hkv = c.Hkv, p.Lq = c.Lq, p.Lk = c.Lk, p.D = p.Dv = c.D;
  const Tensor q = view(e.qb), k = view(e.kb), v = view(e.vb);
  p.q = e.qb.data(), p.q_sb = q.stride(0), p.q_sh = q.stride(1), p.q_sl = q.stride(2);
  p.k = e.kb.data(), p.k_sb = k.stride(0), p.k_sh = k.stride(1), p.k_sl = k.stride(2);
  p.v = e.vb.data(), p.v_sb = v.stride(0), p.v_sh = v.stride(1), p.v_sl = v.stride(2);
  p.causal = c.causal;
  p.scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(c.D));
  p.softcap = c.softcap;
  if (e.mask.defined()) {
    const Tensor& m = e.mask;  // [B or 1, 1 or H, Lq, Lk] or [Lq, Lk]: broadcast dims get stride 0
    const bool four = m.dim() == 4;
    p.mask.kind = m.dtype() == DType::boolean ? kernels::AttnMask::Kind::boolean : kernels::AttnMask::Kind::additive;
    p.mask.data = m.dtype() == DType::boolean ? static_cast<const void*>(m.data<uint8_t>()) : m.data();
    p.mask.sb = four && m.size(0) > 1 ? m.stride(0) : 0;
    p.mask.sh = four && m.size(1) > 1 ? m.stride(1) : 0;
    p.mask.sq = m.stride(-2), p.mask.sk = m.stride(-1);
  }
  e.offset = std::make_shared<uint64_t>(kOffset);
  if (c.dropout > 0.f) p.dropout_p = c.dropout, p.seed = dropout_seed, p.counter = 0, p.counter_offset = e.offset.get();
  p.out_l = p.dout_l = p.dq_l = kernels::HeadLayout::dense(c.H, c.Lq, c.D);
  p.dk_l = p.dv_l = kernels::HeadLayout::dense(c.Hkv, c.Lk, c.D);
  return e;
}

// max |got − want| over the largest finite |want| (equal values, infinities too, differ by 0)
inline double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;  // equal, infinities too (an lse of a row that sees no key: −∞)
    const double d = std::fabs(double{got[i]} - want[i]);
    num = std::isnan(d) ? INFINITY : std::max(num, d);
    if (std::isfinite(want[i])) den = std::max(den, std::fabs(double{want[i]}));
  }
  return num / den;
}

}  // namespace qkv::testing
