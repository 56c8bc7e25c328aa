#include "qkv/ops/attention.h"

#include <cmath>

#include "dispatch.h"
#include "kernels/cpu/attention_kernels.h"
#include "qkv/ops/autocast.h"
#include "qkv/autograd/node.h"
#include "qkv/ops/arith.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

namespace {

// Views t [..., L, d] as 4-D [B, H, L, d] (leading dims of rank > 4 merged into B, by a copy).
Tensor to_4d(const Tensor& t) {
  Tensor x = t.detach();
  switch (x.dim()) {
    case 2: return x.as_strided({1, 1, x.size(0), x.size(1)}, {0, 0, x.stride(0), x.stride(1)}, x.offset());
    case 3:
      return x.as_strided({x.size(0), 1, x.size(1), x.size(2)}, {x.stride(0), 0, x.stride(1), x.stride(2)},
                          x.offset());
    case 4: return x;
    default: {
      Tensor c = x.contiguous_copy();
      return c.as_strided({numel_of(Shape(c.shape().begin(), c.shape().end() - 3)), c.size(-3), c.size(-2), c.size(-1)},
                          {c.size(-3) * c.size(-2) * c.size(-1), c.size(-2) * c.size(-1), c.size(-1), 1}, 0);
    }
  }
}

// A 4-D [B, H, L, d] view of a [B, L, H, d] tensor (heads split off a projection, as
// MultiheadAttention does): the flash kernels then write the output and the gradients in that
// layout too, so merging the heads back, and the gradients' way back to the projection, are views
// rather than copies (as PyTorch gives gradients the layout of their inputs).
bool heads_inner(const Tensor& t) { return t.dim() == 4 && t.size(1) > 1 && t.stride(1) < t.stride(2); }

// Whether q, k, v are the three pieces of one fused projection [B, L, 3·H·d] (MultiheadAttention's
// in_proj split, then each viewed [B, L, H, d] and transposed): same shape and strides, heads
// inner, each piece H·d elements after the one before. Their gradients can then be written into one
// [B, L, 3·H·d] buffer, which the split's backward takes as it is (ops/view.cpp: no gathering copy).
bool pieces_of_one_projection(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || !heads_inner(q) || q.shape() != k.shape() || q.shape() != v.shape() ||
      q.strides() != k.strides() || q.strides() != v.strides() || q.stride(3) != 1)
    return false;
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3), E = H * d;
  return q.stride(1) == d && q.stride(2) == 3 * E && (B == 1 || q.stride(0) == L * 3 * E) &&
         k.impl().storage == q.impl().storage && v.impl().storage == q.impl().storage &&
         k.offset() == q.offset() + E && v.offset() == k.offset() + E;
}

// Fresh [B, H, L, d] storage on `d`, laid out as [B, L, H, d] when `inner`, else dense.
Tensor empty_heads(const Shape& shape, bool inner, Device d) {
  if (!inner) return Tensor::empty(shape, DType::f32, d);
  return Tensor::empty({shape[0], shape[2], shape[1], shape[3]}, DType::f32, d).transpose(1, 2);
}

// The kernels' view of a 4-D tensor with unit stride along its last dim.
kernels::HeadLayout layout_of(const Tensor& t4) { return {t4.stride(0), t4.stride(1), t4.stride(2)}; }

// q, k, v for the kernels: 4-D with a unit stride along the head dim.
Tensor as_bhld(const Tensor& t) {
  Tensor x = t.detach();
  if (x.stride(-1) != 1 && x.size(-1) > 1) x = x.contiguous_copy();
  return to_4d(x);
}

struct Prepared {
  kernels::AttnProblem p;
  Device device;
  Tensor q4, k4, v4, mask4;   // keep the viewed storage alive
  Shape out_shape, scores_shape;  // q's leading dims + [Lq, dv] / [Lq, Lk]
};

