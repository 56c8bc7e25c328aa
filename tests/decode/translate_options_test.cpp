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
  edge.max_input_length = -1;
  EXPECT_NO_THROW(check_options(edge));
  edge.length_penalty = 0.f, edge.max_extra = 1;
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

}  // namespace
}  // namespace qkv::decode
