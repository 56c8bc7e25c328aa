// The safetensors reader on arbitrary bytes: a qkv::Error or a file, nothing else (no crash, no
// read past the buffer, no allocation beyond what the file holds).
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = qkv::fuzz::as_file(data, size, "st.safetensors");
  try {
    qkv::io::load_safetensors(path);
    qkv::io::load_safetensors(path, /*keep_bf16=*/true);
  } catch (const qkv::Error&) {
  }
  return 0;
}
