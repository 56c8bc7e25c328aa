#include "qkv/decode/batching_generator.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "qkv/autograd/grad_mode.h"
#include "qkv/ops.h"

namespace qkv::decode {

// A lock and a condition a caller waits on for its requests' tokens (a request's own, or shared by
// the requests of one generate_interleaved).
struct BatchingGenerator::Channel {
  std::mutex m;
  std::condition_variable cv;
};

// One request: its context as decode::generate keeps it (the model sees context[window …]), its
// sequence in the pool, and the channel its tokens go to its caller by.
struct BatchingGenerator::Request {
  GenerateOptions opt;
  Sampler sampler;
  std::vector<int32_t> context;
  size_t window = 0;
  int64_t produced = 0;
  nn::PagedSequence seq;
  bool shares = false;  // publishes its pages and matched earlier ones (its window never restarts)
  bool long_rope = false;  // longrope: its window is fed on the long factors (past the model's refeed_at())
  std::chrono::steady_clock::time_point admit_by;
  // the channel: the caller reads while the worker writes, under the channel's lock (its own, or one
  // that the requests of one generate_interleaved share, so that their caller waits for any of them)
  std::shared_ptr<Channel> ch;
  std::deque<int32_t> out;
  bool done = false;
  std::exception_ptr error;
  std::atomic<bool> cancelled{false};

  Request(const std::vector<int32_t>& prompt, const GenerateOptions& o, std::shared_ptr<Channel> c)
      : opt(o), sampler(o.sampling, prompt), context(prompt), ch(c ? std::move(c) : std::make_shared<Channel>()) {}
  // tokens of the window the cache has not seen: the prompt (or the restarted window) while
  // prefilling, then the one token last chosen
  int64_t pending() const { return static_cast<int64_t>(context.size() - window) - seq.length; }
};

namespace {

// The pool's pages: the tokens asked for, or max_batch full contexts within max_cache_bytes.
int64_t pool_pages(const models::LanguageModel& m, const BatchingGeneratorOptions& o, Device d) {
  QKV_CHECK(o.max_batch >= 1 && o.max_step_tokens >= 1 && o.page_size >= 1 && o.cache_tokens >= 0 && o.max_cache_bytes >= 1,
            "BatchingGenerator: max_batch ", o.max_batch, ", max_step_tokens ", o.max_step_tokens, ", page_size ",
            o.page_size, " must be ≥ 1, cache_tokens ", o.cache_tokens, " ≥ 0");
  int64_t tokens = o.cache_tokens;
  if (tokens == 0) {
    const int64_t per_token = m.make_paged_cache(1, o.page_size, d, o.kv_cache_dtype).bytes_per_token();
    tokens = std::min(o.max_batch * m.block_size(), std::max<int64_t>(o.page_size, o.max_cache_bytes / per_token));
  }
  return (tokens + o.page_size - 1) / o.page_size;
}

}  // namespace

BatchingGenerator::BatchingGenerator(const models::LanguageModel& model, BatchingGeneratorOptions options, Around around)
    : model_(model),
      opt_(options),
      around_(std::move(around)),
      cache_(model.make_paged_cache(pool_pages(model, options, model_device(model)), options.page_size, model_device(model),
                                    options.kv_cache_dtype)) {
  using G = BatchingGeneratorOptions::DecodeGraphs;
  const Device d = cache_.device();
  if (opt_.decode_graphs == G::on || (opt_.decode_graphs == G::automatic && decode_graphs_wanted(d)))
    graphs_ = std::make_unique<PagedDecodeGraphs>(
        model_, cache_, opt_.max_batch, d.is_cpu() ? PagedDecodeGraphs::Mode::emulated : PagedDecodeGraphs::Mode::graph);
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

std::shared_ptr<BatchingGenerator::Request> BatchingGenerator::submit(const std::vector<int32_t>& prompt,
                                                                       const GenerateOptions& opt,
                                                                       std::chrono::duration<double> admit_within,
                                                                       std::shared_ptr<Channel> ch) {
  auto r = std::make_shared<Request>(prompt, opt, std::move(ch));
  const auto block = static_cast<size_t>(model_.block_size());
  r->window = r->context.size() > block ? r->context.size() - block : 0;
  r->admit_by = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::min<std::chrono::duration<double>>(admit_within, std::chrono::hours(24 * 365)));
  if (opt.max_new_tokens <= 0) {
    r->done = true;
    return r;
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(r);
  }
  cv_.notify_all();
  return r;
}

void BatchingGenerator::cancel(Request& r) {
  r.cancelled = true;  // the worker drops it at its next step
  cv_.notify_all();
}

std::vector<int32_t> BatchingGenerator::collect(Request& r, const std::function<bool(int32_t)>& on_token) {
  std::vector<int32_t> tokens;
  for (;;) {
    std::deque<int32_t> got;
    bool done;
    {
      std::unique_lock lock(r.ch->m);
      r.ch->cv.wait(lock, [&] { return r.done || !r.out.empty(); });
      got.swap(r.out);
      done = r.done;
    }
    for (int32_t id : got) {
      tokens.push_back(id);
      bool more = true;
      try {
        more = !on_token || on_token(id);
      } catch (...) {  // (the caller's failure ends its request too)
        cancel(r);
        throw;
      }
      if (!more) {
        cancel(r);
        return tokens;
      }
    }
    if (done) {
      if (r.error) std::rethrow_exception(r.error);
      return tokens;
    }
  }
}

void BatchingGenerator::check_prompt(const std::vector<int32_t>& prompt, const std::string& where) const {
  QKV_CHECK(!prompt.empty(), where, "the prompt is empty (give at least one token)");
  for (int32_t id : prompt)
    QKV_CHECK(id >= 0 && id < model_.vocab_size(), where, "token id ", id, " outside the vocabulary of ", model_.vocab_size());
}

void BatchingGenerator::check_prompts(const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<GenerateOptions>& opts, const char* what) const {
  QKV_CHECK(prompts.size() == opts.size(), what, ": ", prompts.size(), " prompts and ", opts.size(), " options");
  for (size_t i = 0; i < prompts.size(); ++i)  // (every prompt checked before any runs)
    check_prompt(prompts[i], detail::concat(what, ": prompt ", i, ": "));
}

std::vector<int32_t> BatchingGenerator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                                 const std::function<bool(int32_t)>& on_token,
                                                 std::chrono::duration<double> admit_within) {
  check_prompt(prompt, "generate: ");
  return collect(*submit(prompt, opt, admit_within), on_token);
}

