// Corpus BLEU and chrF, identical to sacreBLEU 2.x with its defaults (checked against sacreBLEU 2.6.0
// by tests/golden/make_bleu_golden.py → tests/golden/bleu.json):
//
//   BLEU: tokenize "13a", smooth "exp", case-sensitive, no effective order, max n-gram order 4.
//     With several references, the n-gram counts are clipped by the maximum count over the
//     references, and the brevity penalty uses, per sentence, the reference length closest to the
//     hypothesis length (on a tie, the shorter one).
//   chrF: character n-grams up to 6, no word n-grams (chrF, not chrF++), beta 2, whitespace
//     removed, sacreBLEU's effective-order averaging (eps_smoothing off). With several references,
//     each sentence takes the statistics of the reference with the best sentence-level chrF.
//
// Strings are UTF-8; "characters" and "whitespace" mean what they mean to Python's str (code points;
// str.split() whitespace, which includes U+00A0, U+2009, U+202F, U+3000, ...). Bytes that are not
// valid UTF-8 count as one character each.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

struct BleuScore {
  double score = 0.0;                        // 0..100
  std::array<double, 4> precisions{};        // n-gram precisions in percent (smoothed as "exp")
  double bp = 0.0;                           // brevity penalty
  double ratio = 0.0;                        // hyp_len / ref_len (0 when ref_len is 0)
  int64_t hyp_len = 0, ref_len = 0;          // 13a tokens; ref_len sums the closest lengths
  std::array<int64_t, 4> counts{};           // matched n-grams per order (clipped)
  std::array<int64_t, 4> totals{};           // hypothesis n-grams per order

  // BLEU-n (n = 1 … 4), the captioning figures: the same statistics over the first n orders only,
  // BP · exp((1/n) Σ_{k≤n} log p_k) — sacreBLEU's BLEU(max_ngram_order=n). bleu_n(4) == score.
  double bleu_n(int n) const;

  // sacreBLEU's score line:
  // "BLEU = 35.42 66.2/42.1/28.9/20.0 (BP = 0.981 ratio = 0.981 hyp_len = 1234 ref_len = 1258)"
  std::string format() const;
};

// refs[r][i] is reference stream r for sentence i (sacreBLEU's layout: one list per reference
// set). Every stream must have hyps.size() lines; an empty string is a reference of length 0.
// Throws qkv::Error on a length mismatch or when there is no reference stream.
BleuScore corpus_bleu(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& refs);

// refs[i] holds the references of sentence i: one or more, as many as that sentence has. This is
// sacreBLEU with a variable number of references (its stream layout with None for the missing
// ones), e.g. Tatoeba, where one source has up to two dozen translations.
BleuScore corpus_bleu_by_sentence(const std::vector<std::string>& hyps,
                                  const std::vector<std::vector<std::string>>& refs);

// sacreBLEU's "13a" tokenizer (mteval-v13a): removes "<skipped>", joins "-\n" hyphenations,
// unescapes &quot; &amp; &lt; &gt;, separates ASCII punctuation (except "'" and "-"; "." and ","
// stay attached between digits; "-" is split after a digit) and collapses whitespace to single
// spaces with no leading/trailing space. corpus_bleu additionally strips trailing whitespace from
// each line before tokenizing (as sacreBLEU does).
std::string tokenize_13a(std::string_view line);

struct ChrfScore {
  double score = 0.0;  // 0..100
  // BLEU-n (n = 1 … 4), the captioning figures: the same statistics over the first n orders only,
  // BP · exp((1/n) Σ_{k≤n} log p_k) — sacreBLEU's BLEU(max_ngram_order=n). bleu_n(4) == score.
  double bleu_n(int n) const;

  // sacreBLEU's score line: "chrF2 = 55.12"
  std::string format() const;
};

// Same argument layout and checks as corpus_bleu.
ChrfScore corpus_chrf(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& refs);
ChrfScore corpus_chrf_by_sentence(const std::vector<std::string>& hyps,
                                  const std::vector<std::vector<std::string>>& refs);

}  // namespace qkv::text
