// A language model's perplexity over a text, as `qkv eval --text` and Python's
// LanguageModel.perplexity report it (transformers' perplexity guide with stride = max_length):
//
//   perplexity = exp((1/N) Σ_t −log p(x_t | x_<t))
//
// over the text's tokens after its first, read in consecutive windows of T + 1 tokens that share one
// token (each window's first token is context only): window w predicts tokens w·T + 1 … w·T + T.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qkv/models/model.h"

namespace qkv::eval {

struct Perplexity {
  double loss = 0;        // mean −log p in nats per scored token
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;     // tokens scored
  int64_t block = 0;      // T: tokens predicted per window
};

// The window when none is asked for: the model's context, at most 1024 tokens.
int64_t default_perplexity_block(const models::LanguageModel& model);
// The windows of `n` tokens read T at a time: ⌈(n − 1) / T⌉.
int64_t perplexity_windows(int64_t n, int64_t block);

// block: T, 1 … model.block_size() (0: the model's context, at most 1024). windows: which windows
// to score (each 0 … perplexity_windows − 1; empty: all). on_window is called after each. A
// qkv::Error naming the problem for fewer than 2 tokens, a block out of range or a window past the
// text; ids must be below the model's vocabulary (its embedding refuses others).
Perplexity perplexity(const models::LanguageModel& model, const std::vector<int32_t>& ids, int64_t block = 0,
                      const std::vector<int64_t>& windows = {}, const std::function<void()>& on_window = nullptr);

}  // namespace qkv::eval
