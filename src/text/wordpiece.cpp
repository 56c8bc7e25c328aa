// WordPiece (BERT), as `tokenizers` runs it on one pre-tokenized word: greedily the longest
// vocabulary entry from the left, the pieces after the first spelled with the continuing prefix
// ("##"); a word longer than max_input_chars_per_word characters, or one with a stretch no entry
// covers, is the unknown token as a whole.
#include "hf_components.h"
#include "hf_unicode.h"
#include "qkv/core/error.h"

namespace qkv::text::hf {

namespace {

class WordPiece final : public Model {
 public:
  WordPiece(const json& j, const Field& f) {
    vocab_ = read_vocab(need(j, "vocab", f), f.at("vocab"));
    unk_token = need_string(j, "unk_token", f);
    unk_id_ = vocab_.find(unk_token);
    if (unk_id_ < 0) f.at("unk_token").fail("\"" + unk_token + "\" is not in model.vocab");
    if (const json* p = find(j, "continuing_subword_prefix")) prefix_ = as_string(*p, f.at("continuing_subword_prefix"));
    else prefix_ = "##";
    max_chars_ = get_int(j, "max_input_chars_per_word", 100, 0, int64_t{1} << 30, f);
  }

  void tokenize(std::string_view word, std::vector<int32_t>& out,
                std::vector<std::pair<size_t, size_t>>* spans) const override {
    auto unknown = [&] {
      out.push_back(unk_id_);
      if (spans) spans->push_back({0, word.size()});
    };
    if (static_cast<int64_t>(utf8_chars(word)) > max_chars_) return unknown();
    const size_t first = out.size(), first_span = spans ? spans->size() : 0;
    std::string candidate;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      int32_t found = -1;
      while (start < end) {
        candidate.assign(start > 0 ? prefix_ : std::string());
        candidate.append(word.substr(start, end - start));
        found = vocab_.find(candidate);
        if (found >= 0) break;
        do --end;  // one character shorter
        while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(first);
        if (spans) spans->resize(first_span);
        return unknown();
      }
      out.push_back(found);
      if (spans) spans->push_back({start, end});
      start = end;
    }
  }

  std::string continuing_subword_prefix() const override { return prefix_; }

 private:
  static size_t utf8_chars(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  std::string prefix_;
  int32_t unk_id_ = -1;
  int64_t max_chars_ = 100;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const json& j, const Field& f) { return std::make_unique<WordPiece>(j, f); }

}  // namespace qkv::text::hf
