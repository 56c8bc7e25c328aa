// Decoders of tokenizer.json: tokens → text, each stage mapping the list of token strings as
// `tokenizers` does (the results are concatenated at the end). ByteLevel, WordPiece, Metaspace,
// Replace, ByteFallback, Fuse, Strip, Sequence; others refused by name.
#include "hf_components.h"
#include "hf_unicode.h"

namespace qkv::text::hf {

// As in HF's tokenizers (tokenizers.decoders.*): the four families of components share names
// (Strip, Replace, Sequence, ByteLevel, Metaspace), and a unity build compiles them in one unit.
namespace decoders {
namespace {

// GPT-2's printable characters back to their bytes (a token with any other character keeps its own
// UTF-8 bytes), the bytes read as UTF-8 with each invalid stretch one U+FFFD.
class ByteLevel final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget&) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0, n = 0; i < t.size() && all; i += n) {
        const int b = byte_of(decode_at(t, i, &n));
        if (b < 0) all = false;
        else bytes += static_cast<char>(b);
      }
      if (!all) bytes.replace(mark, std::string::npos, t);
    }
    return {valid_utf8(bytes)};
  }
};

// WordPiece: "##" pieces glued to the one before, the others after a space; cleanup undoes BERT's
// spaces before punctuation and in English contractions.
class WordPiece final : public Decoder {
 public:
  WordPiece(const json& j, const Field& f)
      : prefix_(find(j, "prefix") ? need_string(j, "prefix", f) : "##"), cleanup_(get_bool(j, "cleanup", true, f)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget&) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t.insert(0, 1, ' ');
      }
      if (cleanup_) t = cleanup(t);
    }
    return tokens;
  }

 private:
  static void replace_all(std::string& s, std::string_view from, std::string_view to) {
    std::string out;
    size_t last = 0;
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, last)) {
      out.append(s, last, at - last);
      out += to;
      last = at + from.size();
    }
    out.append(s, last);
    s = std::move(out);
  }
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> rules[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (auto [from, to] : rules) replace_all(s, from, to);
    return s;
  }
  std::string prefix_;
  bool cleanup_;
};

// SentencePiece's "▁" back to spaces; in the first token it is dropped (unless prepend_scheme is
// "never").
class Metaspace final : public Decoder {
 public:
  Metaspace(const json& j, const Field& f) : replacement_(need_string(j, "replacement", f)) {
    if (const json* s = find(j, "prepend_scheme")) never_ = as_string(*s, f.at("prepend_scheme")) == "never";
    else never_ = !get_bool(j, "add_prefix_space", true, f);
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget&) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          if (i != 0 || never_) out += ' ';
          k += replacement_.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool never_ = false;
};

class Replace final : public Decoder {
 public:
  Replace(const json& j, const Field& f)
      : pattern_(need(j, "pattern", f), f.at("pattern")),
        content_(need_string(j, "content", f)),
        where_(f.file + ": " + f.path) {}
  // The tokens together within the budget, as each is replaced.
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget& budget) const override {
    size_t total = 0;
    for (const auto& t : tokens) total += t.size();
    for (auto& t : tokens) {
      std::string out = pattern_.replace(t, content_, budget);
      total = total - t.size() + out.size();
      budget.check_bytes(total, where_);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  Pattern pattern_;
  std::string content_, where_;
};

// Runs of <0xXX> tokens back to their bytes: valid UTF-8 as one string, else one U+FFFD per byte.
class ByteFallback final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget&) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (valid_utf8(bytes) == bytes) out.push_back(bytes);
      else
        for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
      count = 0;
    };
    for (auto& t : tokens) {
      int b = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') b = hex_byte(t[3], t[4]);
      if (b >= 0) {
        bytes += static_cast<char>(b);
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int hex_byte(char a, char b) { return hex(a) < 0 || hex(b) < 0 ? -1 : hex(a) * 16 + hex(b); }
};

class Fuse final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget&) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

// Up to `start` leading and `stop` trailing copies of one character removed from each token.
class Strip final : public Decoder {
 public:
  Strip(const json& j, const Field& f)
      : content_(need_string(j, "content", f)),
        start_(get_int(j, "start", 0, 0, int64_t{1} << 30, f)),
        stop_(get_int(j, "stop", 0, 0, int64_t{1} << 30, f)) {
    size_t n = 0;
    if (content_.empty() || (decode_at(content_, 0, &n), n != content_.size())) f.at("content").fail("expected one character");
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget&) const override {
    const size_t c = content_.size();
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (int64_t i = 0; i < start_ && e - b >= c && t.compare(b, c, content_) == 0; ++i) b += c;
      for (int64_t i = 0; i < stop_ && e - b >= c && t.compare(e - c, c, content_) == 0; ++i) e -= c;
      t = t.substr(b, e - b);
    }
    return tokens;
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class Sequence final : public Decoder {
 public:
  Sequence(const json& j, const Field& f) {
    const json& list = need(j, "decoders", f);
    if (!list.is_array()) f.at("decoders").fail("expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parts_.push_back(make_decoder(list[i], f.at("decoders").at(i)));
      wheres_.push_back(f.file + ": " + f.at("decoders").at(i).path);
    }
  }
  // The tokens together within the budget after each part (WordPiece adds a space a token).
  std::vector<std::string> decode_chain(std::vector<std::string> tokens, const Budget& budget) const override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      tokens = parts_[i]->decode_chain(std::move(tokens), budget);
      size_t total = 0;
      for (const auto& t : tokens) total += t.size();
      budget.check_bytes(total, wheres_[i]);
    }
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
  std::vector<std::string> wheres_;
};

}  // namespace
}  // namespace decoders

std::unique_ptr<Decoder> make_decoder(const json& j, const Field& f) {
  using namespace decoders;
  const std::string type = type_of(j, f);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "WordPiece") return std::make_unique<WordPiece>(j, f);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j, f);
  if (type == "Replace") return std::make_unique<Replace>(j, f);
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(j, f);
  if (type == "Sequence") return std::make_unique<Sequence>(j, f);
  f.at("type").fail("decoder \"" + type + "\" is not supported (ByteLevel, WordPiece, Metaspace, Replace, ByteFallback, "
                    "Fuse, Strip, Sequence are)");
}

}  // namespace qkv::text::hf
