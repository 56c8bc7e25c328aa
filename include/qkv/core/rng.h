// Generator: a seeded, counter-based random number generator (Philox-style keyed hash of a
// 64-bit counter). Every draw is a pure function of (seed, counter), so results do not depend on
// the number of threads: a kernel reserves a block of counters, then each element i uses
// counter base + i independently.
#pragma once

#include <cstdint>

#include "qkv/core/error.h"
#include "qkv/core/host_device.h"

namespace qkv {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    counter_ = 0;
  }
  // Reserves n consecutive counters and returns the first.
  //
  // Sharded (data-parallel training): this process holds rows [row_begin, row_begin + rows) of a
  // batch of total_rows, and every draw is of a batch-major tensor (dropout's masks), so its n
  // counters are its rows' slice of the whole batch's n · total_rows / rows: it gets the slice's
  // first counter, and the stream moves past the whole batch. Each row then sees the very numbers
  // it would in one process — and every process's counter stays the same.
  uint64_t reserve(uint64_t n) {
    if (shard_rows_ == 0) {
      uint64_t base = counter_;
      counter_ += n;
      return base;
    }
    const uint64_t per_row = n / shard_rows_;
    QKV_CHECK(per_row * shard_rows_ == n, "Generator: a sharded draw of ", n, " numbers is not ", shard_rows_,
              " equal rows (data-parallel dropout draws batch-major tensors)");
    const uint64_t base = counter_ + shard_begin_ * per_row;
    counter_ += per_row * shard_total_;
    return base;
  }
  void set_shard(uint64_t row_begin, uint64_t rows, uint64_t total_rows) {
    shard_begin_ = row_begin, shard_rows_ = rows, shard_total_ = total_rows;
  }
  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t c) { counter_ = c; }
  // While a training step is recorded for replay (train/step_graph.h): a word in the memory of the
  // device the draws run on, which every kernel drawing from a counter this generator reserved adds
  // to it when it runs (kernels/dropout_mask.h's offset). Null (the default): none.
  void set_counter_offset(const uint64_t* word) { counter_offset_ = word; }
  const uint64_t* counter_offset() const { return counter_offset_; }

  // The hash's constants, shared with the vectorized dropout mask (kernels/cpu/vec.h), which must
  // draw exactly these bits.
  static constexpr uint64_t kCounterMul = 0x9E3779B97F4A7C15ull, kSeedMul = 0xD1B54A32D192ED03ull,
                            kOffset = 0x2545F4914F6CDD1Dull, kMix1 = 0xBF58476D1CE4E5B9ull,
                            kMix2 = 0x94D049BB133111EBull;

  // 64 random bits for (seed, counter): splitmix64 finalizer over a keyed counter.
  QKV_HOST_DEVICE static uint64_t bits(uint64_t seed, uint64_t counter) {
    uint64_t z = counter * kCounterMul + seed * kSeedMul + kOffset;
    z = (z ^ (z >> 30)) * kMix1;
    z = (z ^ (z >> 27)) * kMix2;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 bits of precision.
  QKV_HOST_DEVICE static float uniform(uint64_t seed, uint64_t counter) {
    return static_cast<float>(bits(seed, counter) >> 40) * (1.0f / 16777216.0f);
  }
  // Uniform in [0, 1) with 24 bits, two draws per hash: counters 2k and 2k+1 take bits 40–63 and
  // 8–31 of h = bits(seed, k). Dropout's decisions use it (half the hashing of uniform()).
  QKV_HOST_DEVICE static float paired_draw(uint64_t h, bool odd) {
    const uint64_t u = odd ? (h >> 8) & 0xFFFFFF : h >> 40;
    return static_cast<float>(u) * (1.0f / 16777216.0f);
  }
  QKV_HOST_DEVICE static float paired_uniform(uint64_t seed, uint64_t counter) {
    return paired_draw(bits(seed, counter >> 1), counter & 1);
  }
  // paired_uniform(seed, 2k) and paired_uniform(seed, 2k + 1), from their one hash.
  QKV_HOST_DEVICE static void paired_uniforms(uint64_t seed, uint64_t k, float& u0, float& u1) {
    const uint64_t h = bits(seed, k);
    u0 = paired_draw(h, false), u1 = paired_draw(h, true);
  }
  // Standard normal by Box–Muller on two uniforms drawn from one counter.
  static float normal(uint64_t seed, uint64_t counter);

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
  uint64_t shard_begin_ = 0, shard_rows_ = 0, shard_total_ = 0;  // rows 0: not sharded
  const uint64_t* counter_offset_ = nullptr;
};

// The process-wide default generator (torch.manual_seed's counterpart).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace qkv
