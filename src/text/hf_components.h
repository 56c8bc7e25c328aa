// The stages of a Hugging Face tokenizer (tokenizer.json), as `tokenizers` runs them:
//
//   added tokens matched → normalizer → added tokens matched again on the normalized text
//     → pre-tokenizer (splits) → model (BPE, WordPiece, Unigram: ids) → post-processor (special tokens)
//   ids → tokens → decoder → text
//
// Each stage's kinds live in their own file (hf_normalizers.cpp, precompiled_charsmap.cpp,
// hf_pre_tokenizers.cpp, bpe.cpp, wordpiece.cpp, unigram.cpp, hf_decoders.cpp) and are built from
// their JSON here. Where offsets are asked for (HfTokenizer::encode_with_offsets), each byte of the
// text carries, through every stage, the bytes of the input it came from (Align, Transform below),
// as `tokenizers`' NormalizedString does. Private to text/.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
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

// The bytes [first, second) of the input that one byte of a text on its way came from (the bytes of
// the input's character it came from: `tokenizers`' alignments).
using Align = std::pair<uint32_t, uint32_t>;

// A stretch of the text on its way through: a token already (an added token: id ≥ 0) or text still
// to split (id < 0). `at_start`: it begins the input (Metaspace's prepend_scheme "first"). `align`:
// each byte's Align where offsets are asked for, else empty (and then no stage writes it).
struct Piece {
  std::string text;
  int32_t id = -1;
  bool at_start = false;
  std::vector<Align> align;
  bool tracked() const { return !align.empty(); }
  // [b, e) of this piece, its alignments with it
  Piece slice(size_t b, size_t e, int32_t new_id = -1, bool start = false) const {
    Piece p{text.substr(b, e - b), new_id, start, {}};
    if (tracked())
      p.align.assign(align.begin() + static_cast<std::ptrdiff_t>(b), align.begin() + static_cast<std::ptrdiff_t>(e));
    return p;
  }
};
using Pieces = std::vector<Piece>;

// A stage's rewrite of a piece's text, character by character, as `tokenizers`'
// NormalizedString::transform takes it: each new character with its `change`
//   0: it takes the place of the next character of the old text (and that character's Align);
//   n > 0: it is new (the Align of the old byte just before the place reached, (0, 0) at the start);
//   n < 0: as 0, then the -n characters after that one are dropped;
// and skip(n) drops the next n characters (tokenizers' initial_offset, and a filter's).
// Untracked pieces only gather the text.
class Transform {
 public:
  explicit Transform(const Piece& old) : old_(old), tracked_(old.tracked()) { text.reserve(old.text.size()); }
  void put(char32_t c, int change = 0);
  void put_all(std::string_view s, int change);  // each character of s, put(c, change)
  void skip(size_t chars = 1);
  bool tracked() const { return tracked_; }
  // The piece rewritten (its id and at_start kept).
  Piece done() &&;

  std::string text;

 private:
  void advance(size_t chars);
  const Piece& old_;
  bool tracked_;
  size_t pos_ = 0;  // bytes of the old text taken
  std::vector<Align> align_;
};
// `old_part`'s characters, next in t's old text, replaced by `new_part`'s (hf_transform.cpp).
void replace_chars(Transform& t, std::string_view old_part, std::string_view new_part);
// `s` before the piece's text, as tokenizers' NormalizedString::prepend aligns it.
void prepend(Piece& p, std::string_view s);

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
  // The piece's text normalized, its alignments with it where it is tracked.
  virtual void normalize(Piece& p, const Budget& budget) const = 0;
  std::string normalized(std::string s, const Budget& budget) const {
    Piece p{std::move(s), -1, false, {}};
    normalize(p, budget);
    return std::move(p.text);
  }
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
  // The ids of one pre-tokenized piece, appended; and, where `spans` is given, each token's bytes
  // [first, second) of the piece (as `tokenizers`' models give them: an unknown or byte-fallback
  // token spans what it stands for).
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out,
                        std::vector<std::pair<size_t, size_t>>* spans = nullptr) const = 0;
  const Vocab& vocab() const { return vocab_; }
  virtual std::string continuing_subword_prefix() const { return {}; }
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

// One sequence on its way through the post-processor: ids and their token types; where offsets are
// asked for (`tracked`), each id's bytes in its text, word and sequence (0, 1; -1 for a special token).
struct Encoded {
  std::vector<int32_t> ids, type_ids;
  bool tracked = false;
  std::vector<std::pair<size_t, size_t>> offsets;
  std::vector<int32_t> words, sequences;
  // Special tokens: (0, 0), no word, no sequence.
  static Encoded specials(const std::vector<int32_t>& ids, int32_t type_id, bool tracked);
  void push_special(int32_t id);
  void push_special_front(int32_t id);
};

// Post-processors: the special tokens around a sequence or a pair (TemplateProcessing,
// BertProcessing; ByteLevel's, which only trims offsets, leaves ids alone). `seqs` holds one or
// two sequences; the result is concatenated by the caller.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<Encoded> process(std::vector<Encoded> seqs, bool add_special_tokens) const = 0;
  // RobertaProcessing's and ByteLevel's trim_offsets: whether a token's offsets leave out the spaces
  // it begins and ends with, and their add_prefix_space (which keeps a first token's one space).
  struct Trim {
    bool add_prefix_space;
  };
  virtual std::optional<Trim> trims_offsets() const { return std::nullopt; }
};
std::unique_ptr<PostProcessor> make_post_processor(const json& j, const Field& f);

}  // namespace qkv::text::hf
