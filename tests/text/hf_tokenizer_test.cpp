// Hugging Face tokenizers against the `tokenizers` package: eight tokenizers trained by
// tests/golden/make_tokenizer_golden.py (GPT-2's byte-level BPE, Llama 3's regex, Llama 2's byte
// fallback, Gemma's, BERT WordPiece uncased and cased, XLM-RoBERTa's Unigram with SentencePiece's
// nmt_nfkc charsmap, a T5-like Unigram with byte fallback) on a 10,000-line corpus of several scripts, emoji,
// combining marks, control characters, whitespace runs, added tokens and invalid UTF-8: every line's
// ids (with and without special tokens), decode (skipping the special tokens or not) and BERT's
// pairs with their token types must be `tokenizers`' own. And hostile tokenizer.json files end in a
// qkv::Error naming the file and the field.
#include "qkv/text/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
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
    if (recs[i].contains(name + "_pair16")) {
      const json& p = recs[i][name + "_pair16"];
      const auto enc = tok.encode_pair_truncated(text, line_text(recs[(i + 1) % recs.size()]), 16);
      if (enc.ids != p[0].get<std::vector<int32_t>>())
        report(i, "encode(pair, max_length=16)", show_ids(enc.ids), p[0].dump());
      if (enc.token_type_ids != p[1].get<std::vector<int32_t>>())
        report(i, "encode(pair, max_length=16).type_ids", show_ids(enc.token_type_ids), p[1].dump());
    }
  }
  EXPECT_EQ(bad, 0) << name << ": " << bad << " mismatches on " << recs.size() << " lines";
}

const std::vector<json>& offsets_corpus() {
  static const std::vector<json> records = [] {
    std::vector<json> out;
    for (const auto& line : read_lines(kDir + "/offsets.jsonl.gz", "the tokenizer offsets"))
      out.push_back(json::parse(line));
    return out;
  }();
  return records;
}

// Every corpus line's offsets, word ids and (pairs) sequence ids against `tokenizers`' (in bytes:
// tests/golden/tokenizers/offsets.jsonl.gz); the number of lines that differ.
int check_offsets(const HfTokenizer& tok, const std::string& name) {
  const auto& recs = corpus();
  const auto& offs = offsets_corpus();
  EXPECT_EQ(offs.size(), recs.size());
  int bad = 0;
  auto report = [&](size_t i, const std::string& what, const std::string& got, const std::string& want) {
    if (++bad <= 3)
      ADD_FAILURE() << name << " line " << i << " " << json(seen_text(recs[i])).dump() << ": " << what
                    << "\n  qkv:        " << got << "\n  tokenizers: " << want;
  };
  auto pairs = [](const HfEncoding& e, bool with_sequence) {
    json out = json::array();
    for (size_t k = 0; k < e.offsets.size(); ++k) {
      json o = {e.offsets[k].first, e.offsets[k].second};
      if (with_sequence) o.push_back(e.sequence_ids[k]);
      out.push_back(o);
    }
    return out;
  };
  for (size_t i = 0; i < std::min(recs.size(), offs.size()); ++i) {
    const std::string text = line_text(recs[i]);
    const auto enc = tok.encode_with_offsets(text, true);
    if (enc.offsets.size() != enc.ids.size() || enc.word_ids.size() != enc.ids.size() ||
        enc.sequence_ids.size() != enc.ids.size())
      report(i, "sizes", std::to_string(enc.offsets.size()), std::to_string(enc.ids.size()));
    const json got = pairs(enc, false);
    if (got != offs[i][name]) report(i, "offsets", got.dump(), offs[i][name].dump());
    if (offs[i].contains(name + "_w") && json(enc.word_ids) != offs[i][name + "_w"])
      report(i, "word_ids", json(enc.word_ids).dump(), offs[i][name + "_w"].dump());
    if (offs[i].contains(name + "_pair")) {
      const auto pair = tok.encode_pair_with_offsets(text, line_text(recs[(i + 1) % recs.size()]));
      const json gp = pairs(pair, true);
      if (gp != offs[i][name + "_pair"]) report(i, "pair offsets", gp.dump(), offs[i][name + "_pair"].dump());
    }
  }
  return bad;
}

