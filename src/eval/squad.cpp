#include "qkv/eval/squad.h"

#include <algorithm>
#include <map>

#include "qkv/text/unicode.h"

namespace qkv::eval {

namespace {

// Python's string.punctuation
bool ascii_punctuation(char32_t c) {
  return (c >= U'!' && c <= U'/') || (c >= U':' && c <= U'@') || (c >= U'[' && c <= U'`') || (c >= U'{' && c <= U'~');
}

// re.sub(r"\b(a|an|the)\b", " ", s): each article that neither follows nor precedes a word character
std::string remove_articles(const std::string& s) {
  const auto cps = text::code_points_of(s);
  std::string out;
  size_t copied = 0;  // bytes of s already in out (or dropped)
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i > 0 && text::is_word_char(cps[i - 1].first)) continue;  // (no \b before it)
    for (const std::string_view article : {"the", "an", "a"}) {
      const size_t n = article.size(), at = cps[i].second;
      if (i + n > cps.size() || s.compare(at, n, article) != 0) continue;
      if (i + n < cps.size() && text::is_word_char(cps[i + n].first)) continue;  // (no \b after it)
      out.append(s, copied, at - copied).push_back(' ');
      copied = at + n;
      i += n - 1;
      break;
    }
  }
  return out.append(s, copied);
}

}  // namespace

std::string normalize_answer(std::string_view s) {
  std::string kept;  // lower-cased, without punctuation
  const std::string lower = text::lowercase(s);
  const auto cps = text::code_points_of(lower);
  for (size_t i = 0; i < cps.size(); ++i) {
    const size_t end = i + 1 < cps.size() ? cps[i + 1].second : lower.size();
    if (!ascii_punctuation(cps[i].first)) kept.append(lower, cps[i].second, end - cps[i].second);
  }
  std::string out;
  for (const std::string& w : text::split_whitespace(remove_articles(kept))) out += (out.empty() ? "" : " ") + w;
  return out;
}

AnswerScores answer_scores(std::string_view prediction, const std::vector<std::string>& truths) {
  const std::string p = normalize_answer(prediction);
  const std::vector<std::string> p_words = text::split_whitespace(p);
  std::vector<std::string> golds;
  for (const std::string& t : truths)
    if (std::string n = normalize_answer(t); !n.empty()) golds.push_back(std::move(n));
  if (golds.empty()) golds.emplace_back();
  AnswerScores best;
  for (const std::string& g : golds) {
    best.exact_match = std::max(best.exact_match, g == p ? 1.0 : 0.0);
    const std::vector<std::string> g_words = text::split_whitespace(g);
    double f1 = 0;
    if (g_words.empty() || p_words.empty()) {
      f1 = g_words == p_words ? 1.0 : 0.0;
    } else {
      std::map<std::string, int> count;
      for (const std::string& w : g_words) ++count[w];
      int common = 0;
      for (const std::string& w : p_words)
        if (auto it = count.find(w); it != count.end() && it->second > 0) --it->second, ++common;
      if (common > 0) {
        const double precision = static_cast<double>(common) / static_cast<double>(p_words.size());
        const double recall = static_cast<double>(common) / static_cast<double>(g_words.size());
        f1 = 2 * precision * recall / (precision + recall);
      }
    }
    best.f1 = std::max(best.f1, f1);
  }
  return best;
}

}  // namespace qkv::eval
