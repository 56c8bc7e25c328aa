#include "qkv/train/data_parallel.h"

#include <chrono>
#include <cstring>

#include "qkv/core/error.h"

namespace qkv::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GradientReducer::GradientReducer(std::vector<Tensor> params, distributed::Communicator& comm, int64_t bucket_bytes,
                                 Mode mode)
    : params_(std::move(params)), comm_(comm), mode_(mode) {
  QKV_CHECK(bucket_bytes > 0, "GradientReducer: bucket size must be positive, got ", bucket_bytes);
  const size_t n = params_.size();
  for (size_t k = 0; k < n; ++k)
    QKV_CHECK(params_[k].dtype() == DType::f32 && params_[k].is_contiguous() && params_[k].requires_grad(),
              "GradientReducer: parameter ", k, " must be a dense f32 tensor that requires grad");
  // Until a backward pass has shown the order: reverse registration order, roughly backward's.
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = n - 1 - k;
  build_buckets(order, bucket_bytes);
  bucket_bytes_ = bucket_bytes;
  if (mode_ == Mode::overlap)
    for (size_t k = 0; k < n; ++k)
      hook_.push_back(params_[k].register_post_accumulate_grad_hook([this, k] {
        if (!sync_) return;
        if (!rebuilt_) seen_order_.push_back(k);
        hand_over(k);
      }));
  thread_ = std::thread([this] { run(); });
}

// Buckets of about bucket_bytes, filled with the parameters in `order`.
void GradientReducer::build_buckets(const std::vector<size_t>& order, int64_t bucket_bytes) {
  const size_t n = params_.size();
  buckets_.clear(), bytes_ = 0;
  bucket_of_.assign(n, 0), slot_of_.assign(n, 0), handed_.assign(n, 0);
  for (size_t k : order) {
    const Tensor& p = params_[k];
    const int64_t b = p.numel() * static_cast<int64_t>(sizeof(float));
    if (buckets_.empty() || (!buckets_.back().params.empty() &&
                             static_cast<int64_t>(buckets_.back().buf.size() * sizeof(float)) + b > bucket_bytes))
      buckets_.emplace_back();
    Bucket& bk = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1, slot_of_[k] = bk.params.size();
    bk.params.push_back(k);
    bk.offset.push_back(static_cast<int64_t>(bk.buf.size()));
    bk.buf.resize(bk.buf.size() + static_cast<size_t>(p.numel()));
  }
  for (Bucket& bk : buckets_) {
    bk.buf.resize(bk.buf.size() + bk.params.size());  // the flags
    bytes_ += static_cast<int64_t>(bk.buf.size() * sizeof(float));
  }
}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (size_t k = 0; k < hook_.size(); ++k) params_[k].remove_post_accumulate_grad_hook(hook_[k]);
}

// The gradient (or zeros and flag 0 where this rank has none) into its slot of the bucket.
void GradientReducer::hand_over(size_t k) {
  if (handed_[k]) return;
  handed_[k] = 1;
  Bucket& b = buckets_[bucket_of_[k]];
  const size_t slot = slot_of_[k];
  float* dst = b.buf.data() + b.offset[slot];
  const Tensor g = params_[k].grad();
  const auto n = static_cast<size_t>(params_[k].numel());
  if (g.defined()) std::memcpy(dst, g.contiguous().data(), n * sizeof(float));
  else std::memset(dst, 0, n * sizeof(float));
  b.flag(slot) = g.defined() ? 1.f : 0.f;
  if (++b.handed == static_cast<int>(b.params.size())) mark_ready(b);
}

void GradientReducer::mark_ready(Bucket& b) {
  {
    std::lock_guard lock(mu_);
    b.ready = true;
  }
  cv_.notify_all();
}

// The reducer thread: sums bucket 0, 1, … in order as each becomes ready.
void GradientReducer::run() {
  for (;;) {
    size_t k = 0;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || (next_ < buckets_.size() && buckets_[next_].ready); });
      if (stop_) return;
      k = next_;
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
      comm_.all_reduce_sum(buckets_[k].buf.data(), static_cast<int64_t>(buckets_[k].buf.size()), &computing_);
    } catch (...) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      comm_s_ += seconds_since(t0);
      ++next_;
    }
    cv_.notify_all();
  }
}

void GradientReducer::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  computing_ = false;  // backward is over: the reducer may spin
  for (size_t k = params_.size(); k-- > 0;) hand_over(k);  // what the backward pass did not reach
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return next_ == buckets_.size(); });
  }
  wait_s_ = seconds_since(t0);
  // Write the sums back: into the .grad itself when nobody else sees its storage (as reverse mode
  // accumulates), into a fresh tensor otherwise (add's backward can hand one tensor to two leaves).
  for (Bucket& b : buckets_) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      Tensor& p = params_[b.params[slot]];
      handed_[b.params[slot]] = 0;
      if (b.flag(slot) == 0.f) continue;  // no rank had a gradient
      Tensor g = p.grad();
      if (!g.defined() || g.impl_ptr()->storage.use_count() != 1 || !g.is_contiguous()) {
        g = Tensor::empty(p.shape());
        p.set_grad(g);
      }
      std::memcpy(g.data(), b.buf.data() + b.offset[slot], static_cast<size_t>(p.numel()) * sizeof(float));
    }
    b.handed = 0, b.ready = false;
  }
  std::exception_ptr err;
  {
    std::lock_guard lock(mu_);
    next_ = 0;
    err = error_;
    error_ = nullptr;
    last_comm_s_ = comm_s_;  // this step's; the next one counts from zero
    comm_s_ = 0;
  }
  sync_ = false;
  if (err) std::rethrow_exception(err);
  // After the first synced pass, as DDP: the buckets again, in the order the gradients actually
  // came (the registration order can be far from it — a shared embedding, a decoder registered
  // before its encoder — and the reducer sends bucket k only after bucket k − 1). Rank 0's order,
  // so that every rank's buckets are the same.
  if (mode_ == Mode::overlap && !rebuilt_) {
    rebuilt_ = true;
    const size_t n = params_.size();
    std::vector<char> seen(n, 0);
    std::vector<int64_t> order;
    for (size_t k : seen_order_)
      if (!seen[k]) seen[k] = 1, order.push_back(static_cast<int64_t>(k));
    for (size_t k = n; k-- > 0;)
      if (!seen[k]) order.push_back(static_cast<int64_t>(k));  // not reached: last
    comm_.broadcast(order.data(), static_cast<int64_t>(order.size() * sizeof(int64_t)), 0);
    seen_order_.clear();
    std::vector<size_t> o(order.begin(), order.end());
    for (size_t k : o) QKV_CHECK(k < n, "GradientReducer: rank 0 sent a parameter order of another model");
    std::lock_guard lock(mu_);  // the reducer thread reads buckets_ when it wakes
    build_buckets(o, bucket_bytes_);
  }
}

void broadcast_parameters(const std::vector<Tensor>& params, distributed::Communicator& comm, int root) {
  for (const Tensor& p : params) {
    QKV_CHECK(p.dtype() == DType::f32 && p.is_contiguous(), "broadcast_parameters: a parameter is not dense f32");
    comm.broadcast(const_cast<float*>(p.data()), p.numel() * static_cast<int64_t>(sizeof(float)), root);
  }
}

}  // namespace qkv::train
