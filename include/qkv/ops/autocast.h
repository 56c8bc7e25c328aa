// Mixed precision, like torch.autocast(device_type="cpu", dtype=torch.bfloat16): inside an
// `Autocast guard(AutocastDType::bf16)` scope, `linear` (every projection, feed-forward layer and the
// output head) multiplies bf16-rounded operands with f32 accumulation, forward and backward, and
// returns f32, and scaled_dot_product_attention computes in bf16 (AttentionCompute::bf16, forward
// and backward; f32 where the attention weights or a float mask's gradient are asked for).
// Everything else — parameters and their gradients (the "master weights"), the optimizer, layer
// norm, softmax, the loss — stays f32. Unlike PyTorch's, qkv's
// autocast outputs stay f32, so no op downstream sees bf16 activations. Per thread, as PyTorch's.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "qkv/core/dtype.h"
#include "qkv/core/names.h"

namespace qkv {

// The dtype linear layers compute in: f32 (autocast off) or bf16 (a training config's "dtype").
enum class AutocastDType : uint8_t { f32, bf16 };
constexpr EnumTable<AutocastDType, 2> enum_table(AutocastDType) {
  return {"autocast dtype", {{{AutocastDType::f32, "f32"}, {AutocastDType::bf16, "bf16"}}}};
}

AutocastDType autocast_dtype();
void set_autocast_dtype(AutocastDType dtype);  // this thread's, until changed (Autocast restores it)

class Autocast {
 public:
  explicit Autocast(AutocastDType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  AutocastDType prev_;
};

}  // namespace qkv
