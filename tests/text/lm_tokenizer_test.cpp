// The language model's tokenizer: characters, or SentencePiece trained for running text. A subword
// model trained on a small Shakespeare-like text must give decode(encode(text)) == text exactly
// (line breaks, runs of spaces and leading spaces included), stream the same text piece by piece,
// survive its JSON form, and name a character it cannot represent.
#include "qkv/text/lm_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "testing.h"

namespace qkv::text {
namespace {

using testing::TempDir;
using testing::error_of;

std::string sample_text() {
  const char* verses[] = {
      "First Citizen:\nBefore we proceed any further, hear me speak.\n\n",
      "All:\nSpeak, speak.\n\n",
      "First Citizen:\nYou are all resolved rather to die than to famish?\n\n",
      "MENENIUS:\nWhy, masters, my good friends, mine honest neighbours,\nWill you undo yourselves?\n\n",
      "ROMEO:\nBut, soft! what light through yonder window breaks?\n  It is the east, and Juliet is the sun.\n\n",
  };
  std::string t;
  for (int i = 0; i < 30; ++i)
    for (const char* v : verses) t += v;
  return t;
}

const LMTokenizer& subwords() {
  static TempDir dir("lm_tokenizer");
  static const LMTokenizer tok =
      LMTokenizer::train_sentencepiece(sample_text(), (dir.path / "spm").string(), 100);
  return tok;
}

TEST(LMTokenizer, SentencePieceRoundTripsRunningTextExactly) {
  const LMTokenizer& t = subwords();
  EXPECT_EQ(t.type(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 100);
  for (const std::string& s : {sample_text(), std::string("ROMEO:\n\n  But  soft,\nJuliet "), std::string("\n"),
                              std::string("a"), std::string("")}) {
    const std::vector<int32_t> ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
  }
  // Subwords: far fewer tokens than characters.
  const std::string text = sample_text();
  EXPECT_LT(t.encode(text).size(), text.size() * 3 / 4);
}

TEST(LMTokenizer, StreamingPrintsTheSameText) {
  const LMTokenizer& t = subwords();
  const std::vector<int32_t> prompt = t.encode("ROMEO:\nBut, soft");
  const std::vector<int32_t> more = t.encode(" what light\nMENENIUS:\nWhy, masters");
  std::string streamed;
  for (int32_t id : more) streamed += t.decode_one(id);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), more.begin(), more.end());
  EXPECT_EQ(t.decode(prompt) + streamed, t.decode(all));
  EXPECT_EQ(streamed, " what light\nMENENIUS:\nWhy, masters");
}

TEST(LMTokenizer, JsonRoundTrip) {
  const LMTokenizer& t = subwords();
  const LMTokenizer back = LMTokenizer::from_json(t.to_json());
  EXPECT_EQ(back.type(), "sentencepiece");
  EXPECT_EQ(back.encode(sample_text()), t.encode(sample_text()));

  const LMTokenizer c = LMTokenizer::chars("hello\nworld");
  const LMTokenizer cb = LMTokenizer::from_json(c.to_json());
  EXPECT_EQ(cb.type(), "char");
  EXPECT_EQ(cb.vocab_size(), 8);
  EXPECT_EQ(cb.encode("low\n"), c.encode("low\n"));
  EXPECT_EQ(c.decode_one(c.encode("w")[0]), "w");
}

TEST(LMTokenizer, UnknownTextIsNamed) {
  const LMTokenizer& t = subwords();
  const std::string m = error_of([&] { t.encode("ROMEO:\nBut soft — zq"); });
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  EXPECT_NE(m.find("not in the SentencePiece vocabulary"), std::string::npos) << m;
  EXPECT_THROW(LMTokenizer::from_json({{"type", "sentencepiece"}}), Error);
  EXPECT_THROW(LMTokenizer::from_json({{"type", "sentencepiece"}, {"model_base64", "AAAA"}}), Error);
  EXPECT_THROW(LMTokenizer::from_json({{"type", "bytes"}}), Error);
}

}  // namespace
}  // namespace qkv::text
