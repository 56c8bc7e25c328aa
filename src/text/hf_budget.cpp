// A text's budget on its way through a tokenizer's stages (hf_components.h's Budget): the bytes any
// form of it may grow to, and the time its regexes may take.
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "hf_components.h"
#include "qkv/core/error.h"

namespace qkv::text::hf {

// max_bytes = kGrowth · text + kSlack                  deadline = now + kSeconds + kSecondsPerByte · text
Budget::Budget(size_t text_bytes)
    : text_bytes_(text_bytes),
      max_bytes_(text_bytes > (SIZE_MAX - kSlack) / kGrowth ? SIZE_MAX : kGrowth * text_bytes + kSlack),
      deadline_(std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(kSeconds + kSecondsPerByte * static_cast<double>(text_bytes)))) {}

void Budget::check_bytes(size_t bytes, const std::string& where) const {
  if (bytes <= max_bytes_) return;
  throw Error(where + ": makes " + std::to_string(bytes) + " bytes of a text of " + std::to_string(text_bytes_) +
              " bytes, past the most a tokenizer's stages may make of it (" + std::to_string(kGrowth) +
              " × its bytes + " + std::to_string(kSlack >> 10) + " KiB = " + std::to_string(max_bytes_) + ")");
}

namespace {
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

// Past the deadline by the clock, the regexes go on until this thread has spent as long again of
// its own CPU time matching: a busy machine may keep a thread waiting past the deadline, and a real
// tokenizer must not stop for that. (The thread's CPU clock costs ~1 µs a read in a VM, 30 times
// the steady clock's: it is read only once the deadline has passed.)
void Budget::check_time(const std::string& where) const {
  if (std::chrono::steady_clock::now() <= deadline_) return;
  const double allowed = kSeconds + kSecondsPerByte * static_cast<double>(text_bytes_);
  const double cpu = thread_cpu_seconds();
  if (cpu_mark_ < 0) cpu_mark_ = cpu;
  if (cpu - cpu_mark_ < allowed) return;
  char seconds[96];
  std::snprintf(seconds, sizeof seconds, "%.2f s (%g s + %g µs a byte) by the clock and as long again of its own CPU",
                allowed, kSeconds, kSecondsPerByte * 1e6);
  throw Error(where + ": the regex has matched a text of " + std::to_string(text_bytes_) + " bytes for " + seconds +
              ", the most a tokenizer's regexes may take on it: a pattern that backtracks without bound");
}

size_t bytes_of(const Pieces& pieces) {
  size_t n = 0;
  for (const Piece& p : pieces) n += p.text.size();
  return n;
}

}  // namespace qkv::text::hf
