// The IDX reader (vision/idx.h) on arbitrary bytes, plain and gzip: an array or a qkv::Error, with
// memory bounded by the header's sizes and a 64 MiB cap.
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/vision/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = qkv::fuzz::as_file(data, size, "images.idx");
  try {
    qkv::vision::read_idx(path, uint64_t{64} << 20);
  } catch (const qkv::Error&) {
  }
  return 0;
}
