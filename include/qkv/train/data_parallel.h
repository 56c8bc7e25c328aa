// Data parallelism over the communicator seam (distributed/communicator.h), as PyTorch's
// DistributedDataParallel: every rank holds the whole model and runs forward and backward on its
// shard of the global batch; the gradients are summed over the ranks in buckets *while the
// backward pass is still running*; every rank then takes the same optimizer step.
//
//   parameters (registration order)   p₀ p₁ … p₉
//   buckets (reverse order, ~4 MB)    [p₉ p₈ p₇] [p₆ p₅ p₄] [p₃ … p₀]
//   backward produces p₉ first → bucket 0 is summed over the network while p₆ … p₀'s gradients
//   are still being computed; the reducer thread sums bucket k only after bucket k − 1, so every
//   rank issues its collectives in the same order. After the first step the buckets are rebuilt
//   in the order the gradients actually became ready (rank 0's), as DDP does.
//
// What is summed: each rank's loss is its share of the global batch's loss (a shard's mean loss
// times its fraction of the batch's rows or tokens — TrainingTask::set_data_shard), so the sum of
// the ranks' gradients is the gradient of one process on the whole batch. With equal shards that
// sum is DDP's average.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "qkv/distributed/communicator.h"
#include "qkv/ops/tensor.h"

namespace qkv::train {

class GradientReducer {
 public:
  enum class Mode {
    overlap,         // buckets go out as backward fills them (the default)
    after_backward,  // everything goes out after backward (for measuring what overlap hides)
  };
  // `params`: the model's parameters in registration order; buckets of about bucket_bytes each.
  GradientReducer(std::vector<Tensor> params, distributed::Communicator& comm, int64_t bucket_bytes = 4 << 20,
                  Mode mode = Mode::overlap);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Whether the next backward pass sums its gradients over the ranks: on for a step's last
  // micro-batch, off for the others (gradient accumulation, as DDP's no_sync()).
  void sync_next_backward(bool on) {
    sync_ = on;
    computing_ = on;  // until finish()
  }
  // After the synced backward: hands over the gradients the pass did not reach (unused
  // parameters: zeros, flagged, so a parameter no rank reached keeps no gradient), waits for
  // every bucket and writes the sums into .grad.
  void finish();

  int64_t gradient_bytes() const { return bytes_; }  // summed per step (f32 gradients + flags)
  int buckets() const { return static_cast<int>(buckets_.size()); }
  // The last step's seconds in collectives (reducer thread) and waiting for them after backward.
  double last_comm_seconds() const { return last_comm_s_; }
  double last_wait_seconds() const { return wait_s_; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // where each one's gradient starts in buf
    std::vector<float> buf;       // the gradients, then one flag per parameter (1: this rank has one)
    float& flag(size_t slot) { return buf[buf.size() - params.size() + slot]; }
    int handed = 0;               // parameters copied in so far
    bool ready = false;           // all handed over: the reducer thread may send it
  };
  void build_buckets(const std::vector<size_t>& order, int64_t bucket_bytes);
  void hand_over(size_t param);   // copies a gradient into its bucket (main thread)
  void mark_ready(Bucket& b);
  void run();                     // the reducer thread

  std::vector<Tensor> params_;
  distributed::Communicator& comm_;
  Mode mode_;
  std::vector<int> hook_;         // hook handles, removed by the destructor
  std::vector<size_t> bucket_of_, slot_of_;
  std::vector<char> handed_;      // per parameter, in this step
  std::vector<Bucket> buckets_;
  int64_t bytes_ = 0, bucket_bytes_ = 0;
  bool sync_ = false;
  bool rebuilt_ = false;            // buckets rebuilt in the order of the first synced pass
  std::vector<size_t> seen_order_;  // that order, as the hooks ran
  std::atomic<bool> computing_{false};  // backward still running: the reducer waits without spinning

  std::mutex mu_;
  std::condition_variable cv_;
  size_t next_ = 0;               // the bucket the thread sums next
  bool stop_ = false;
  std::exception_ptr error_;
  double comm_s_ = 0, last_comm_s_ = 0, wait_s_ = 0;
  std::thread thread_;
};

// Every rank's parameters ← root's (the initial weights of a data-parallel run).
void broadcast_parameters(const std::vector<Tensor>& params, distributed::Communicator& comm, int root = 0);

}  // namespace qkv::train
