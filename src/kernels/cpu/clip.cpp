#include "kernels/cpu/clip.h"

#include <cmath>

#include "kernels/cpu/elementwise.h"

namespace qkv::kernels::cpu {

// ‖x‖² tensor by tensor, in the list's order (each tensor's own sum as sum_squares_f64 takes it),
// then ‖x‖ and s = min(1, max_norm / (‖x‖ + 1e-6)) in double, rounded to f32 once.
void clip_coefficient(const float* const* x, const int64_t* n, int64_t count, double max_norm, float* out) {
  double squares = 0;
  for (int64_t i = 0; i < count; ++i) squares += sum_squares_f64(x[i], n[i]);
  const double norm = std::sqrt(squares), s = max_norm / (norm + 1e-6);
  out[0] = static_cast<float>(norm);
  out[1] = s < 1.0 ? static_cast<float>(s) : 1.f;
}

}  // namespace qkv::kernels::cpu
