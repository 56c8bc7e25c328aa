// qkv bench tokenizer — a Hugging Face tokenizer (text::HfTokenizer: tokenizer.json, or a BERT
// vocab.txt) encoding the lines of a text file one at a time, with the special tokens, on one thread
// (a tokenizer is called a line at a time by a translator, a server, a data loader): lines and
// tokens a second over the whole file, the median of --repeats passes after one unmeasured.
// bench/tokenizer_vs_hf.py runs it beside Hugging Face's `tokenizers` on the same files.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/parallel_corpus.h"

namespace qkv::cli {

namespace {

struct TokenizerBenchArgs {
  std::string folder, input;
  int repeats = 5;
  bool json = false;
};

int run_bench_tokenizer(const TokenizerBenchArgs& a) {
  const text::HfTokenizer tok = text::HfTokenizer::from_folder(a.folder);
  const std::vector<std::string> lines = text::read_lines(a.input, "bench tokenizer --input");
  if (lines.empty()) throw Error("bench tokenizer: --input '" + a.input + "' holds no lines");
  int64_t bytes = 0, tokens = 0;
  uint64_t sum = 0;  // the ids, summed: the same ids give the same sum as another tokenizer's
  for (const std::string& l : lines) {
    bytes += static_cast<int64_t>(l.size());
    for (int32_t id : tok.encode(l)) sum += static_cast<uint64_t>(id), ++tokens;
  }
  std::vector<double> seconds;
  for (int r = 0; r < a.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const std::string& l : lines) n += tok.encode(l).size();
    seconds.push_back(seconds_since(t0));
    if (static_cast<int64_t>(n) != tokens) throw Error("bench tokenizer: the token count changed between passes");
  }
  const double s = time_stats(seconds).median;
  const double lines_s = static_cast<double>(lines.size()) / s, tokens_s = static_cast<double>(tokens) / s;
  if (a.json) {
    std::printf(
        "{\"impl\": \"qkv\", \"folder\": \"%s\", \"lines\": %zu, \"bytes\": %ld, \"tokens\": %ld, "
        "\"id_sum\": %llu, \"seconds\": %.6f, \"lines_per_s\": %.1f, \"tokens_per_s\": %.1f}\n",
        a.folder.c_str(), lines.size(), static_cast<long>(bytes), static_cast<long>(tokens),
        static_cast<unsigned long long>(sum), s, lines_s, tokens_s);
  } else {
    std::printf("tokenizer %s: %zu lines (%ld bytes, %ld tokens with the special ones), one thread, a line at a time\n",
                a.folder.c_str(), lines.size(), static_cast<long>(bytes), static_cast<long>(tokens));
    std::printf("  %.3f s a pass (median of %d): %.0f lines/s, %.0f tokens/s, %.1f MB/s\n", s, a.repeats, lines_s,
                tokens_s, static_cast<double>(bytes) / s / 1e6);
  }
  return 0;
}

}  // namespace

void add_bench_tokenizer(CLI::App* bench) {
  auto a = std::make_shared<TokenizerBenchArgs>();
  CLI::App* app = bench->add_subcommand(
      "tokenizer", "Time a Hugging Face tokenizer (tokenizer.json or vocab.txt) encoding a file's lines one at a time");
  app->add_option("folder", a->folder, "a folder holding tokenizer.json (+ tokenizer_config.json) or a BERT vocab.txt")
      ->required();
  app->add_option("--input,-i", a->input, "a text file (plain or gzip), one line a text")->required();
  app->add_option("--repeats", a->repeats, "timed passes over the file (the median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app->add_flag("--json", a->json, "print one JSON object");
  register_runner(app, [a] { return run_bench_tokenizer(*a); });
}

}  // namespace qkv::cli
