#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/core/parallel.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn_call.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/vec.h"

namespace qkv::kernels::cpu {

namespace {

// Adds the mask and the causal −∞ to row i of the scores of head (b, h).
void mask_row(const AttnProblem& p, int64_t b, int64_t h, int64_t i, float* s) {
  const int64_t Lk = p.Lk;
  if (p.mask.kind == AttnMask::Kind::boolean) {
    const uint8_t* m = static_cast<const uint8_t*>(p.mask.data) + b * p.mask.sb + h * p.mask.sh + i * p.mask.sq;
    for (int64_t j = 0; j < Lk; ++j)
      if (!m[j * p.mask.sk]) s[j] = -INFINITY;
  } else if (p.mask.kind == AttnMask::Kind::additive) {
    const float* m = static_cast<const float*>(p.mask.data) + b * p.mask.sb + h * p.mask.sh + i * p.mask.sq;
    for (int64_t j = 0; j < Lk; ++j) s[j] += m[j * p.mask.sk];
  }
  if (p.causal)
    for (int64_t j = i + 1; j < Lk; ++j) s[j] = -INFINITY;
}

uint64_t dropout_base(const AttnProblem& p, int64_t b, int64_t h) {
  return p.first_counter() + static_cast<uint64_t>((b * p.H + h) * p.Lq * p.Lk);
}

// W = P ∘ Z / (1 − p) for one head (in → out may alias).
void apply_dropout(const AttnProblem& p, int64_t b, int64_t h, const float* in, float* out) {
  dropout_apply(in, out, p.Lq * p.Lk, dropout_mask(p.dropout_p, p.seed, dropout_base(p, b, h)));
}

// Runs f(b, h_or_group, scratch) over `count` = B·heads items: in parallel over items (each one
// single-threaded) when there are enough of them, otherwise one after another with every thread
// inside each item's GEMMs and row loops.
template <typename F>
void for_each_head(int64_t B, int64_t heads, size_t scratch_floats, F&& f) {
  const int64_t count = B * heads;
  if (count >= num_threads() && num_threads() > 1 && !in_parallel_region()) {
    RegionErrors errors;  // (a GEMM or the scratch failing inside the region: thrown after it)
#pragma omp parallel
    {
      std::vector<float> scratch;
      errors.run([&] { scratch.resize(scratch_floats); });
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < count; ++i) errors.run([&] { f(i / heads, i % heads, scratch.data()); });
    }
    errors.rethrow();
  } else {
    std::vector<float> scratch(scratch_floats);
    for (int64_t i = 0; i < count; ++i) f(i / heads, i % heads, scratch.data());
  }
}

}  // namespace

void attention_forward_reference(const AttnProblem& p, float* out, float* probs, float* weights) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t LL = p.Lq * p.Lk;
  const int64_t group = p.H / p.Hkv;
  const bool dropout = p.dropout_p > 0.f;
  // Scratch: the scores when P is not kept, the dropped weights when W is not kept.
  const size_t scratch = static_cast<size_t>((probs ? 0 : LL) + (dropout && !weights ? LL : 0));
  for_each_head(p.B, p.H, scratch, [&](int64_t b, int64_t h, float* tmp) {
    const int64_t hk = h / group;
    float* P = probs ? probs + (b * p.H + h) * LL : tmp;
    const float* q = p.q + b * p.q_sb + h * p.q_sh;
    const float* k = p.k + b * p.k_sb + hk * p.k_sh;
    const float* v = p.v + b * p.v_sb + hk * p.v_sh;
    // S = scale · Q Kᵀ
    sgemm(false, true, p.Lq, p.Lk, p.D, p.scale, q, p.q_sl, k, p.k_sl, 0.f, P, p.Lk);
    // P = softmax(c(S) + M)
    parallel_for(p.Lq, 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        if (p.softcap > 0.f) softcap_row(P + i * p.Lk, p.Lk, p.softcap);
        mask_row(p, b, h, i, P + i * p.Lk);
        softmax_row_inplace(P + i * p.Lk, p.Lk);
      }
    });
    // W = dropout(P)
    float* W = P;
    if (dropout) {
      W = weights ? weights + (b * p.H + h) * LL : tmp + (probs ? 0 : LL);
      apply_dropout(p, b, h, P, W);
    } else if (weights && weights != P) {
      std::memcpy(weights + (b * p.H + h) * LL, P, static_cast<size_t>(LL) * sizeof(float));
    }
    // O = W V
    sgemm(false, false, p.Lq, p.Dv, p.Lk, 1.f, W, p.Lk, v, p.v_sl, 0.f, out + (b * p.H + h) * p.Lq * p.Dv, p.Dv);
  });
}

