// Mixed precision, like torch.autocast(device_type="cpu", dtype=torch.bfloat16): inside an
// `Autocast guard(DType::bf16)` scope, `linear` (every projection, feed-forward layer and the
// output head) multiplies bf16-rounded operands with f32 accumulation, forward and backward, and
// returns f32. Everything else — parameters and their gradients (the "master weights"), the
// optimizer, layer norm, softmax, attention, the loss — stays f32. Unlike PyTorch's, qkv's
// autocast outputs stay f32, so no op downstream sees bf16 activations. Per thread, as PyTorch's.
#pragma once

#include <string>

#include "qkv/core/dtype.h"

namespace qkv {

// The dtype linear layers compute in: f32 (autocast off) or bf16.
DType autocast_dtype();

class Autocast {
 public:
  explicit Autocast(DType dtype);
  explicit Autocast(const std::string& dtype);  // "f32" or "bf16", as configs and the CLI name them
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DType prev_;
};

}  // namespace qkv
