// Checked arithmetic for sizes that come from input (a config's batch_size × block_size, a file's
// counts): a product that wraps allocates a small buffer for a large job, and the copy into it runs
// off its end (issue 43: batch_size 2^62 × block_size 256 wrapped to 0 bytes). A size derived from
// input is computed with these, never with a bare `*` or `+`.
#pragma once

#include <cstdint>

#include "qkv/core/error.h"

namespace qkv {

// a · b, or a qkv::Error "<what>: a × b is more than 2^63" (what names the input: the config keys).
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  QKV_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " × ", b, " is more than 2^63");
  return r;
}

// a + b, or a qkv::Error naming `what`.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  QKV_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " is more than 2^63");
  return r;
}

}  // namespace qkv
