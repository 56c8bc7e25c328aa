// Positions for a model without recurrence ("Attention Is All You Need" §3.5, seed 003):
//
//   PE(pos, 2i)   = sin(pos / 10000^(2i/d_model))
//   PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))
//
// Marian (and so Hugging Face's MarianMTModel, OPUS-MT) lays the same sinusoids out in halves: the
// sines of every frequency first, then the cosines — PE(pos, i) = sin(pos / 10000^(2i/d_model)) and
// PE(pos, d_model/2 + i) = cos(…), i < d_model/2 ("sinusoidal_split").
//
// PositionalEncoding holds that table for positions 0 … max_len−1 (no parameters), or, with
// learned = true, a trained table "weight" [max_len, d_model] (as GPT's wpe) drawn from N(0, 0.02).
// forward(x, pos0) returns the rows pos0 … pos0+T−1 for x [B, T, d_model], to be added to x.
#pragma once

#include "qkv/core/rng.h"
#include "qkv/nn/module.h"

namespace qkv::nn {

// Which table a model adds to its embeddings: the paper's sinusoids, or a learned one.
enum class Positions : uint8_t { sinusoidal, learned, sinusoidal_split };
constexpr EnumTable<Positions, 3> enum_table(Positions) {
  return {"position encoding",
          {{{Positions::sinusoidal, "sinusoidal"}, {Positions::learned, "learned"}, {Positions::sinusoidal_split, "sinusoidal_split"}}}};
}

// The sinusoidal table [max_len, d_model] (d_model even): interleaved (the paper's) or split in halves (Marian's).
Tensor sinusoidal_table(int64_t max_len, int64_t d_model, bool split = false);

class PositionalEncoding : public Module {
 public:
  PositionalEncoding(int64_t max_len, int64_t d_model, Positions kind = Positions::sinusoidal, Generator* gen = nullptr);
  // The position rows for a sequence of T positions starting at pos0: [T, d_model]. Positions past
  // max_len → qkv::Error naming the length.
  Tensor forward(int64_t T, int64_t pos0 = 0) const;

  int64_t max_len, d_model;
  bool learned;
  Tensor weight;  // [max_len, d_model]: a parameter when learned, a constant otherwise
};

}  // namespace qkv::nn
