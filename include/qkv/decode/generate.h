// Autoregressive generation with a language model (models::LanguageModel: a GPT; seed 004): feed the prompt once (prefill), then one token
// per step. With the KV cache each step costs one position's worth of work; without it the whole
// context is recomputed every step (the "naive" baseline the cache is measured against).
//
// Context longer than block_size: the model only knows positions < block_size, so when the window
// is full it restarts at the last block_size/2 tokens (fed again from position 0: recomputed once
// every block_size/2 steps; nanoGPT recomputes the last block_size tokens every step).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qkv/decode/sampling.h"
#include "qkv/models/model.h"

namespace qkv::decode {

struct GenerateOptions {
  int64_t max_new_tokens = 500;
  SamplingOptions sampling;
  bool use_cache = true;
  // Tokens that end the text (a converted model's eos_token_id, as transformers' generate stops):
  // the first one chosen stops generation and is not returned. Empty: generate max_new_tokens.
  std::vector<int32_t> stop_ids;
  // Batched generations (decode/batching_generator.h) share prefix-cache pages only among requests of
  // the same salt (vLLM's cache_salt): a user's own salt keeps others from learning, by how fast
  // their prompts run, what its prompts began with. Unbatched generation ignores it.
  std::string cache_salt;
};

// Returns the new tokens; on_token (optional) sees each as it is chosen (streaming); returning
// false from it stops early.
std::vector<int32_t> generate(const models::LanguageModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<bool(int32_t)>& on_token = nullptr);

// The device the model's parameters are on (nn::Module::to moves them all; the CPU for none): where
// its inputs and caches go.
Device model_device(const models::LanguageModel& model);

}  // namespace qkv::decode
