// Batches for sequence-to-sequence training: token-id pairs cut into batches by token count, and a
// batch as padded tensors for teacher forcing (seeds 003–004: every target position predicted in
// parallel).
//
//   token_batches:  pairs (already sorted by length) cut so that a batch holds at most max_tokens
//                   padded tokens: max(source length, target length) × pairs
//   make_batch:     src  [B, S] = the sources (EOS included), padded
//                   tgt_in  [B, T] = BOS y₁ … y_n (padded)      tgt_out [B, T] = y₁ … y_n EOS (padded)
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::text {

struct EncodedPair {
  std::vector<int32_t> src;  // pieces + EOS
  std::vector<int32_t> tgt;  // BOS + pieces + EOS
};

struct Batch {
  TensorBase src, tgt_in, tgt_out;  // i32 [B, S], [B, T], [B, T], padded with pad_id
  int64_t tgt_tokens = 0;           // real target tokens (EOS included)
};

// The batches of pairs[order[…]], each at most max_tokens padded tokens (a pair longer than that
// alone makes a batch of one).
std::vector<std::vector<size_t>> token_batches(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& order,
                                               int64_t max_tokens);
// pad_src / pad_tgt: pad to at least these lengths (a data-parallel shard padded as its whole batch).
Batch make_batch(const std::vector<EncodedPair>& pairs, const std::vector<size_t>& index, int32_t pad_id,
                 size_t pad_src = 0, size_t pad_tgt = 0);

}  // namespace qkv::text
