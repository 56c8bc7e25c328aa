// The inputs every encoder read in both directions (nn::Bert, nn::ModernBert) takes the same way: the
// attention_mask beside input_ids, checked once and turned into which positions hold a token.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv::nn {

// attention_mask i32 [B, T] as input_ids (1: a token, 0: padding; undefined: no padding) → keep[b·T + t]
// (true: a token), empty when the mask is undefined. Another shape or dtype, a value other than 0 or 1,
// or a row of padding alone is a qkv::Error naming `model` ("BERT", "ModernBERT").
std::vector<bool> tokens_kept(const Tensor& attention_mask, const Tensor& input_ids, const char* model);

}  // namespace qkv::nn
