#include "qkv/ops/rnn.h"

#include <memory>

#include "dispatch.h"
#include "kernels/cpu/rnn.h"
#include "qkv/autograd/node.h"

namespace qkv {

using autograd::record_outputs;
using ops_detail::device_of;

namespace {

// The problem of one scan, after checking every operand against x_proj [B, T, G·H].
struct Scan {
  kernels::RnnProblem p;
  Device device;
  std::shared_ptr<std::vector<int64_t>> lengths;  // the problem points into it; the backward keeps it
  Tensor x, w, b;                                 // dense copies the problem points into
};

// `proj` (the projected LSTM's P; 0: none) is the width of the state h and of w_hh's rows.
Scan prepare(const char* op, int64_t gates, const Tensor& x_proj, const std::vector<const Tensor*>& states,
             const Tensor& w_hh, const Tensor& b_hh, const std::vector<int64_t>& lengths, bool reverse,
             int64_t proj = 0) {
  QKV_CHECK(x_proj.dim() == 3 && x_proj.dtype() == DType::f32 && x_proj.size(2) % gates == 0, op,
            ": x_proj must be f32 [B, T, ", gates, "·H], got ", x_proj.str());
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = x_proj.size(2) / gates, R = proj ? proj : H;
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor* s = states[i];
    const int64_t W = i == 0 ? R : H;  // h0 has R features, c0 H
    QKV_CHECK(s->dim() == 2 && s->size(0) == B && s->size(1) == W && s->dtype() == DType::f32, op,
              ": initial ", i == 0 ? "state h0" : "cell c0", " must be f32 [", B, ", ", W, "], got ", s->str());
  }
  QKV_CHECK(w_hh.dim() == 2 && w_hh.size(0) == gates * H && w_hh.size(1) == R && w_hh.dtype() == DType::f32, op,
            ": w_hh must be f32 [", gates * H, ", ", R, "], got ", w_hh.str());
  QKV_CHECK(!b_hh.defined() || (b_hh.dim() == 1 && b_hh.size(0) == gates * H), op, ": b_hh must be [", gates * H,
            "], got ", b_hh.str());
  QKV_CHECK(lengths.empty() || static_cast<int64_t>(lengths.size()) == B, op, ": ", lengths.size(),
            " lengths for a batch of ", B);
  Scan sc;
  sc.device = device_of(op, {&x_proj, &w_hh, &b_hh});
  for (const Tensor* s : states) device_of(op, {&x_proj, s});
  sc.lengths = std::make_shared<std::vector<int64_t>>(lengths.empty() ? std::vector<int64_t>(B, T) : lengths);
  for (int64_t len : *sc.lengths)
    QKV_CHECK(len >= 0 && len <= T, op, ": length ", len, " is outside [0, ", T, "]");
  sc.x = dense(x_proj), sc.w = dense(w_hh), sc.b = b_hh.defined() ? dense(b_hh) : Tensor();
  sc.p.B = B, sc.p.T = T, sc.p.H = H, sc.p.gates = gates, sc.p.reverse = reverse;
  sc.p.lengths = sc.lengths->data();
  sc.p.x_proj = sc.x.data(), sc.p.w_hh = sc.w.data(), sc.p.b_hh = sc.b.defined() ? sc.b.data() : nullptr;
  return sc;
}

// The gradient buffer for an output's gradient that may not have flowed (undefined: none).
const float* maybe(const Tensor& g, Tensor& keep) {
  if (!g.defined()) return nullptr;
  keep = g.contiguous();
  return keep.data();
}

}  // namespace

