// What a recurrent decoder keeps when it decodes without a cache (the baseline a cache is measured
// against, use_cache = false): each row's tokens so far, fed again through the whole teacher-forced
// forward at every step. Shared by the recurrent translators and the captioner.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"

namespace qkv::nn {

struct Prefixes {
  std::vector<std::vector<int32_t>> rows;

  explicit Prefixes(int64_t n = 0) : rows(static_cast<size_t>(n)) {}
  // Appends tokens[r] to row r; returns every row's tokens so far, i32 [rows, T].
  Tensor append(const std::vector<int32_t>& tokens) {
    QKV_CHECK(tokens.size() == rows.size(), "decoder: ", tokens.size(), " tokens for ", rows.size(), " rows");
    std::vector<int32_t> flat;
    for (size_t r = 0; r < rows.size(); ++r) {
      rows[r].push_back(tokens[r]);
      flat.insert(flat.end(), rows[r].begin(), rows[r].end());
    }
    const auto T = rows.empty() ? int64_t{0} : static_cast<int64_t>(rows[0].size());
    return Tensor::from_ints(flat, {static_cast<int64_t>(rows.size()), T});
  }
  // Keeps rows `index` (in that order, repeats allowed).
  void reorder(const std::vector<int64_t>& index) {
    std::vector<std::vector<int32_t>> kept;
    for (int64_t i : index) kept.push_back(rows[static_cast<size_t>(i)]);
    rows = std::move(kept);
  }
};

}  // namespace qkv::nn
