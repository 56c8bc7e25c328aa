// The patterns of Split, Replace and the ByteLevel pre-tokenizer: a literal string, or a regex run by
// PCRE2 in UTF + UCP mode. Hugging Face runs Oniguruma: the same backtracking leftmost-first
// semantics, \p{L} \p{N} and lookahead, but its own classes: \s is White_Space (PCRE2's also holds
// U+180E) and \w is Unicode's word class, Alphabetic|M|Nd|Pc|Join_Control (PCRE2's is L|N|_: it
// takes ½ and leaves out marks). Those escapes are spelled out before compiling.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "hf_components.h"
#include "qkv/core/error.h"

namespace qkv::text::hf {

namespace {

constexpr const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";

// Oniguruma's \s \S \w (and \W outside a class) in PCRE2's words, inside and outside [...].
std::string from_oniguruma(const std::string& re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[++i];
      if (e == 's') out += "\\p{White_Space}";
      else if (e == 'S') out += "\\P{White_Space}";
      else if (e == 'w') out += in_class ? kWord : "[" + std::string(kWord) + "]";
      else if (e == 'W' && !in_class) out += "[^" + std::string(kWord) + "]";
      else out += {c, e};
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

pcre2_code* compile(const std::string& pattern, const Field& f) {
  const std::string re = from_oniguruma(pattern);
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(), PCRE2_UTF | PCRE2_UCP, &err,
                                   &at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    f.fail("regex " + json(pattern).dump() + " does not compile at offset " + std::to_string(at) + ": " +
           reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // (without JIT, it is interpreted)
  return code;
}

}  // namespace

Pattern::Pattern(const json& j, const Field& f) {
  if (const json* s = find(j, "String")) {
    literal_ = as_string(*s, f.at("String"));
    if (literal_.empty()) f.at("String").fail("an empty pattern");
    where_ = f.file + ": " + f.at("String").path;
  } else if (const json* r = find(j, "Regex")) {
    code_ = compile(as_string(*r, f.at("Regex")), f.at("Regex"));
    where_ = f.file + ": " + f.at("Regex").path;
  } else {
    f.fail("expected {\"String\": …} or {\"Regex\": …}");
  }
}

Pattern Pattern::regex(const std::string& re, const Field& f) {
  Pattern p;
  p.code_ = compile(re, f);
  p.where_ =
      f.file + ": " + (f.path.empty() ? std::string("top level") : f.path) + " (its regex " + json(re).dump() + ")";
  return p;
}

Pattern::~Pattern() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}
Pattern::Pattern(Pattern&& o) noexcept : literal_(std::move(o.literal_)), code_(o.code_), where_(std::move(o.where_)) {
  o.code_ = nullptr;
}
Pattern& Pattern::operator=(Pattern&& o) noexcept {
  std::swap(literal_, o.literal_);
  std::swap(code_, o.code_);
  std::swap(where_, o.where_);
  return *this;
}

std::vector<std::pair<size_t, size_t>> Pattern::matches(std::string_view s, const Budget& budget) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (!code_) {
    for (size_t at = s.find(literal_); at != std::string_view::npos; at = s.find(literal_, at + literal_.size()))
      out.emplace_back(at, at + literal_.size());
    return out;
  }
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  if (!md) throw Error(where_ + ": out of memory for a regex's match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  // Each call is bounded by PCRE2's match limit (10 million backtracks, ~1 s on a pathological
  // pattern); the text's time is checked after every fourth (a steady clock read, ~30 ns, against a
  // match's ~250 on Llama 3's pattern: at every match, 5 % of its tokenizer's time).
  for (unsigned calls = 1; start <= s.size(); ++calls) {
    const int rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw Error(where_ + ": the regex failed on a text of " + std::to_string(s.size()) +
                  " bytes: " + reinterpret_cast<const char*>(msg));
    }
    if (calls % 4 == 0) budget.check_time(where_);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      start = e;
    } else {  // an empty match: on to the next character
      start = b + 1;
      while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
    }
  }
  return out;
}

// out = s[0, b₁) + content + s[e₁, b₂) + content + … + s[eₙ, end)
std::string Pattern::replace(std::string_view s, const std::string& content, const Budget& budget) const {
  std::string out;
  size_t last = 0;
  for (auto [b, e] : matches(s, budget)) {
    out.append(s, last, b - last);
    budget.check_bytes(out.size() + content.size() + (s.size() - e), where_);
    out += content;
    last = e;
  }
  out.append(s, last);
  return out;
}

}  // namespace qkv::text::hf