std::vector<Tensor> gru_scan(const Tensor& x_proj, const Tensor& h0, const Tensor& w_hh, const Tensor& b_hh,
                             const std::vector<int64_t>& lengths, bool reverse) {
  Scan sc = prepare("gru_scan", 3, x_proj, {&h0}, w_hh, b_hh, lengths, reverse);
  const kernels::RnnProblem& p = sc.p;
  const Device d = sc.device;
  const bool grad = autograd::needs_grad({x_proj, h0, w_hh, b_hh});
  Tensor h0c = dense(h0), y = Tensor::empty({p.B, p.T, p.H}, DType::f32, d), h_n = Tensor::empty({p.B, p.H}, DType::f32, d);
  Tensor gates = grad ? Tensor::empty({p.T, p.B, 4 * p.H}, DType::f32, d) : Tensor();
  Tensor states = grad ? Tensor::empty({p.T, p.B, p.H}, DType::f32, d) : Tensor();
  QKV_DISPATCH("gru_scan", d,
               k::gru_forward(p, h0c.data(), y.data(), h_n.data(), grad ? gates.data() : nullptr,
                              grad ? states.data() : nullptr));
  const bool with_bias = b_hh.defined();
  return record_outputs(std::vector<Tensor>{y, h_n}, "gru_scan", std::vector<Tensor>{x_proj, h0, w_hh, b_hh},
                        [sc, gates, states, with_bias](const std::vector<Tensor>& g) {
                          const kernels::RnnProblem& p = sc.p;
                          Tensor dy_keep, dh_keep;
                          Tensor dx = Tensor::empty({p.B, p.T, 3 * p.H}, DType::f32, sc.device),
                                 dh0 = Tensor::empty({p.B, p.H}, DType::f32, sc.device),
                                 dw = Tensor::empty({3 * p.H, p.H}, DType::f32, sc.device),
                                 db = with_bias ? Tensor::empty({3 * p.H}, DType::f32, sc.device) : Tensor();
                          QKV_DISPATCH("gru_scan", sc.device,
                                       k::gru_backward(p, gates.data(), states.data(), maybe(g[0], dy_keep),
                                                       maybe(g[1], dh_keep), dx.data(), dh0.data(), dw.data(),
                                                       with_bias ? db.data() : nullptr));
                          return std::vector<Tensor>{dx, dh0, dw, db};
                        });
}

std::vector<Tensor> lstm_scan(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                              const Tensor& b_hh, const std::vector<int64_t>& lengths, bool reverse) {
  Scan sc = prepare("lstm_scan", 4, x_proj, {&h0, &c0}, w_hh, b_hh, lengths, reverse);
  const kernels::RnnProblem& p = sc.p;
  const Device d = sc.device;
  const bool grad = autograd::needs_grad({x_proj, h0, c0, w_hh, b_hh});
  Tensor h0c = dense(h0), c0c = dense(c0);
  Tensor y = Tensor::empty({p.B, p.T, p.H}, DType::f32, d), h_n = Tensor::empty({p.B, p.H}, DType::f32, d),
         c_n = Tensor::empty({p.B, p.H}, DType::f32, d);
  Tensor gates, hs, cs, tcs;
  if (grad) {
    gates = Tensor::empty({p.T, p.B, 4 * p.H}, DType::f32, d);
    hs = Tensor::empty({p.T, p.B, p.H}, DType::f32, d);
    cs = Tensor::empty({p.T, p.B, p.H}, DType::f32, d);
    tcs = Tensor::empty({p.T, p.B, p.H}, DType::f32, d);
  }
  QKV_DISPATCH("lstm_scan", d,
               k::lstm_forward(p, h0c.data(), c0c.data(), y.data(), h_n.data(), c_n.data(),
                               grad ? gates.data() : nullptr, grad ? hs.data() : nullptr, grad ? cs.data() : nullptr,
                               grad ? tcs.data() : nullptr));
  const bool with_bias = b_hh.defined();
  return record_outputs(
      std::vector<Tensor>{y, h_n, c_n}, "lstm_scan", std::vector<Tensor>{x_proj, h0, c0, w_hh, b_hh},
      [sc, gates, hs, cs, tcs, with_bias](const std::vector<Tensor>& g) {
        const kernels::RnnProblem& p = sc.p;
        Tensor dy_keep, dh_keep, dc_keep;
        Tensor dx = Tensor::empty({p.B, p.T, 4 * p.H}, DType::f32, sc.device),
               dh0 = Tensor::empty({p.B, p.H}, DType::f32, sc.device), dc0 = Tensor::empty({p.B, p.H}, DType::f32, sc.device),
               dw = Tensor::empty({4 * p.H, p.H}, DType::f32, sc.device),
               db = with_bias ? Tensor::empty({4 * p.H}, DType::f32, sc.device) : Tensor();
        QKV_DISPATCH("lstm_scan", sc.device,
                     k::lstm_backward(p, gates.data(), hs.data(), cs.data(), tcs.data(), maybe(g[0], dy_keep),
                                      maybe(g[1], dh_keep), maybe(g[2], dc_keep), dx.data(), dh0.data(), dc0.data(),
                                      dw.data(), with_bias ? db.data() : nullptr));
        return std::vector<Tensor>{dx, dh0, dc0, dw, db};
      });
}

