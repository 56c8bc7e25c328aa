// Translations scored against references as `qkv eval` reports them, for the CLI, Python and the
// tests alike: corpus BLEU and chrF2 (sacreBLEU's defaults, text/bleu.h) over the sentences, and
// again over each bucket of source length.
//
//   sentences   every line; or, grouped, each distinct source once (its first line) with the
//               references of all its lines — a corpus such as Tatoeba lists one English sentence
//               with several French ones, and scoring each line alone counts the others as wrong
//   by length   bucket b holds the sentences whose source has (b·w, (b + 1)·w] 13a tokens (bucket 0
//               also the empty ones), w = bucket_width; empty buckets are left out
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/text/bleu.h"

namespace qkv::eval {

// Which lines are scored: sentence k is line first_line[k]; line i belongs to sentence sentence_of[i].
struct SentenceGroups {
  std::vector<size_t> first_line;
  std::vector<size_t> sentence_of;
  bool grouped = false;  // scored with each sentence's references together (the _by_sentence forms)
  size_t sentences() const { return first_line.size(); }
};
// n_lines lines, each its own sentence; or (group) grouped by identical sources (sources: n_lines).
SentenceGroups group_by_source(const std::vector<std::string>& sources, size_t n_lines, bool group);

struct LengthBucket {
  int64_t from = 0, to = 0;  // source tokens, inclusive
  size_t sentences = 0;
  text::BleuScore bleu;
  text::ChrfScore chrf;
};

struct TranslationScores {
  text::BleuScore bleu;
  text::ChrfScore chrf;
  size_t sentences = 0;
  std::vector<LengthBucket> by_length;  // bucket_width > 0 only
};

// hyps: one per sentence of `groups`; refs: reference streams of one line per source line each
// (sacreBLEU's layout); sources: the source lines (needed for bucket_width > 0). Ungrouped scores
// equal corpus_bleu(hyps, refs) and corpus_chrf; grouped ones the _by_sentence forms. Throws
// qkv::Error on mismatched lengths.
TranslationScores score_translations(const SentenceGroups& groups, const std::vector<std::string>& hyps,
                                     const std::vector<std::vector<std::string>>& refs,
                                     const std::vector<std::string>& sources = {}, int64_t bucket_width = 0);

}  // namespace qkv::eval
