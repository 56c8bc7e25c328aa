// Corpus BLEU and chrF as sacreBLEU 2.x computes them (metrics/bleu.py, metrics/chrf.py,
// tokenizers/tokenizer_13a.py, tokenizers/tokenizer_re.py). The arithmetic is written in the same
// order as sacreBLEU's Python so that the scores agree to the last bit or so.
#include "qkv/text/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <utility>

#include "qkv/core/error.h"
#include "qkv/core/utf8.h"

namespace qkv::text {
namespace {

// The code point starting at byte i and its length in bytes (an invalid byte: utf8::kInvalid, one
// non-space "character").
std::pair<char32_t, size_t> next_cp(std::string_view s, size_t i) {
  const utf8::CodePoint c = utf8::decode_one(s, i);
  return {c.value, c.length};
}

// Python's str.isspace(), which is what str.split() and str.rstrip() use.
bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.split() with no argument: the non-empty runs between whitespace.
std::vector<std::string_view> py_split(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0, start = std::string_view::npos;
  while (i < s.size()) {
    const auto [cp, len] = next_cp(s, i);
    if (is_py_space(cp)) {
      if (start != std::string_view::npos) out.push_back(s.substr(start, i - start));
      start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = i;
    }
    i += len;
  }
  if (start != std::string_view::npos) out.push_back(s.substr(start));
  return out;
}

// Python's str.rstrip().
std::string_view py_rstrip(std::string_view s) {
  size_t end = 0, i = 0;
  while (i < s.size()) {
    const auto [cp, len] = next_cp(s, i);
    i += len;
    if (!is_py_space(cp)) end = i;
  }
  return s.substr(0, end);
}

// Python's str.replace(from, to): non-overlapping, left to right.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_comma(char c) { return c == '.' || c == ','; }

// [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII punctuation and space, except ' , - .
bool is_13a_punct(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

// The four regular expressions of sacreBLEU's TokenizerRegexp, each applied as re.sub does
// (non-overlapping matches, scanned left to right). Working on bytes is equivalent to working on
// code points here: every pattern byte is ASCII, and [^0-9] consumes at most the first byte of a
// multi-byte character (pass 3) or its last byte (pass 2); the other bytes of that character
// can never start or end a match.
std::string regexp_tokenize(const std::string& in) {
  std::string a;
  a.reserve(in.size() * 2);
  for (char c : in) {  // ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> " \1 "
    if (is_13a_punct(c)) {
      a += ' ';
      a += c;
      a += ' ';
    } else {
      a += c;
    }
  }
  std::string b;
  b.reserve(a.size() + a.size() / 4);
  for (size_t i = 0; i < a.size();) {  // ([^0-9])([\.,]) -> "\1 \2 "
    if (i + 1 < a.size() && !is_digit(a[i]) && is_period_comma(a[i + 1])) {
      b += a[i];
      b += ' ';
      b += a[i + 1];
      b += ' ';
      i += 2;
    } else {
      b += a[i++];
    }
  }
  std::string c;
  c.reserve(b.size() + b.size() / 4);
  for (size_t i = 0; i < b.size();) {  // ([\.,])([^0-9]) -> " \1 \2"
    if (i + 1 < b.size() && is_period_comma(b[i]) && !is_digit(b[i + 1])) {
      c += ' ';
      c += b[i];
      c += ' ';
      c += b[i + 1];
      i += 2;
    } else {
      c += b[i++];
    }
  }
  std::string d;
  d.reserve(c.size() + c.size() / 8);
  for (size_t i = 0; i < c.size();) {  // ([0-9])(-) -> "\1 \2 "
    if (i + 1 < c.size() && is_digit(c[i]) && c[i + 1] == '-') {
      d += c[i];
      d += ' ';
      d += '-';
      d += ' ';
      i += 2;
    } else {
      d += c[i++];
    }
  }
  // ' '.join(line.split())
  std::string out;
  out.reserve(d.size());
  for (std::string_view tok : py_split(d)) {
    if (!out.empty()) out += ' ';
    out.append(tok);
  }
  return out;
}

// The references of each sentence: out[i] = pointers to sentence i's references.
using SentenceRefs = std::vector<std::vector<const std::string*>>;

// From the stream layout (refs[r][i]: stream r, line i; every stream as long as hyps), checked.
SentenceRefs from_streams(const char* name, const std::vector<std::string>& hyps,
                          const std::vector<std::vector<std::string>>& refs) {
  QKV_CHECK(!refs.empty(), name, ": no reference stream given");
  for (size_t r = 0; r < refs.size(); ++r)
    QKV_CHECK(refs[r].size() == hyps.size(), name, ": reference stream ", r, " has ",
              refs[r].size(), " lines but there are ", hyps.size(), " hypotheses");
  SentenceRefs out(hyps.size());
  for (size_t i = 0; i < hyps.size(); ++i)
    for (const auto& stream : refs) out[i].push_back(&stream[i]);
  return out;
}

// From the per-sentence layout (refs[i]: the references of sentence i, at least one), checked.
SentenceRefs from_lists(const char* name, const std::vector<std::string>& hyps,
                        const std::vector<std::vector<std::string>>& refs) {
  QKV_CHECK(refs.size() == hyps.size(), name, ": ", refs.size(), " reference lists for ", hyps.size(),
            " hypotheses");
  SentenceRefs out(refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    QKV_CHECK(!refs[i].empty(), name, ": sentence ", i, " has no reference");
    for (const std::string& r : refs[i]) out[i].push_back(&r);
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// --- BLEU ---------------------------------------------------------------------------------------

constexpr int kOrder = 4;

// The tokenized line is single-space separated, so the n-gram of tokens i..i+n-1 is a substring
// of it, and its order is implied by its content: one map holds all orders.
using NgramCounts = std::unordered_map<std::string_view, int64_t>;

// Counts the 1..4-grams of a tokenized line; returns the number of tokens.
int64_t count_ngrams(std::string_view line, NgramCounts& counts) {
  std::vector<size_t> starts, ends;
  for (size_t i = 0; i < line.size();) {
    const size_t sp = line.find(' ', i);
    const size_t e = sp == std::string_view::npos ? line.size() : sp;
    starts.push_back(i);
    ends.push_back(e);
    i = e + 1;
  }
  const size_t n_tok = starts.size();
  for (int n = 1; n <= kOrder; ++n)
    for (size_t i = 0; i + n <= n_tok; ++i)
      ++counts[line.substr(starts[i], ends[i + n - 1] - starts[i])];
  return static_cast<int64_t>(n_tok);
}

int ngram_order(std::string_view ngram) {
  return 1 + static_cast<int>(std::count(ngram.begin(), ngram.end(), ' '));
}

std::string preprocess_bleu(const std::string& line) { return tokenize_13a(py_rstrip(line)); }

// --- chrF ---------------------------------------------------------------------------------------

constexpr int kCharOrder = 6;
constexpr int kBeta = 2;

using CharNgrams = std::array<std::unordered_map<std::string_view, int64_t>, kCharOrder>;

// ''.join(line.split()): the line without whitespace.
std::string strip_spaces(std::string_view s) {
  std::string out;
  for (std::string_view tok : py_split(s)) out.append(tok);
  return out;
}

// Character (code point) n-grams of orders 1..6 of a line without whitespace.
void char_ngrams(std::string_view s, CharNgrams& out) {
  std::vector<size_t> bounds;  // byte offsets of the characters, then s.size()
  for (size_t i = 0; i < s.size(); i += next_cp(s, i).second) bounds.push_back(i);
  const size_t n_chars = bounds.size();
  bounds.push_back(s.size());
  for (int n = 1; n <= kCharOrder; ++n)
    for (size_t i = 0; i + n <= n_chars; ++i)
      ++out[n - 1][s.substr(bounds[i], bounds[i + n] - bounds[i])];
}

// statistics: kCharOrder triples [hyp n-grams, ref n-grams, matches]. CHRF._compute_f_score with
// eps_smoothing off.
double chrf_f_score(const std::array<int64_t, 3 * kCharOrder>& st) {
  constexpr double eps = 1e-16;
  constexpr int factor = kBeta * kBeta;
  double avg_prec = 0.0, avg_rec = 0.0;
  int effective_order = 0;
  for (int i = 0; i < kCharOrder; ++i) {
    const int64_t n_hyp = st[3 * i], n_ref = st[3 * i + 1], n_match = st[3 * i + 2];
    const double prec = n_hyp > 0 ? static_cast<double>(n_match) / static_cast<double>(n_hyp) : eps;
    const double rec = n_ref > 0 ? static_cast<double>(n_match) / static_cast<double>(n_ref) : eps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (effective_order == 0) {
    avg_prec = avg_rec = 0.0;
  } else {
    avg_prec /= effective_order;
    avg_rec /= effective_order;
  }
  if (avg_prec + avg_rec != 0.0) {
    double score = (1 + factor) * avg_prec * avg_rec;
    score /= (factor * avg_prec) + avg_rec;
    return 100 * score;
  }
  return 0.0;
}

}  // namespace

std::string tokenize_13a(std::string_view line) {
  std::string s(line);
  replace_all(s, "<skipped>", "");
  replace_all(s, "-\n", "");
  replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replace_all(s, "&quot;", "\"");
    replace_all(s, "&amp;", "&");
    replace_all(s, "&lt;", "<");
    replace_all(s, "&gt;", ">");
  }
  return regexp_tokenize(" " + s + " ");
}

namespace {

BleuScore bleu(const std::vector<std::string>& hyps, const SentenceRefs& refs) {
  int64_t sys_len = 0, ref_len = 0;
  std::array<int64_t, kOrder> correct{}, total{};
  std::vector<std::string> ref_tok;  // alive while ref_counts (string views into them) is used
  NgramCounts ref_counts, one_ref, hyp_counts;
  for (size_t i = 0; i < hyps.size(); ++i) {
    // References: n-gram counts merged by max, and the lengths.
    ref_counts.clear();
    int64_t closest_diff = -1, closest_len = -1;
    const std::string hyp_tok = preprocess_bleu(hyps[i]);
    hyp_counts.clear();
    const int64_t hyp_len = count_ngrams(hyp_tok, hyp_counts);
    ref_tok.resize(refs[i].size());
    for (size_t r = 0; r < refs[i].size(); ++r) {
      ref_tok[r] = preprocess_bleu(*refs[i][r]);
      one_ref.clear();
      const int64_t len = count_ngrams(ref_tok[r], one_ref);
      for (const auto& [ng, c] : one_ref) {
        int64_t& m = ref_counts[ng];
        m = std::max(m, c);
      }
      // BLEU._get_closest_ref_len: the closest length, the shorter one on a tie.
      const int64_t diff = hyp_len > len ? hyp_len - len : len - hyp_len;
      if (closest_diff == -1 || diff < closest_diff) {
        closest_diff = diff;
        closest_len = len;
      } else if (diff == closest_diff && len < closest_len) {
        closest_len = len;
      }
    }
    sys_len += hyp_len;
    ref_len += closest_len;
    for (const auto& [ng, c] : hyp_counts) {
      const int n = ngram_order(ng) - 1;
      total[n] += c;
      const auto it = ref_counts.find(ng);
      if (it != ref_counts.end()) correct[n] += std::min(c, it->second);
    }
  }

  // BLEU.compute_bleu with smooth_method "exp", effective_order off.
  BleuScore s;
  s.hyp_len = sys_len;
  s.ref_len = ref_len;
  s.counts = correct;
  s.totals = total;
  s.ratio = ref_len ? static_cast<double>(sys_len) / static_cast<double>(ref_len) : 0.0;
  s.bp = 1.0;
  if (sys_len < ref_len)
    s.bp = sys_len > 0
               ? std::exp(1 - static_cast<double>(ref_len) / static_cast<double>(sys_len))
               : 0.0;
  s.precisions.fill(0.0);
  if (std::all_of(correct.begin(), correct.end(), [](int64_t c) { return c == 0; })) {
    s.score = 0.0;
    return s;
  }
  double smooth_mteval = 1.0;
  for (int n = 0; n < kOrder; ++n) {
    if (total[n] == 0) break;
    if (correct[n] == 0) {
      smooth_mteval *= 2;
      s.precisions[n] = 100. / (smooth_mteval * static_cast<double>(total[n]));
    } else {
      s.precisions[n] = 100. * static_cast<double>(correct[n]) / static_cast<double>(total[n]);
    }
  }
  double log_sum = 0.0;  // sum([my_log(p) for p in precisions]), left to right
  for (double p : s.precisions) log_sum += p == 0.0 ? -9999999999.0 : std::log(p);
  s.score = s.bp * std::exp(log_sum / kOrder);
  return s;
}

}  // namespace

double BleuScore::bleu_n(int n) const {
  QKV_CHECK(n >= 1 && n <= kOrder, "BLEU-n: n must be 1 … ", kOrder, ", got ", n);
  // A hypothesis with no matching word scores 0 at every order (compute_bleu's first test); the
  // "exp" smoothing of order k depends only on orders ≤ k, so the precisions are those of BLEU-4.
  if (counts[0] == 0) return 0.0;
  double log_sum = 0.0;
  for (int k = 0; k < n; ++k) log_sum += precisions[k] == 0.0 ? -9999999999.0 : std::log(precisions[k]);
  return bp * std::exp(log_sum / n);
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  return bleu(hyps, from_streams("corpus_bleu", hyps, refs));
}

BleuScore corpus_bleu_by_sentence(const std::vector<std::string>& hyps,
                                  const std::vector<std::vector<std::string>>& refs) {
  return bleu(hyps, from_lists("corpus_bleu_by_sentence", hyps, refs));
}

std::string BleuScore::format() const {
  std::string out = "BLEU = " + fmt("%.2f", score) + " ";
  for (int n = 0; n < kOrder; ++n) {
    if (n) out += '/';
    out += fmt("%.1f", precisions[n]);
  }
  out += " (BP = " + fmt("%.3f", bp) + " ratio = " + fmt("%.3f", ratio) +
         " hyp_len = " + std::to_string(hyp_len) + " ref_len = " + std::to_string(ref_len) + ")";
  return out;
}

namespace {

ChrfScore chrf(const std::vector<std::string>& hyps, const SentenceRefs& refs) {
  std::array<int64_t, 3 * kCharOrder> corpus{};
  CharNgrams hyp_ng, ref_ng;
  for (size_t i = 0; i < hyps.size(); ++i) {
    const std::string hyp = strip_spaces(hyps[i]);
    for (auto& m : hyp_ng) m.clear();
    char_ngrams(hyp, hyp_ng);
    std::array<int64_t, 3 * kCharOrder> best{};
    double best_f = -1.0;
    for (const std::string* r : refs[i]) {
      const std::string ref = strip_spaces(*r);
      for (auto& m : ref_ng) m.clear();
      char_ngrams(ref, ref_ng);
      std::array<int64_t, 3 * kCharOrder> st{};
      for (int n = 0; n < kCharOrder; ++n) {
        int64_t hyp_count = 0, match = 0, ref_count = 0;
        for (const auto& [ng, c] : hyp_ng[n]) {
          hyp_count += c;
          const auto it = ref_ng[n].find(ng);
          if (it != ref_ng[n].end()) match += std::min(c, it->second);
        }
        for (const auto& kv : ref_ng[n]) ref_count += kv.second;
        st[3 * n] = ref_ng[n].empty() ? 0 : hyp_count;  // no hits without a reference n-gram
        st[3 * n + 1] = ref_count;
        st[3 * n + 2] = match;
      }
      const double f = chrf_f_score(st);
      if (f > best_f) {
        best_f = f;
        best = st;
      }
    }
    for (size_t k = 0; k < corpus.size(); ++k) corpus[k] += best[k];
  }
  return ChrfScore{chrf_f_score(corpus)};
}

}  // namespace

ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  return chrf(hyps, from_streams("corpus_chrf", hyps, refs));
}

ChrfScore corpus_chrf_by_sentence(const std::vector<std::string>& hyps,
                                  const std::vector<std::vector<std::string>>& refs) {
  return chrf(hyps, from_lists("corpus_chrf_by_sentence", hyps, refs));
}

std::string ChrfScore::format() const { return "chrF2 = " + fmt("%.2f", score); }

}  // namespace qkv::text
