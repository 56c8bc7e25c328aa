// Decoding options are checked in the library, against the ranges the command line's flags take
// (issue 43: Python's translate_batch took max_extra_length=-1, length_penalty=nan and 1e300).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/decode/caption.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"
#include "testing.h"

namespace qkv::decode {
namespace {

std::string refusal(const TranslateOptions& o) {
  return testing::error_of([&] { check_options(o); });
}

TEST(TranslateOptions, EachOptionOutOfRangeIsNamed) {
  EXPECT_NO_THROW(check_options(TranslateOptions{}));
  TranslateOptions edge;
  edge.beam_size = kMaxBeamSize, edge.length_penalty = kMaxLengthPenalty, edge.max_extra = kMaxExtraTokens;
  edge.max_input_length = -1, edge.max_length = kMaxDecodingLength;
  EXPECT_NO_THROW(check_options(edge));
  edge.length_penalty = 0.f, edge.max_extra = 1, edge.max_length = 1;
  EXPECT_NO_THROW(check_options(edge));

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float alpha : {nan, inf, -inf, static_cast<float>(1e300), -0.1f, 5.01f}) {
    TranslateOptions o;
    o.length_penalty = alpha;
    const std::string e = refusal(o);
    EXPECT_NE(e.find("length_penalty (α) must be between 0 and 5"), std::string::npos) << alpha << ": " << e;
  }
  for (int64_t extra : {int64_t{-1}, int64_t{0}, kMaxExtraTokens + 1, std::numeric_limits<int64_t>::max()}) {
    TranslateOptions o;
    o.max_extra = extra;
    const std::string e = refusal(o);
    EXPECT_NE(e.find("max_extra"), std::string::npos) << extra << ": " << e;
    EXPECT_NE(e.find("between 1 and 10000"), std::string::npos) << e;
  }
  for (int64_t length : {int64_t{-1}, kMaxDecodingLength + 1, std::numeric_limits<int64_t>::max()}) {
    TranslateOptions o;
    o.max_length = length;
    const std::string e = refusal(o);
    EXPECT_NE(e.find("max_length"), std::string::npos) << length << ": " << e;
    EXPECT_NE(e.find("between 0 and 1000000"), std::string::npos) << e;
  }
  TranslateOptions o;
  o.beam_size = kMaxBeamSize + 1;
  EXPECT_NE(refusal(o).find("beam_size"), std::string::npos);
  o = {}, o.batch_size = 0;
  EXPECT_NE(refusal(o).find("batch_size"), std::string::npos);
  o = {}, o.num_hypotheses = -1;
  EXPECT_NE(refusal(o).find("num_hypotheses"), std::string::npos);
  o = {}, o.max_input_length = -2;
  EXPECT_NE(refusal(o).find("max_input_length"), std::string::npos);
}

TEST(TranslateOptions, TranslatorsRefuseBeforeDecoding) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const Translator tr(*t.model, *t.tokenizer);
  TranslateOptions o;
  o.length_penalty = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(testing::error_of([&] { tr.translate({"The cat sleeps."}, o); }).find("length_penalty"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { translate_ids(*t.model, {{5, 6}}, o); }).find("length_penalty"), std::string::npos);
  o = {}, o.max_extra = -1;
  EXPECT_NE(testing::error_of([&] { tr.translate_nbest({"The cat sleeps."}, o); }).find("max_extra"), std::string::npos);
}

// max_length caps every output, greedy or beam, its EOS counted, as transformers' max_new_tokens
// (HfConvert.MarianMatchesTransformers holds a converted model to it token for token): with room
// the translations are those without it; with less, each the first max_length tokens of them
// (greedy) or at most max_length tokens (beam: the ranking among shorter hypotheses may differ).
TEST(TranslateOptions, MaxLengthCapsEveryOutputEosIncluded) {
  models::LoadedSeq2Seq t = models::load_seq2seq(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors");
  const std::vector<std::vector<int32_t>> sources = {{5, 6, 7, 8, 9, 10, 11, 12}, {20, 21, 22}, {30, 31, 32, 33, 34}};
  for (int64_t beam : {1, 4}) {
    TranslateOptions o;
    o.beam_size = beam;
    const std::vector<Hypothesis> free = translate_ids(*t.model, sources, o);
    o.max_length = 1000;  // more than |source| + 50: the same outputs
    const std::vector<Hypothesis> roomy = translate_ids(*t.model, sources, o);
    o.max_length = 3;
    const std::vector<Hypothesis> capped = translate_ids(*t.model, sources, o);
    ASSERT_EQ(capped.size(), sources.size());
    bool shortened = false;
    for (size_t i = 0; i < sources.size(); ++i) {
      EXPECT_EQ(roomy[i].tokens, free[i].tokens) << "beam " << beam << ", source " << i;
      EXPECT_LE(capped[i].tokens.size(), 3u) << "beam " << beam << ", source " << i;
      shortened |= free[i].tokens.size() > 3;
      if (beam == 1) {
        const size_t n = std::min<size_t>(3, free[i].tokens.size());
        EXPECT_EQ(capped[i].tokens, std::vector<int32_t>(free[i].tokens.begin(), free[i].tokens.begin() + n))
            << "source " << i;
      }
    }
    EXPECT_TRUE(shortened) << "no source made more than 3 tokens: the cap was not tested";
  }
}

}  // namespace
}  // namespace qkv::decode
