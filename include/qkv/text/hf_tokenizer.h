// The tokenizers of Hugging Face model folders, equal to the `tokenizers` package (tokenizer.json):
// byte-level BPE (GPT-2, Llama 3, Qwen2: the pre-tokenizer regex, merges by rank, ignore_merges),
// BPE with byte fallback (Llama 2: Prepend/Replace "▁", <0xXX> pieces, fuse_unk), WordPiece (BERT:
// BertNormalizer, BertPreTokenizer, "##", [UNK]) and Unigram (XLM-RoBERTa, T5: SentencePiece's
// Precompiled charsmap, Metaspace, Viterbi over the pieces' scores), with added and special tokens (matched before
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
// What it reads (anything else is a qkv::Error naming the file, the field and the kinds it knows;
// so is every malformed field, an id outside [0, 2^31) or far past the vocabulary's size, a merge of
// tokens not in the vocabulary, a regex that does not compile, an unknown top-level field):
//   model           BPE (byte_fallback, fuse_unk, ignore_merges, continuing_subword_prefix,
//                   end_of_word_suffix, unk_token; dropout only null or 0), WordPiece, Unigram
//                   (unk_id, byte_fallback) — not WordLevel
//   normalizer      BertNormalizer, Lowercase, NFC, NFD, NFKC, NFKD, StripAccents, Strip, Replace,
//                   Prepend, Precompiled (SentencePiece's charsmap; grapheme clusters as utf8proc's
//                   Unicode 15 draws them), Sequence
//   pre_tokenizer   ByteLevel, Split (string or regex; Removed, Isolated, MergedWithPrevious,
//                   MergedWithNext, Contiguous; invert), BertPreTokenizer, Whitespace, WhitespaceSplit,
//                   Digits, Metaspace, Sequence — not Punctuation, UnicodeScripts, CharDelimiterSplit
//   post_processor  TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence
//   decoder         ByteLevel, WordPiece, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence —
//                   not BPEDecoder, CTC
// The "truncation" and "padding" fields are read past, not applied: encode() returns the whole
// sequence unpadded, as `tokenizers` does after no_truncation() and no_padding(); transformers'
// clean_up_tokenization_spaces is not applied by decode() (tokenizers' Tokenizer.decode is matched).
//
// Regexes run on PCRE2 (UTF + UCP), with Oniguruma's \s and \w (tokenizers' engine) spelled out;
// Unicode questions go to utf8proc. Characters assigned after Unicode 14 (PCRE2 10.42's tables) or
// 15 (utf8proc 2.8's) may be classed differently than `tokenizers`' own tables class them, and
// BERT's punctuation there follows Unicode 9 (U+2E4E is punctuation here, not there). On 20,000
// lines of random code points from all planes, the golden tokenizers differed from `tokenizers` on
// ≤ 1.2 % of lines (all at characters of newer Unicode versions); the Whitespace pre-tokenizer
// (\w+|[^\w\s]+, not in the golden corpus) on 12 %, not yet explained: treat it as unverified.
//
// A crafted tokenizer.json can neither hang nor exhaust memory on a text: its regexes stop after 1 s
// + 4 µs a byte of it by the clock and as long again of the thread's CPU time, and no form of the
// text passes 64 × its bytes + 64 KiB; either ends in a
// qkv::Error naming the file and the field (text/hf_components.h's Budget).
//
// Speed (one thread, a line at a time, the special tokens; `qkv bench tokenizer`, and
// bench/tokenizer_vs_hf.py beside `tokenizers` 0.23 on the same lines, the same ids; Zen 3, 2026-12-05,
// docs/BENCHMARKS.md): 2.3–4.8× `tokenizers`' encode called a line at a time from Python, 1.9–4.3× its
// two-thread encode_batch — 74k–176k lines/s on the golden corpus's scripts and emoji, 300k–530k on
// English sentences.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

