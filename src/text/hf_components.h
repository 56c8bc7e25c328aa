// The stages of a Hugging Face tokenizer (tokenizer.json), as `tokenizers` runs them:
//
//   added tokens matched → normalizer → added tokens matched again on the normalized text
//     → pre-tokenizer (splits) → model (BPE, WordPiece, Unigram: ids) → post-processor (special tokens)
//   ids → tokens → decoder → text
//
// Each stage's kinds live in their own file (hf_normalizers.cpp, precompiled_charsmap.cpp,
// hf_pre_tokenizers.cpp, bpe.cpp, wordpiece.cpp, unigram.cpp, hf_decoders.cpp) and are built from
// their JSON here. Offsets are not kept: qkv wants ids and text. Private to text/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace qkv::text::hf {

using nlohmann::json;

// Where a JSON value came from, for errors: "tokenizer.json: model.vocab: expected an object".
struct Field {
  const std::string& file;
  std::string path;
  Field at(std::string_view key) const { return {file, path.empty() ? std::string(key) : path + "." + std::string(key)}; }
  Field at(size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& why) const;
};
// j[key] of an object, which must be there.
const json& need(const json& j, std::string_view key, const Field& f);
// j[key] when present and not null, else nullptr.
const json* find(const json& j, std::string_view key);
std::string need_string(const json& j, std::string_view key, const Field& f);
bool get_bool(const json& j, std::string_view key, bool fallback, const Field& f);
int64_t get_int(const json& j, std::string_view key, int64_t fallback, int64_t lo, int64_t hi, const Field& f);
std::string as_string(const json& j, const Field& f);
// The "type" of a component; refused kinds are named: "pre_tokenizer: type \"Punctuation\" is not supported".
std::string type_of(const json& j, const Field& f);

// A stretch of the text on its way through: a token already (an added token: id ≥ 0) or text still
// to split (id < 0). `at_start`: it begins the input (Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  int32_t id = -1;
  bool at_start = false;
};
using Pieces = std::vector<Piece>;

// What one text may cost on its way through the stages (hf_budget.cpp), so that no tokenizer.json —
// a crafted one included — exhausts memory or hangs on it:
//   bytes: any form of the text (a stage's output, the pieces together) ≤ kGrowth × its bytes +
//          kSlack — Replace stages in a Sequence multiply a text by their contents' lengths, ByteLevel
//          pre-tokenizers in one double its non-ASCII bytes;
//   time:  its regexes stop matching kSeconds + kSecondsPerByte × its bytes after it set out, once the
//          thread has also spent as long again of its own CPU time matching (a busy machine's waits
//          never stop a real tokenizer) — PCRE2 backtracks, and a pattern such as "a*a*b|." costs a
//          long word's length squared a match.
// Real tokenizers are far inside both: NFKC makes at most 18 characters of one, Replace "▁" for " "
// three bytes of one; GPT-2's and Llama 3's patterns take ~0.07 µs a byte. Past either bound: a
// qkv::Error naming the stage's field.
class Budget {
 public:
  static constexpr size_t kGrowth = 64, kSlack = 64 << 10;
  static constexpr double kSeconds = 1.0, kSecondsPerByte = 4e-6;

  explicit Budget(size_t text_bytes);
  size_t text_bytes() const { return text_bytes_; }
  size_t max_bytes() const { return max_bytes_; }
  // `where`: "tokenizer.json: normalizer.normalizers[1]", the stage that made `bytes` of the text
  void check_bytes(size_t bytes, const std::string& where) const;
  void check_time(const std::string& where) const;

 private:
  size_t text_bytes_, max_bytes_;
  std::chrono::steady_clock::time_point deadline_;
  mutable double cpu_mark_ = -1;  // the thread's CPU seconds when the deadline was first seen passed
};
size_t bytes_of(const Pieces& pieces);  // the pieces' texts together

// Patterns the pre-tokenizers and Replace stages split on: a literal string or a PCRE2 regex
// (UTF + UCP: \p{L}, \s as Unicode has them; lookahead).
class Pattern {
 public:
  Pattern(const json& j, const Field& f);  // {"String": "…"} or {"Regex": "…"}
  static Pattern regex(const std::string& re, const Field& f);
  ~Pattern();
  Pattern(Pattern&&) noexcept;
  Pattern& operator=(Pattern&&) noexcept;
  // Every match [start, end) of s, in order, non-overlapping (s valid UTF-8); empty matches skipped.
  // A regex checks the budget's time after every match.
  std::vector<std::pair<size_t, size_t>> matches(std::string_view s, const Budget& budget) const;
  // s with every match replaced by `content`, within the budget's bytes.
  std::string replace(std::string_view s, const std::string& content, const Budget& budget) const;

 private:
  Pattern() = default;
  std::string literal_;
  void* code_ = nullptr;  // pcre2_code_8 (literal_ when null)
  std::string where_;     // "tokenizer.json: pre_tokenizer.pattern.Regex", for errors
};

// Each stage below keeps to the budget of the text it is given (Budget, above).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string s, const Budget& budget) const = 0;
};
std::unique_ptr<Normalizer> make_normalizer(const json& j, const Field& f);
std::unique_ptr<Normalizer> make_precompiled(const json& j, const Field& f);  // precompiled_charsmap.cpp

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece that is not a token yet; empty pieces are dropped.
  virtual void pre_tokenize(Pieces& pieces, const Budget& budget) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const Field& f);

// The vocabulary of a model: token ↔ id (ids < 2^31, dense enough to index: at most twice the
// entries plus 1024).
struct Vocab {
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> tokens;  // by id ("" where none)
  int32_t find(std::string_view t) const {
    auto it = ids.find(std::string(t));
    return it == ids.end() ? -1 : it->second;
  }
};
Vocab read_vocab(const json& j, const Field& f);  // {"token": id, …}

class Model {
 public:
  virtual ~Model() = default;
  // The ids of one pre-tokenized piece, appended.
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;
  const Vocab& vocab() const { return vocab_; }
  std::string unk_token;

 protected:
  Vocab vocab_;
};
std::unique_ptr<Model> make_bpe(const json& j, const Field& f);        // bpe.cpp
std::unique_ptr<Model> make_wordpiece(const json& j, const Field& f);  // wordpiece.cpp
std::unique_ptr<Model> make_unigram(const json& j, const Field& f);    // unigram.cpp

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget& budget) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const json& j, const Field& f);

// GPT-2's bytes_to_unicode: each byte a printable character ('!'…'~', '¡'…'¬', '®'…'ÿ' as
// themselves, the other 68 from U+0100 up), as UTF-8; and back (-1: not a byte's character).
const std::vector<std::string>& byte_to_unicode();
int byte_of(char32_t c);

}  // namespace qkv::text::hf

namespace qkv::text::hf {

// One sequence on its way through the post-processor: ids and their token types.
struct Encoded {
  std::vector<int32_t> ids, type_ids;
};

// Post-processors: the special tokens around a sequence or a pair (TemplateProcessing,
// BertProcessing; ByteLevel's, which only trims offsets, leaves ids alone). `seqs` holds one or
// two sequences; the result is concatenated by the caller.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<Encoded> process(std::vector<Encoded> seqs, bool add_special_tokens) const = 0;
};
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const Field& f);

}  // namespace qkv::text::hf
