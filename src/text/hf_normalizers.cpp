// Normalizers of tokenizer.json, as `tokenizers` applies them to each stretch of text between
// added tokens: BertNormalizer, Lowercase, Strip, StripAccents, NFC/NFD/NFKC/NFKD, Replace,
// Prepend, Sequence; Precompiled (SentencePiece's character map) in precompiled_charsmap.cpp. The
// rest are refused by name.
#include "hf_components.h"
#include "hf_unicode.h"

namespace qkv::text::hf {

// As in HF's tokenizers (tokenizers.normalizers.*): the four families of components share names
// (Strip, Replace, Sequence, ByteLevel, Metaspace), and a unity build compiles them in one unit.
namespace normalizers {
namespace {

// Calls fn(c) for each code point of s (valid UTF-8).
template <typename Fn>
void for_each_char(std::string_view s, Fn&& fn) {
  for (size_t i = 0, n = 0; i < s.size(); i += n) fn(decode_at(s, i, &n));
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for_each_char(s, [&](char32_t c) { append_lowercase(out, c); });
  return out;
}

// BERT's basic text cleaning, CJK spacing, accent stripping and lower-casing, in that order:
//   clean_text: drop U+0000, U+FFFD and "control" characters (C* but Cn, and not \t \n \r);
//               whitespace → ' '
//   handle_chinese_chars: ' ' c ' ' around each CJK ideograph
//   strip_accents (default: as lowercase): NFD, then drop the nonspacing marks (Mn)
//   lowercase: each character's lowercase
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(const json& j, const Field& f)
      : clean_text_(get_bool(j, "clean_text", true, f)),
        chinese_(get_bool(j, "handle_chinese_chars", true, f)),
        lowercase_(get_bool(j, "lowercase", true, f)),
        strip_accents_(get_bool(j, "strip_accents", lowercase_, f)) {}

  std::string normalize(std::string s, const Budget&) const override {
    if (clean_text_ || chinese_) {
      std::string out;
      out.reserve(s.size());
      for_each_char(s, [&](char32_t c) {
        if (clean_text_) {
          const bool ws = c == '\t' || c == '\n' || c == '\r';
          if (!ws && (c == 0 || c == 0xFFFD || is_other(c))) return;
          if (ws || is_whitespace(c)) c = ' ';
        }
        if (chinese_ && is_chinese_char(c)) {
          out += ' ';
          append_utf8(out, c);
          out += ' ';
        } else {
          append_utf8(out, c);
        }
      });
      s = std::move(out);
    }
    if (strip_accents_) {
      const std::string nfd = hf::normalize(s, NormalForm::NFD);
      s.clear();
      for_each_char(nfd, [&](char32_t c) {
        if (!is_mark_nonspacing(c)) append_utf8(s, c);
      });
    }
    if (lowercase_) s = lowercase(s);
    return s;
  }

 private:
  // The CJK Unified Ideographs blocks BERT names (not Hangul, Hiragana or Katakana).
  static bool is_chinese_char(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  bool clean_text_, chinese_, lowercase_, strip_accents_;
};

class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string s, const Budget&) const override { return lowercase(s); }
};

// Unicode normal forms (utf8proc).
class NormalFormNormalizer final : public Normalizer {
 public:
  explicit NormalFormNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(std::string s, const Budget&) const override { return hf::normalize(s, form_); }

 private:
  NormalForm form_;
};

// Drops the combining marks (M*); used after NFD/NFKD.
class StripAccents final : public Normalizer {
 public:
  std::string normalize(std::string s, const Budget&) const override {
    std::string out;
    for_each_char(s, [&](char32_t c) {
      if (!is_mark(c)) append_utf8(out, c);
    });
    return out;
  }
};

// Whitespace trimmed on the left and/or the right.
class Strip final : public Normalizer {
 public:
  Strip(const json& j, const Field& f) : left_(get_bool(j, "strip_left", false, f)), right_(get_bool(j, "strip_right", true, f)) {}
  std::string normalize(std::string s, const Budget&) const override {
    size_t b = 0, e = s.size(), n = 0;
    if (left_)
      while (b < e && is_whitespace(decode_at(s, b, &n))) b += n;
    if (right_)
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        if (!is_whitespace(decode_at(s, k, &n))) break;
        e = k;
      }
    return s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

// Every match of the pattern replaced by `content`.
class Replace final : public Normalizer {
 public:
  Replace(const json& j, const Field& f) : pattern_(need(j, "pattern", f), f.at("pattern")), content_(need_string(j, "content", f)) {}
  std::string normalize(std::string s, const Budget& budget) const override {
    return pattern_.replace(s, content_, budget);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// `prepend` before a non-empty text (Llama 2's "▁").
class Prepend final : public Normalizer {
 public:
  Prepend(const json& j, const Field& f) : prepend_(need_string(j, "prepend", f)), where_(f.file + ": " + f.path) {}
  std::string normalize(std::string s, const Budget& budget) const override {
    if (s.empty()) return s;
    budget.check_bytes(prepend_.size() + s.size(), where_);
    return prepend_ + s;
  }

 private:
  std::string prepend_, where_;
};

class Sequence final : public Normalizer {
 public:
  Sequence(const json& j, const Field& f) {
    const json& list = need(j, "normalizers", f);
    if (!list.is_array()) f.at("normalizers").fail("expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parts_.push_back(make_normalizer(list[i], f.at("normalizers").at(i)));
      wheres_.push_back(f.file + ": " + f.at("normalizers").at(i).path);
    }
  }
  // Each part's output within the budget (NFKC and the like grow a text by a bounded factor; Replace
  // and Prepend check their own as they write it).
  std::string normalize(std::string s, const Budget& budget) const override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      s = parts_[i]->normalize(std::move(s), budget);
      budget.check_bytes(s.size(), wheres_[i]);
    }
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
  std::vector<std::string> wheres_;
};

}  // namespace
}  // namespace normalizers

std::unique_ptr<Normalizer> make_normalizer(const json& j, const Field& f) {
  using namespace normalizers;
  const std::string type = type_of(j, f);
  if (type == "BertNormalizer") return std::make_unique<BertNormalizer>(j, f);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "NFC") return std::make_unique<NormalFormNormalizer>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<NormalFormNormalizer>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<NormalFormNormalizer>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<NormalFormNormalizer>(NormalForm::NFKD);
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip") return std::make_unique<Strip>(j, f);
  if (type == "Replace") return std::make_unique<Replace>(j, f);
  if (type == "Prepend") return std::make_unique<Prepend>(j, f);
  if (type == "Sequence") return std::make_unique<Sequence>(j, f);
  if (type == "Precompiled") return make_precompiled(j, f);
  f.at("type").fail("normalizer \"" + type +
                    "\" is not supported (BertNormalizer, Lowercase, NFC, NFD, NFKC, NFKD, "
                    "StripAccents, Strip, Replace, Prepend, Precompiled, Sequence are)");
}

}  // namespace qkv::text::hf
