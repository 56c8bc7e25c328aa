// A text's budget on its way through a tokenizer's stages (hf_components.h's Budget): the bytes any
// form of it may grow to, and the time its regexes may take.
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

void Budget::check_time(const std::string& where) const {
  if (std::chrono::steady_clock::now() <= deadline_) return;
  char allowed[64];
  std::snprintf(allowed, sizeof allowed, "%.2f s (%g s + %g µs a byte)",
                kSeconds + kSecondsPerByte * double(text_bytes_), kSeconds, kSecondsPerByte * 1e6);
  throw Error(where + ": the regex is still matching a text of " + std::to_string(text_bytes_) + " bytes after " +
              allowed + ", the most a tokenizer's regexes may take on it: a pattern that backtracks without bound");
}

size_t bytes_of(const Pieces& pieces) {
  size_t n = 0;
  for (const Piece& p : pieces) n += p.text.size();
  return n;
}

}  // namespace qkv::text::hf
