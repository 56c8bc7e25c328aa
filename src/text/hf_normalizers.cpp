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

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Each character's lowercase (tokenizers' NormalizedString::lowercase): the first in its place, the
// other of U+0130's two new.
void lowercase(Piece& p) {
  Transform t(p);
  std::string lower;
  for_each_char(p.text, [&](char32_t c) {
    lower.clear();
    append_lowercase(lower, c);
    for (size_t i = 0, n = 0; i < lower.size(); i += n) t.put(decode_at(lower, i, &n), i > 0);
  });
  p = std::move(t).done();
}

// Some characters dropped (tokenizers' NormalizedString::filter): the others keep their Align.
template <typename Keep>
void filter(Piece& p, Keep&& keep) {
  Transform t(p);
  for_each_char(p.text, [&](char32_t c) {
    if (keep(c))
      t.put(c);
    else
      t.skip();
  });
  p = std::move(t).done();
}

// A Unicode normal form. Tracked, cluster by cluster (no normal form reaches across the edge of an
// extended grapheme cluster): a cluster whose characters decompose each on its own puts each one's
// first part in its place and the rest new; any other change of a cluster (a composition, marks
// reordered) is replace_chars of the cluster.
void normal_form(Piece& p, NormalForm form) {
  if (!p.tracked()) {
    p.text = normalize(p.text, form);
    return;
  }
  const bool decomposes = form == NormalForm::NFD || form == NormalForm::NFKD;
  Transform t(p);
  std::vector<std::string> parts;
  for (size_t i = 0, end = 0; i < p.text.size(); i = end) {
    end = grapheme_end(p.text, i);
    const std::string_view g(p.text.data() + i, end - i);
    const std::string out = normalize(g, form);
    if (out == g) {
      for_each_char(g, [&](char32_t c) { t.put(c); });
      continue;
    }
    if (decomposes) {
      parts.clear();
      std::string joined;
      for (size_t k = 0, n = 0; k < g.size(); k += n) {
        decode_at(g, k, &n);
        parts.push_back(normalize(g.substr(k, n), form));
        joined += parts.back();
      }
      if (joined == out) {
        size_t k = 0;
        for (size_t j = 0, n = 0; j < g.size(); j += n, ++k) {
          decode_at(g, j, &n);
          replace_chars(t, g.substr(j, n), parts[k]);
        }
        continue;
      }
    }
    replace_chars(t, g, out);
  }
  p = std::move(t).done();
}

// BERT's basic text cleaning, CJK spacing, accent stripping and lower-casing, in that order:
//   clean_text: drop U+0000, U+FFFD and "control" characters (C* but Cn, and not \t \n \r);
//               whitespace → ' '
//   handle_chinese_chars: ' ' c ' ' around each CJK ideograph (the spaces new)
//   strip_accents (default: as lowercase): NFD, then drop the nonspacing marks (Mn)
//   lowercase: each character's lowercase
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(const json& j, const Field& f)
      : clean_text_(get_bool(j, "clean_text", true, f)),
        chinese_(get_bool(j, "handle_chinese_chars", true, f)),
        lowercase_(get_bool(j, "lowercase", true, f)),
        strip_accents_(get_bool(j, "strip_accents", lowercase_, f)) {}

  void normalize(Piece& p, const Budget&) const override {
    if (clean_text_ || chinese_) {
      Transform t(p);
      for_each_char(p.text, [&](char32_t c) {
        if (clean_text_) {
          const bool ws = c == '\t' || c == '\n' || c == '\r';
          if (!ws && (c == 0 || c == 0xFFFD || is_other(c))) return t.skip();
          if (ws || is_whitespace(c)) c = ' ';
        }
        if (chinese_ && is_chinese_char(c)) {
          t.put(' ', 0);
          t.put(c, 1);
          t.put(' ', 1);
        } else {
          t.put(c);
        }
      });
      p = std::move(t).done();
    }
    if (strip_accents_) {
      normal_form(p, NormalForm::NFD);
      filter(p, [](char32_t c) { return !is_mark_nonspacing(c); });
    }
    if (lowercase_) lowercase(p);
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
  void normalize(Piece& p, const Budget&) const override { lowercase(p); }
};

// Unicode normal forms (utf8proc).
class NormalFormNormalizer final : public Normalizer {
 public:
  explicit NormalFormNormalizer(NormalForm form) : form_(form) {}
  void normalize(Piece& p, const Budget&) const override { normal_form(p, form_); }

 private:
  NormalForm form_;
};

// Drops the combining marks (M*); used after NFD/NFKD.
class StripAccents final : public Normalizer {
 public:
  void normalize(Piece& p, const Budget&) const override {
    filter(p, [](char32_t c) { return !is_mark(c); });
  }
};

// Whitespace trimmed on the left and/or the right.
class Strip final : public Normalizer {
 public:
  Strip(const json& j, const Field& f) : left_(get_bool(j, "strip_left", false, f)), right_(get_bool(j, "strip_right", true, f)) {}
  void normalize(Piece& p, const Budget&) const override {
    const std::string& s = p.text;
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
    if (b > 0 || e < s.size()) p = p.slice(b, e, p.id, p.at_start);
  }

 private:
  bool left_, right_;
};

// Every match of the pattern replaced by `content` (its characters new: each with the Align of the
// match's last byte).
class Replace final : public Normalizer {
 public:
  Replace(const json& j, const Field& f)
      : pattern_(need(j, "pattern", f), f.at("pattern")),
        content_(need_string(j, "content", f)),
        where_(f.file + ": " + f.path) {}
  void normalize(Piece& p, const Budget& budget) const override {
    if (!p.tracked()) {
      p.text = pattern_.replace(p.text, content_, budget);
      return;
    }
    Transform t(p);
    size_t last = 0;
    for (auto [b, e] : pattern_.matches(p.text, budget)) {
      for_each_char(std::string_view(p.text).substr(last, b - last), [&](char32_t c) { t.put(c); });
      t.skip(count_chars(std::string_view(p.text).substr(b, e - b)));
      t.put_all(content_, 1);
      budget.check_bytes(t.text.size(), where_);
      last = e;
    }
    for_each_char(std::string_view(p.text).substr(last), [&](char32_t c) { t.put(c); });
    p = std::move(t).done();
  }

 private:
  Pattern pattern_;
  std::string content_, where_;
};

// `prepend` before a non-empty text (Llama 2's "▁"): its first character in the place of the text's
// first, the rest new.
class Prepend final : public Normalizer {
 public:
  Prepend(const json& j, const Field& f) : prepend_(need_string(j, "prepend", f)), where_(f.file + ": " + f.path) {}
  void normalize(Piece& p, const Budget& budget) const override {
    if (p.text.empty()) return;
    budget.check_bytes(prepend_.size() + p.text.size(), where_);
    if (!p.tracked()) {
      p.text.insert(0, prepend_);
      return;
    }
    prepend(p, prepend_);
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
  void normalize(Piece& p, const Budget& budget) const override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      parts_[i]->normalize(p, budget);
      budget.check_bytes(p.text.size(), wheres_[i]);
    }
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
