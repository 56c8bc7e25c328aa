#include "qkv/decode/batching_generator.h"

#include <algorithm>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops.h"

namespace qkv::decode {

// One request: its context as decode::generate keeps it (the model sees context[window …]), its
// sequence in the pool, and the channel its tokens go to its caller by.
struct BatchingGenerator::Request {
  GenerateOptions opt;
  Sampler sampler;
  std::vector<int32_t> context;
  size_t window = 0;
  int64_t produced = 0;
  nn::PagedSequence seq;
  std::chrono::steady_clock::time_point admit_by;
  // the channel (its own lock: the caller reads while the worker writes)
  std::mutex m;
  std::condition_variable cv;
  std::deque<int32_t> out;
  bool done = false;
  std::exception_ptr error;
  std::atomic<bool> cancelled{false};

  Request(const std::vector<int32_t>& prompt, const GenerateOptions& o) : opt(o), sampler(o.sampling), context(prompt) {}
  // tokens of the window the cache has not seen: the prompt (or the restarted window) while
  // prefilling, then the one token last chosen
  int64_t pending() const { return static_cast<int64_t>(context.size() - window) - seq.length; }
};

namespace {

Device device_of(const models::LanguageModel& m) {
  const std::vector<Tensor> params = const_cast<models::LanguageModel&>(m).module().parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

// The pool's pages: the tokens asked for, or max_batch full contexts within max_cache_bytes.
int64_t pool_pages(const models::LanguageModel& m, const BatchingGeneratorOptions& o, Device d) {
  QKV_CHECK(o.max_batch >= 1 && o.max_step_tokens >= 1 && o.page_size >= 1 && o.cache_tokens >= 0 && o.max_cache_bytes >= 1,
            "BatchingGenerator: max_batch ", o.max_batch, ", max_step_tokens ", o.max_step_tokens, ", page_size ",
            o.page_size, " must be ≥ 1, cache_tokens ", o.cache_tokens, " ≥ 0");
  int64_t tokens = o.cache_tokens;
  if (tokens == 0) {
    const int64_t per_token = m.make_paged_cache(1, o.page_size, d).bytes_per_token();
    tokens = std::min(o.max_batch * m.block_size(), std::max<int64_t>(o.page_size, o.max_cache_bytes / per_token));
  }
  return (tokens + o.page_size - 1) / o.page_size;
}

}  // namespace

BatchingGenerator::BatchingGenerator(const models::LanguageModel& model, BatchingGeneratorOptions options, Around around)
    : model_(model),
      opt_(options),
      around_(std::move(around)),
      cache_(model.make_paged_cache(pool_pages(model, options, device_of(model)), options.page_size, device_of(model))) {
  worker_ = std::thread([this] { run(); });
}

BatchingGenerator::~BatchingGenerator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

size_t BatchingGenerator::queued() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

size_t BatchingGenerator::running() const {
  std::lock_guard lock(mu_);
  return running_.size();
}

std::vector<int32_t> BatchingGenerator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                                 const std::function<bool(int32_t)>& on_token,
                                                 std::chrono::duration<double> admit_within) {
  QKV_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token)");
  for (int32_t id : prompt)
    QKV_CHECK(id >= 0 && id < model_.vocab_size(), "generate: token id ", id, " outside the vocabulary of ",
              model_.vocab_size());
  auto r = std::make_shared<Request>(prompt, opt);
  const auto block = static_cast<size_t>(model_.block_size());
  r->window = r->context.size() > block ? r->context.size() - block : 0;
  r->admit_by = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::min<std::chrono::duration<double>>(admit_within, std::chrono::hours(24 * 365)));
  std::vector<int32_t> tokens;
  if (opt.max_new_tokens <= 0) return tokens;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(r);
  }
  cv_.notify_all();
  for (;;) {
    std::deque<int32_t> got;
    bool done;
    {
      std::unique_lock lock(r->m);
      r->cv.wait(lock, [&] { return r->done || !r->out.empty(); });
      got.swap(r->out);
      done = r->done;
    }
    for (int32_t id : got) {
      tokens.push_back(id);
      bool more = true;
      try {
        more = !on_token || on_token(id);
      } catch (...) {  // (the caller's failure ends its request too)
        more = false;
        r->cancelled = true;
        cv_.notify_all();
        throw;
      }
      if (!more) {  // the caller is done: the worker drops it at its next step
        r->cancelled = true;
        cv_.notify_all();
        return tokens;
      }
    }
    if (done) {
      if (r->error) std::rethrow_exception(r->error);
      return tokens;
    }
  }
}

// The pages for every token the request can hold: its window now plus what it may still generate,
// at most block_size (the window restarts below it).
bool BatchingGenerator::admit(Request& r) {
  const int64_t need = std::min<int64_t>(model_.block_size(), static_cast<int64_t>(r.context.size() - r.window) + r.opt.max_new_tokens);
  if (cache_.pages_for(need) > cache_.pages())
    throw Error(detail::concat("generate: the request needs ", need, " tokens of KV cache; the pool holds ",
                               cache_.pages() * cache_.page_size(), " (give the server a larger cache)"));
  return cache_.reserve(r.seq, need);
}

