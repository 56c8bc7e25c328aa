#include "qkv/ops/activation.h"

#include "dispatch.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/autocast.h"
#include "kernels/cpu/activation.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record;
using ops_detail::device_of;

static Tensor dense_f32(const Tensor& x, const char* op) {
  QKV_CHECK(x.dtype() == DType::f32, op, ": expected an f32 tensor, got ", dtype_name(x.dtype()));
  return dense(x);
}

// The mask of a dropout that `op` applies to its output (kernels::reserve_dropout); p = 0: none.
static kernels::DropoutMask output_dropout(const char* op, const Tensor& x, float p, Generator* gen) {
  QKV_CHECK(p >= 0.f && p <= 1.f, op, ": dropout probability has to be between 0 and 1, but got ", p);
  return kernels::reserve_dropout(p, x.numel(), gen);
}

// The bf16 copy of an output (forward) or an input gradient (backward) that `producer` writes in its own
// pass when the step's AutocastWeights scope wants it (ops/autocast.h: a linear casts it next), or
// undefined; data16: its elements, or null.
static Tensor bf16_copy(const char* producer, const Shape& shape, Device d) {
  return AutocastWeights::copy_wanted(producer) ? Tensor::empty(shape, DType::bf16, d) : Tensor();
}
static bf16* data16(const Tensor& copy) { return copy.defined() ? copy.data<bf16>() : nullptr; }

// A bias added in an activation's pass (f32 [cols], cols = x's last dimension), as the kernels take it
// — its dense copy (which the backward keeps alive), pointer and columns; none: undefined, null, 0 —
// and the activation's inputs and gradients with it.
struct RowBias {
  Tensor given, dense_copy;
  const float* data = nullptr;
  int64_t cols = 0;
  bool grad = false;  // the bias takes a gradient

  RowBias(const char* op, const Tensor& x, const Tensor& bias) : given(bias) {
    if (!bias.defined()) return;
    QKV_CHECK(bias.dim() == 1 && x.dim() >= 1 && bias.size(0) == x.size(-1) && bias.dtype() == DType::f32, op,
              ": bias ", shape_str(bias.shape()), " ", dtype_name(bias.dtype()), " must be f32 [",
              x.dim() >= 1 ? x.size(-1) : 0, "], x's last dimension (x ", shape_str(x.shape()), ")");
    dense_copy = dense(bias), data = dense_copy.data(), cols = bias.size(0), grad = bias.requires_grad();
  }
  std::vector<Tensor> inputs(const Tensor& x) const {
    return dense_copy.defined() ? std::vector<Tensor>{x, given} : std::vector<Tensor>{x};
  }
  // the bias's gradient, written by the activation's backward in its pass (kernels/activation.inc's
  // dbias: the bits of sum_to(dx)); undefined where there is no bias or it takes no gradient
  Tensor gradient_buffer(Device d) const { return grad ? Tensor::empty({cols}, DType::f32, d) : Tensor(); }
  // {dx} or, with a bias, {dx, db}
  std::vector<Tensor> gradients(const Tensor& dx, const Tensor& db) const {
    if (!dense_copy.defined()) return {dx};
    return {dx, db};
  }
};

// y = Dropout_p(max(x̂, 0));  dx = [x̂ > 0] · dy · m / (1 − p)   (x̂ = x, or x + bias over rows)
Tensor relu(const Tensor& x, float dropout_p, Generator* gen, const Tensor& bias) {
  const Device d = device_of("relu", {&x, &bias});
  Tensor xc = dense_f32(x, "relu");
  const RowBias b("relu", x, bias);
  const kernels::DropoutMask drop = output_dropout("relu", x, dropout_p, gen);
  Tensor out = Tensor::empty(x.shape(), DType::f32, d), out16 = bf16_copy("relu", x.shape(), d);
  QKV_DISPATCH("relu", d, k::relu_forward(xc.data(), out.data(), x.numel(), drop, data16(out16), b.data, b.cols));
  AutocastWeights::lend_copy("relu", out, out16);
  return record(out, "relu", b.inputs(x), [xc, b, drop, d](const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(xc.shape(), DType::f32, d);
    Tensor dx16 = bf16_copy("relu backward", xc.shape(), d);
    Tensor db = b.gradient_buffer(d);
    QKV_DISPATCH("relu", d,
                 k::relu_backward(xc.data(), gc.data(), dx.data(), xc.numel(), drop, data16(dx16), b.data, b.cols,
                                  db.defined() ? db.data() : nullptr));
    AutocastWeights::lend_copy("relu backward", dx, dx16);
    return b.gradients(dx, db);
  });
}

Tensor relu(const Tensor& x) { return relu(x, 0.f); }

// y = x · σ(x);  dx = dy · σ(x) · (1 + x · (1 − σ(x))) — composed of sigmoid and mul, whose backward
// rules give exactly this.
Tensor silu(const Tensor& x) { return mul(x, sigmoid(x)); }

