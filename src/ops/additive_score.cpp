#include "qkv/ops/additive_score.h"

#include "dispatch.h"
#include "kernels/cpu/additive_score.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

Tensor additive_score(const Tensor& q, const Tensor& keys, const Tensor& v) {
  const Tensor& k = keys;  // (k:: below names the kernels' namespace)
  QKV_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 1 && q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
                v.size(0) == q.size(2),
            "additive_score: expected q [B, T, A], k [B, S, A], v [A], got ", shape_str(q.shape()), ", ",
            shape_str(k.shape()), ", ", shape_str(v.shape()));
  QKV_CHECK(q.dtype() == DType::f32 && k.dtype() == DType::f32 && v.dtype() == DType::f32,
            "additive_score: expected f32 tensors");
  const Device d = device_of("additive_score", {&q, &k, &v});
  const int64_t B = q.size(0), T = q.size(1), S = k.size(1), A = q.size(2);
  const Tensor qc = dense(q), kc = dense(k), vc = dense(v);
  Tensor e = Tensor::empty({B, T, S}, DType::f32, d);
  QKV_DISPATCH("additive_score", d, k::additive_score_forward(qc.data(), kc.data(), vc.data(), e.data(), B, T, S, A));
  const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
  return record(e, "additive_score", {q, k, v}, [qc, kc, vc, B, T, S, A, gq, gk, gv, d](const Tensor& g) {
    const Tensor gc = g.contiguous();
    Tensor dq = gq ? Tensor::empty(qc.shape(), DType::f32, d) : Tensor();
    Tensor dk = gk ? Tensor::empty(kc.shape(), DType::f32, d) : Tensor();
    Tensor dv = gv ? Tensor::empty(vc.shape(), DType::f32, d) : Tensor();
    QKV_DISPATCH("additive_score", d,
                 k::additive_score_backward(qc.data(), kc.data(), vc.data(), gc.data(), gq ? dq.data() : nullptr,
                                            gk ? dk.data() : nullptr, gv ? dv.data() : nullptr, B, T, S, A));
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace qkv
