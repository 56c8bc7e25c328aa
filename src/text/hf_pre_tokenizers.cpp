// Pre-tokenizers of tokenizer.json: how the text between added tokens is cut into the pieces the
// model sees. ByteLevel (GPT-2's regex, then each byte as a printable character), Split (a string
// or regex, with `tokenizers`' five behaviours and invert: Llama 3's and Qwen2's regexes),
// BertPreTokenizer, Whitespace, WhitespaceSplit, Metaspace, Digits and Sequence; others refused by
// name.
#include <algorithm>
#include <cctype>

#include "hf_components.h"
#include "hf_unicode.h"

namespace qkv::text::hf {

// As in HF's tokenizers (tokenizers.pre_tokenizers.*): the four families of components share names
// (Strip, Replace, Sequence, ByteLevel, Metaspace), and a unity build compiles them in one unit.
namespace pre_tokenizers {
namespace {

// A stretch [begin, end) of a piece, and whether the pattern matched it.
struct Span {
  size_t begin, end;
  bool match;
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const std::string& name, const Field& f) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  f.fail("unknown split behavior \"" + name + "\"");
}

// The matches of a piece, with the stretches between them: the whole text, in order.
std::vector<Span> spans_of(size_t size, const std::vector<std::pair<size_t, size_t>>& matches) {
  std::vector<Span> out;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b != prev) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  }
  if (prev != size) out.push_back({prev, size, false});
  return out;
}

// `tokenizers`' NormalizedString::split: the spans become pieces as the behavior says
//   Removed: matches dropped; Isolated: every span a piece; Contiguous: runs of equal flags joined;
//   MergedWithPrevious/Next: a match joins the span before/after it.
void split_piece(const Piece& piece, std::vector<Span> spans, Behavior behavior, bool invert, Pieces& out) {
  if (invert)
    for (auto& s : spans) s.match = !s.match;
  std::vector<Span> keep;  // `match` here: removed
  switch (behavior) {
    case Behavior::Removed: keep = spans; break;
    case Behavior::Isolated:
      for (auto s : spans) keep.push_back({s.begin, s.end, false});
      break;
    case Behavior::Contiguous:
      for (size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].match == spans[i - 1].match) keep.back().end = spans[i].end;
        else keep.push_back({spans[i].begin, spans[i].end, false});
      }
      break;
    case Behavior::MergedWithPrevious: {
      bool previous_match = false;
      for (auto s : spans) {
        if (s.match && !previous_match && !keep.empty()) keep.back().end = s.end;
        else keep.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous_match = false;
      for (size_t i = spans.size(); i-- > 0;) {
        const Span s = spans[i];
        if (s.match && !previous_match && !keep.empty()) keep.back().begin = s.begin;
        else keep.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (const Span& s : keep) {
    if (s.match || s.end == s.begin) continue;
    out.push_back(piece.slice(s.begin, s.end, -1, piece.at_start && s.begin == 0));
  }
}

// Applies fn(piece, out) to every piece that is not a token yet.
template <typename Fn>
void split_all(Pieces& pieces, Fn&& fn) {
  Pieces out;
  out.reserve(pieces.size());
  for (auto& p : pieces) {
    if (p.id >= 0) out.push_back(std::move(p));
    else fn(p, out);
  }
  pieces = std::move(out);
}

// The spans of single characters for which pred holds (each its own match).
template <typename Pred>
std::vector<Span> char_spans(std::string_view s, Pred&& pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0, n = 0; i < s.size(); i += n)
    if (pred(decode_at(s, i, &n))) m.emplace_back(i, i + n);
  return spans_of(s.size(), m);
}

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's: a space before each piece where asked, the regex above (Isolated), then every byte of a
// piece spelled as its printable character.
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(const json& j, const Field& f)
      : add_prefix_space_(get_bool(j, "add_prefix_space", true, f)), use_regex_(get_bool(j, "use_regex", true, f)) {
    if (use_regex_) regex_ = std::make_unique<Pattern>(Pattern::regex(kGpt2Pattern, f));
  }
  void pre_tokenize(Pieces& pieces, const Budget& budget) const override {
    split_all(pieces, [&](Piece& p, Pieces& out) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) {
        if (p.tracked())
          prepend(p, " ");
        else
          p.text.insert(0, 1, ' ');
      }
      if (use_regex_)
        split_piece(p, spans_of(p.text.size(), regex_->matches(p.text, budget)), Behavior::Isolated, false, out);
      else if (!p.text.empty())
        out.push_back(std::move(p));
    });
    const auto& map = byte_to_unicode();
    for (auto& p : pieces) {
      if (p.id >= 0) continue;
      if (p.tracked()) {  // each character's bytes: the first in its place, the others new
        Transform t(p);
        for (size_t i = 0, n = 0; i < p.text.size(); i += n) {
          decode_at(p.text, i, &n);
          for (size_t k = 0; k < n; ++k) t.put_all(map[static_cast<unsigned char>(p.text[i + k])], k > 0);
        }
        p = std::move(t).done();
        continue;
      }
      std::string s;
      s.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) s += map[b];
      p.text = std::move(s);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Pattern> regex_;
};

