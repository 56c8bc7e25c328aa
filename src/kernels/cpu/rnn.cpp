#include "kernels/cpu/rnn.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn_call.h"
#include "kernels/cpu/vec.h"
#include "qkv/core/parallel.h"

namespace qkv::kernels::cpu {

namespace {

float sigmoid_s(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float tanh_s(float x) { return 2.0f * sigmoid_s(x + x) - 1.0f; }

// Runs f(b) for the rows, in parallel when there is enough work.
template <typename F>
void for_rows(int64_t B, int64_t H, F&& f) {
  parallel_for(B, std::max<int64_t>(1, 4096 / std::max<int64_t>(H, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) f(b);
  });
}

// The longest row: no step past it changes anything.
int64_t steps_of(const RnnProblem& p) {
  int64_t s = 0;
  for (int64_t b = 0; b < p.B; ++b) s = std::max(s, p.lengths[b]);
  return s;
}

// hh = h W_hhᵀ for every row (the bias is added in the gate loops)
void state_gemm(const RnnProblem& p, const float* h, float* hh) {
  const int64_t GH = p.gates * p.H;
  sgemm(false, true, p.B, GH, p.H, 1.f, h, p.H, p.w_hh, p.H, 0.f, hh, GH);
}

// ---- GRU -----------------------------------------------------------------------------------------

// One row's step: x [3H] (x_r, x_z, x_n), hh [3H], bias [3H]; h (in: h, out: h') and y get h'.
// g (optional) receives r, z, n, hh_n + b_hn.
void gru_cell(int64_t H, const float* x, const float* hh, const float* bias, float* h, float* y, float* g) {
  int64_t j = 0;
#if QKV_SIMD
  namespace simd = kernels::cpu::simd;
  for (; j + simd::kLanes <= H; j += simd::kLanes) {
    const simd::vf r = simd::sigmoid(simd::add(simd::load(x + j), simd::add(simd::load(hh + j), simd::load(bias + j))));
    const simd::vf z = simd::sigmoid(
        simd::add(simd::load(x + H + j), simd::add(simd::load(hh + H + j), simd::load(bias + H + j))));
    const simd::vf hn = simd::add(simd::load(hh + 2 * H + j), simd::load(bias + 2 * H + j));
    const simd::vf n = simd::tanh(simd::fmadd(r, hn, simd::load(x + 2 * H + j)));
    const simd::vf hp = simd::load(h + j);
    const simd::vf out = simd::fmadd(z, simd::sub(hp, n), n);  // (1 − z) n + z h = n + z (h − n)
    simd::store(h + j, out);
    simd::store(y + j, out);
    if (g) {
      simd::store(g + j, r);
      simd::store(g + H + j, z);
      simd::store(g + 2 * H + j, n);
      simd::store(g + 3 * H + j, hn);
    }
  }
#endif
  for (; j < H; ++j) {
    const float r = sigmoid_s(x[j] + (hh[j] + bias[j]));
    const float z = sigmoid_s(x[H + j] + (hh[H + j] + bias[H + j]));
    const float hn = hh[2 * H + j] + bias[2 * H + j];
    const float n = tanh_s(r * hn + x[2 * H + j]);
    const float out = z * (h[j] - n) + n;
    h[j] = out;
    y[j] = out;
    if (g) g[j] = r, g[H + j] = z, g[2 * H + j] = n, g[3 * H + j] = hn;
  }
}

// One row's step backward: dh' (in: the gradient of h', out: its part of dh that does not go
// through W_hh, z ∘ dh'), g the saved gates, hp the state the step started from; writes dx [3H] and
// dhh [3H].
void gru_cell_backward(int64_t H, const float* g, const float* hp, float* dh, float* dx, float* dhh) {
  for (int64_t j = 0; j < H; ++j) {
    const float r = g[j], z = g[H + j], n = g[2 * H + j], hn = g[3 * H + j];
    const float d = dh[j];
    const float dn = d * (1.f - z) * (1.f - n * n);  // through n = tanh(n̂)
    const float dz = d * (hp[j] - n) * z * (1.f - z);
    const float dr = dn * hn * r * (1.f - r);
    dx[j] = dr, dx[H + j] = dz, dx[2 * H + j] = dn;
    dhh[j] = dr, dhh[H + j] = dz, dhh[2 * H + j] = dn * r;
    dh[j] = d * z;
  }
}

// ---- LSTM ----------------------------------------------------------------------------------------

// One row's step: x [4H] (i, f, g, o), hh and bias [4H]; h, c updated in place, y gets h'.
// sv (optional) receives i, f, g, o; tc (optional) tanh c'.
void lstm_cell(int64_t H, const float* x, const float* hh, const float* bias, float* h, float* c, float* y, float* sv,
               float* tc) {
  for (int64_t j = 0; j < H; ++j) {
    const float i = sigmoid_s(x[j] + (hh[j] + bias[j]));
    const float f = sigmoid_s(x[H + j] + (hh[H + j] + bias[H + j]));
    const float gg = tanh_s(x[2 * H + j] + (hh[2 * H + j] + bias[2 * H + j]));
    const float o = sigmoid_s(x[3 * H + j] + (hh[3 * H + j] + bias[3 * H + j]));
    const float cn = f * c[j] + i * gg;
    const float t = tanh_s(cn);
    c[j] = cn;
    h[j] = o * t;
    y[j] = o * t;
    if (sv) sv[j] = i, sv[H + j] = f, sv[2 * H + j] = gg, sv[3 * H + j] = o;
    if (tc) tc[j] = t;
  }
}

void lstm_cell_backward(int64_t H, const float* sv, const float* cp, const float* tc, float* dh, float* dc, float* dx) {
  for (int64_t j = 0; j < H; ++j) {
    const float i = sv[j], f = sv[H + j], gg = sv[2 * H + j], o = sv[3 * H + j], t = tc[j];
    const float dct = dc[j] + dh[j] * o * (1.f - t * t);
    dx[j] = dct * gg * i * (1.f - i);
    dx[H + j] = dct * cp[j] * f * (1.f - f);
    dx[2 * H + j] = dct * i * (1.f - gg * gg);
    dx[3 * H + j] = dh[j] * t * o * (1.f - o);
    dc[j] = dct * f;
    dh[j] = 0.f;  // all of dh goes through W_hh (added by the GEMM)
  }
}

// dW_hh = Σ_s dhh_sᵀ h_s (one GEMM over all steps), db_hh = Σ_s dhh_s; h_s has K features (H, or P
// for the projected LSTM)
void weight_grads(const RnnProblem& p, int64_t steps, const float* dhh, const float* saved_h, float* dw_hh,
                  float* db_hh, int64_t K) {
  const int64_t GH = p.gates * p.H, rows = steps * p.B;
  if (dw_hh) {
    if (rows == 0) std::fill(dw_hh, dw_hh + GH * K, 0.f);
    else sgemm(true, false, GH, K, rows, 1.f, dhh, GH, saved_h, K, 0.f, dw_hh, K);
  }
  // db_hh in kernels/column_strips.h's order (the GPU's bits)
  if (db_hh) column_sums_in_strips(rows, GH, db_hh, [dhh, GH](int64_t r0, int64_t) { return dhh + r0 * GH; });
}

}  // namespace

void gru_forward(const RnnProblem& p, const float* h0, float* y, float* h_n, float* saved_gates, float* saved_h) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t B = p.B, T = p.T, H = p.H, G = 3 * H;
  std::vector<float> h(h0, h0 + B * H), hh(static_cast<size_t>(B * G)), zero_bias(static_cast<size_t>(G), 0.f);
  const float* bias = p.b_hh ? p.b_hh : zero_bias.data();
  std::fill(y, y + B * T * H, 0.f);
  const int64_t steps = steps_of(p);
  for (int64_t s = 0; s < steps; ++s) {
    state_gemm(p, h.data(), hh.data());
    if (saved_h) std::memcpy(saved_h + s * B * H, h.data(), static_cast<size_t>(B * H) * sizeof(float));
    for_rows(B, H, [&](int64_t b) {
      const int64_t t = p.time(b, s);
      float* g = saved_gates ? saved_gates + (s * B + b) * 4 * H : nullptr;
      if (t < 0) {
        if (g) std::fill(g, g + 4 * H, 0.f);
        return;
      }
      gru_cell(H, p.x_proj + (b * T + t) * G, hh.data() + b * G, bias, h.data() + b * H, y + (b * T + t) * H, g);
    });
  }
  std::copy(h.begin(), h.end(), h_n);
}

void gru_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* dy,
                  const float* dh_n, float* dx_proj, float* dh0, float* dw_hh, float* db_hh) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t B = p.B, T = p.T, H = p.H, G = 3 * H, steps = steps_of(p);
  std::vector<float> dh(static_cast<size_t>(B * H), 0.f), dhh(static_cast<size_t>(std::max<int64_t>(steps, 1) * B * G), 0.f);
  if (dh_n) std::copy(dh_n, dh_n + B * H, dh.begin());
  std::fill(dx_proj, dx_proj + B * T * G, 0.f);
  for (int64_t s = steps - 1; s >= 0; --s) {
    float* dhh_s = dhh.data() + s * B * G;
    for_rows(B, H, [&](int64_t b) {
      const int64_t t = p.time(b, s);
      if (t < 0) return;  // the state was carried: dh passes through, nothing else
      float* d = dh.data() + b * H;
      if (dy)
        for (int64_t j = 0; j < H; ++j) d[j] += dy[(b * T + t) * H + j];
      gru_cell_backward(H, saved_gates + (s * B + b) * 4 * H, saved_h + (s * B + b) * H, d,
                        dx_proj + (b * T + t) * G, dhh_s + b * G);
    });
    // dh (of the state before step s) = z ∘ dh' + dhh W_hh
    sgemm(false, false, B, H, G, 1.f, dhh_s, G, p.w_hh, H, 1.f, dh.data(), H);
  }
  if (dh0) std::copy(dh.begin(), dh.end(), dh0);
  weight_grads(p, steps, dhh.data(), saved_h, dw_hh, db_hh, p.H);
}

