#include "qkv/decode/generate.h"

#include <algorithm>
#include <optional>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/ops.h"

namespace qkv::decode {

namespace {

// ids[from …] as [1, n] on the model's device
Tensor ids_tensor(const std::vector<int32_t>& ids, size_t from, Device device) {
  std::vector<int32_t> v(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
  return Tensor::from_ints(v, {1, static_cast<int64_t>(v.size())}).to(device);
}

}  // namespace

Device model_device(const models::LanguageModel& model) {
  const std::vector<Tensor> params = model.module().parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

std::vector<int32_t> generate(const models::LanguageModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token) {
  NoGradGuard no_grad;
  QKV_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  const auto block = static_cast<size_t>(model.block_size());
  for (int32_t id : prompt)
    QKV_CHECK(id >= 0 && id < model.vocab_size(), "generate: token id ", id, " outside the vocabulary of ",
              model.vocab_size());
  Sampler sampler(opt.sampling, prompt);
  const Device device = model_device(model);
  std::vector<int32_t> context = prompt, out;
  // The model sees context[window …]: the last block_size tokens of the prompt at first; when the
  // window would exceed block_size it restarts at the last block_size/2 tokens. Both modes use the
  // same windows, so they choose the same tokens.
  size_t window = context.size() > block ? context.size() - block : 0;
  std::unique_ptr<models::DecoderState> cache = model.start_decoding();
  // (longrope: a cache made for a sequence of at most `refeed` tokens is fed again once it grows past,
  // as Hugging Face's Phi-3 generate() does)
  const auto refeed = static_cast<size_t>(model.refeed_at());
  std::optional<ThreadBudget> threads;  // free cores, asked again every 16 tokens (core/thread_budget.h)
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    if (n % 16 == 0) threads.reset(), threads.emplace();
    if (context.size() - window > block) {
      window = context.size() - std::max<size_t>(1, block / 2);
      cache = model.start_decoding();
    }
    const auto seen = static_cast<size_t>(cache->length());
    if (refeed > 0 && seen > 0 && seen <= refeed && context.size() - window > refeed) cache = model.start_decoding();
    Tensor logits;
    if (opt.use_cache) {  // feed what the cache has not seen yet
      logits = model.step(ids_tensor(context, window + static_cast<size_t>(cache->length()), device), *cache);
    } else {  // recompute the whole window
      Tensor all = model.forward(ids_tensor(context, window, device));
      logits = all.select(1, all.size(1) - 1);
    }
    const auto next = static_cast<int32_t>(sampler.next(logits));  // drawn on the model's device: one number back
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) break;
    out.push_back(next);
    context.push_back(next);
    if (on_token && !on_token(next)) break;
  }
  return out;
}

}  // namespace qkv::decode
