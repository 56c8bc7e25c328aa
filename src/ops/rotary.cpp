#include "qkv/ops/rotary.h"

#include "qkv/core/error.h"
#include "qkv/ops/arith.h"
#include "qkv/ops/view.h"

namespace qkv {

// y = x · cos + rotate_half(x) · sin on the first `rot` features (formula in ops/rotary.h).
Tensor apply_rotary_pos_emb(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  QKV_CHECK(x.dim() == 4, "apply_rotary_pos_emb: x must be [B, H, T, D], got ", shape_str(x.shape()));
  const int64_t T = x.size(2), D = x.size(3);
  QKV_CHECK(cos.dim() == 2 && cos.shape() == sin.shape() && cos.size(0) == T && cos.size(1) % 2 == 0 &&
                cos.size(1) <= D && cos.size(1) > 0,
            "apply_rotary_pos_emb: cos/sin ", shape_str(cos.shape()), " / ", shape_str(sin.shape()),
            " should be [T, rot] with T = ", T, " and an even rot ≤ ", D);
  const int64_t rot = cos.size(1), half = rot / 2;
  Tensor xr = rot == D ? x : x.slice(3, 0, rot);
  Tensor rotated = cat({neg(xr.slice(3, half, rot)), xr.slice(3, 0, half)}, 3);
  Tensor y = add(mul(xr, cos), mul(rotated, sin));
  return rot == D ? y : cat({y, x.slice(3, rot, D)}, 3);
}

}  // namespace qkv
