#include "qkv/nn/paged_kv_cache.h"

#include <algorithm>
#include <utility>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/ops.h"

namespace qkv::nn {

namespace {
// every name a KV cache's dtype goes by, once
constexpr std::pair<const char*, DType> kKvCacheDtypes[] = {
    {"f32", DType::f32}, {"bf16", DType::bf16}, {"fp8", DType::f8e4m3}, {"fp8_e4m3", DType::f8e4m3}, {"f8e4m3", DType::f8e4m3}};
}  // namespace

DType kv_cache_dtype(const std::string& name) {
  for (const auto& [n, t] : kKvCacheDtypes)
    if (name == n) return t;
  throw Error("a KV cache keeps f32, bf16 or fp8 (e4m3; also fp8_e4m3, f8e4m3), not \"" + name + "\"");
}

std::vector<std::string> kv_cache_dtype_names() {
  std::vector<std::string> names;
  for (const auto& entry : kKvCacheDtypes) names.emplace_back(entry.first);
  return names;
}

PagedKVCache::PagedKVCache(int64_t layers, int64_t pages, int64_t page_size, int64_t kv_heads, int64_t head_dim,
                           int64_t v_head_dim, Device device, DType dtype)
    : pages_(pages), page_size_(page_size), device_(device) {
  QKV_CHECK(layers >= 1 && pages >= 1 && page_size >= 1 && kv_heads >= 1 && head_dim >= 1 && v_head_dim >= 1,
            "PagedKVCache: layers ", layers, ", pages ", pages, ", page_size ", page_size, ", heads ", kv_heads,
            ", head dims ", head_dim, "/", v_head_dim, " must all be ≥ 1");
  QKV_CHECK(pages <= (int64_t{1} << 31) / page_size, "PagedKVCache: ", pages, " pages of ", page_size,
            " slots exceed the 2^31 slots an i32 slot index reaches");
  QKV_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f8e4m3,
            "PagedKVCache: keys and values are kept in f32, bf16 or f8e4m3, not ", dtype_name(dtype));
  for (int64_t l = 0; l < layers; ++l) {
    k_.push_back(Tensor::empty({pages, kv_heads, page_size, head_dim}, dtype, device));
    v_.push_back(Tensor::empty({pages, kv_heads, page_size, v_head_dim}, dtype, device));
  }
  for (int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));  // page 0 first
  info_.resize(static_cast<size_t>(pages));
}

int64_t PagedKVCache::bytes_per_token() const {
  int64_t b = 0;
  for (size_t l = 0; l < k_.size(); ++l)
    b += k_[l].size(1) * (k_[l].size(3) + v_[l].size(3)) * static_cast<int64_t>(dtype_size(k_[l].dtype()));
  return b;
}

int32_t PagedKVCache::take_page() {
  int32_t p;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {  // evict the least recently released cached page: it is found no more, nor are its children
    p = lru_.front();
    lru_.pop_front();
    PageInfo& e = info_[static_cast<size_t>(p)];
    cached_.erase(e.key);
    e.cached = false, e.tokens.clear(), e.salt.clear(), ++e.generation;
  }
  info_[static_cast<size_t>(p)].refs = 1;
  return p;
}

bool PagedKVCache::reserve(PagedSequence& s, int64_t tokens) {
  const int64_t need = pages_for(tokens) - static_cast<int64_t>(s.pages.size());
  if (need <= 0) return true;
  if (need > free_pages()) return false;
  for (int64_t i = 0; i < need; ++i) s.pages.push_back(take_page());
  return true;
}

void PagedKVCache::release(PagedSequence& s) {
  // the last pages first: a sequence's tail is the least likely to be matched, so the first evicted
  for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) {
    PageInfo& e = info_[static_cast<size_t>(*it)];
    if (--e.refs > 0) continue;
    if (e.cached) e.lru = lru_.insert(lru_.end(), *it);
    else free_.push_back(*it);
  }
  s = PagedSequence{};
}

// key = FNV-1a over (parent, parent_generation, salt, tokens) with a final mix; equal keys are then
// checked field by field, so the hash only has to spread, not to be unforgeable
uint64_t PagedKVCache::page_key(int32_t parent, uint32_t parent_generation, const std::string& salt, const int32_t* tokens,
                                int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 4; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ull;
  };
  mix(static_cast<uint32_t>(parent)), mix(parent_generation);
  for (unsigned char c : salt) h = (h ^ c) * 0x100000001b3ull;
  for (int64_t i = 0; i < n; ++i) mix(static_cast<uint32_t>(tokens[i]));
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
  return h;
}