class Split final : public PreTokenizer {
 public:
  Split(const json& j, const Field& f)
      : pattern_(need(j, "pattern", f), f.at("pattern")),
        behavior_(behavior_of(need_string(j, "behavior", f), f.at("behavior"))),
        invert_(get_bool(j, "invert", false, f)) {}
  void pre_tokenize(Pieces& pieces, const Budget& budget) const override {
    split_all(pieces, [&](Piece& p, Pieces& out) {
      split_piece(p, spans_of(p.text.size(), pattern_.matches(p.text, budget)), behavior_, invert_, out);
    });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// BERT's: whitespace removed, then each punctuation character (ASCII punctuation or P*) on its own.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(Pieces& pieces, const Budget&) const override {
    split_all(pieces, [](Piece& p, Pieces& out) {
      split_piece(p, char_spans(p.text, is_whitespace), Behavior::Removed, false, out);
    });
    split_all(pieces, [](Piece& p, Pieces& out) {
      split_piece(p, char_spans(p.text, [](char32_t c) {
                    return (c < 0x80 && std::ispunct(static_cast<int>(c))) || is_punctuation(c);
                  }), Behavior::Isolated, false, out);
    });
  }
};

// \w+|[^\w\s]+ kept, the rest (whitespace) removed.
class Whitespace final : public PreTokenizer {
 public:
  explicit Whitespace(const Field& f) : regex_(Pattern::regex(R"(\w+|[^\w\s]+)", f)) {}
  void pre_tokenize(Pieces& pieces, const Budget& budget) const override {
    split_all(pieces, [&](Piece& p, Pieces& out) {
      split_piece(p, spans_of(p.text.size(), regex_.matches(p.text, budget)), Behavior::Removed, true, out);
    });
  }

 private:
  Pattern regex_;
};

class WhitespaceSplit final : public PreTokenizer {
 public:
  void pre_tokenize(Pieces& pieces, const Budget&) const override {
    split_all(pieces, [](Piece& p, Pieces& out) {
      split_piece(p, char_spans(p.text, is_whitespace), Behavior::Removed, false, out);
    });
  }
};

// Digits apart from the rest: each alone (individual_digits) or in runs.
class Digits final : public PreTokenizer {
 public:
  Digits(const json& j, const Field& f) : individual_(get_bool(j, "individual_digits", false, f)) {}
  void pre_tokenize(Pieces& pieces, const Budget&) const override {
    split_all(pieces, [&](Piece& p, Pieces& out) {
      split_piece(p, char_spans(p.text, is_numeric), individual_ ? Behavior::Isolated : Behavior::Contiguous, false, out);
    });
  }

 private:
  bool individual_;
};