void attention_backward_reference(const AttnProblem& p, const float* probs, const float* dout, float* dq, float* dk,
                                  float* dv, float* dscores) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t LL = p.Lq * p.Lk;
  const int64_t group = p.H / p.Hkv;
  const bool dropout = p.dropout_p > 0.f, capped = p.softcap > 0.f;
  // One item per key/value head: the query heads of a group all add into its dK and dV.
  const int64_t scratch = LL * (1 + (dropout ? 1 : 0) + (capped ? 1 : 0));
  for_each_head(p.B, p.Hkv, static_cast<size_t>(scratch), [&](int64_t b, int64_t hk, float* tmp) {
    float* dS = tmp;
    float* W = dropout ? tmp + LL : nullptr;
    float* C = capped ? tmp + (dropout ? 2 : 1) * LL : nullptr;  // the capped scores, recomputed
    const float* k = p.k + b * p.k_sb + hk * p.k_sh;
    const float* v = p.v + b * p.v_sb + hk * p.v_sh;
    float* dk_h = dk + (b * p.Hkv + hk) * p.Lk * p.D;
    float* dv_h = dv + (b * p.Hkv + hk) * p.Lk * p.Dv;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const float* P = probs + (b * p.H + h) * LL;
      const float* q = p.q + b * p.q_sb + h * p.q_sh;
      const float* dO = dout + (b * p.H + h) * p.Lq * p.Dv;
      const float beta = h == hk * group ? 0.f : 1.f;  // first head of the group overwrites
      // dV (+)= Wᵀ dO
      if (dropout) apply_dropout(p, b, h, P, W);
      sgemm(true, false, p.Lk, p.Dv, p.Lq, 1.f, dropout ? W : P, p.Lk, dO, p.Dv, beta, dv_h, p.Dv);
      // dW = dO Vᵀ
      sgemm(false, true, p.Lq, p.Lk, p.Dv, 1.f, dO, p.Dv, v, p.v_sl, 0.f, dS, p.Lk);
      // dP = dW ∘ Z/(1−p);  dS = P ∘ (dP − rowsum(P ∘ dP))
      const uint64_t base = dropout_base(p, b, h);
      parallel_for(p.Lq, 16, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          float* d = dS + i * p.Lk;
          const float* Pr = P + i * p.Lk;
          if (dropout) dropout_apply(d, d, p.Lk, dropout_mask(p.dropout_p, p.seed, base + static_cast<uint64_t>(i * p.Lk)));
          const float s = dot(Pr, d, p.Lk);
          for (int64_t j = 0; j < p.Lk; ++j) d[j] = Pr[j] * (d[j] - s);
        }
      });
      if (dscores) std::memcpy(dscores + (b * p.H + h) * LL, dS, static_cast<size_t>(LL) * sizeof(float));
      // soft-capped: dX = dS ∘ (1 − (c(X) / softcap)²), X = scale · Q Kᵀ recomputed
      if (capped) {
        sgemm(false, true, p.Lq, p.Lk, p.D, p.scale, q, p.q_sl, k, p.k_sl, 0.f, C, p.Lk);
        parallel_for(p.Lq, 16, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            softcap_row(C + i * p.Lk, p.Lk, p.softcap);
            softcap_backward_row(dS + i * p.Lk, C + i * p.Lk, p.Lk, p.softcap);
          }
        });
      }
      // dQ = scale · dS K;  dK (+)= scale · dSᵀ Q
      sgemm(false, false, p.Lq, p.D, p.Lk, p.scale, dS, p.Lk, k, p.k_sl, 0.f, dq + (b * p.H + h) * p.Lq * p.D, p.D);
      sgemm(true, false, p.Lk, p.D, p.Lq, p.scale, dS, p.Lk, q, p.q_sl, beta, dk_h, p.D);
    }
  });
}

}  // namespace qkv::kernels::cpu