// The projected LSTM (torch's proj_size): h' = (o ∘ tanh c') W_hrᵀ.
//   x_proj [B, T, 4H], h0 [B, P], c0 [B, H], w_hh [4H, P], b_hh [4H], w_hr [P, H] → {y [B, T, P], h_n [B, P], c_n [B, H]}
std::vector<Tensor> lstm_proj_scan(const Tensor& x_proj, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                                   const Tensor& b_hh, const Tensor& w_hr, const std::vector<int64_t>& lengths,
                                   bool reverse) {
  const char* op = "lstm_proj_scan";
  QKV_CHECK(w_hr.dim() == 2 && w_hr.dtype() == DType::f32 && x_proj.dim() == 3 && w_hr.size(1) * 4 == x_proj.size(2),
            op, ": w_hr must be f32 [P, H] with 4H = x_proj's last dimension ", x_proj.dim() == 3 ? x_proj.size(2) : 0,
            ", got ", w_hr.str());
  const int64_t P = w_hr.size(0);
  QKV_CHECK(P > 0, op, ": w_hr has no rows (P = 0): use lstm_scan");
  Scan sc = prepare(op, 4, x_proj, {&h0, &c0}, w_hh, b_hh, lengths, reverse, P);
  const kernels::RnnProblem& p = sc.p;
  const Device d = sc.device;
  device_of(op, {&x_proj, &w_hr});
  const bool grad = autograd::needs_grad({x_proj, h0, c0, w_hh, b_hh, w_hr});
  Tensor h0c = dense(h0), c0c = dense(c0), wr = dense(w_hr);
  Tensor y = Tensor::empty({p.B, p.T, P}, DType::f32, d), h_n = Tensor::empty({p.B, P}, DType::f32, d),
         c_n = Tensor::empty({p.B, p.H}, DType::f32, d);
  Tensor gates, hs, cs, tcs;
  if (grad) {
    gates = Tensor::empty({p.T, p.B, 4 * p.H}, DType::f32, d);
    hs = Tensor::empty({p.T, p.B, P}, DType::f32, d);
    cs = Tensor::empty({p.T, p.B, p.H}, DType::f32, d);
    tcs = Tensor::empty({p.T, p.B, p.H}, DType::f32, d);
  }
  QKV_DISPATCH(op, d,
               k::lstm_proj_forward(p, P, wr.data(), h0c.data(), c0c.data(), y.data(), h_n.data(), c_n.data(),
                                    grad ? gates.data() : nullptr, grad ? hs.data() : nullptr,
                                    grad ? cs.data() : nullptr, grad ? tcs.data() : nullptr));
  const bool with_bias = b_hh.defined();
  return record_outputs(
      std::vector<Tensor>{y, h_n, c_n}, op, std::vector<Tensor>{x_proj, h0, c0, w_hh, b_hh, w_hr},
      [sc, wr, P, gates, hs, cs, tcs, with_bias](const std::vector<Tensor>& g) {
        const kernels::RnnProblem& p = sc.p;
        Tensor dy_keep, dh_keep, dc_keep;
        Tensor dx = Tensor::empty({p.B, p.T, 4 * p.H}, DType::f32, sc.device),
               dh0 = Tensor::empty({p.B, P}, DType::f32, sc.device), dc0 = Tensor::empty({p.B, p.H}, DType::f32, sc.device),
               dw = Tensor::empty({4 * p.H, P}, DType::f32, sc.device),
               db = with_bias ? Tensor::empty({4 * p.H}, DType::f32, sc.device) : Tensor(),
               dwr = Tensor::empty({P, p.H}, DType::f32, sc.device);
        QKV_DISPATCH("lstm_proj_scan", sc.device,
                     k::lstm_proj_backward(p, P, wr.data(), gates.data(), hs.data(), cs.data(), tcs.data(),
                                           maybe(g[0], dy_keep), maybe(g[1], dh_keep), maybe(g[2], dc_keep),
                                           dx.data(), dh0.data(), dc0.data(), dw.data(),
                                           with_bias ? db.data() : nullptr, dwr.data()));
        return std::vector<Tensor>{dx, dh0, dc0, dw, db, dwr};
      });
}

}  // namespace qkv