void lstm_forward(const RnnProblem& p, const float* h0, const float* c0, float* y, float* h_n, float* c_n,
                  float* saved_gates, float* saved_h, float* saved_c, float* saved_tanh_c) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  std::vector<float> h(h0, h0 + B * H), c(c0, c0 + B * H), hh(static_cast<size_t>(B * G)),
      zero_bias(static_cast<size_t>(G), 0.f);
  const float* bias = p.b_hh ? p.b_hh : zero_bias.data();
  std::fill(y, y + B * T * H, 0.f);
  const int64_t steps = steps_of(p);
  for (int64_t s = 0; s < steps; ++s) {
    state_gemm(p, h.data(), hh.data());
    if (saved_h) std::memcpy(saved_h + s * B * H, h.data(), static_cast<size_t>(B * H) * sizeof(float));
    if (saved_c) std::memcpy(saved_c + s * B * H, c.data(), static_cast<size_t>(B * H) * sizeof(float));
    for_rows(B, H, [&](int64_t b) {
      const int64_t t = p.time(b, s);
      float* sv = saved_gates ? saved_gates + (s * B + b) * G : nullptr;
      float* tc = saved_tanh_c ? saved_tanh_c + (s * B + b) * H : nullptr;
      if (t < 0) {
        if (sv) std::fill(sv, sv + G, 0.f);
        if (tc) std::fill(tc, tc + H, 0.f);
        return;
      }
      lstm_cell(H, p.x_proj + (b * T + t) * G, hh.data() + b * G, bias, h.data() + b * H, c.data() + b * H,
                y + (b * T + t) * H, sv, tc);
    });
  }
  std::copy(h.begin(), h.end(), h_n);
  std::copy(c.begin(), c.end(), c_n);
}

