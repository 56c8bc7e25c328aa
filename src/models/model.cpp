// The interfaces' defaults (models/model.h): what a model without an optional ability says.
#include "qkv/models/model.h"

#include "qkv/core/error.h"

namespace qkv::models {

nn::PagedKVCache LanguageModel::make_paged_cache(int64_t, int64_t, Device, DType) const {
  throw Error("a " + type() + " language model has no paged KV cache (many sequences in one step): GPT and Llama have");
}

Tensor LanguageModel::step_paged(const Tensor&, const nn::PagedStep&, nn::PagedKVCache&) const {
  throw Error("a " + type() + " language model has no paged decoding step (many sequences in one step): GPT and Llama have");
}

}  // namespace qkv::models
