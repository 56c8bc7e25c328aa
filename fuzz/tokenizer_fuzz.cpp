// Hugging Face tokenizers on arbitrary bytes: a tokenizer.json (bytes that open with '{') or a BERT
// vocab.txt (anything else, through a folder holding it), then texts of several scripts encoded,
// alone and in pairs (with offsets too: every token's bytes inside its text, the ids the same), and
// their ids decoded; and the same bytes as a small tokenizer's
// tokenizer_config.json. Each ends in ids and text or a qkv::Error — never a
// crash, and never a hang or an allocation the text does not justify: a tokenizer's regexes and the
// stages that grow a text keep to the text's budget (text/hf_components.h's Budget).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/text/hf_tokenizer.h"

namespace {

// A folder of this process's own holding `vocab.txt` = the input (HfTokenizer::from_folder's BERT form).
std::string vocab_folder(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t && *t ? t : "/tmp") + "/qkv-fuzz-" + std::to_string(::getpid()) + "-vocab";
    ::mkdir(d.c_str(), 0700);
    return d;
  }();
  std::FILE* f = std::fopen((dir + "/vocab.txt").c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using qkv::text::HfTokenizer;
  const std::vector<std::string>& texts = qkv::fuzz::sample_texts();
  try {
    const HfTokenizer tok = size > 0 && data[0] == '{'
                                ? HfTokenizer::from_json(std::string_view(reinterpret_cast<const char*>(data), size),
                                                         "", "fuzz/tokenizer.json")
                                : HfTokenizer::from_folder(vocab_folder(data, size));
    for (const std::string& t : texts) {
      try {
        const std::vector<int32_t> ids = tok.encode(t);
        tok.decode(ids, false);
        tok.decode(ids, true);
        // the offsets: one per id, each inside the text (made valid UTF-8: at most 3 bytes a byte)
        const qkv::text::HfEncoding e = tok.encode_with_offsets(t);
        if (e.ids != ids || e.offsets.size() != ids.size() || e.word_ids.size() != ids.size()) std::abort();
        for (const auto& [b, end] : e.offsets)
          if (b > 3 * t.size() || end > 3 * t.size()) std::abort();
      } catch (const qkv::Error&) {
      }
    }
    try {
      tok.encode_pair(texts[0], texts[2]);
      tok.encode_pair_windows(texts[0], texts[2], 24, 4);
    } catch (const qkv::Error&) {
    }
    const auto n = static_cast<int32_t>(std::min<int64_t>(tok.vocab_size(), INT32_MAX));
    for (int32_t id : {0, 1, n - 1, n, -1}) tok.id_to_token(id);
  } catch (const qkv::Error&) {
  }
  // The same bytes as the tokenizer_config.json beside a small tokenizer.json (its special tokens'
  // names, or a BERT vocab.txt's casing and tokens).
  static const std::string small = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3, "</s>": 4},
      "merges": ["a b"]}, "added_tokens": [{"id": 3, "content": "<s>", "special": true},
      {"id": 4, "content": "</s>", "special": true}]})";
  try {
    const HfTokenizer tok = HfTokenizer::from_json(
        small, std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    tok.decode(tok.encode(texts[3]), true);
  } catch (const qkv::Error&) {
  }
  return 0;
}
