// Parallel corpora for machine translation: reading line files (plain or gzip), tab-separated
// pair files (Tatoeba's fra.txt: "English<TAB>French<TAB>attribution"), line-aligned file pairs
// (Multi30k's train.en/train.de), a leak-free train/dev/test split by source sentence, and the
// whitespace normalization applied to raw text before SentencePiece and BLEU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

struct SentencePair {
  std::string src, tgt;
};

// What read_lines holds. A line is a sentence, at most max_line_bytes (16 MiB: a sentence is
// kilobytes, and tokenizing a line takes tens of bytes per byte); the lines together — their bytes
// and a std::string each — and the file's own bytes at most max_bytes (0: half of the machine's
// memory, core/machine.h). Both bound what a gzip file inflates to: a "bomb" of 512 MiB of zeros
// ran qkv out of memory (issue 43); it is refused after its first 16 MiB.
struct LineLimits {
  int64_t max_line_bytes = int64_t{16} << 20;
  int64_t max_bytes = 0;
};

// The lines of a text file, plain or gzip-compressed (recognized by its magic bytes, not its
// name). Lines end at '\n'; a trailing '\r' is removed; a final line without '\n' counts, the
// empty "line" after a final '\n' does not. A regular file is read to its size, no larger than
// half the memory (io/data_file.h); a pipe, FIFO or device (`-i <(cmd)`) is read as a stream, as
// `cat` does (opening a FIFO waits for its writer). read_tsv_pairs and read_file_pairs (training
// data) take regular files only. qkv::Error "<what> '<path>': …" when it cannot be read, is not gzip
// it claims to be, or passes the limits (naming the line, or the limit).
std::vector<std::string> read_lines(const std::string& path, const std::string& what = "text file",
                                    const LineLimits& limits = {});

// Tab-separated pairs: column src_col is the source, tgt_col the target (0-based). A line with
// too few columns (an empty line included) → qkv::Error "PATH:LINE: ...".
std::vector<SentencePair> read_tsv_pairs(const std::string& path, int src_col = 0,
                                         int tgt_col = 1);

// Line-aligned files: line i of src_path and line i of tgt_path form pair i. Different line
// counts → qkv::Error naming both files and both counts.
std::vector<SentencePair> read_file_pairs(const std::string& src_path, const std::string& tgt_path);

struct Split {
  std::vector<SentencePair> train, dev, test;
};

// Splits by distinct source sentence (exact string equality), so that no source sentence of dev
// or test occurs in train (Tatoeba has many translations per English sentence). The distinct
// sources are shuffled with a splitmix64-driven Fisher–Yates shuffle seeded by `seed` (the same
// result on every machine and compiler); the first dev_sources go to dev, the next test_sources to
// test, the rest to train, each with all its pairs. Inside a split, pairs keep their input order.
// dev_sources + test_sources larger than the number of distinct sources → qkv::Error.
Split split_by_source(const std::vector<SentencePair>& pairs, int64_t dev_sources,
                      int64_t test_sources, uint64_t seed);

// Maps U+00A0 (no-break space), U+202F (narrow no-break space), U+2009 (thin space) and ASCII
// whitespace (tab, '\n', '\v', '\f', '\r') to ' ', collapses runs of spaces to one and trims both
// ends. Other bytes (including invalid UTF-8) pass through unchanged.
std::string normalize_spaces(std::string_view text);

}  // namespace qkv::text
