#include "qkv/eval/translation_scores.h"

#include <algorithm>
#include <unordered_map>

#include "qkv/core/error.h"

namespace qkv::eval {

SentenceGroups group_by_source(const std::vector<std::string>& sources, size_t n_lines, bool group) {
  QKV_CHECK(!group || sources.size() == n_lines, "group_by_source: ", sources.size(), " sources for ", n_lines,
            " lines");
  SentenceGroups g;
  g.sentence_of.resize(n_lines);
  g.grouped = group;
  if (!group) {
    for (size_t i = 0; i < n_lines; ++i) g.first_line.push_back(i), g.sentence_of[i] = i;
    return g;
  }
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < n_lines; ++i) {
    auto [it, fresh] = seen.emplace(sources[i], g.first_line.size());
    if (fresh) g.first_line.push_back(i);
    g.sentence_of[i] = it->second;
  }
  return g;
}

TranslationScores score_translations(const SentenceGroups& groups, const std::vector<std::string>& hyps,
                                     const std::vector<std::vector<std::string>>& refs,
                                     const std::vector<std::string>& sources, int64_t bucket_width) {
  const size_t n_lines = groups.sentence_of.size();
  QKV_CHECK(hyps.size() == groups.sentences(), "score_translations: ", hyps.size(), " translations for ",
            groups.sentences(), " sentences");
  QKV_CHECK(!refs.empty(), "score_translations: no references");
  for (size_t r = 0; r < refs.size(); ++r)
    QKV_CHECK(refs[r].size() == n_lines, "score_translations: reference stream ", r + 1, " has ", refs[r].size(),
              " lines for ", n_lines);
  QKV_CHECK(bucket_width >= 0, "score_translations: bucket width ", bucket_width, " < 0");
  QKV_CHECK(bucket_width == 0 || sources.size() == n_lines, "score_translations: scores by source length need the ",
            n_lines, " source lines, got ", sources.size());
  const bool grouped = groups.grouped;

  // The references of each sentence: all of its lines' (grouped), or its own line's.
  std::vector<std::vector<std::string>> refs_of(groups.sentences());
  for (size_t i = 0; i < n_lines; ++i)
    for (const auto& stream : refs) refs_of[groups.sentence_of[i]].push_back(stream[i]);

  TranslationScores s;
  s.sentences = hyps.size();
  // the whole set: sacreBLEU's reference streams, or a variable number of references per sentence
  s.bleu = grouped ? text::corpus_bleu_by_sentence(hyps, refs_of) : text::corpus_bleu(hyps, refs);
  s.chrf = grouped ? text::corpus_chrf_by_sentence(hyps, refs_of) : text::corpus_chrf(hyps, refs);
  if (bucket_width == 0) return s;

  // bucket b: sources of (b·w, (b + 1)·w] 13a tokens (bucket 0 also the empty ones)
  std::vector<std::vector<size_t>> members;
  for (size_t k = 0; k < groups.sentences(); ++k) {
    const std::string tok = text::tokenize_13a(sources[groups.first_line[k]]);
    const auto n = static_cast<int64_t>(std::count(tok.begin(), tok.end(), ' ') + (tok.empty() ? 0 : 1));
    const auto b = static_cast<size_t>(n == 0 ? 0 : (n - 1) / bucket_width);
    if (members.size() <= b) members.resize(b + 1);
    members[b].push_back(k);
  }
  for (size_t b = 0; b < members.size(); ++b) {
    if (members[b].empty()) continue;
    LengthBucket bucket;
    bucket.from = b == 0 ? 0 : static_cast<int64_t>(b) * bucket_width + 1;
    bucket.to = static_cast<int64_t>(b + 1) * bucket_width;
    bucket.sentences = members[b].size();
    std::vector<std::string> h;
    std::vector<std::vector<std::string>> r;
    for (size_t k : members[b]) h.push_back(hyps[k]), r.push_back(refs_of[k]);
    bucket.bleu = text::corpus_bleu_by_sentence(h, r);
    bucket.chrf = text::corpus_chrf_by_sentence(h, r);
    s.by_length.push_back(std::move(bucket));
  }
  return s;
}

}  // namespace qkv::eval
