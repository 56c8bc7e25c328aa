#include "qkv/nn/rnn.h"

#include <cmath>

#include "qkv/nn/init.h"
#include "qkv/ops.h"

namespace qkv::nn {

RecurrentBase::RecurrentBase(const RNNOptions& o, int64_t G, const char* who, Generator* gen) : opt(o), gen_(gen) {
  QKV_CHECK(o.input_size > 0 && o.hidden_size > 0 && o.num_layers > 0, who, ": input_size ", o.input_size,
            ", hidden_size ", o.hidden_size, " and num_layers ", o.num_layers, " must be positive");
  QKV_CHECK(o.dropout >= 0.f && o.dropout < 1.f, who, ": dropout must be in [0, 1), got ", o.dropout);
  QKV_CHECK(o.proj_size == 0 || (G == 4 && o.proj_size > 0 && o.proj_size < o.hidden_size), who, ": proj_size ",
            o.proj_size, G == 4 ? " must be in [0, hidden_size " : " is for LSTM only (GRU has no projection)",
            G == 4 ? std::to_string(o.hidden_size) + ")" : std::string());
  Generator& g = gen ? *gen : default_generator();
  const int64_t H = o.hidden_size, D = directions(), P = o.proj_size, R = P ? P : H;
  const float k = 1.f / std::sqrt(static_cast<float>(H));  // U(−1/√H, 1/√H), as torch.nn.RNNBase
  for (int64_t l = 0; l < o.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? o.input_size : D * R;
      auto param = [&](const std::string& name, const Shape& shape) {
        Tensor t = Tensor::empty(shape);
        init::uniform_(t, g, -k, k);
        return register_parameter(name + sfx, t);
      };
      Weights w;
      w.w_ih = param("weight_ih", {G * H, in});
      w.w_hh = param("weight_hh", {G * H, R});
      if (o.bias) {
        w.b_ih = param("bias_ih", {G * H});
        w.b_hh = param("bias_hh", {G * H});
      }
      if (P) w.w_hr = param("weight_hr", {P, H});  // torch registers it last
      weights_.push_back(w);
    }
}

namespace {

// The [B, T, F] view the layers run on; the per-layer/direction initial state [B, H] of `h0`.
Tensor batch_major(const Tensor& x, bool batch_first) { return batch_first ? x : x.transpose(0, 1); }
Tensor initial(const Tensor& h0, int64_t i, int64_t B, int64_t H, Device d) {
  return h0.defined() ? h0.select(0, i) : Tensor::zeros({B, H}, DType::f32, d);  // zeros on the input's device
}

// states: each initial state with its feature count (h: proj_size or H; c: H).
void check_input(const char* who, const RNNOptions& o, int64_t D, const Tensor& input,
                 const std::vector<std::pair<const Tensor*, int64_t>>& states, const std::vector<int64_t>& lengths) {
  QKV_CHECK(input.dim() == 3 && input.size(2) == o.input_size, who, ": input must be [",
            o.batch_first ? "B, T, " : "T, B, ", o.input_size, "], got ", shape_str(input.shape()));
  const int64_t B = input.size(o.batch_first ? 0 : 1), T = input.size(o.batch_first ? 1 : 0);
  for (const auto& [s, F] : states)
    QKV_CHECK(!s->defined() || (s->dim() == 3 && s->size(0) == o.num_layers * D && s->size(1) == B &&
                                 s->size(2) == F),
              who, ": initial state must be [", o.num_layers * D, ", ", B, ", ", F, "], got ",
              shape_str(s->shape()));
  QKV_CHECK(lengths.empty() || static_cast<int64_t>(lengths.size()) == B, who, ": ", lengths.size(),
            " lengths for a batch of ", B);
  for (int64_t len : lengths) QKV_CHECK(len >= 0 && len <= T, who, ": length ", len, " outside [0, ", T, "]");
}

}  // namespace

GRU::GRU(const RNNOptions& o, Generator* gen) : RecurrentBase(o, 3, "GRU", gen) {}

GRU::Output GRU::forward(const Tensor& input, const Tensor& h0, const std::vector<int64_t>& lengths) const {
  const int64_t D = directions(), H = opt.hidden_size;
  check_input("GRU", opt, D, input, {{&h0, H}}, lengths);
  Tensor x = batch_major(input, opt.batch_first);
  const int64_t B = x.size(0);
  std::vector<Tensor> h_n;
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    std::vector<Tensor> ys;
    for (int64_t d = 0; d < D; ++d) {
      const Weights& w = weights_[static_cast<size_t>(l * D + d)];
      // X_proj = X W_ihᵀ + b_ih for every step at once; then the fused time loop
      std::vector<Tensor> r = gru_scan(linear(x, w.w_ih, w.b_ih), initial(h0, l * D + d, B, H, x.device()), w.w_hh, w.b_hh,
                                       lengths, /*reverse=*/d == 1);
      ys.push_back(r[0]);
      h_n.push_back(r[1]);
    }
    x = D == 1 ? ys[0] : cat(ys, -1);
    if (l + 1 < opt.num_layers) x = dropout(x, opt.dropout, is_training(), gen_);
  }
  return {batch_major(x, opt.batch_first), stack(h_n, 0)};
}

LSTM::LSTM(const RNNOptions& o, Generator* gen) : RecurrentBase(o, 4, "LSTM", gen) {}

LSTM::Output LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0,
                           const std::vector<int64_t>& lengths) const {
  const int64_t D = directions(), H = opt.hidden_size, R = opt.proj_size ? opt.proj_size : H;
  check_input("LSTM", opt, D, input, {{&h0, R}, {&c0, H}}, lengths);
  Tensor x = batch_major(input, opt.batch_first);
  const int64_t B = x.size(0);
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < opt.num_layers; ++l) {
    std::vector<Tensor> ys;
    for (int64_t d = 0; d < D; ++d) {
      const Weights& w = weights_[static_cast<size_t>(l * D + d)];
      const Tensor xp = linear(x, w.w_ih, w.b_ih), h = initial(h0, l * D + d, B, R, x.device()),
                   c = initial(c0, l * D + d, B, H, x.device());
      // with proj_size: h_t = W_hr (o_t ∘ tanh c_t) inside the loop
      std::vector<Tensor> r = w.w_hr.defined() ? lstm_proj_scan(xp, h, c, w.w_hh, w.b_hh, w.w_hr, lengths, d == 1)
                                               : lstm_scan(xp, h, c, w.w_hh, w.b_hh, lengths, d == 1);
      ys.push_back(r[0]);
      h_n.push_back(r[1]);
      c_n.push_back(r[2]);
    }
    x = D == 1 ? ys[0] : cat(ys, -1);
    if (l + 1 < opt.num_layers) x = dropout(x, opt.dropout, is_training(), gen_);
  }
  return {batch_major(x, opt.batch_first), stack(h_n, 0), stack(c_n, 0)};
}

}  // namespace qkv::nn