Prepared prepare(const Tensor& q, const Tensor& kk, const Tensor& v, const AttentionOptions& opt) {
  const char* op = "scaled_dot_product_attention";
  for (const Tensor* t : {&q, &kk, &v})
    QKV_CHECK(t->defined() && t->dtype() == DType::f32 && t->dim() >= 2, op,
              ": q, k, v must be f32 tensors of rank ≥ 2, got q ", q.str(), ", k ", kk.str(), ", v ", v.str());
  QKV_CHECK(q.dim() == kk.dim() && q.dim() == v.dim(), op, ": q ", shape_str(q.shape()), ", k ", shape_str(kk.shape()),
            ", v ", shape_str(v.shape()), " differ in rank");
  QKV_CHECK(q.size(-1) == kk.size(-1), op, ": q ", shape_str(q.shape()), " and k ", shape_str(kk.shape()),
            " differ in the head dimension (", q.size(-1), " vs ", kk.size(-1), ")");
  QKV_CHECK(kk.size(-2) == v.size(-2), op, ": k ", shape_str(kk.shape()), " and v ", shape_str(v.shape()),
            " differ in sequence length (", kk.size(-2), " vs ", v.size(-2), ")");
  const int64_t nd = q.dim();
  for (int64_t d = 0; d < nd - 2; ++d) {
    bool heads = d == nd - 3;
    bool same = q.size(d) == kk.size(d) && kk.size(d) == v.size(d);
    bool gqa_ok = heads && opt.enable_gqa && kk.size(d) == v.size(d) && kk.size(d) > 0 && q.size(d) % kk.size(d) == 0;
    QKV_CHECK(same || gqa_ok, op, ": q ", shape_str(q.shape()), ", k ", shape_str(kk.shape()), ", v ",
              shape_str(v.shape()), " differ in dim ", d,
              heads ? (opt.enable_gqa ? " (q heads must be a multiple of k/v heads)"
                                      : " (fewer k/v heads than q heads needs enable_gqa)")
                    : "");
  }
  QKV_CHECK(opt.dropout_p >= 0.f && opt.dropout_p < 1.f, op, ": dropout_p must be in [0, 1), got ", opt.dropout_p);
  // (a normal float: 1/softcap is finite, so no score becomes 0 · ∞)
  QKV_CHECK(opt.softcap == 0.f || (opt.softcap > 0.f && std::isnormal(opt.softcap)), op,
            ": softcap must be 0 (none) or a positive normal float, got ", opt.softcap);

  Prepared r;
  r.device = device_of(op, {&q, &kk, &v, &opt.attn_mask});
  r.q4 = as_bhld(q);
  r.k4 = as_bhld(kk);
  r.v4 = as_bhld(v);
  kernels::AttnProblem& p = r.p;
  p.B = r.q4.size(0);
  p.H = r.q4.size(1);
  p.Hkv = r.k4.size(1);
  p.Lq = r.q4.size(2);
  p.Lk = r.k4.size(2);
  p.D = r.q4.size(3);
  p.Dv = r.v4.size(3);
  p.q = r.q4.data();
  p.q_sb = r.q4.stride(0), p.q_sh = r.q4.stride(1), p.q_sl = std::max<int64_t>(r.q4.stride(2), p.D);
  p.k = r.k4.data();
  p.k_sb = r.k4.stride(0), p.k_sh = r.k4.stride(1), p.k_sl = std::max<int64_t>(r.k4.stride(2), p.D);
  p.v = r.v4.data();
  p.v_sb = r.v4.stride(0), p.v_sh = r.v4.stride(1), p.v_sl = std::max<int64_t>(r.v4.stride(2), p.Dv);
  p.out_l = p.dout_l = kernels::HeadLayout::dense(p.H, p.Lq, p.Dv);
  p.dq_l = kernels::HeadLayout::dense(p.H, p.Lq, p.D);
  p.dk_l = kernels::HeadLayout::dense(p.Hkv, p.Lk, p.D);
  p.dv_l = kernels::HeadLayout::dense(p.Hkv, p.Lk, p.Dv);
  p.causal = opt.is_causal;
  p.scale = opt.scale ? *opt.scale : 1.0f / std::sqrt(static_cast<float>(p.D));
  p.softcap = opt.softcap;

  r.out_shape = Shape(q.shape().begin(), q.shape().end() - 1);
  r.out_shape.push_back(p.Dv);
  r.scores_shape = Shape(q.shape().begin(), q.shape().end() - 1);
  r.scores_shape.push_back(p.Lk);

  if (opt.attn_mask.defined()) {
    const Tensor& m = opt.attn_mask;
    QKV_CHECK(m.dtype() == DType::boolean || m.dtype() == DType::f32, op,
              ": attn_mask must be boolean (true = may attend) or f32 (added to the scores), got ", m.str());
    QKV_CHECK(m.dim() <= nd, op, ": attn_mask ", shape_str(m.shape()), " has more dims than the scores ",
              shape_str(r.scores_shape));
    Shape st;
    try {
      st = broadcast_strides(m, r.scores_shape);
    } catch (const Error&) {
      throw Error(detail::concat(op, ": attn_mask ", shape_str(m.shape()), " does not broadcast to the scores ",
                                 shape_str(r.scores_shape), " ([..., Lq, Lk])"));
    }
    r.mask4 = to_4d(m.detach().as_strided(r.scores_shape, st, m.offset()));
    const Tensor& mv = r.mask4;
    p.mask.kind = m.dtype() == DType::boolean ? kernels::AttnMask::Kind::boolean : kernels::AttnMask::Kind::additive;
    p.mask.data = m.dtype() == DType::boolean ? static_cast<const void*>(mv.data<uint8_t>())
                                              : static_cast<const void*>(mv.data<float>());
    p.mask.sb = mv.stride(0), p.mask.sh = mv.stride(1), p.mask.sq = mv.stride(2), p.mask.sk = mv.stride(3);
  }
  if (opt.dropout_p > 0.f) {
    Generator& g = opt.generator ? *opt.generator : default_generator();
    p.dropout_p = opt.dropout_p;
    p.seed = g.seed();
    p.counter = g.reserve(static_cast<uint64_t>(p.B * p.H * p.Lq * p.Lk));
    p.counter_offset = g.counter_offset();  // (a step graph's, while it records one)
  }
  return r;
}