int64_t PagedKVCache::match_prefix(PagedSequence& s, const int32_t* tokens, int64_t count, const std::string& salt) {
  QKV_CHECK(s.pages.empty() && s.length == 0, "PagedKVCache::match_prefix: the sequence already holds ",
            s.pages.size(), " pages");
  int32_t parent = -1;
  uint32_t parent_generation = 0;
  for (int64_t j = 0; (j + 1) * page_size_ <= count - 1; ++j) {
    const int32_t* page_tokens = tokens + j * page_size_;
    const std::string& page_salt = j == 0 ? salt : std::string();  // (a chain's first page holds its salt)
    const auto found = cached_.find(page_key(parent, parent_generation, page_salt, page_tokens, page_size_));
    if (found == cached_.end()) break;
    PageInfo& e = info_[static_cast<size_t>(found->second)];
    if (e.parent != parent || e.parent_generation != parent_generation || e.salt != page_salt ||
        !std::equal(e.tokens.begin(), e.tokens.end(), page_tokens))
      break;  // (a collision: another prefix's page)
    if (e.refs++ == 0) lru_.erase(e.lru);
    s.pages.push_back(found->second);
    parent = found->second, parent_generation = e.generation;
  }
  s.shared = static_cast<int64_t>(s.pages.size());
  s.length = s.shared * page_size_;
  return s.length;
}

void PagedKVCache::publish(PagedSequence& s, const int32_t* tokens, const std::string& salt) {
  for (; s.publishing && s.shared < s.length / page_size_; ++s.shared) {
    const auto j = static_cast<size_t>(s.shared);
    const int32_t parent = j == 0 ? -1 : s.pages[j - 1];
    const uint32_t parent_generation = j == 0 ? 0 : info_[static_cast<size_t>(parent)].generation;
    const int32_t* page_tokens = tokens + s.shared * page_size_;
    const std::string& page_salt = j == 0 ? salt : std::string();
    const uint64_t key = page_key(parent, parent_generation, page_salt, page_tokens, page_size_);
    PageInfo& e = info_[static_cast<size_t>(s.pages[j])];
    if (!cached_.emplace(key, s.pages[j]).second) {  // the same page (or a colliding one) is cached already
      s.publishing = false;
      return;
    }
    e.cached = true, e.key = key, e.parent = parent, e.parent_generation = parent_generation;
    e.tokens.assign(page_tokens, page_tokens + page_size_);
    e.salt = page_salt;
  }
}

PagedStep PagedKVCache::plan(const std::vector<PagedSequence*>& seqs, const std::vector<int64_t>& new_tokens,
                             int64_t dense_from) const {
  QKV_CHECK(seqs.size() == new_tokens.size() && !seqs.empty(), "PagedKVCache::plan: ", seqs.size(), " sequences and ",
            new_tokens.size(), " counts of new tokens");
  size_t width = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    QKV_CHECK(new_tokens[i] >= 1 && pages_for(seqs[i]->length + new_tokens[i]) <= static_cast<int64_t>(seqs[i]->pages.size()),
              "PagedKVCache::plan: sequence ", i, " of ", seqs[i]->length, " tokens holds ", seqs[i]->pages.size(),
              " pages, too few for ", new_tokens[i], " more (reserve them first)");
    width = std::max(width, seqs[i]->pages.size());
  }
  std::vector<int32_t> positions, seq, len, paged_len, slots, table(seqs.size() * width, -1);
  PagedStep step;
  for (size_t i = 0; i < seqs.size(); ++i) {
    PagedSequence& s = *seqs[i];
    std::copy(s.pages.begin(), s.pages.end(), table.begin() + static_cast<std::ptrdiff_t>(i * width));
    const bool fresh = s.length == 0 && new_tokens[i] >= 2;
    const bool continued = s.length > 0 && new_tokens[i] >= std::max<int64_t>(2, dense_from);
    if (fresh) step.fresh.emplace_back(static_cast<int64_t>(positions.size()), new_tokens[i]);
    if (continued)
      step.continued.push_back({static_cast<int64_t>(positions.size()), new_tokens[i], s.length,
                                std::vector<int64_t>(s.pages.begin(), s.pages.begin() + pages_for(s.length + new_tokens[i]))});
    for (int64_t j = s.length; j < s.length + new_tokens[i]; ++j) {
      positions.push_back(static_cast<int32_t>(j));
      seq.push_back(static_cast<int32_t>(i));
      len.push_back(static_cast<int32_t>(j + 1));
      paged_len.push_back(fresh || continued ? 0 : static_cast<int32_t>(j + 1));
      slots.push_back(static_cast<int32_t>(s.pages[static_cast<size_t>(j / page_size_)] * page_size_ + j % page_size_));
    }
    step.last.push_back(static_cast<int64_t>(positions.size()) - 1);
    s.length += new_tokens[i];
  }
  const auto T = static_cast<int64_t>(positions.size());
  step.positions = Tensor::from_ints(positions, {T}).to(device_);
  step.host_positions = std::move(positions);
  step.host_seq = Tensor::from_ints(seq, {T});
  step.host_paged_len = Tensor::from_ints(paged_len, {T});
  step.host_block_table = Tensor::from_ints(table, {static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width)});
  step.page_size = page_size_;
  step.seq = step.host_seq.to(device_);
  step.seq_len = Tensor::from_ints(len, {T}).to(device_);
  step.paged_len = step.fresh.empty() && step.continued.empty() ? step.seq_len : step.host_paged_len.to(device_);
  step.slots = Tensor::from_ints(slots, {T}).to(device_);
  step.block_table = step.host_block_table.to(device_);
  return step;
}