std::vector<std::vector<int32_t>> BatchingGenerator::generate_all(const std::vector<std::vector<int32_t>>& prompts,
                                                                  const std::vector<GenerateOptions>& opts,
                                                                  const std::function<bool(size_t, int32_t)>& on_token,
                                                                  std::chrono::duration<double> admit_within) {
  check_prompts(prompts, opts, "generate_all");
  // submitted ahead of the one collected: two batches' worth — the batch stays full while the memory
  // held by waiting requests (their contexts, their tokens kept) stays bounded however many are asked
  const size_t ahead = static_cast<size_t>(2 * opt_.max_batch);
  std::deque<std::shared_ptr<Request>> requests;
  std::vector<std::vector<int32_t>> out;
  try {
    size_t submitted = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (; submitted < prompts.size() && submitted < i + ahead; ++submitted)
        requests.push_back(submit(prompts[submitted], opts[submitted], admit_within));
      out.push_back(collect(*requests.front(), [&](int32_t id) { return !on_token || on_token(i, id); }));
      requests.pop_front();
    }
  } catch (...) {
    for (auto& r : requests) cancel(*r);  // (those already ended ignore it)
    throw;
  }
  return out;
}

std::vector<std::vector<int32_t>> BatchingGenerator::generate_interleaved(
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<GenerateOptions>& opts,
    const std::function<bool(size_t, int32_t)>& on_token, const std::function<void(size_t)>& on_end,
    std::chrono::duration<double> admit_within) {
  check_prompts(prompts, opts, "generate_interleaved");
  // one channel for all: this thread waits for news from any of them; at most two batches' worth
  // submitted and not ended (as generate_all), the next submitted as one ends
  const auto ch = std::make_shared<Channel>();
  const size_t ahead = static_cast<size_t>(2 * opt_.max_batch);
  std::vector<std::shared_ptr<Request>> live(prompts.size());  // submitted, not yet ended
  std::vector<size_t> active;                                  // their indices
  std::vector<char> dropped(prompts.size(), 0);                // its caller said stop: later tokens unread
  std::vector<std::vector<int32_t>> out(prompts.size());
  size_t submitted = 0;
  try {
    while (submitted < prompts.size() || !active.empty()) {
      for (; submitted < prompts.size() && active.size() < ahead; ++submitted) {
        live[submitted] = submit(prompts[submitted], opts[submitted], admit_within, ch);
        active.push_back(submitted);
      }
      // what the steps made since the last look, and which requests have ended
      std::vector<std::pair<size_t, std::deque<int32_t>>> got;
      std::vector<size_t> done;
      {
        std::unique_lock lock(ch->m);
        ch->cv.wait(lock, [&] {
          return std::any_of(active.begin(), active.end(), [&](size_t i) { return live[i]->done || !live[i]->out.empty(); });
        });
        for (size_t i : active) {
          if (!live[i]->out.empty()) got.emplace_back(i, std::exchange(live[i]->out, {}));
          if (live[i]->done) done.push_back(i);
        }
      }
      for (auto& [i, ids] : got)
        for (int32_t id : ids) {
          if (dropped[i]) break;
          out[i].push_back(id);
          if (on_token && !on_token(i, id)) dropped[i] = 1, cancel(*live[i]);
        }
      for (size_t i : done) {
        const std::exception_ptr error = live[i]->error;
        live[i].reset();
        std::erase(active, i);
        if (error) std::rethrow_exception(error);
        if (on_end) on_end(i);
      }
    }
  } catch (...) {
    for (auto& r : live)
      if (r) cancel(*r);  // (those already ended ignore it)
    throw;
  }
  return out;
}

