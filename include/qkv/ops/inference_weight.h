// The weights decoding steps read (issue 27): the f32 parameter itself, a bf16 copy, or int8 rows
// with a scale each — chosen once for a loaded model (models/load.h's LoadOptions, the CLI's
// --dtype), never while training; the f32 parameters stay what training and `forward` use.
//
//   bf16   W rounded to bf16 (~3 significant digits), read by the matrix–vector kernel for small
//          batches (kernels/cpu/gemv.h: half the bytes)
//   int8   per output row n: s[n] = max_k |W[n,k]| / 127, W8[n,k] = round(W[n,k] / s[n]); the
//          activations quantized per row on the fly, integer products summed exactly in int32
//          (kernels/cpu/gemm_int8.h); a quarter of the bytes, ~2 significant digits of weight
//
// On the CPU, f32 and int8 weights also get a copy reordered for oneDNN's matmul primitive
// (kernels/cpu/packed_linear.h), made on the first batch of more than a few rows and kept: a
// translation step's GEMM no longer packs the weights on every call. f32 results then equal the
// training path's `linear` to rounding (another summation order), int8 results exactly.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "qkv/core/names.h"
#include "qkv/ops/tensor.h"

namespace qkv {

enum class InferenceWeights : uint8_t { f32, bf16, int8 };
constexpr EnumTable<InferenceWeights, 3> enum_table(InferenceWeights) {
  return {"inference weights dtype",
          {{{InferenceWeights::f32, "f32"}, {InferenceWeights::bf16, "bf16"}, {InferenceWeights::int8, "int8"}}}};
}

// The bits of int8 products' activations on this CPU (kernels/cpu/gemm_int8.h): 8 where every path
// sums them exactly (VNNI or AMX), 7 elsewhere, or 7 by QKV_INT8_ACTIVATION_BITS=7. A model's
// encoder reads int8 weights only with 8 (7-bit activations cost it BLEU: docs/BENCHMARKS.md).
int int8_activation_bits();
bool int8_full_range_available();  // whether 8 bits can be chosen here
// Sets them (7, or 8 where available; a qkv::Error otherwise), for comparing both; not while an
// int8 product runs on another thread.
void set_int8_activation_bits(int bits);

// A weight matrix [N, K] quantized to int8 per row: W ≈ s[n] · W8[n, :].
struct QuantizedRows {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> values;  // W8, [rows, cols] row-major
  std::vector<float> scales;   // s, [rows]
  std::vector<int32_t> sums;   // Σ_k W8[n, k], [rows] (the kernel takes the activations' zero point out with it)
  static QuantizedRows quantize(const Tensor& weight);  // f32 [N, K]
  // Rows as a quantized model file holds them (qkv quantize): W8 i8 [N, K] with every value in
  // [-127, 127], s f32 [N] finite and ≥ 0 — anything else is a qkv::Error naming `what`.
  static QuantizedRows from_tensors(const Tensor& values, const Tensor& scales, const std::string& what);
  Tensor dequantize() const;       // s[n] · W8[n, k], f32 [N, K]
  Tensor values_tensor() const;    // W8 as an i8 [N, K] tensor (a view of `values`: keep this alive)
  Tensor scales_tensor() const;    // s, f32 [N] (a copy)
};

// While one lives (on this thread), InferenceWeight(weight, int8) takes the rows given here for a
// weight — matched by its storage, and only when the rows have its shape — instead of quantizing
// its f32 values: a quantized model file's int8 rows, used as written (models/load.cpp), so the
// f32 values need never be there.
class GivenInt8Rows {
 public:
  using Map = std::map<const Storage*, std::shared_ptr<const QuantizedRows>>;
  explicit GivenInt8Rows(Map rows);
  ~GivenInt8Rows();
  GivenInt8Rows(const GivenInt8Rows&) = delete;
  GivenInt8Rows& operator=(const GivenInt8Rows&) = delete;
  // The rows given for `weight` in the innermost live scope, or null.
  static std::shared_ptr<const QuantizedRows> find(const Tensor& weight);

 private:
  Map rows_;
  GivenInt8Rows* outer_;
};

// The kernels' packed copy of a weight (or of its int8 rows), made once on first use (thread-safe);
// defined in src/ops/inference_weight.cpp.
struct PackedCopy;

// What a decoding step reads for one weight matrix: nothing extra (f32), a bf16 copy, or int8 rows
// (shared, so rows(b, e) — q, k and v of a fused projection — is a view, not a copy); and, for
// batches of rows on the CPU, the packed copy of those rows.
class InferenceWeight {
 public:
  InferenceWeight() = default;
  InferenceWeight(const Tensor& weight, InferenceWeights kind);
  InferenceWeights kind() const { return kind_; }
  const Tensor& bf16() const { return bf16_; }
  const QuantizedRows* int8() const { return int8_.get(); }
  int64_t row_begin() const { return row0_; }
  int64_t rows() const { return rows_; }
  InferenceWeight slice_rows(int64_t begin, int64_t end) const;  // rows [begin, end)
  // This weight's rows packed for the kernels (made on the first call from `weight`, the f32
  // parameter, or from the int8 rows); null for a bf16 copy, off the CPU, or without an inference
  // kind set (a default-constructed InferenceWeight: the training path).
  const PackedCopy* packed(const Tensor& weight) const;

 private:
  InferenceWeights kind_ = InferenceWeights::f32;
  Tensor bf16_;
  std::shared_ptr<const QuantizedRows> int8_;
  std::shared_ptr<PackedCopy> packed_;  // this slice's own (a slice gets a new one)
  int64_t row0_ = 0, rows_ = 0;
};

}  // namespace qkv
