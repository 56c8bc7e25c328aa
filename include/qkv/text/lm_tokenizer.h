// The tokenizer of a language model: characters (nanoGPT's shakespeare_char), SentencePiece
// subwords, or a converted model's Hugging Face tokenizer, behind one interface, stored in the model
// file's metadata.
//
//   {"type": "char", "chars": ["\n", " ", "!", …]}
//   {"type": "sentencepiece", "model_base64": "…"}
//   {"type": "hf", "tokenizer_json": "<tokenizer.json's text>", "tokenizer_config": {…},
//    "chat_template": "<chat_template.jinja's text>"}                                     (qkv convert)
//
// A Hugging Face tokenizer encodes with its special tokens (Llama 3's <|begin_of_text|> first), as
// transformers' tokenizer(prompt) does, and decodes them too (tokenizer.decode's default).
//
// Subword LMs see running text, not sentences, so their SentencePiece model is trained with
// identity normalization, no dummy prefix and no whitespace clean-up, and "\n" as a piece of its
// own: decode(encode(text)) == text for any text made of the training text's characters. The
// text is encoded line by line, with the "\n" piece between lines.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/text/char_tokenizer.h"
#include "qkv/text/chat_template.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/sentencepiece.h"

namespace qkv::text {

class LMTokenizer {
 public:
  LMTokenizer() = default;
  static LMTokenizer chars(std::string_view text);  // the characters of `text`
  static LMTokenizer sentencepiece(SentencePiece sp);
  // Trains the subword model described above on `text` (written to a temporary file beside
  // model_prefix and removed afterwards); the model is written to model_prefix + ".model".
  static LMTokenizer train_sentencepiece(std::string_view text, const std::string& model_prefix, int vocab_size,
                                         const std::string& model_type = "unigram");
  static LMTokenizer from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;

  std::string type() const { return hf_ ? "hf" : sp_ ? "sentencepiece" : "char"; }
  int64_t vocab_size() const;
  // Text the vocabulary cannot represent (a character outside it): an error naming it and where.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  // The text of one token, for streaming: printing decode_one of each token in turn prints
  // decode() of them all (pieces are whole characters and "▁" is a space; no piece is trimmed).
  std::string decode_one(int32_t id) const;
  const HfTokenizer* hf() const { return hf_.get(); }  // the Hugging Face tokenizer, or null
  // A converted model's chat template (null: none, or chat_template_error() says why it is unusable),
  // and the encoding of what it renders: without adding special tokens (the template writes them),
  // as apply_chat_template(tokenize=True) encodes.
  const ChatTemplate* chat_template() const { return chat_.get(); }
  const std::string& chat_template_error() const { return chat_error_; }
  std::vector<int32_t> encode_prompt(std::string_view text) const;
  // The chat template of a stored tokenizer (to_json's form) without building the tokenizer: what
  // chat_template() and chat_template_error() of from_json(j) would give.
  struct ChatTemplateFound {
    std::shared_ptr<const ChatTemplate> chat_template;
    std::string error;
  };
  static ChatTemplateFound find_chat_template(const nlohmann::json& j);

  // The tokenizer as Hugging Face's `tokenizers` writes one (src/text/lm_tokenizer_hf.cpp), for a
  // language model qkv trained going to a Hugging Face folder (models/hf_export.h): tokenizer.json and
  // tokenizer_config.json that encode every text this tokenizer encodes to the same ids, and decode ids
  // to the same text. Characters: a BPE vocabulary of the characters with no merges, no pre-tokenizer,
  // a Fuse decoder. qkv's SentencePiece models (identity normalization, no dummy prefix): the "\n" piece an
  // added token, spaces as "▁" by a Metaspace pre-tokenizer that splits before them, the Unigram
  // vocabulary with its scores (or BPE's, its merges ranked by the merged piece's id; char models:
  // none), <unk>/<s>/</s>/<pad> special tokens. A SentencePiece model trained otherwise (another
  // normalization, a dummy prefix, byte fallback, …) is refused by name; a converted model's tokenizer
  // is its own files.
  struct HfForm {
    nlohmann::json tokenizer_json, tokenizer_config;
    int32_t bos_id = -1, eos_id = -1, pad_id = -1;  // the special tokens' ids (-1: none)
  };
  HfForm to_hf(int64_t model_max_length) const;

 private:
  CharTokenizer chars_;
  std::shared_ptr<const SentencePiece> sp_;  // set: SentencePiece; unset: characters
  int32_t newline_id_ = -1;                  // the "\n" piece (SentencePiece only)
  std::shared_ptr<const HfTokenizer> hf_;    // set: a converted model's tokenizer
  nlohmann::json hf_json_;                   // … and how the model file stores it
  std::shared_ptr<const ChatTemplate> chat_;
  std::string chat_error_;
};

// Text as it is generated, token by token: push(id) returns the text that token adds, which a
// stream prints as it comes. For characters and qkv's SentencePiece models each token's own text;
// for a Hugging Face tokenizer (byte-level pieces may end inside a character, and decoders such as
// Strip look at neighbours) the whole sequence is decoded again and what is new is returned once
// its last character is complete — the concatenated pushes equal decode(all ids).
class TextStreamer {
 public:
  explicit TextStreamer(const LMTokenizer& tokenizer) : t_(tokenizer) {}
  std::string push(int32_t id);
  std::string flush();  // what is held back (an incomplete character at the very end)

 private:
  const LMTokenizer& t_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;  // bytes of decode(ids_) returned so far
};

}  // namespace qkv::text
