// The CPU's recurrent kernels: kernels/rnn.inc (the GRU's and LSTM's formulas forward and backward,
// the projected LSTM's too; one declaration for every device).
#pragma once

#include <cstdint>

#include "kernels/rnn.h"

namespace qkv::kernels::cpu {
#include "kernels/rnn.inc"
}  // namespace qkv::kernels::cpu