void lstm_backward(const RnnProblem& p, const float* saved_gates, const float* saved_h, const float* saved_c,
                   const float* saved_tanh_c, const float* dy, const float* dh_n, const float* dc_n, float* dx_proj,
                   float* dh0, float* dc0, float* dw_hh, float* db_hh) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H, steps = steps_of(p);
  std::vector<float> dh(static_cast<size_t>(B * H), 0.f), dc(static_cast<size_t>(B * H), 0.f),
      dhh(static_cast<size_t>(std::max<int64_t>(steps, 1) * B * G), 0.f);
  if (dh_n) std::copy(dh_n, dh_n + B * H, dh.begin());
  if (dc_n) std::copy(dc_n, dc_n + B * H, dc.begin());
  std::fill(dx_proj, dx_proj + B * T * G, 0.f);
  for (int64_t s = steps - 1; s >= 0; --s) {
    float* dhh_s = dhh.data() + s * B * G;
    for_rows(B, H, [&](int64_t b) {
      const int64_t t = p.time(b, s);
      if (t < 0) return;  // carried: dh and dc pass through
      float* d = dh.data() + b * H;
      if (dy)
        for (int64_t j = 0; j < H; ++j) d[j] += dy[(b * T + t) * H + j];
      float* dx = dx_proj + (b * T + t) * G;
      lstm_cell_backward(H, saved_gates + (s * B + b) * G, saved_c + (s * B + b) * H, saved_tanh_c + (s * B + b) * H,
                         d, dc.data() + b * H, dx);
      std::copy(dx, dx + G, dhh_s + b * G);  // the pre-activations add x and hh: one gradient for both
    });
    sgemm(false, false, B, H, G, 1.f, dhh_s, G, p.w_hh, H, 1.f, dh.data(), H);
  }
  if (dh0) std::copy(dh.begin(), dh.end(), dh0);
  if (dc0) std::copy(dc.begin(), dc.end(), dc0);
  weight_grads(p, steps, dhh.data(), saved_h, dw_hh, db_hh, p.H);
}

