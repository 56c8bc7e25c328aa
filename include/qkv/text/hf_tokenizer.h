// The tokenizers of Hugging Face model folders, equal to the `tokenizers` package (tokenizer.json):
// byte-level BPE (GPT-2, Llama 3, Qwen2: the pre-tokenizer regex, merges by rank, ignore_merges),
// BPE with byte fallback (Llama 2: Prepend/Replace "▁", <0xXX> pieces, fuse_unk) and WordPiece (BERT:
// BertNormalizer, BertPreTokenizer, "##", [UNK]), with added and special tokens (matched before
// pre-tokenization, with their special/normalized/lstrip/rstrip/single_word flags), the
// post-processor's special tokens and token types, and the decoder.
//
//   auto tok = qkv::text::HfTokenizer::from_folder("gpt2/");
//   std::vector<int32_t> ids = tok.encode("Hello world", /*add_special_tokens=*/true);
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);
//
// Invalid UTF-8 input is not an error: each maximal invalid stretch becomes one U+FFFD first, as
// Python's bytes.decode("utf-8", errors="replace") makes it before `tokenizers` sees a str.
//
// A component qkv does not implement (a normalizer, pre-tokenizer, model, post-processor or decoder
// type; BPE dropout) is a qkv::Error naming it and its field; so is every malformed field. The
// "truncation" and "padding" fields are read past, not applied: encode() returns the whole
// sequence unpadded, as `tokenizers` does after no_truncation() and no_padding().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

// encode_pair's result: the ids and each one's token type (0: first sequence, 1: second, as the
// post-processor says).
struct HfEncoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> token_type_ids;
};

class HfTokenizer {
 public:
  // A model folder: its tokenizer.json (and tokenizer_config.json for the special tokens' names),
  // or, where there is no tokenizer.json, BERT's vocab.txt with tokenizer_config.json
  // (do_lower_case, strip_accents, tokenize_chinese_chars and the special tokens), built as
  // transformers' BertTokenizerFast builds it.
  static HfTokenizer from_folder(const std::string& dir);
  // The text of a tokenizer.json (as stored inside a model file), and optionally that of
  // tokenizer_config.json; `what` names the source in errors.
  static HfTokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {},
                               const std::string& what = "tokenizer.json");

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  HfEncoding encode_pair(std::string_view text, std::string_view pair, bool add_special_tokens = true) const;
  // Ids the tokenizer does not know are left out, as `tokenizers` does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // -1 / "" where there is none.
  int32_t token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;
  // The size an embedding needs: one past the largest id of the model's vocabulary and the added
  // tokens.
  int64_t vocab_size() const;
  bool is_special(int32_t id) const;

  // The special tokens' ids, -1 where the tokenizer has none: named by tokenizer_config.json
  // (bos_token, …); without it, unk is the model's unk_token and the others the added special
  // tokens of the usual names (<s>, </s>, <|endoftext|>, <|begin_of_text|>, [CLS], [SEP], …).
  int32_t bos_token_id() const;
  int32_t eos_token_id() const;
  int32_t pad_token_id() const;
  int32_t unk_token_id() const;
  int32_t cls_token_id() const;
  int32_t sep_token_id() const;
  int32_t mask_token_id() const;

  // What it was loaded from (for a model file): tokenizer.json's text (built from vocab.txt where
  // that was all there was) and tokenizer_config.json's ("" where none).
  const std::string& tokenizer_json() const;
  const std::string& tokenizer_config_json() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::text
