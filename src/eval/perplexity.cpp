#include "qkv/eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/ops.h"

namespace qkv::eval {

int64_t default_perplexity_block(const models::LanguageModel& model) {
  return std::min<int64_t>(model.block_size(), 1024);
}

int64_t perplexity_windows(int64_t n, int64_t block) {
  QKV_CHECK(block >= 1, "perplexity: a window of ", block, " tokens");
  return n < 2 ? 0 : (n - 1 + block - 1) / block;
}

Perplexity perplexity(const models::LanguageModel& model, const std::vector<int32_t>& ids, int64_t block,
                      const std::vector<int64_t>& windows, const std::function<void()>& on_window) {
  const auto n = static_cast<int64_t>(ids.size());
  QKV_CHECK(n >= 2, "perplexity: the text holds ", n, " token(s); perplexity needs at least 2");
  QKV_CHECK(block >= 0 && block <= model.block_size(), "perplexity: block_size must be between 1 and the model's ",
            model.block_size(), " (0: its context), got ", block);
  const int64_t T = block > 0 ? block : default_perplexity_block(model);
  const int64_t all = perplexity_windows(n, T);
  std::vector<int64_t> which = windows;
  if (which.empty())
    for (int64_t w = 0; w < all; ++w) which.push_back(w);
  NoGradGuard no_grad;
  Perplexity r;
  r.block = T;
  double nll = 0;  // Σ −log p over the scored tokens
  for (int64_t w : which) {
    QKV_CHECK(w >= 0 && w < all, "perplexity: window ", w, " of a text of ", all, " windows");
    const ThreadBudget threads;  // the cores free now, window by window (core/thread_budget.h)
    const int64_t start = w * T, len = std::min(T, n - 1 - start);
    // x [1, len] = ids[start …], y [1, len] = ids[start + 1 …]; loss: their mean cross-entropy
    const std::vector<int32_t> x(ids.begin() + start, ids.begin() + start + len),
        y(ids.begin() + start + 1, ids.begin() + start + 1 + len);
    nll += model.loss(Tensor::from_ints(x, {1, len}), Tensor::from_ints(y, {1, len})).item() * static_cast<double>(len);
    r.tokens += len;
    if (on_window) on_window();
  }
  r.loss = r.tokens ? nll / static_cast<double>(r.tokens) : 0;
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace qkv::eval
