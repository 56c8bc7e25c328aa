// qkv quantize: a model file rewritten for int8 decoding, as CTranslate2's converter's
// --quantization int8 — the matrices its decoding reads through int8 kernels stored as int8 rows,
// so that loading it for int8 decoding never holds their f32 values (models/load.cpp).
//
//   per output row n of such a matrix W [N, K]:  s[n] = max_k |W[n, k]| / 127,
//                                                 W8[n, k] = round(W[n, k] / s[n]) ∈ [−127, 127]
//   stored as  <name> → I8 [N, K] (W8),  <name>_scale → F32 [N] (s),  metadata "quantized":
//   {"dtype": "int8", "scheme": …, "tensors": [names]}; every other tensor as `store` says.
//
// The rows are exactly what set_inference_weights(int8) makes from the f32 file, so decoding the
// quantized file with int8 weights gives the f32 file's `--dtype int8` translations, token for
// token. Loaded with f32 or bf16 weights, it decodes with W ≈ s[n] · W8[n, k].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/io/safetensors.h"

namespace qkv::models {

struct QuantizeReport {
  std::string type;                       // the model's registry name
  std::vector<std::string> int8_tensors;  // the matrices stored as int8 rows
  int64_t int8_params = 0, other_params = 0;
};

// Reads the model file `in` (checked as its loader checks it), writes `out` atomically, and loads
// `out` back (with int8 and with f32 weights) before returning: a file no loader reads is removed
// and the error names it. A model without an int8-only decoding path (Model::int8_only_weights
// empty), or a file quantized already, is a qkv::Error naming `in`.
QuantizeReport quantize_model_file(const std::string& in, const std::string& out,
                                   io::StoreAs store = io::StoreAs::kF32);

}  // namespace qkv::models