const PagedPrefixes* PagedStep::prefixes(int64_t window) const {
  if (!block_table.defined() || block_table.device().is_cpu() || !host_block_table.defined() || tokens() < 2)
    return nullptr;
  for (const auto& [w, p] : found)
    if (w == window) return p.empty() ? nullptr : &p;
  found.emplace_back(window, paged_prefixes(host_block_table, host_seq, host_paged_len, page_size, window, block_table.device()));
  return found.back().second.empty() ? nullptr : &found.back().second;
}

Tensor PagedStep::last_rows(const Tensor& x) const {
  bool every = static_cast<int64_t>(last.size()) == x.size(0);
  for (size_t i = 0; every && i < last.size(); ++i) every = last[i] == static_cast<int64_t>(i);
  return every ? x : index_select(x, 0, last);
}

// attn = paged_attention(q over the pages; fresh prompts skipped) with each fresh prompt's rows
// [b, b + n) replaced by sdpa(q, k, v of those rows, causal) — [1, H, n, D] against [1, Hkv, n, D]
Tensor attend_paged(const Tensor& q, const Tensor& k, const Tensor& v, PagedKVCache& cache, int64_t layer,
                    const PagedStep& step, int64_t window, std::optional<float> scale, float softcap) {
  NoGradGuard no_grad;
  paged_kv_write(cache.keys(layer), cache.values(layer), k, v, step.slots);
  Tensor out = paged_attention(q, cache.keys(layer), cache.values(layer), step.block_table, step.seq, step.paged_len,
                               scale, window, step.prefixes(window), softcap);  // [T, H, Dv]
  for (const auto& range : step.fresh) {
    const int64_t b = range.first, n = range.second;  // (not a structured binding: the lambda captures them)
    auto rows = [&](const Tensor& x) { return x.slice(0, b, b + n).transpose(0, 1).unsqueeze(0); };  // [1, heads, n, d]
    AttentionOptions opt;
    opt.enable_gqa = q.size(1) != k.size(1), opt.scale = scale, opt.softcap = softcap;
    if (window > 0 && n > window) opt.attn_mask = sliding_window_mask(n, n, window, 0, q.device());
    else opt.is_causal = true;
    out.slice(0, b, b + n).copy_(scaled_dot_product_attention(rows(q), rows(k), rows(v), opt).squeeze(0).transpose(0, 1));
  }
  // a continued chunk: its n queries at positions start … over the sequence's L = start + n keys,
  // gathered page by page — [pages, Hkv, page_size, D] → [1, Hkv, L, D] (f32: a bf16 cache's widened)
  // — causal from start
  for (const auto& c : step.continued) {
    const int64_t L = c.start + c.count;
    auto gather = [&](const Tensor& pool) {
      Tensor pages = index_select(pool, 0, c.pages);  // [m, Hkv, page_size, D]
      if (pages.dtype() != DType::f32) pages = pages.to(DType::f32);
      return pages.transpose(0, 1).reshape({1, pool.size(1), pages.size(0) * pool.size(2), pool.size(3)}).slice(2, 0, L);
    };
    AttentionOptions opt;
    opt.enable_gqa = q.size(1) != k.size(1), opt.scale = scale, opt.softcap = softcap;
    opt.attn_mask = window > 0 && L > window ? sliding_window_mask(c.count, L, window, c.start, q.device())
                                             : causal_mask(c.count, L, c.start, q.device());
    const Tensor rows = q.slice(0, c.begin, c.begin + c.count).transpose(0, 1).unsqueeze(0);  // [1, H, n, D]
    out.slice(0, c.begin, c.begin + c.count)
        .copy_(scaled_dot_product_attention(rows, gather(cache.keys(layer)), gather(cache.values(layer)), opt).squeeze(0).transpose(0, 1));
  }
  return out;
}

}  // namespace qkv::nn
