// What the fuzz targets share: the input as a file (the readers under test take paths), written to
// one temporary path per process and target, overwritten at each execution.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace qkv::fuzz {

inline std::string as_file(const uint8_t* data, size_t size, const char* name) {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    return std::string(t && *t ? t : "/tmp");
  }();
  const std::string path = dir + "/qkv-fuzz-" + std::to_string(::getpid()) + "-" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Texts for the tokenizer targets to encode: several scripts and emoji, whitespace runs, added
// tokens' spellings, a long word and digits, invalid UTF-8.
inline const std::vector<std::string>& sample_texts() {
  static const std::vector<std::string> texts = {
      "Hello, world! It's 2026 — isn't it?",
      "  spaces\tand\nnewlines  ",
      "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 "
      "\xef\xbc\xa1\xd8\xb3\xd9\x84\xd8\xa7\xd9\x85",
      "<|endoftext|>[CLS] a [MASK] b [SEP]</s><s>",
      std::string(300, 'a') + " 12345678901234567890",
      "\xff\xfe broken \xc3",
  };
  return texts;
}

}  // namespace qkv::fuzz