// ---- LSTM with a projection (proj_size P) ---------------------------------------------------------
// Per step: hh = h W_hhᵀ (K = P), the cell writes m' = o ∘ tanh c' (in place of its h'), then
// h' = m' W_hrᵀ, one GEMM for all rows; rows past their length keep h.

void lstm_proj_forward(const RnnProblem& p, int64_t P, const float* w_hr, const float* h0, const float* c0, float* y,
                       float* h_n, float* c_n, float* saved_gates, float* saved_h, float* saved_c, float* saved_tanh_c) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H;
  std::vector<float> h(h0, h0 + B * P), c(c0, c0 + B * H), hh(static_cast<size_t>(B * G)),
      m(static_cast<size_t>(B * H), 0.f), hr(static_cast<size_t>(B * P)), zero_bias(static_cast<size_t>(G), 0.f);
  const float* bias = p.b_hh ? p.b_hh : zero_bias.data();
  std::fill(y, y + B * T * P, 0.f);
  const int64_t steps = steps_of(p);
  for (int64_t s = 0; s < steps; ++s) {
    // hh = h W_hhᵀ   [B, P] × [P, 4H]
    sgemm(false, true, B, G, P, 1.f, h.data(), P, p.w_hh, P, 0.f, hh.data(), G);
    if (saved_h) std::memcpy(saved_h + s * B * P, h.data(), static_cast<size_t>(B * P) * sizeof(float));
    if (saved_c) std::memcpy(saved_c + s * B * H, c.data(), static_cast<size_t>(B * H) * sizeof(float));
    for_rows(B, H, [&](int64_t b) {
      const int64_t t = p.time(b, s);
      float* sv = saved_gates ? saved_gates + (s * B + b) * G : nullptr;
      float* tc = saved_tanh_c ? saved_tanh_c + (s * B + b) * H : nullptr;
      if (t < 0) {
        if (sv) std::fill(sv, sv + G, 0.f);
        if (tc) std::fill(tc, tc + H, 0.f);
        return;
      }
      float* mb = m.data() + b * H;  // m' = o ∘ tanh c'
      lstm_cell(H, p.x_proj + (b * T + t) * G, hh.data() + b * G, bias, mb, c.data() + b * H, mb, sv, tc);
    });
    // h' = m' W_hrᵀ   [B, H] × [H, P]
    sgemm(false, true, B, P, H, 1.f, m.data(), H, w_hr, H, 0.f, hr.data(), P);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t t = p.time(b, s);
      if (t < 0) continue;
      std::copy(hr.begin() + b * P, hr.begin() + (b + 1) * P, h.begin() + b * P);
      std::copy(hr.begin() + b * P, hr.begin() + (b + 1) * P, y + (b * T + t) * P);
    }
  }
  std::copy(h.begin(), h.end(), h_n);
  std::copy(c.begin(), c.end(), c_n);
}

