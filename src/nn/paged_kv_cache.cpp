#include "qkv/nn/paged_kv_cache.h"

#include <algorithm>

#include "qkv/core/error.h"

namespace qkv::nn {

PagedKVCache::PagedKVCache(int64_t layers, int64_t pages, int64_t page_size, int64_t kv_heads, int64_t head_dim,
                           int64_t v_head_dim, Device device)
    : pages_(pages), page_size_(page_size), device_(device) {
  QKV_CHECK(layers >= 1 && pages >= 1 && page_size >= 1 && kv_heads >= 1 && head_dim >= 1 && v_head_dim >= 1,
            "PagedKVCache: layers ", layers, ", pages ", pages, ", page_size ", page_size, ", heads ", kv_heads,
            ", head dims ", head_dim, "/", v_head_dim, " must all be ≥ 1");
  QKV_CHECK(pages <= (int64_t{1} << 31) / page_size, "PagedKVCache: ", pages, " pages of ", page_size,
            " slots exceed the 2^31 slots an i32 slot index reaches");
  for (int64_t l = 0; l < layers; ++l) {
    k_.push_back(Tensor::empty({pages * page_size, kv_heads, head_dim}, DType::f32, device));
    v_.push_back(Tensor::empty({pages * page_size, kv_heads, v_head_dim}, DType::f32, device));
  }
  for (int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));  // page 0 first
}

int64_t PagedKVCache::bytes_per_token() const {
  int64_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l)
    b += (k_[l].size(1) * k_[l].size(2) + v_[l].size(1) * v_[l].size(2)) * static_cast<int64_t>(sizeof(float));
  return b;
}

bool PagedKVCache::reserve(PagedSequence& s, int64_t tokens) {
  const int64_t need = pages_for(tokens) - static_cast<int64_t>(s.pages.size());
  if (need <= 0) return true;
  if (need > free_pages()) return false;
  for (int64_t i = 0; i < need; ++i) {
    s.pages.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void PagedKVCache::release(PagedSequence& s) {
  free_.insert(free_.end(), s.pages.rbegin(), s.pages.rend());
  s.pages.clear();
  s.length = 0;
}

PagedStep PagedKVCache::plan(const std::vector<PagedSequence*>& seqs, const std::vector<int64_t>& new_tokens) const {
  QKV_CHECK(seqs.size() == new_tokens.size() && !seqs.empty(), "PagedKVCache::plan: ", seqs.size(), " sequences and ",
            new_tokens.size(), " counts of new tokens");
  size_t width = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    QKV_CHECK(new_tokens[i] >= 1 && pages_for(seqs[i]->length + new_tokens[i]) <= static_cast<int64_t>(seqs[i]->pages.size()),
              "PagedKVCache::plan: sequence ", i, " of ", seqs[i]->length, " tokens holds ", seqs[i]->pages.size(),
              " pages, too few for ", new_tokens[i], " more (reserve them first)");
    width = std::max(width, seqs[i]->pages.size());
  }
  std::vector<int32_t> positions, seq, len, slots, table(seqs.size() * width, -1);
  PagedStep step;
  for (size_t i = 0; i < seqs.size(); ++i) {
    PagedSequence& s = *seqs[i];
    std::copy(s.pages.begin(), s.pages.end(), table.begin() + static_cast<std::ptrdiff_t>(i * width));
    for (int64_t j = s.length; j < s.length + new_tokens[i]; ++j) {
      positions.push_back(static_cast<int32_t>(j));
      seq.push_back(static_cast<int32_t>(i));
      len.push_back(static_cast<int32_t>(j + 1));
      slots.push_back(static_cast<int32_t>(s.pages[static_cast<size_t>(j / page_size_)] * page_size_ + j % page_size_));
    }
    step.last.push_back(static_cast<int64_t>(positions.size()) - 1);
    s.length += new_tokens[i];
  }
  const auto T = static_cast<int64_t>(positions.size());
  step.positions = Tensor::from_ints(positions, {T}).to(device_);
  step.seq = Tensor::from_ints(seq, {T}).to(device_);
  step.seq_len = Tensor::from_ints(len, {T}).to(device_);
  step.slots = Tensor::from_ints(slots, {T}).to(device_);
  step.block_table = Tensor::from_ints(table, {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width)}).to(device_);
  return step;
}

}  // namespace qkv::nn