void BatchingGenerator::finish(Request& r, std::exception_ptr error) {
  cache_.release(r.seq);
  {
    std::lock_guard lock(r.m);
    r.done = true;
    r.error = error;
  }
  r.cv.notify_all();
}

void BatchingGenerator::run() {
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Request>> running;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !running.empty(); });
      if (stop_ && queue_.empty() && running.empty()) return;
      // first come, first admitted: the oldest waits for room rather than be passed by smaller ones
      const auto now = std::chrono::steady_clock::now();
      while (!queue_.empty()) {
        Request& r = *queue_.front();
        if (r.cancelled) {
          finish(r);
        } else if (now > r.admit_by) {
          finish(r, std::make_exception_ptr(GeneratorBusy("generate: no room in the batch or the KV cache in time")));
        } else {
          bool in = false;
          try {
            in = static_cast<int64_t>(running.size()) < opt_.max_batch && admit(r);
          } catch (...) {
            finish(r, std::current_exception());
            queue_.pop_front();
            continue;
          }
          if (!in) break;
          running.push_back(queue_.front());
        }
        queue_.pop_front();
      }
      running_ = running;
    }
    // a caller that stopped reading leaves now
    std::erase_if(running, [&](const std::shared_ptr<Request>& r) {
      if (!r->cancelled) return false;
      finish(*r);
      return true;
    });
    if (running.empty()) {
      // (nothing admitted: wait for a request to end or arrive, or a deadline to pass)
      std::unique_lock lock(mu_);
      running_.clear();
      if (!queue_.empty()) cv_.wait_for(lock, std::chrono::milliseconds(10));
      continue;
    }
    step(running);
  }
}

// One step: every decoding sequence's token, then prompt chunks within max_step_tokens; the logits of
// each sequence whose window the cache now holds choose its next token.
void BatchingGenerator::step(std::vector<std::shared_ptr<Request>>& running) {
  const auto block = static_cast<size_t>(model_.block_size());
  for (auto& r : running)  // a window past block_size restarts at its last block_size/2 tokens (generate's rule)
    if (r->context.size() - r->window > block) {
      r->window = r->context.size() - std::max<size_t>(1, block / 2);
      r->seq.length = 0;  // (its pages stay: the new window is shorter)
    }
  std::vector<Request*> in;
  std::vector<int64_t> count;
  int64_t budget = opt_.max_step_tokens;
  for (int pass = 0; pass < 2; ++pass)  // decoding tokens first: a long prompt does not hold them up
    for (auto& r : running) {
      const int64_t p = r->pending();
      if ((p == 1) != (pass == 0)) continue;
      const int64_t n = pass == 0 ? 1 : std::min(p, budget);
      if (n <= 0) continue;
      in.push_back(r.get()), count.push_back(n), budget -= n;
    }
  std::vector<nn::PagedSequence*> seqs;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < in.size(); ++i) {
    seqs.push_back(&in[i]->seq);
    const auto from = in[i]->context.begin() + static_cast<std::ptrdiff_t>(in[i]->window) + in[i]->seq.length;
    ids.insert(ids.end(), from, from + count[i]);
  }
  std::vector<float> logits;
  try {
    const nn::PagedStep plan = cache_.plan(seqs, count);
    const Tensor x = Tensor::from_ints(ids, {static_cast<int64_t>(ids.size())}).to(cache_.device());
    auto work = [&] { logits = model_.step_paged(x, plan, cache_).to(Device::cpu()).to_vector(); };
    if (around_) around_(work);
    else work();
  } catch (...) {  // every sequence of the step ends with the error (none is left half-fed)
    const std::exception_ptr e = std::current_exception();
    for (Request* r : in) finish(*r, e);
    std::erase_if(running, [&](const std::shared_ptr<Request>& r) { return r->done; });
    return;
  }
  ++steps_, step_sequences_ += static_cast<int64_t>(in.size());
  const auto V = static_cast<size_t>(model_.vocab_size());
  for (size_t i = 0; i < in.size(); ++i) {
    Request& r = *in[i];
    if (r.pending() > 0) continue;  // a prompt chunk: its logits are not the next token's
    const auto next = static_cast<int32_t>(r.sampler.next(std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(i * V),
                                                                             logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * V))));
    const bool stop = std::find(r.opt.stop_ids.begin(), r.opt.stop_ids.end(), next) != r.opt.stop_ids.end();
    if (!stop) {
      r.context.push_back(next), ++r.produced;
      {
        std::lock_guard lock(r.m);
        r.out.push_back(next);
      }
      r.cv.notify_all();
    }
    if (stop || r.produced >= r.opt.max_new_tokens) finish(r);
  }
  std::erase_if(running, [&](const std::shared_ptr<Request>& r) { return r->done; });
}

}  // namespace qkv::decode