AttentionResult sdpa(const Tensor& q, const Tensor& kk, const Tensor& v, const AttentionOptions& opt,
                     bool need_weights) {
  const bool grad = autograd::needs_grad({q, kk, v, opt.attn_mask});
  const bool mask_grad = grad && opt.attn_mask.defined() && opt.attn_mask.requires_grad();
  // Under Autocast(bf16) attention computes in bf16, as under torch.autocast, wherever the flash
  // path serves: not when the weights or a float mask's gradient are asked for.
  AttentionCompute compute = opt.compute_dtype;
  if (compute == AttentionCompute::f32 && autocast_dtype() == AutocastDType::bf16 && !need_weights && !mask_grad &&
      opt.backend != AttentionBackend::reference)
    compute = AttentionCompute::bf16;
  const bool half = compute != AttentionCompute::f32;  // bf16 or f16
  if (half) {
    const char* name = compute == AttentionCompute::bf16 ? "bf16" : "f16";
    QKV_CHECK(!need_weights && opt.backend != AttentionBackend::reference, "scaled_dot_product_attention: ", name,
              " compute runs on the flash backend only (no attention weights)");
    QKV_CHECK(!mask_grad, "scaled_dot_product_attention: ", name, " compute gives no gradient to a float mask; use f32");
  }
  Prepared r = prepare(q, kk, v, opt);
  r.p.compute = compute == AttentionCompute::bf16  ? kernels::AttnCompute::bf16
                : compute == AttentionCompute::f16 ? kernels::AttnCompute::f16
                                                   : kernels::AttnCompute::f32;
  const kernels::AttnProblem& p = r.p;
  QKV_CHECK(!(opt.backend == AttentionBackend::flash && (need_weights || mask_grad)),
            "scaled_dot_product_attention: the flash backend cannot return attention weights or the gradient of a "
            "float mask; use the reference backend");
  const bool flash = opt.backend == AttentionBackend::flash ||
                     (opt.backend == AttentionBackend::automatic && !need_weights && !mask_grad);
  Shape q_shape = q.shape(), k_shape = kk.shape(), v_shape = v.shape();
  // The flash kernels (every precision, every device) write the output in q's layout when q's heads
  // are split off a projection; the reference kernels write dense.
  const bool q_in = flash && heads_inner(q);
  const Device d = r.device;
  Tensor out = empty_heads(r.out_shape, q_in, d);
  if (q_in) r.p.out_l = layout_of(out);
  AttentionResult res;

  if (flash) {
    // bf16/f16: q, k, v (and the output's gradient) rounded to the 16-bit format for the products,
    // f32 sums and softmax (kernels/attention.inc); the gradients reach q, k, v in f32, as
    // through autocast's casts.
    const bool k_in = heads_inner(kk), v_in = heads_inner(v), one_projection = pieces_of_one_projection(q, kk, v);
    Shape lse_shape(r.scores_shape.begin(), r.scores_shape.end() - 1);
    Tensor lse = grad ? Tensor::empty(lse_shape, DType::f32, d) : Tensor();
    float* lse_data = grad ? lse.data() : nullptr;
    QKV_DISPATCH("scaled_dot_product_attention", d, k::attention_forward_flash(p, out.data(), lse_data));
    if (!grad) {
      res.output = out;
      return res;
    }
    Tensor saved_out = out.detach();
    res.output = record(out, "scaled_dot_product_attention", {q, kk, v, opt.attn_mask},
                        [r, saved_out, lse, q_shape, k_shape, v_shape, q_in, k_in, v_in, one_projection,
                         d](const Tensor& g) {
                          kernels::AttnProblem p = r.p;
                          Tensor g4 = to_4d(g.stride(-1) == 1 ? g : g.contiguous());
                          Tensor dq, dk, dv;
                          if (one_projection) {  // [B, L, 3, H, d]: dq, dk, dv as q, k, v sit in theirs
                            const int64_t B = q_shape[0], H = q_shape[1], L = q_shape[2], D = q_shape[3];
                            Tensor all = Tensor::empty({B, L, 3 * H * D}, DType::f32, d);
                            const Shape st = {L * 3 * H * D, D, 3 * H * D, 1};
                            dq = all.as_strided(q_shape, st, 0), dk = all.as_strided(q_shape, st, H * D),
                            dv = all.as_strided(q_shape, st, 2 * H * D);
                          } else {
                            dq = empty_heads(q_shape, q_in, d), dk = empty_heads(k_shape, k_in, d),
                            dv = empty_heads(v_shape, v_in, d);
                          }
                          p.dout_l = layout_of(g4);
                          if (q_in) p.dq_l = layout_of(dq);
                          if (k_in) p.dk_l = layout_of(dk);
                          if (v_in) p.dv_l = layout_of(dv);
                          QKV_DISPATCH("scaled_dot_product_attention", d,
                                       k::attention_backward_flash(p, saved_out.data(), lse.data(), g4.data(),
                                                                   dq.data(), dk.data(), dv.data()));
                          return std::vector<Tensor>{dq, dk, dv, Tensor()};
                        });
    return res;
  }

  Tensor probs = grad ? Tensor::empty(r.scores_shape, DType::f32, d) : Tensor();
  Tensor weights;
  if (need_weights) weights = grad && p.dropout_p == 0.f ? probs : Tensor::empty(r.scores_shape, DType::f32, d);
  QKV_DISPATCH("scaled_dot_product_attention", d,
               k::attention_forward_reference(p, out.data(), grad ? probs.data() : nullptr,
                                              need_weights && !(grad && p.dropout_p == 0.f) ? weights.data() : nullptr));
  res.weights = need_weights ? weights.detach() : Tensor();
  if (!grad) {
    res.output = out;
    return res;
  }
  Shape mask_shape = mask_grad ? opt.attn_mask.shape() : Shape{};
  res.output = record(out, "scaled_dot_product_attention", {q, kk, v, opt.attn_mask},
                      [r, probs, q_shape, k_shape, v_shape, mask_grad, mask_shape, d](const Tensor& g) {
                        const kernels::AttnProblem& p = r.p;
                        Tensor gc = g.contiguous();
                        Tensor dq = Tensor::empty(q_shape, DType::f32, d), dk = Tensor::empty(k_shape, DType::f32, d),
                               dv = Tensor::empty(v_shape, DType::f32, d);
                        Tensor ds = mask_grad ? Tensor::empty(r.scores_shape, DType::f32, d) : Tensor();
                        QKV_DISPATCH("scaled_dot_product_attention", d,
                                     k::attention_backward_reference(p, probs.data(), gc.data(), dq.data(), dk.data(),
                                                                     dv.data(), mask_grad ? ds.data() : nullptr));
                        return std::vector<Tensor>{dq, dk, dv, mask_grad ? sum_to(ds, mask_shape) : Tensor()};
                      });
  return res;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    float dropout_p, bool is_causal, std::optional<float> scale, bool enable_gqa) {
  AttentionOptions opt;
  opt.attn_mask = attn_mask;
  opt.dropout_p = dropout_p;
  opt.is_causal = is_causal;
  opt.scale = scale;
  opt.enable_gqa = enable_gqa;
  return sdpa(q, k, v, opt, false).output;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  return sdpa(q, k, v, opt, false).output;
}

AttentionResult scaled_dot_product_attention_with_weights(const Tensor& q, const Tensor& k, const Tensor& v,
                                                          const AttentionOptions& opt) {
  return sdpa(q, k, v, opt, true);
}

}  // namespace qkv
