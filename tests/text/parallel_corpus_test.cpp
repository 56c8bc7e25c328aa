// Parallel corpora: line files (plain and gzip), TSV pairs, line-aligned file pairs, the split by
// source sentence, and normalize_spaces.
#include "qkv/text/parallel_corpus.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "testing.h"

namespace {

namespace fs = std::filesystem;
using namespace qkv::text;
using qkv::testing::error_of;

fs::path temp_path() {
  return fs::temp_directory_path() / ("qkv_corpus_test_" + std::to_string(::getpid()));
}

std::string temp_file(const std::string& name) {
  fs::create_directories(temp_path());
  return (temp_path() / name).string();
}

struct RemoveTempDir {
  ~RemoveTempDir() {
    std::error_code ec;
    fs::remove_all(temp_path(), ec);
  }
} remove_temp_dir;

std::string write_plain(const std::string& name, const std::string& content) {
  const std::string path = temp_file(name);
  std::ofstream out(path, std::ios::binary);
  out << content;
  return path;
}

std::string write_gzip(const std::string& name, const std::string& content) {
  const std::string path = temp_file(name);
  gzFile gz = gzopen(path.c_str(), "wb");
  EXPECT_NE(gz, nullptr);
  if (!content.empty()) {
    EXPECT_EQ(gzwrite(gz, content.data(), static_cast<unsigned>(content.size())),
              static_cast<int>(content.size()));
  }
  gzclose(gz);
  return path;
}

TEST(ParallelCorpus, ReadLinesPlainAndGzip) {
  const std::string text = "first\r\nsecond\n\nfourth été\r\nlast without newline";
  const std::vector<std::string> want = {"first", "second", "", "fourth été",
                                         "last without newline"};
  EXPECT_EQ(read_lines(write_plain("a.txt", text)), want);
  // Recognized by the magic bytes, whatever the name.
  EXPECT_EQ(read_lines(write_gzip("a.txt.gz", text)), want);
  EXPECT_EQ(read_lines(write_gzip("gzip_without_suffix", text)), want);
  EXPECT_EQ(read_lines(write_plain("b.txt", "one\ntwo\n")),
            (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(read_lines(write_plain("empty.txt", "")).empty());
  EXPECT_TRUE(read_lines(write_gzip("empty.gz", "")).empty());
  EXPECT_EQ(read_lines(write_plain("one_byte.txt", "x")), (std::vector<std::string>{"x"}));
  // A large gzip file (several read buffers).
  std::string big;
  for (int i = 0; i < 200000; ++i) big += "line " + std::to_string(i) + "\n";
  const std::vector<std::string> lines = read_lines(write_gzip("big.gz", big));
  ASSERT_EQ(lines.size(), 200000u);
  EXPECT_EQ(lines[123456], "line 123456");
}

TEST(ParallelCorpus, ReadLinesErrors) {
  const std::string missing = temp_file("missing.txt");
  const std::string msg = error_of([&] { read_lines(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  // A truncated gzip stream.
  std::string big;
  for (int i = 0; i < 5000; ++i) big += "some text " + std::to_string(i) + "\n";
  const std::string gz = write_gzip("trunc.gz", big);
  fs::resize_file(gz, fs::file_size(gz) / 2);
  const std::string msg2 = error_of([&] { read_lines(gz); });
  EXPECT_NE(msg2.find(gz), std::string::npos) << msg2;
}

// What read_lines holds is bounded (issue 43): a gzip "bomb" (one endless line of zeros) is refused
// after its first max_line_bytes, never inflated whole; lines past the budget stop the read; both
// errors name the input and the limit. A line of exactly the limit (plus its '\r') is read.
TEST(ParallelCorpus, ReadLinesLimitsWhatItHolds) {
  qkv::text::LineLimits small;
  small.max_line_bytes = 1 << 20;
  const std::string bomb = write_gzip("bomb.gz", std::string(8 << 20, '\0'));
  EXPECT_LT(fs::file_size(bomb), 100000u);
  std::string msg = error_of([&] { read_lines(bomb, "--input", small); });
  EXPECT_NE(msg.find("--input '" + bomb + "': line 1 is longer than 1 MiB (decompressed)"), std::string::npos) << msg;
  // the default: 16 MiB a line
  const std::string big_bomb = write_gzip("big-bomb.gz", std::string(17 << 20, 'x'));
  msg = error_of([&] { read_lines(big_bomb); });
  EXPECT_NE(msg.find("text file '" + big_bomb + "': line 1 is longer than 16 MiB"), std::string::npos) << msg;
  // plain text the same; the line's number is named
  msg = error_of([&] { read_lines(write_plain("long.txt", "a\nb\n" + std::string((1 << 20) + 1, 'x')), "x", small); });
  EXPECT_NE(msg.find("line 3 is longer than 1 MiB"), std::string::npos) << msg;
  const std::vector<std::string> edge =
      read_lines(write_gzip("edge.gz", std::string(1 << 20, 'y') + "\r\nz"), "x", small);
  ASSERT_EQ(edge.size(), 2u);
  EXPECT_EQ(edge[0].size(), size_t{1} << 20);
  EXPECT_EQ(edge[1], "z");
  // the budget: many short lines take a std::string each
  qkv::text::LineLimits budget;
  budget.max_bytes = 1 << 20;
  std::string many;
  for (int i = 0; i < 100000; ++i) many += "a\n";
  const std::string many_gz = write_gzip("many.gz", many);
  msg = error_of([&] { read_lines(many_gz, "--ref", budget); });
  EXPECT_NE(msg.find("--ref '" + many_gz + "': its lines (decompressed) take more than"), std::string::npos) << msg;
  budget.max_bytes = 8 << 20;
  EXPECT_EQ(read_lines(many_gz, "--ref", budget).size(), 100000u);
}

TEST(ParallelCorpus, ReadTsvPairs) {
  const std::string path = write_gzip(
      "fra.txt.gz",
      "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)\r\n"
      "Hi.\tSalut !\tCC-BY 2.0\n"
      "Hi.\tSalut.\tCC-BY 2.0\n");
  const std::vector<SentencePair> pairs = read_tsv_pairs(path);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].src, "Go.");
  EXPECT_EQ(pairs[0].tgt, "Va !");
  EXPECT_EQ(pairs[2].src, "Hi.");
  EXPECT_EQ(pairs[2].tgt, "Salut.");
  // Other columns; the last column has its '\r' stripped.
  const std::vector<SentencePair> rev = read_tsv_pairs(path, 2, 1);
  EXPECT_EQ(rev[0].src, "CC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM)");
  EXPECT_EQ(rev[0].tgt, "Va !");
  // Empty fields are kept.
  const std::vector<SentencePair> empty = read_tsv_pairs(write_plain("e.tsv", "\tx\na\t\n"));
  EXPECT_EQ(empty[0].src, "");
  EXPECT_EQ(empty[1].tgt, "");
}

TEST(ParallelCorpus, ReadTsvPairsErrorNamesFileAndLine) {
  const std::string path = write_plain("bad.tsv", "a\tb\nc\td\nonly one column\ne\tf\n");
  const std::string msg = error_of([&] { read_tsv_pairs(path); });
  EXPECT_NE(msg.find(path + ":3:"), std::string::npos) << msg;
  const std::string msg2 = error_of([&] { read_tsv_pairs(write_plain("ok.tsv", "a\tb\n"), 0, 2); });
  EXPECT_NE(msg2.find("ok.tsv:1:"), std::string::npos) << msg2;
  EXPECT_THROW(read_tsv_pairs(temp_file("no_such.tsv")), qkv::Error);
}

TEST(ParallelCorpus, ReadFilePairs) {
  const std::string en = write_gzip("train.en.gz", "A dog.\nTwo cats.\n");
  const std::string de = write_plain("train.de", "Ein Hund.\r\nZwei Katzen.\r\n");
  const std::vector<SentencePair> pairs = read_file_pairs(en, de);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[1].src, "Two cats.");
  EXPECT_EQ(pairs[1].tgt, "Zwei Katzen.");
  const std::string de3 = write_plain("three.de", "a\nb\nc\n");
  const std::string msg = error_of([&] { read_file_pairs(en, de3); });
  EXPECT_NE(msg.find(en), std::string::npos) << msg;
  EXPECT_NE(msg.find(de3), std::string::npos) << msg;
  EXPECT_NE(msg.find(" 2 "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" 3"), std::string::npos) << msg;
}

// 60 distinct sources, source k having (k % 4) + 1 translations, interleaved.
std::vector<SentencePair> many_translations() {
  std::vector<SentencePair> pairs;
  for (int rep = 0; rep < 4; ++rep)
    for (int k = 0; k < 60; ++k)
      if (rep <= k % 4)
        pairs.push_back({"source " + std::to_string(k), "target " + std::to_string(k) + "/" +
                                                            std::to_string(rep)});
  return pairs;
}

std::set<std::string> sources(const std::vector<SentencePair>& v) {
  std::set<std::string> s;
  for (const auto& p : v) s.insert(p.src);
  return s;
}

TEST(Split, NoSourceOverlapAndCounts) {
  const std::vector<SentencePair> pairs = many_translations();
  const Split s = split_by_source(pairs, 10, 7, 42);
  const auto tr = sources(s.train), dv = sources(s.dev), te = sources(s.test);
  EXPECT_EQ(dv.size(), 10u);
  EXPECT_EQ(te.size(), 7u);
  EXPECT_EQ(tr.size(), 43u);
  for (const auto& x : dv) {
    EXPECT_EQ(tr.count(x), 0u) << x;
    EXPECT_EQ(te.count(x), 0u) << x;
  }
  for (const auto& x : te) EXPECT_EQ(tr.count(x), 0u) << x;
  // All pairs kept, each exactly once.
  EXPECT_EQ(s.train.size() + s.dev.size() + s.test.size(), pairs.size());
  std::multiset<std::string> all, got;
  for (const auto& p : pairs) all.insert(p.src + "\t" + p.tgt);
  for (const auto* v : {&s.train, &s.dev, &s.test})
    for (const auto& p : *v) got.insert(p.src + "\t" + p.tgt);
  EXPECT_EQ(all, got);
  // A source's pairs all go to one split: dev holds every translation of its sources.
  size_t dev_pairs = 0;
  for (const auto& p : pairs) dev_pairs += dv.count(p.src);
  EXPECT_EQ(s.dev.size(), dev_pairs);
}

TEST(Split, KeepsFileOrderInsideSplits) {
  const std::vector<SentencePair> pairs = many_translations();
  const Split s = split_by_source(pairs, 10, 10, 7);
  auto position = [&](const SentencePair& p) {
    for (size_t i = 0; i < pairs.size(); ++i)
      if (pairs[i].src == p.src && pairs[i].tgt == p.tgt) return i;
    return pairs.size();
  };
  for (const auto* v : {&s.train, &s.dev, &s.test})
    for (size_t i = 1; i < v->size(); ++i) EXPECT_LT(position((*v)[i - 1]), position((*v)[i]));
}

TEST(Split, DeterministicAndSeedDependent) {
  const std::vector<SentencePair> pairs = many_translations();
  const Split a = split_by_source(pairs, 10, 10, 123);
  const Split b = split_by_source(pairs, 10, 10, 123);
  const Split c = split_by_source(pairs, 10, 10, 124);
  EXPECT_EQ(sources(a.dev), sources(b.dev));
  EXPECT_EQ(sources(a.test), sources(b.test));
  EXPECT_NE(sources(a.dev), sources(c.dev));
  // The same on every machine and compiler: splitmix64 + Fisher–Yates, pinned here.
  const Split d = split_by_source(pairs, 3, 2, 2024);
  std::vector<std::string> dev, test;
  for (const auto& p : d.dev) dev.push_back(p.src + "|" + p.tgt);
  for (const auto& p : d.test) test.push_back(p.src + "|" + p.tgt);
  // (Cross-checked against an independent Python implementation of the same procedure.)
  EXPECT_EQ(dev, (std::vector<std::string>{"source 10|target 10/0", "source 21|target 21/0",
                                           "source 24|target 24/0", "source 10|target 10/1",
                                           "source 21|target 21/1", "source 10|target 10/2"}));
  EXPECT_EQ(test, (std::vector<std::string>{"source 13|target 13/0", "source 40|target 40/0",
                                            "source 13|target 13/1"}));
}

TEST(Split, EdgeCases) {
  const std::vector<SentencePair> pairs = many_translations();
  const Split all_train = split_by_source(pairs, 0, 0, 1);
  EXPECT_EQ(all_train.train.size(), pairs.size());
  EXPECT_TRUE(all_train.dev.empty());
  const Split no_train = split_by_source(pairs, 30, 30, 1);
  EXPECT_TRUE(no_train.train.empty());
  EXPECT_EQ(sources(no_train.dev).size(), 30u);
  EXPECT_THROW(split_by_source(pairs, 30, 31, 1), qkv::Error);
  EXPECT_THROW(split_by_source(pairs, -1, 0, 1), qkv::Error);
  const Split empty = split_by_source({}, 0, 0, 5);
  EXPECT_TRUE(empty.train.empty() && empty.dev.empty() && empty.test.empty());
}

TEST(ParallelCorpus, NormalizeSpaces) {
  EXPECT_EQ(normalize_spaces("  Où est la gare\u00a0?  "), "Où est la gare ?");
  EXPECT_EQ(normalize_spaces("«\u202fBonjour\u202f»"), "« Bonjour »");
  EXPECT_EQ(normalize_spaces("a\u2009b\t\tc \r\n d"), "a b c d");
  EXPECT_EQ(normalize_spaces("\u00a0\u202f\u2009\t "), "");
  EXPECT_EQ(normalize_spaces(""), "");
  EXPECT_EQ(normalize_spaces("plain"), "plain");
  EXPECT_EQ(normalize_spaces("déjà  vu"), "déjà vu");
  // Other characters starting with the same bytes are left alone: U+00A9 ©, U+2014 —, U+2026 ….
  EXPECT_EQ(normalize_spaces("\u00a9 \u2014 \u2026"), "\u00a9 \u2014 \u2026");
  EXPECT_EQ(normalize_spaces("\xC2"), "\xC2");  // truncated UTF-8 passes through
}

}  // namespace
