// Attention masks: qkv's one convention, and the conversions into it.
//
// Inside qkv an attention mask is what scaled_dot_product_attention reads (PyTorch's SDPA
// convention): a boolean tensor broadcastable to the scores [B, H, Lq, Lk], true = may attend — or
// an additive f32 mask (0 or −∞, or any bias). A model converts what it is given at its boundary —
// token ids and their padding, sequence lengths, the true-means-masked masks of
// nn.MultiheadAttention — once, with the functions below, and hands the result to every layer and
// every decoding step; no layer converts again.
#pragma once

#include <vector>

#include "qkv/ops/tensor.h"

namespace qkv {

// A key padding mask [B, S] (true = padding, as MultiheadAttention's key_padding_mask) → [B, 1, 1, S],
// true = may attend.
Tensor attention_mask_from_padding(const Tensor& key_padding_mask);
// Sequence lengths (one per batch row) → [B, 1, 1, S]: key j may be attended to when j < lengths[b].
Tensor attention_mask_from_lengths(const std::vector<int64_t>& lengths, int64_t S, Device device = Device::cpu());
// A mask in nn.MultiheadAttention's convention (boolean: true = may NOT attend; float: added) → ours.
Tensor attention_mask_from_mha(const Tensor& attn_mask);
// [Lq, Lk], true where query i may see key j: j ≤ i + offset. offset 0 is PyTorch's is_causal (top-left
// aligned); offset Lk − Lq aligns the last query with the last key (new positions after a cached past).
Tensor causal_mask(int64_t Lq, int64_t Lk, int64_t offset = 0, Device device = Device::cpu());
// [Lq, Lk], true where query i may see key j within a window of W keys: j ≤ i + offset and
// i + offset − j < W (Mistral's and Qwen2's sliding window; offset as above).
Tensor sliding_window_mask(int64_t Lq, int64_t Lk, int64_t window, int64_t offset = 0, Device device = Device::cpu());
// [L, L], true where query i may see key j within w positions either way: |i − j| ≤ w (ModernBERT's
// local attention, w = local_attention / 2).
Tensor bidirectional_window_mask(int64_t L, int64_t w, Device device = Device::cpu());
// Two masks in our convention as one (either may be undefined): boolean ∧ boolean stays boolean
// (broadcast to both shapes); otherwise both become additive (true → 0, false → −∞) and are added.
Tensor merge_attention_masks(const Tensor& a, const Tensor& b);

}  // namespace qkv
