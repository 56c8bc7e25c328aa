// Hugging Face tokenizers against the `tokenizers` package: five tokenizers trained by
// tests/golden/make_tokenizer_golden.py (GPT-2's byte-level BPE, Llama 3's regex, Llama 2's byte
// fallback, BERT WordPiece uncased and cased) on a 10,000-line corpus of several scripts, emoji,
// combining marks, control characters, whitespace runs, added tokens and invalid UTF-8: every line's
// ids (with and without special tokens), decode (skipping the special tokens or not) and BERT's
// pairs with their token types must be `tokenizers`' own. And hostile tokenizer.json files end in a
// qkv::Error naming the file and the field.
#include "qkv/text/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/base64.h"
#include "qkv/io/file.h"
#include "qkv/text/parallel_corpus.h"
#include "testing.h"

namespace qkv::text {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::error_of;

const std::string kDir = std::string(QKV_GOLDEN_DIR) + "/tokenizers";

const std::vector<json>& corpus() {
  static const std::vector<json> records = [] {
    std::vector<json> out;
    for (const auto& line : read_lines(kDir + "/corpus.jsonl.gz", "the tokenizer corpus")) out.push_back(json::parse(line));
    return out;
  }();
  return records;
}

std::string line_text(const json& rec) { return io::base64_decode(rec["b"].get<std::string>()); }
// The text `tokenizers` saw: the line, its invalid UTF-8 replaced as Python's decode(errors="replace").
std::string seen_text(const json& rec) { return rec.contains("r") ? rec["r"].get<std::string>() : line_text(rec); }

std::string show_ids(const std::vector<int32_t>& v) { return json(v).dump(); }

// Every corpus line through `tok`, against the golden entry `name`; the first mismatches reported
// with their line.
void check_corpus(const HfTokenizer& tok, const std::string& name) {
  const auto& recs = corpus();
  ASSERT_EQ(recs.size(), 10000u);
  int bad = 0;
  auto report = [&](size_t i, const std::string& what, const std::string& got, const std::string& want) {
    if (++bad <= 5)
      ADD_FAILURE() << name << " line " << i << " " << json(seen_text(recs[i])).dump() << ": " << what
                    << "\n  qkv:        " << got << "\n  tokenizers: " << want;
  };
  for (size_t i = 0; i < recs.size(); ++i) {
    const json& e = recs[i][name];
    const std::string text = line_text(recs[i]);
    const auto want = e[0].get<std::vector<int32_t>>();
    const auto got = tok.encode(text, false);
    if (got != want) report(i, "encode(add_special_tokens=False)", show_ids(got), show_ids(want));
    std::vector<int32_t> want_sp;
    if (e[1].is_object()) {
      want_sp = e[1]["ids"].get<std::vector<int32_t>>();
    } else {
      want_sp = e[1][0].get<std::vector<int32_t>>();
      want_sp.insert(want_sp.end(), want.begin(), want.end());
      for (const auto& x : e[1][1]) want_sp.push_back(x.get<int32_t>());
    }
    const auto got_sp = tok.encode(text, true);
    if (got_sp != want_sp) report(i, "encode(add_special_tokens=True)", show_ids(got_sp), show_ids(want_sp));
    // decode the golden ids (a wrong encode is not counted twice)
    const std::string want_text = e[2].is_null() ? seen_text(recs[i]) : e[2].get<std::string>();
    const std::string got_text = tok.decode(want_sp, true);
    if (got_text != want_text) report(i, "decode(skip_special_tokens=True)", json(got_text).dump(), json(want_text).dump());
    if (e.size() > 3) {
      const std::string full = tok.decode(want_sp, false);
      if (full != e[3].get<std::string>()) report(i, "decode(skip_special_tokens=False)", json(full).dump(), e[3].dump());
    }
    if (recs[i].contains(name + "_pair")) {
      const json& p = recs[i][name + "_pair"];
      const auto enc = tok.encode_pair(text, line_text(recs[(i + 1) % recs.size()]));
      if (enc.ids != p[0].get<std::vector<int32_t>>()) report(i, "encode(pair)", show_ids(enc.ids), p[0].dump());
      if (enc.token_type_ids != p[1].get<std::vector<int32_t>>())
        report(i, "encode(pair).type_ids", show_ids(enc.token_type_ids), p[1].dump());
    }
  }
  EXPECT_EQ(bad, 0) << name << ": " << bad << " mismatches on " << recs.size() << " lines";
}

TEST(HfTokenizer, Gpt2ByteLevelEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/gpt2"), "gpt2"); }
TEST(HfTokenizer, Llama3RegexEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/llama3"), "llama3"); }
TEST(HfTokenizer, ByteFallbackEqualsTokenizers) {
  check_corpus(HfTokenizer::from_folder(kDir + "/byte_fallback"), "byte_fallback");
}
TEST(HfTokenizer, BertUncasedEqualsTokenizers) {
  check_corpus(HfTokenizer::from_folder(kDir + "/bert_uncased"), "bert_uncased");
}
TEST(HfTokenizer, BertCasedEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/bert_cased"), "bert_cased"); }

}  // namespace
}  // namespace qkv::text