// encode_pair's result: the ids and each one's token type (0: first sequence, 1: second, as the
// post-processor says). From the …_with_offsets and windows calls also, an entry per id, as
// `tokenizers`' Encoding has them (transformers' return_offsets_mapping, word_ids(), sequence_ids()):
//   offsets       the token's bytes [first, second) in the text it came from (made valid UTF-8 as
//                 encode makes it); (0, 0) for a special token the post-processor added
//   word_ids      the pre-tokenizer's piece it came from, counted in its text; -1: special
//   sequence_ids  0: the text, 1: the pair; -1: special
// Offsets are bytes; text::code_points (qkv/text/unicode.h) gives Python's character indices.
struct HfEncoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> token_type_ids;
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<int32_t> word_ids, sequence_ids;
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
  HfEncoding encode_with_offsets(std::string_view text, bool add_special_tokens = true) const;
  HfEncoding encode_pair_with_offsets(std::string_view text, std::string_view pair,
                                      bool add_special_tokens = true) const;
  // The pair cut into windows as transformers' tokenizer(text, pair, truncation="only_second",
  // max_length=N, stride=S, return_overflowing_tokens=True, return_offsets_mapping=True) cuts it (the
  // question-answering pipeline's): the pair's tokens in windows of the room the text and the special
  // tokens leave, each window `stride` tokens into the one before, with offsets; one window where
  // the pair fits. An error where the text leaves no room, or where a stride of the room or more
  // would have to be used.
  std::vector<HfEncoding> encode_pair_windows(std::string_view text, std::string_view pair, int64_t max_length,
                                              int64_t stride) const;
  // Words already split — a CoNLL sentence's — encoded as transformers' tokenizer(words,
  // is_split_into_words=True[, truncation=True, max_length=N]) encodes them: each word alone through
  // the normalizer, pre-tokenizer and model, word_ids its index (-1 at the special tokens), offsets
  // within its word; the words' tokens cut to fit max_length (< 0: not cut) with the special tokens.
  // A ByteLevel tokenizer without add_prefix_space (RoBERTa's, ModernBERT's) gives each word its
  // space, as the add_prefix_space=True transformers requires of it does.
  HfEncoding encode_words(const std::vector<std::string>& words, int64_t max_length = -1) const;
  // encode(text) cut to at most max_length ids as transformers' truncation=True, max_length=N cuts
  // one sequence: the text's tokens shortened, the special tokens kept.
  std::vector<int32_t> encode_truncated(std::string_view text, int64_t max_length) const;
  // A pair with the special tokens, cut to max_length tokens as transformers' truncation=True
  // ("longest_first") cuts it: the longer sequence first, down to half the room each; or
  // "only_first" (the zero-shot pipeline's): the text alone, and neither where cutting the text
  // cannot make the pair fit (transformers' retry without truncation).
  enum class Truncation { longest_first, only_first };
  HfEncoding encode_pair_truncated(std::string_view text, std::string_view pair, int64_t max_length,
                                   Truncation truncation = Truncation::longest_first) const;
  // Ids the tokenizer does not know are left out, as `tokenizers` does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // Token strings (a vocabulary's spellings, or any text) through the decoder: transformers'
  // convert_tokens_to_string.
  std::string convert_tokens_to_string(std::vector<std::string> tokens) const;

  // -1 / "" where there is none.
  int32_t token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;
  // The size an embedding needs: one past the largest id of the model's vocabulary and the added
  // tokens.
  int64_t vocab_size() const;
  bool is_special(int32_t id) const;
  // The model's continuing_subword_prefix (WordPiece's "##", a BPE's where it has one; "" where none:
  // Unigram, most BPEs) — what tells the pipelines a word's later tokens.
  std::string continuing_subword_prefix() const;

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
  // Whether transformers' tokenizer hands the model token_type_ids (its model_input_names):
  // tokenizer_config.json's "model_input_names", else its "tokenizer_class"'s (BERT's family, DeBERTa's:
  // yes; RoBERTa's, XLM-R's, MPNet's, DistilBERT's, a plain PreTrainedTokenizerFast / TokenizersBackend:
  // no); nullopt where the config names neither (transformers then picks the class by the model's type).
  std::optional<bool> returns_token_type_ids() const;
  // tokenizer_config.json's "model_max_length" (the longest input the model was trained on), read
  // once at load; nullopt where it gives none, or "none" (transformers' 1e30).
  std::optional<int64_t> model_max_length() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::text