// The pages for every token the request can hold: its window now plus what it may still generate,
// at most block_size (the window restarts below it) — the first ones, with prefix caching, those
// holding the longest run of its prompt's full pages already in the cache.
bool BatchingGenerator::admit(Request& r) {
  const auto tokens = static_cast<int64_t>(r.context.size() - r.window);
  const int64_t need = std::min<int64_t>(model_.block_size(), tokens + r.opt.max_new_tokens);
  if (cache_.pages_for(need) > cache_.pages())
    throw Error(detail::concat("generate: the request needs ", need, " tokens of KV cache; the pool holds ",
                               cache_.pages() * cache_.page_size(), " (give the server a larger cache)"));
  // (a window that restarts rewrites its pages from position 0: such a request keeps its pages to itself)
  r.shares = would_share(r);
  r.seq.publishing = r.shares;
  if (r.shares) cache_.match_prefix(r.seq, r.context.data() + r.window, tokens, r.opt.cache_salt);
  if (!cache_.reserve(r.seq, need)) {
    cache_.release(r.seq);
    return false;
  }
  prompt_tokens_ += tokens, prefix_hit_tokens_ += r.seq.length;
  return true;
}

bool BatchingGenerator::would_share(const Request& r) const {
  // (nor one that may run past a longrope model's short factors: fed again with the long ones there)
  const int64_t most = static_cast<int64_t>(r.context.size() - r.window) + r.opt.max_new_tokens;
  return opt_.prefix_caching && most <= model_.block_size() && (model_.refeed_at() == 0 || most <= model_.refeed_at());
}

// Whether r should wait for a running request that is still feeding its prompt and whose first page
// r's prompt begins with (SGLang's in-batch prefix sharing): that prompt's pages are published once it
// is fed, a step or a few later, and r then computes only what follows them — the samples of one
// prompt, or clients sending one system prompt at once, compute it once, not once each.
bool BatchingGenerator::follows_prefill(const Request& r, const std::vector<std::shared_ptr<Request>>& running) const {
  const auto ps = static_cast<size_t>(cache_.page_size());
  if (!would_share(r) || r.context.size() - r.window <= ps) return false;
  const auto first = r.context.begin() + static_cast<std::ptrdiff_t>(r.window);
  for (const auto& q : running)
    if (q->shares && q->produced == 0 && q->seq.publishing && q->opt.cache_salt == r.opt.cache_salt &&
        q->context.size() - q->window > ps &&
        std::equal(first, first + static_cast<std::ptrdiff_t>(ps), q->context.begin() + static_cast<std::ptrdiff_t>(q->window)))
      return true;
  return false;
}