// y = g·σ(g)·u;  dg = dy·u·σ(g)(1 + g(1 − σ(g))),  du = dy·g·σ(g)   (kernels/activation.inc)
Tensor silu_mul(const Tensor& gate, const Tensor& up) {
  QKV_CHECK(gate.shape() == up.shape(), "silu_mul: gate ", shape_str(gate.shape()), " and up ", shape_str(up.shape()),
            " must have one shape");
  const Device d = device_of("silu_mul", {&gate, &up});
  Tensor g = dense_f32(gate, "silu_mul"), u = dense_f32(up, "silu_mul");
  Tensor out = Tensor::empty(gate.shape(), DType::f32, d), out16 = bf16_copy("silu_mul", gate.shape(), d);
  QKV_DISPATCH("silu_mul", d, k::silu_mul_forward(g.data(), u.data(), out.data(), g.numel(), data16(out16)));
  AutocastWeights::lend_copy("silu_mul", out, out16);
  return record(out, "silu_mul", {gate, up}, [g, u, d](const Tensor& dy) {
    Tensor dyc = dy.contiguous();
    Tensor dg = Tensor::empty(g.shape(), DType::f32, d), du = Tensor::empty(g.shape(), DType::f32, d);
    Tensor dg16 = bf16_copy("silu_mul backward", g.shape(), d), du16 = bf16_copy("silu_mul backward", g.shape(), d);
    QKV_DISPATCH("silu_mul", d, k::silu_mul_backward(g.data(), u.data(), dyc.data(), dg.data(), du.data(), g.numel(),
                                                     data16(dg16), data16(du16)));
    AutocastWeights::lend_copy("silu_mul backward", dg, dg16);
    AutocastWeights::lend_copy("silu_mul backward", du, du16);
    return std::vector<Tensor>{dg, du};
  });
}

// y = Dropout_p(x̂·Φ(x̂));  dx = gelu'(x̂) · dy · m / (1 − p)   (x̂ = x, or x + bias over rows)
Tensor gelu(const Tensor& x, const std::string& approximate, float dropout_p, Generator* gen, const Tensor& bias) {
  QKV_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
            approximate, "\"");
  const bool tanh_approx = approximate == "tanh";
  const Device d = device_of("gelu", {&x, &bias});
  Tensor xc = dense_f32(x, "gelu");
  const RowBias b("gelu", x, bias);
  const kernels::DropoutMask drop = output_dropout("gelu", x, dropout_p, gen);
  Tensor out = Tensor::empty(x.shape(), DType::f32, d);
  // Φ(x̂) is kept for the backward when there will be one (exact GELU only) on the CPU, where erf costs
  // more than a pass over memory; a GPU computes it again (the same bits) rather than write a tensor
  // the size of x and read it back (the GPT's FFN on a GPU: 100 MB each way a layer)
  Tensor cdf = autograd::needs_grad({x, bias}) && !tanh_approx && d.is_cpu() ? Tensor::empty(x.shape(), DType::f32, d)
                                                                             : Tensor();
  Tensor out16 = bf16_copy("gelu", x.shape(), d);
  QKV_DISPATCH("gelu", d, k::gelu_forward(xc.data(), out.data(), x.numel(), tanh_approx,
                                          cdf.defined() ? cdf.data() : nullptr, drop, data16(out16), b.data, b.cols));
  AutocastWeights::lend_copy("gelu", out, out16);
  return record(out, "gelu", b.inputs(x), [xc, b, cdf, tanh_approx, drop, d](const Tensor& g) {
    Tensor gc = g.contiguous(), dx = Tensor::empty(xc.shape(), DType::f32, d);
    Tensor dx16 = bf16_copy("gelu backward", xc.shape(), d);
    Tensor db = b.gradient_buffer(d);
    QKV_DISPATCH("gelu", d, k::gelu_backward(xc.data(), gc.data(), dx.data(), xc.numel(), tanh_approx,
                                             cdf.defined() ? cdf.data() : nullptr, drop, data16(dx16), b.data, b.cols,
                                             db.defined() ? db.data() : nullptr));
    AutocastWeights::lend_copy("gelu backward", dx, dx16);
    return b.gradients(dx, db);
  });
}

Tensor gelu(const Tensor& x, const std::string& approximate) { return gelu(x, approximate, 0.f); }

// y = x · m / (1 − p);  dx = dy · m / (1 − p), with m regenerated from (seed, counter)
Tensor dropout(const Tensor& x, float p, bool training, Generator* gen) {
  QKV_CHECK(p >= 0.f && p <= 1.f, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.f) return x;
  const Device d = device_of("dropout", {&x});
  const kernels::DropoutMask m = kernels::reserve_dropout(p, x.numel(), gen);
  Tensor xc = dense_f32(x, "dropout");
  Tensor out = Tensor::empty(x.shape(), DType::f32, d);
  QKV_DISPATCH("dropout", d, k::dropout_apply(xc.data(), out.data(), x.numel(), m));
  return record(out, "dropout", {x}, [m, d](const Tensor& gr) {
    Tensor gc = gr.contiguous(), dx = Tensor::empty(gr.shape(), DType::f32, d);
    QKV_DISPATCH("dropout", d, k::dropout_apply(gc.data(), dx.data(), gc.numel(), m));
    return std::vector<Tensor>{dx};
  });
}

Tensor dropout2d(const Tensor& x, float p, bool training, Generator* gen) {
  QKV_CHECK(x.dim() == 3 || x.dim() == 4, "dropout2d: expected [N, C, H, W] or [C, H, W], got ", shape_str(x.shape()));
  QKV_CHECK(p >= 0.f && p <= 1.f, "dropout2d: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.f) return x;
  // one keep-or-drop (0 or 1 / (1 − p)) per channel, broadcast over its plane
  Shape per_channel(x.shape().begin(), x.shape().end() - 2);
  per_channel.insert(per_channel.end(), {1, 1});
  Tensor ones = Tensor::empty(per_channel, DType::f32, x.device());  // (made there: no copy from the host)
  const Tensor keep = dropout(ones.fill_(1.f), p, true, gen);
  return mul(x, keep);
}

}  // namespace qkv