// SentencePiece's spaces: ' ' → the replacement ("▁"), prepended (always, or to the input's first
// piece, or never) where the piece does not start with it, and split before each (split = true).
class Metaspace final : public PreTokenizer {
 public:
  Metaspace(const json& j, const Field& f) {
    const std::string r = need_string(j, "replacement", f);
    size_t n = 0;
    if (r.empty() || decode_at(r, 0, &n) == 0 || n != r.size()) f.at("replacement").fail("expected one character");
    replacement_ = r;
    split_ = get_bool(j, "split", true, f);
    if (const json* s = find(j, "prepend_scheme")) {
      const std::string scheme = as_string(*s, f.at("prepend_scheme"));
      if (scheme == "always") scheme_ = 0;
      else if (scheme == "first") scheme_ = 1;
      else if (scheme == "never") scheme_ = 2;
      else f.at("prepend_scheme").fail("expected \"always\", \"first\" or \"never\", got \"" + scheme + "\"");
    } else {
      scheme_ = get_bool(j, "add_prefix_space", true, f) ? 0 : 2;
    }
  }
  void pre_tokenize(Pieces& pieces, const Budget&) const override {
    split_all(pieces, [&](Piece& p, Pieces& out) {
      // ' ' → the replacement (new characters, with the space's Align: tokenizers' replace)
      Piece q;
      if (p.tracked()) {
        Transform t(p);
        for (size_t i = 0, n = 0; i < p.text.size(); i += n) {
          const char32_t c = decode_at(p.text, i, &n);
          if (c == ' ')
            t.skip(), t.put_all(replacement_, 1);
          else
            t.put(c);
        }
        q = std::move(t).done();
      } else {
        for (char c : p.text) {
          if (c == ' ')
            q.text += replacement_;
          else
            q.text += c;
        }
      }
      q.at_start = p.at_start;
      const bool starts = q.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == 0 || (scheme_ == 1 && p.at_start))) {
        if (q.tracked())
          prepend(q, replacement_);
        else
          q.text.insert(0, replacement_);
      }
      if (!split_) {
        if (!q.text.empty()) out.push_back(std::move(q));
        return;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t at = q.text.find(replacement_); at != std::string::npos; at = q.text.find(replacement_, at + 1))
        m.emplace_back(at, at + replacement_.size());
      split_piece(q, spans_of(q.text.size(), m), Behavior::MergedWithNext, false, out);
    });
  }

 private:
  std::string replacement_;
  int scheme_ = 0;  // 0 always, 1 first, 2 never
  bool split_ = true;
};

class Sequence final : public PreTokenizer {
 public:
  Sequence(const json& j, const Field& f) {
    const json& list = need(j, "pretokenizers", f);
    if (!list.is_array()) f.at("pretokenizers").fail("expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parts_.push_back(make_pre_tokenizer(list[i], f.at("pretokenizers").at(i)));
      wheres_.push_back(f.file + ": " + f.at("pretokenizers").at(i).path);
    }
  }
  // The pieces within the budget after each part (ByteLevel doubles a text's non-ASCII bytes,
  // Metaspace makes up to 4 bytes of a space: a chain of them would multiply it).
  void pre_tokenize(Pieces& pieces, const Budget& budget) const override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      parts_[i]->pre_tokenize(pieces, budget);
      budget.check_bytes(bytes_of(pieces), wheres_[i]);
    }
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
  std::vector<std::string> wheres_;
};

}  // namespace
}  // namespace pre_tokenizers

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> map = [] {
    std::vector<std::string> m(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      std::string s;
      append_utf8(s, static_cast<char32_t>(printable ? b : next++));
      m[static_cast<size_t>(b)] = s;
    }
    return m;
  }();
  return map;
}

int byte_of(char32_t c) {
  static const std::vector<int> back = [] {
    std::vector<int> v(512, -1);
    const auto& m = byte_to_unicode();
    for (int b = 0; b < 256; ++b) {
      size_t n = 0;
      v[decode_at(m[static_cast<size_t>(b)], 0, &n)] = b;
    }
    return v;
  }();
  return c < 512 ? back[c] : -1;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const Field& f) {
  using namespace pre_tokenizers;
  const std::string type = type_of(j, f);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j, f);
  if (type == "Split") return std::make_unique<Split>(j, f);
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Whitespace") return std::make_unique<Whitespace>(f);
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (type == "Digits") return std::make_unique<Digits>(j, f);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j, f);
  if (type == "Sequence") return std::make_unique<Sequence>(j, f);
  f.at("type").fail("pre-tokenizer \"" + type + "\" is not supported (ByteLevel, Split, BertPreTokenizer, Whitespace, "
                    "WhitespaceSplit, Digits, Metaspace, Sequence are)");
}

}  // namespace qkv::text::hf
