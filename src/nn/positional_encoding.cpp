#include "qkv/nn/positional_encoding.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/nn/init.h"

namespace qkv::nn {

// PE(pos, 2i) = sin(pos · ω_i), PE(pos, 2i+1) = cos(pos · ω_i),  ω_i = 10000^(−2i/d_model)
// (ω_i computed as exp(2i · −ln(10000)/d_model), in float as PyTorch's tutorial does).
Tensor sinusoidal_table(int64_t max_len, int64_t d, bool split) {
  QKV_CHECK(max_len > 0 && d > 0 && d % 2 == 0, "sinusoidal positions: need max_len > 0 and an even d_model, got ",
            max_len, " and ", d);
  Tensor pe = Tensor::empty({max_len, d});
  float* p = pe.data<float>();
  if (split) {  // Marian's layout, computed in double as Hugging Face's (NumPy) table is
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t pos = 0; pos < max_len; ++pos) {
        const double a = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(d));
        p[pos * d + i] = static_cast<float>(std::sin(a));
        p[pos * d + d / 2 + i] = static_cast<float>(std::cos(a));
      }
    return pe;
  }
  const float k = -std::log(10000.f) / static_cast<float>(d);
  for (int64_t i = 0; i < d / 2; ++i) {
    const float w = std::exp(static_cast<float>(2 * i) * k);
    for (int64_t pos = 0; pos < max_len; ++pos) {
      const float a = static_cast<float>(pos) * w;
      p[pos * d + 2 * i] = std::sin(a);
      p[pos * d + 2 * i + 1] = std::cos(a);
    }
  }
  return pe;
}

PositionalEncoding::PositionalEncoding(int64_t n, int64_t d, Positions kind, Generator* gen)
    : max_len(n), d_model(d), learned(kind == Positions::learned) {
  if (learned) {
    QKV_CHECK(n > 0 && d > 0, "PositionalEncoding: max_len and d_model must be positive");
    weight = Tensor::empty({n, d});
    init::normal_(weight, gen ? *gen : default_generator(), 0.f, 0.02f);
    weight = register_parameter("weight", weight);
  } else {
    weight = register_constant(sinusoidal_table(n, d, kind == Positions::sinusoidal_split));  // (computed, not saved; moved by Module::to)
  }
}

Tensor PositionalEncoding::forward(int64_t T, int64_t pos0) const {
  QKV_CHECK(T >= 1 && pos0 >= 0 && pos0 + T <= max_len, "positions ", pos0, " … ", pos0 + T - 1,
            " exceed the model's max_len ", max_len, " (a sequence of ", pos0 + T, " tokens is too long)");
  return weight.slice(0, pos0, pos0 + T);
}

}  // namespace qkv::nn