void lstm_proj_backward(const RnnProblem& p, int64_t P, const float* w_hr, const float* saved_gates,
                        const float* saved_h, const float* saved_c, const float* saved_tanh_c, const float* dy,
                        const float* dh_n, const float* dc_n, float* dx_proj, float* dh0, float* dc0, float* dw_hh,
                        float* db_hh, float* dw_hr) {
  const OneDnnCall held;  // one hold for every GEMM below (kernels/cpu/onednn_call.h)
  const int64_t B = p.B, T = p.T, H = p.H, G = 4 * H, steps = steps_of(p), S = std::max<int64_t>(steps, 1);
  std::vector<float> dh(static_cast<size_t>(B * P), 0.f), dc(static_cast<size_t>(B * H), 0.f),
      dm(static_cast<size_t>(B * H)), dhh(static_cast<size_t>(S * B * G), 0.f), dhr(static_cast<size_t>(S * B * P), 0.f),
      ms(static_cast<size_t>(S * B * H), 0.f);
  if (dh_n) std::copy(dh_n, dh_n + B * P, dh.begin());
  if (dc_n) std::copy(dc_n, dc_n + B * H, dc.begin());
  std::fill(dx_proj, dx_proj + B * T * G, 0.f);
  for (int64_t s = steps - 1; s >= 0; --s) {
    float *dhh_s = dhh.data() + s * B * G, *dhr_s = dhr.data() + s * B * P, *m_s = ms.data() + s * B * H;
    // dh' of the rows this step updated (0 for the others: their dh is carried), and m' = o ∘ tanh c'
    for (int64_t b = 0; b < B; ++b) {
      const int64_t t = p.time(b, s);
      if (t < 0) continue;
      float* d = dh.data() + b * P;
      if (dy)
        for (int64_t j = 0; j < P; ++j) d[j] += dy[(b * T + t) * P + j];
      std::copy(d, d + P, dhr_s + b * P);
      std::fill(d, d + P, 0.f);  // all of dh' goes through W_hr
      const float *sv = saved_gates + (s * B + b) * G, *tc = saved_tanh_c + (s * B + b) * H;
      for (int64_t j = 0; j < H; ++j) m_s[b * H + j] = sv[3 * H + j] * tc[j];
    }
    // dm' = dh' W_hr   [B, P] × [P, H]
    sgemm(false, false, B, H, P, 1.f, dhr_s, P, w_hr, H, 0.f, dm.data(), H);
    for_rows(B, H, [&](int64_t b) {
      const int64_t t = p.time(b, s);
      if (t < 0) return;  // carried: dh and dc pass through
      float* dx = dx_proj + (b * T + t) * G;
      lstm_cell_backward(H, saved_gates + (s * B + b) * G, saved_c + (s * B + b) * H, saved_tanh_c + (s * B + b) * H,
                         dm.data() + b * H, dc.data() + b * H, dx);
      std::copy(dx, dx + G, dhh_s + b * G);
    });
    // dh (of the state before step s) += dhh W_hh   [B, 4H] × [4H, P]
    sgemm(false, false, B, P, G, 1.f, dhh_s, G, p.w_hh, P, 1.f, dh.data(), P);
  }
  if (dh0) std::copy(dh.begin(), dh.end(), dh0);
  if (dc0) std::copy(dc.begin(), dc.end(), dc0);
  weight_grads(p, steps, dhh.data(), saved_h, dw_hh, db_hh, P);
  // dW_hr = Σ_s dh'_sᵀ m'_s   [P, H]
  if (dw_hr) {
    if (steps == 0) std::fill(dw_hr, dw_hr + P * H, 0.f);
    else sgemm(true, false, P, H, steps * B, 1.f, dhr.data(), P, ms.data(), H, 0.f, dw_hr, H);
  }
}

}  // namespace qkv::kernels::cpu