// The offsets `tokenizers` gives (transformers' return_offsets_mapping): through each normalizer's
// alignments (BERT's cleaning, accents and CJK spacing, SentencePiece's charsmap and its deletions,
// NFKC), each pre-tokenizer (GPT-2's bytes, Metaspace's "▁"), each model's token spans (WordPiece's
// [UNK] words, BPE's byte fallback, Unigram's), added tokens and RoBERTa/GPT-2's trim_offsets.
TEST(HfTokenizer, OffsetsAndWordIdsEqualTokenizers) {
  for (const char* name :
       {"gpt2", "llama3", "byte_fallback", "gemma", "bert_uncased", "bert_cased", "xlmr", "unigram"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(check_offsets(HfTokenizer::from_folder(kDir + "/" + name), name), 0) << name;
  }
}

TEST(HfTokenizer, Gpt2ByteLevelEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/gpt2"), "gpt2"); }
TEST(HfTokenizer, Llama3RegexEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/llama3"), "llama3"); }
TEST(HfTokenizer, ByteFallbackEqualsTokenizers) {
  check_corpus(HfTokenizer::from_folder(kDir + "/byte_fallback"), "byte_fallback");
}
// Gemma's form (Gemma 1–3's tokenizer.json): no prefix, a Split(" ") that finds no space left, turn markers
TEST(HfTokenizer, GemmaEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/gemma"), "gemma"); }
TEST(HfTokenizer, BertUncasedEqualsTokenizers) {
  check_corpus(HfTokenizer::from_folder(kDir + "/bert_uncased"), "bert_uncased");
}
TEST(HfTokenizer, BertCasedEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/bert_cased"), "bert_cased"); }
// XLM-RoBERTa's form as transformers 5 converts its sentencepiece.bpe.model: the Precompiled
// normalizer (SentencePiece's nmt_nfkc charsmap, cluster by cluster), WhitespaceSplit + Metaspace,
// Unigram with unknown runs fused
TEST(HfTokenizer, XlmRobertaUnigramEqualsTokenizers) { check_corpus(HfTokenizer::from_folder(kDir + "/xlmr"), "xlmr"); }
// T5's form with byte fallback: Precompiled (rules where only a cluster's prefix is a key) + Replace,
// Metaspace "first", <0xXX> pieces for what no piece covers
TEST(HfTokenizer, UnigramByteFallbackEqualsTokenizers) {
  check_corpus(HfTokenizer::from_folder(kDir + "/unigram"), "unigram");
}

// A folder with BERT's vocab.txt and tokenizer_config.json only is built as transformers'
// BertTokenizerFast builds it: the same as the trained uncased tokenizer on the whole corpus.
TEST(HfTokenizer, VocabTxtFolderEqualsTokenizers) {
  TempDir dir("qkv-hf-vocab");
  io::write_file_atomic((dir.path / "vocab.txt").string(), io::read_file(kDir + "/bert_uncased/vocab.txt"));
  io::write_file_atomic((dir.path / "tokenizer_config.json").string(), R"({"do_lower_case": true, "unk_token": "[UNK]"})");
  const auto tok = HfTokenizer::from_folder(dir.path.string());
  EXPECT_EQ(tok.cls_token_id(), tok.token_to_id("[CLS]"));
  EXPECT_EQ(tok.mask_token_id(), tok.token_to_id("[MASK]"));
  check_corpus(tok, "bert_uncased");
}

// The tokenizers of the golden model folders (trained on Shakespeare): transformers' ids for the
// prompt, and its text for the greedy ids.
TEST(HfTokenizer, GoldenModelFoldersEqualTransformers) {
  int folders = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(QKV_GOLDEN_DIR) + "/hf")) {
    if (!std::filesystem::exists(entry.path() / "tokenizer.json")) continue;
    const json ref = json::parse(io::read_file((entry.path() / "reference.json").string()));
    if (!ref.contains("text_prompt")) continue;
    SCOPED_TRACE(entry.path().string());
    const auto tok = HfTokenizer::from_folder(entry.path().string());
    EXPECT_EQ(tok.encode(ref["text_prompt"].get<std::string>()), ref["text_prompt_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(tok.decode(ref["text_greedy_ids"].get<std::vector<int32_t>>()), ref["text_greedy"].get<std::string>());
    ++folders;
  }
  EXPECT_GE(folders, 2);
}

// model_input_names as transformers 5 has them: the config's list, else its tokenizer class's
// attribute, else not said (the model's type picks the class).
TEST(HfTokenizer, TokenTypesAsTheTokenizerClassHandsThem) {
  const std::string json = io::read_file(kDir + "/bert_uncased/tokenizer.json");
  auto with = [&](const std::string& config) {
    return HfTokenizer::from_json(json, config, "t").returns_token_type_ids();
  };
  EXPECT_EQ(with(R"({"model_input_names": ["input_ids", "token_type_ids", "attention_mask"]})"), true);
  EXPECT_EQ(with(R"({"model_input_names": ["input_ids", "attention_mask"], "tokenizer_class": "BertTokenizer"})"),
            false);
  EXPECT_EQ(with(R"({"tokenizer_class": "BertTokenizerFast"})"), true);
  EXPECT_EQ(with(R"({"tokenizer_class": "DebertaV2Tokenizer"})"), true);
  for (const char* cls : {"RobertaTokenizer", "XLMRobertaTokenizerFast", "MPNetTokenizer", "DistilBertTokenizer",
                          "TokenizersBackend", "PreTrainedTokenizerFast"})
    EXPECT_EQ(with(std::string(R"({"tokenizer_class": ")") + cls + "\"}"), false) << cls;
  EXPECT_EQ(with(R"({"do_lower_case": true})"), std::nullopt);
  EXPECT_EQ(with(""), std::nullopt);
}

TEST(HfTokenizer, VocabularyAndSpecialTokens) {
  const auto gpt2 = HfTokenizer::from_folder(kDir + "/gpt2");
  EXPECT_EQ(gpt2.vocab_size(), 1004);  // 1000 trained + <mask>, qkv-added, " padded ", café
  EXPECT_EQ(gpt2.token_to_id("<|endoftext|>"), 0);
  EXPECT_EQ(gpt2.id_to_token(0), "<|endoftext|>");
  EXPECT_EQ(gpt2.token_to_id("<mask>"), 1000);
  EXPECT_EQ(gpt2.id_to_token(1003), "café");
  EXPECT_EQ(gpt2.token_to_id("no such token"), -1);
  EXPECT_EQ(gpt2.id_to_token(123456), "");
  EXPECT_TRUE(gpt2.is_special(1000));
  EXPECT_FALSE(gpt2.is_special(1001));
  EXPECT_EQ(gpt2.bos_token_id(), 0);  // <|endoftext|>, named by no config
  EXPECT_EQ(gpt2.unk_token_id(), -1);
  const auto bert = HfTokenizer::from_folder(kDir + "/bert_uncased");
  EXPECT_EQ(bert.unk_token_id(), bert.token_to_id("[UNK]"));
  EXPECT_EQ(bert.sep_token_id(), bert.token_to_id("[SEP]"));
  EXPECT_EQ(bert.pad_token_id(), 0);
  // the text stored in a model file loads the same tokenizer
  const auto again = HfTokenizer::from_json(gpt2.tokenizer_json());
  EXPECT_EQ(again.encode("Hello <mask> world qkv-added"), gpt2.encode("Hello <mask> world qkv-added"));
  // ids it does not know are left out of decode
  EXPECT_EQ(gpt2.decode({gpt2.token_to_id("H"), -5, 99999, gpt2.token_to_id("i")}), "Hi");
  // a tokenizer_config.json names the special tokens
  const auto named = HfTokenizer::from_json(gpt2.tokenizer_json(), R"({"eos_token": {"content": "<mask>"}, "bos_token": null})");
  EXPECT_EQ(named.eos_token_id(), 1000);
}

// Invalid UTF-8 becomes U+FFFD as Python's bytes.decode("utf-8", errors="replace"): one per maximal
// invalid subpart (a truncated sequence is one, a surrogate's three bytes are three).
TEST(HfTokenizer, InvalidUtf8IsReplacedAsPythonDoes) {
  const auto tok = HfTokenizer::from_folder(kDir + "/gpt2");
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(tok.encode("a\xE2\x82 b"), tok.encode("a" + r + " b"));
  EXPECT_EQ(tok.encode("a\xED\xA0\x80"), tok.encode("a" + r + r + r));
  EXPECT_EQ(tok.encode("\xF0\x9F\x98"), tok.encode(r));
  EXPECT_EQ(tok.encode("\xC0\xAF\xFF"), tok.encode(r + r + r));
  EXPECT_EQ(tok.decode(tok.encode("x\xF5y")), "x" + r + "y");
  // a decoded byte sequence that is not UTF-8 is replaced the same way
  EXPECT_EQ(tok.decode({tok.token_to_id("\xC3\xA2")}), r);  // "â": the byte 0xE2 alone
}

// Regexes run as Oniguruma runs them (tokenizers' engine), not as PCRE2 would: \s is White_Space
// (not U+180E, which PCRE2's \s holds), \w is Alphabetic|M|Nd|Pc|Join_Control (marks, other
// scripts' digits, Ⅻ and the ZWJ in; ② out).
TEST(HfTokenizer, RegexClassesAreOniguruma) {
  const auto gpt2 = HfTokenizer::from_folder(kDir + "/gpt2");
  EXPECT_EQ(gpt2.encode("a\u180e b\u180e\u180e" "c"), (std::vector<int32_t>{65, 158, 255, 237, 290, 158, 255, 237, 158, 255, 237, 67}));
  EXPECT_EQ(gpt2.encode("x \u180e"), (std::vector<int32_t>{88, 465, 255, 237}));
  json j = json::parse(io::read_file(kDir + "/bert_cased/tokenizer.json"));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  const auto ws = HfTokenizer::from_json(j.dump());
  EXPECT_EQ(ws.encode("ne\u0301" "e n\u0303o_x2 \u0661\u0662! a\u180e" "b", false),
            (std::vector<int32_t>{448, 396, 267, 1, 1, 5, 63, 1, 64}));
  EXPECT_EQ(ws.encode("a\u2461b a\u216bb a\u200d" "b", false), (std::vector<int32_t>{63, 1, 64, 1, 1}));
}

// Metaspace (Llama 2's tokenizer.json as transformers writes it now: no normalizer, "▁" prepended
// to the input's first piece only, no split; and the older always/split form with its decoder).
TEST(HfTokenizer, MetaspaceEqualsTokenizers) {
  json j = json::parse(io::read_file(kDir + "/byte_fallback/tokenizer.json"));
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  const auto first = HfTokenizer::from_json(j.dump());
  EXPECT_EQ(first.encode("Hello  world <s>again"), (std::vector<int32_t>{1, 507, 574, 304, 381, 312, 418, 604, 375, 1, 622, 563}));
  EXPECT_EQ(first.decode(first.encode("Hello  world <s>again"), true), "Hello  world again");
  EXPECT_EQ(first.encode(" x"), (std::vector<int32_t>{1, 375, 313}));
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  const auto always = HfTokenizer::from_json(j.dump());
  const auto ids = always.encode("Hello  world <s>again");
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 507, 574, 304, 375, 416, 418, 604, 375, 1, 392, 296, 563}));
  EXPECT_EQ(always.decode(ids, true), "Hello  world  again");
}

// WordPiece: a word longer than max_input_chars_per_word (100) is [UNK] as a whole.
TEST(HfTokenizer, WordPieceLongWordIsUnknown) {
  const auto tok = HfTokenizer::from_folder(kDir + "/bert_uncased");
  EXPECT_EQ(tok.encode(std::string(101, 'a'), false), std::vector<int32_t>{tok.unk_token_id()});
  EXPECT_NE(tok.encode(std::string(100, 'a'), false), std::vector<int32_t>{tok.unk_token_id()});
}

// The golden gpt2 tokenizer.json with one field replaced; the error of loading it.
std::string error_with(const std::string& pointer, const json& value, const std::string& base = "gpt2") {
  json j = json::parse(io::read_file(kDir + "/" + base + "/tokenizer.json"));
  const json::json_pointer ptr(pointer);
  if (value.is_discarded()) j[ptr.parent_pointer()].erase(ptr.back());
  else j[ptr] = value;
  return error_of([&] { HfTokenizer::from_json(j.dump(), "", "bad/tokenizer.json"); });
}

TEST(HfTokenizer, HostileTokenizerJsonNamesFileAndField) {
  auto expect = [](const std::string& err, const std::string& part) {
    EXPECT_NE(err.find("bad/tokenizer.json"), std::string::npos) << err;
    EXPECT_NE(err.find(part), std::string::npos) << "expected \"" << part << "\" in: " << err;
  };
  expect(error_with("/model", json::value_t::discarded), "model: missing");
  expect(error_with("/model", 3), "model: expected an object");
  expect(error_with("/model/type", "WordLevel"), "model.type: model \"WordLevel\" is not supported");
  expect(error_with("/model/vocab", json::array()), "model.vocab: expected an object");
  expect(error_with("/model/vocab/a", "seven"), "model.vocab.a: expected an id");
  expect(error_with("/model/vocab/a", -1), "model.vocab.a: expected an id");
  expect(error_with("/model/vocab/a", 18446744073709551615ull), "model.vocab.a: expected an id");
  expect(error_with("/model/vocab/a", 2000000000), "model.vocab.a: id 2000000000 is far past");
  expect(error_with("/model/merges/0", json::array({"zzz", "q"})), "model.merges[0]: \"zzz\" is not in model.vocab");
  expect(error_with("/model/merges/0", "a b c"), "model.merges[0]: expected \"a b\"");
  expect(error_with("/model/merges/0", 7), "model.merges[0]: expected");
  expect(error_with("/model/merges/0", json::array({"a", "a"})), "model.merges[0]: the merged token \"aa\"");
  expect(error_with("/model/dropout", 0.1), "model.dropout: BPE dropout is not supported");
  expect(error_with("/model/unk_token", "<nope>"), "model.unk_token: \"<nope>\" is not in model.vocab");
  expect(error_with("/model/byte_fallback", "yes"), "model.byte_fallback: expected true or false");
  expect(error_with("/normalizer", json{{"type", "Precompiled"}}), "normalizer.precompiled_charsmap: missing");
  expect(error_with("/normalizer", json{{"type", "Precompiled"}, {"precompiled_charsmap", "@@@@"}}),
         "normalizer.precompiled_charsmap");
  expect(error_with("/normalizer", json{{"type", "Precompiled"}, {"precompiled_charsmap", "AQI="}}),
         "normalizer.precompiled_charsmap: shorter than its 4-byte header");
  // a header promising a 4,096-byte trie that is not there; a pool that is not UTF-8
  expect(error_with("/normalizer", json{{"type", "Precompiled"},
                                        {"precompiled_charsmap", io::base64_encode(std::string("\0\x10\0\0abcd", 8))}}),
         "normalizer.precompiled_charsmap: its header gives a trie of 4096 bytes, and 4 follow it");
  expect(error_with("/normalizer",
                    json{{"type", "Precompiled"},
                         {"precompiled_charsmap", io::base64_encode(std::string("\4\0\0\0\0\0\0\0\xff", 9))}}),
         "normalizer.precompiled_charsmap: its replacement strings are not valid UTF-8");
  expect(error_with("/normalizer", json{{"type", "UnicodeScripts"}}), "normalizer.type: normalizer \"UnicodeScripts\"");
  expect(error_with("/pre_tokenizer/type", "UnicodeScripts"), "pre_tokenizer.type: pre-tokenizer \"UnicodeScripts\"");
  expect(error_with("/pre_tokenizer", json{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}),
         "pre_tokenizer.pattern.Regex: regex \"(unclosed\" does not compile");
  expect(error_with("/pre_tokenizer", json{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}}),
         "pre_tokenizer.behavior: unknown split behavior");
  expect(error_with("/decoder/type", "CTC"), "decoder.type: decoder \"CTC\"");
  expect(error_with("/post_processor/type", "Robertaprocessing"),
         "post_processor.type: post-processor \"Robertaprocessing\"");
  expect(error_with("/added_tokens/0/id", 1e30), "added_tokens[0].id: expected an integer");
  expect(error_with("/added_tokens/0/id", 99999999999), "added_tokens[0].id: 99999999999 is out of range");
  expect(error_with("/added_tokens/0/content", json::value_t::discarded), "added_tokens[0].content: missing");
  expect(error_with("/added_tokens", "none"), "added_tokens: expected an array");
  expect(error_with("/surprise", 1), "surprise: unknown field");
  expect(error_with("/post_processor/processors/1/single/0/SpecialToken/id", "<nope>", "llama3"),
         "post_processor.processors[1].single[0].SpecialToken.id: \"<nope>\" is not in special_tokens");
  expect(error_with("/model/unk_token", "[NOPE]", "bert_uncased"), "model.unk_token: \"[NOPE]\" is not in model.vocab");
  expect(error_with("/model/max_input_chars_per_word", -3, "bert_uncased"), "model.max_input_chars_per_word: -3 is out of range");
  expect(error_with("/model/vocab", json::object(), "unigram"), "model.vocab: expected an array of [piece, score]");
  expect(error_with("/model/vocab/5", json::array({"a", "b"}), "unigram"), "model.vocab[5]: expected [piece, score]");
  expect(error_with("/model/vocab/5", json::array({"a"}), "unigram"), "model.vocab[5]: expected [piece, score]");
  expect(error_with("/model/unk_id", 100000, "unigram"), "model.unk_id: 100000 is not an entry of model.vocab");
  expect(error_with("/model/unk_id", -1, "unigram"), "model.unk_id: -1 is not an entry");
  expect(error_with("/model/unk_id", "<unk>", "unigram"), "model.unk_id: expected an integer or null");
  expect(error_with("/model/byte_fallback", 2, "unigram"), "model.byte_fallback: expected true or false");
  expect(error_of([] { HfTokenizer::from_json("{\"model\": ", "", "bad/tokenizer.json"); }), "not JSON");
  expect(error_of([] { HfTokenizer::from_json("[1, 2]", "", "bad/tokenizer.json"); }), "expected a JSON object");
  // a folder with neither file
  TempDir empty("qkv-hf-empty");
  const std::string err = error_of([&] { HfTokenizer::from_folder(empty.path.string()); });
  EXPECT_NE(err.find("has no tokenizer.json and no vocab.txt"), std::string::npos) << err;
}

// A charsmap of darts-clone units mapping the key "a" to the pool's string at `value`: the root's
// children at 1, "a" at 1 ^ 0x61 = 96 (a leaf, its value unit at 96 ^ 1 = 97).
json charsmap_of_a(uint32_t value, const std::string& pool, uint32_t root = 1u << 10) {
  std::vector<uint32_t> units(128, 0);
  units[0] = root;
  units[96] = 0x61 | 1u << 8 | 1u << 10;
  units[97] = value;
  std::string blob(4 + 4 * units.size(), '\0');
  const uint32_t bytes = static_cast<uint32_t>(4 * units.size());
  std::memcpy(blob.data(), &bytes, 4);  // (little-endian, as x86 and the format are)
  std::memcpy(blob.data() + 4, units.data(), 4 * units.size());
  return {{"type", "Precompiled"}, {"precompiled_charsmap", io::base64_encode(blob + pool)}};
}

// A crafted charsmap is read only where it leads: a unit or a replacement past its end, or a
// replacement that begins inside a character, is an error naming it when a text first reaches it;
// replacements stay within the text's budget. Unigram without an unk_id on a character no piece
// covers names the model.
TEST(HfTokenizer, CraftedCharsmapsAndUnigramsEndInErrorsNamingTheField) {
  json j = json::parse(io::read_file(kDir + "/gpt2/tokenizer.json"));
  j.erase("added_tokens");
  auto with = [&](const json& normalizer) {
    json k = j;
    k["normalizer"] = normalizer;
    return HfTokenizer::from_json(k.dump(), "", "bad/tokenizer.json");
  };
  const auto plain = HfTokenizer::from_json(j.dump(), "", "bad/tokenizer.json");
  EXPECT_EQ(with(charsmap_of_a(0, std::string("bb\0", 3))).encode("a cat"), plain.encode("bb cbbt"));
  EXPECT_EQ(with(charsmap_of_a(3, std::string("bb\0", 3))).encode("a cat"), plain.encode(" ct"));  // "" at the end
  auto fails = [&](const json& normalizer, const std::string& text, const std::string& part) {
    const std::string err = error_of([&] { with(normalizer).encode(text); });
    EXPECT_NE(err.find("bad/tokenizer.json: normalizer.precompiled_charsmap: " + part), std::string::npos) << err;
  };
  fails(charsmap_of_a(5000, std::string("bb\0", 3)), "a",
        "a replacement at byte 5000 of its 3-byte pool is past its end");
  fails(charsmap_of_a(1, "\xC3\xA9"), "xa", "a replacement at byte 1 of its 2-byte pool begins inside a character");
  fails(charsmap_of_a(0, "b", 1000u << 10), "a", "its trie leads to unit 905 of 128");
  fails(charsmap_of_a(0, std::string(100000, 'b')), std::string(10, 'a'), "makes ");
  EXPECT_NO_THROW(with(charsmap_of_a(5000, "b")).encode("xyz"));  // never reached

  json u = json::parse(io::read_file(kDir + "/unigram/tokenizer.json"));
  u["model"]["unk_id"] = nullptr;
  u["model"]["byte_fallback"] = false;
  const auto no_unk = HfTokenizer::from_json(u.dump(), "", "bad/tokenizer.json");
  EXPECT_FALSE(no_unk.encode("the cat").empty());
  const std::string err = error_of([&] { no_unk.encode("the \xE2\x98\x83"); });
  EXPECT_NE(err.find("bad/tokenizer.json: model: no entry covers \"\xE2\x98\x83\" and there is no unk_id"),
            std::string::npos)
      << err;
}

// The golden gpt2 tokenizer.json with its added tokens gone and `stage` replaced by `value`, loaded
// as "bad/tokenizer.json".
HfTokenizer crafted(const std::string& stage, const json& value) {
  json j = json::parse(io::read_file(kDir + "/gpt2/tokenizer.json"));
  j.erase("added_tokens");
  j[stage] = value;
  return HfTokenizer::from_json(j.dump(), "", "bad/tokenizer.json");
}

// A crafted tokenizer.json cannot hang a tokenizer: "a*a*b|." tries a*a*b from every start of a
// long word (its length cubed, ~hours at 30,000 letters), and stops at the text's time (1 s + 4 µs
// a byte: 1.12 s by the clock, then as long on the thread's CPU) naming the field; an exponential one
// stops at PCRE2's match limit.
TEST(HfTokenizer, ARegexThatBacktracksWithoutBoundEndsInAnErrorNamingIt) {
  const auto split = [](const std::string& re) {
    return crafted("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}});
  };
  const auto start = std::chrono::steady_clock::now();
  const std::string err = error_of([&] { split("a*a*b|.").encode(std::string(30000, 'a')); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(err.find("bad/tokenizer.json: pre_tokenizer.pattern.Regex: the regex has matched a text of 30000 bytes for "
                     "1.12 s (1 s + 4 µs a byte) by the clock and as long again of its own CPU"),
            std::string::npos)
      << err;
  EXPECT_LT(seconds, 30.0);  // the budget, and a busy machine's slack
  const std::string limit = error_of([&] { split("a*a*a*a*b|.").encode(std::string(3000, 'a')); });
  EXPECT_NE(limit.find("bad/tokenizer.json: pre_tokenizer.pattern.Regex: the regex failed on a text of 3000 bytes"),
            std::string::npos)
      << limit;
  // the same patterns on short words, and GPT-2's on a long one, within their budgets
  EXPECT_NO_THROW(split("a*a*b|.").encode("aaab " + std::string(500, 'a')));
  EXPECT_EQ(crafted("pre_tokenizer", {{"type", "ByteLevel"}}).encode(std::string(1 << 20, 'a')).size(), 1u << 20);
}

// Nor exhaust memory: stages that grow a text (Replace, ByteLevel) chained in a Sequence would
// multiply it (4 Replaces of "a" by 1,000 of them: a terabyte from 10 bytes); a text's forms stay
// within 64 × its bytes + 64 KiB, and the error names the stage that would pass it.
TEST(HfTokenizer, StagesThatMultiplyATextEndInAnErrorNamingTheStage) {
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(1000, 'a')}};
  const auto normalizers =
      crafted("normalizer", {{"type", "Sequence"}, {"normalizers", {replace, replace, replace, replace}}});
  const std::string err = error_of([&] { normalizers.encode(std::string(10, 'a')); });
  EXPECT_NE(err.find("bad/tokenizer.json: normalizer.normalizers[1].pattern.String: makes "), std::string::npos) << err;
  EXPECT_NE(err.find("of a text of 10 bytes, past the most a tokenizer's stages may make of it (64 × its bytes + "
                     "64 KiB = 66176)"),
            std::string::npos)
      << err;
  EXPECT_NO_THROW(
      crafted("normalizer", {{"type", "Sequence"}, {"normalizers", {replace}}}).encode("a"));  // 1,000 bytes

  // ByteLevel doubles each non-ASCII byte: 2,000 bytes of "é" pass 64 × 2,000 + 65,536 at the 7th
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  const auto pre =
      crafted("pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", std::vector<json>(40, byte_level)}});
  std::string e_acute;
  for (int i = 0; i < 1000; ++i) e_acute += "\xC3\xA9";
  const std::string pre_err = error_of([&] { pre.encode(e_acute); });
  EXPECT_NE(
      pre_err.find("bad/tokenizer.json: pre_tokenizer.pretokenizers[6]: makes 256000 bytes of a text of 2000 bytes"),
      std::string::npos)
      << pre_err;

  // the decoder's Replace chained likewise, on the tokens' bytes
  const auto decoders = crafted("decoder", {{"type", "Sequence"}, {"decoders", {replace, replace, replace}}});
  const std::vector<int32_t> ids = decoders.encode("a a a");
  const std::string dec_err = error_of([&] { decoders.decode(ids); });
  EXPECT_NE(dec_err.find("bad/tokenizer.json: decoder.decoders[1]"), std::string::npos) << dec_err;
}

}  // namespace
}  // namespace qkv::text
