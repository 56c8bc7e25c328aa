// The text readers on arbitrary bytes: lines of a corpus file (plain; gzip when it starts so),
// tab-separated pairs, space normalization, BLEU/chrF of the lines against themselves reversed, and the
// bytes as a CSV data file (io/csv.h, libcsv).
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/csv.h"
#include "qkv/text/bleu.h"
#include "qkv/text/parallel_corpus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qkv::text;
  const std::string path = qkv::fuzz::as_file(data, size, size > 2 && data[0] == 0x1f ? "corpus.gz" : "corpus.txt");
  try {
    std::vector<std::string> lines = read_lines(path);
    for (std::string& l : lines) l = normalize_spaces(l);
    std::vector<std::string> refs(lines.rbegin(), lines.rend());
    if (!lines.empty()) {
      corpus_bleu(lines, {refs});
      corpus_chrf(lines, {refs});
    }
    read_tsv_pairs(path);
  } catch (const qkv::Error&) {
  }
  try {
    qkv::io::parse_csv(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.csv");
  } catch (const qkv::Error&) {
  }
  return 0;
}