void BatchingGenerator::finish(Request& r, std::exception_ptr error) {
  cache_.release(r.seq);
  {
    std::lock_guard lock(r.ch->m);
    r.done = true;
    r.error = error;
  }
  r.ch->cv.notify_all();
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
            in = static_cast<int64_t>(running.size()) < opt_.max_batch && !follows_prefill(r, running) && admit(r);
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
      running_count_ = running.size();
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
      running_count_ = 0;
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
  const auto refeed = static_cast<size_t>(model_.refeed_at());
  for (auto& r : running) {  // a window past block_size restarts at its last block_size/2 tokens (generate's rule)
    if (r->context.size() - r->window > block) {
      r->window = r->context.size() - std::max<size_t>(1, block / 2);
      r->seq.length = 0;  // (its pages stay: the new window is shorter)
      r->long_rope = false;
    }
    // longrope: a window grown past the short factors is fed again from position 0 on the long ones
    // (generate's rule); one that begins past them is fed on the long ones from the start
    if (refeed > 0 && !r->long_rope && r->context.size() - r->window > refeed) {
      r->seq.length = 0;
      r->long_rope = true;
    }
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
  // what comes back to the host: each sequence's token, drawn on the logits' device for its Sampler
  // (ops' sample_rows: Sampler's token — temperature, top-k, top-p —, n numbers rather than n · V)
  static const bool on_device = [] {
    const char* e = std::getenv("QKV_DEVICE_SAMPLING");  // "0": every logit to the host, for the Samplers (to compare)
    return !(e && std::string_view(e) == "0");
  }();
  std::vector<float> logits;
  std::vector<int32_t> drawn;
  try {
    std::function<void()> work;
    nn::PagedStep plan;
    Tensor x;
    auto read = [&](const Tensor& out) {  // out [n, V] on the cache's device
      if (!on_device) {
        logits = out.to(Device::cpu()).to_vector();
        return;
      }
      std::vector<RowSampling> rows;
      for (Request* r : in)  // (a prompt chunk's row chooses nothing: greedy, no draw)
        rows.push_back(r->pending() == 0 ? r->sampler.row() : RowSampling{});
      drawn = sample_rows(out, rows).to(Device::cpu()).to_ints();
    };
    if (graphs_ && graphs_->takes(count)) {  // decoding tokens only: a bucket's graph
      std::vector<uint8_t> long_rope;        // (longrope: each sequence past its short factors or not)
      if (refeed > 0)
        for (const Request* r : in) long_rope.push_back(r->long_rope ? 1 : 0);
      work = [&, long_rope] {
        read(graphs_->step(seqs, ids, long_rope));
        graph_steps_ = graphs_->replayed(), graphs_captured_ = graphs_->captured();
      };
    } else {
      plan = cache_.plan(seqs, count);
      if (refeed > 0)  // (longrope: each token's sequence past its short factors or not)
        for (size_t i = 0; i < in.size(); ++i)
          plan.long_rope.insert(plan.long_rope.end(), static_cast<size_t>(count[i]), in[i]->long_rope ? 1 : 0);
      x = Tensor::from_ints(ids, {static_cast<int64_t>(ids.size())}).to(cache_.device());
      work = [&] { read(model_.step_paged(x, plan, cache_)); };
    }
    if (around_) around_(work);
    else work();
  } catch (...) {  // every sequence of the step ends with the error (none is left half-fed)
    const std::exception_ptr e = std::current_exception();
    for (Request* r : in) finish(*r, e);
    std::erase_if(running, [&](const std::shared_ptr<Request>& r) { return r->done; });
    return;
  }
  ++steps_, step_sequences_ += static_cast<int64_t>(in.size());
  for (Request* r : in)  // the pages this step filled, findable by later requests
    if (r->shares) cache_.publish(r->seq, r->context.data() + r->window, r->opt.cache_salt);
  const auto V = static_cast<size_t>(model_.vocab_size());
  for (size_t i = 0; i < in.size(); ++i) {
    Request& r = *in[i];
    if (r.pending() > 0) continue;  // a prompt chunk: its logits are not the next token's
    int32_t next;
    try {  // (a row the sampler refuses — NaN logits, infinities after the temperature — ends its request alone)
      QKV_CHECK(!on_device || drawn[i] >= 0, "generate: the logits hold no distribution (a NaN, or infinities after the temperature ",
                r.opt.sampling.temperature, ")");
      if (on_device) r.sampler.accept(next = drawn[i]);  // (the penalties' history; next() accepts its own)
      else
        next = static_cast<int32_t>(r.sampler.next(std::vector<float>(
            logits.begin() + static_cast<std::ptrdiff_t>(i * V), logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * V))));
    } catch (...) {
      finish(r, std::current_exception());
      continue;
    }
    const bool stop = std::find(r.opt.stop_ids.begin(), r.opt.stop_ids.end(), next) != r.opt.stop_ids.end();
    if (!stop) {
      r.context.push_back(next), ++r.produced;
      {
        std::lock_guard lock(r.ch->m);
        r.out.push_back(next);
      }
      r.ch->cv.notify_all();
    }
    if (stop || r.produced >= r.opt.max_new_tokens) finish(r);
  }
  std::erase_if(running, [&](const std::shared_ptr<Request>& r) { return r->done; });
}

}  // namespace qkv::decode
