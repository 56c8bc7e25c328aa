// Captioning images through the shared search (decode/caption.h): captions for every image in
// input order, the text the tokenizer makes of the chosen ids, one attention distribution over the
// grid per step written, and clear errors for a model that does not take images, images of the
// wrong shape, and a captioner given to the translator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "qkv/decode/caption.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/models/load.h"
#include "qkv/models/registry.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv::decode {
namespace {

using nlohmann::json;

struct Fixture {
  testing::TempDir dir{"caption"};
  std::unique_ptr<text::SentencePiece> sp;
  std::unique_ptr<models::Seq2SeqModel> model;
  explicit Fixture(json extra = json::object()) {
    const std::string corpus = (dir.path / "c.txt").string();
    io::write_file_atomic(corpus, "a bag on the left\na coat at the top\na sandal in the middle\n");
    text::SentencePiece::train({corpus}, (dir.path / "spm").string(), 64, "word", 1.0, 0, false,
                               {{"hard_vocab_limit", "false"}});
    sp = std::make_unique<text::SentencePiece>(text::SentencePiece::load((dir.path / "spm.model").string()));
    json j = {{"image_height", 8}, {"image_width", 8}, {"channels", {3, 4}}, {"blocks", {1, 1}},
              {"vocab_size", sp->vocab_size()}, {"embedding_dim", 6}, {"hidden_size", 7}, {"dropout", 0.0},
              {"max_len", 8}};
    j.update(extra);
    Generator g(3);
    model = models::build_seq2seq("captioner", j, &g);
    model->module().eval();
  }
};

Tensor images(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n * 64));
  for (size_t i = 0; i < v.size(); ++i) v[i] = Generator::uniform(9, i);
  return Tensor::from_vector(v, {n, 1, 8, 8});
}

TEST(Caption, EveryImageGetsItsCaptionAndOneDistributionPerStep) {
  Fixture f;
  const ImageCaptioner c(*f.model, *f.sp);
  for (int64_t beam : {1, 3}) {
    SCOPED_TRACE(beam);
    CaptionOptions o;
    o.beam_size = beam, o.attention = true, o.batch_size = 2;  // 5 images: batches of 2, 2, 1
    const std::vector<Caption> caps = c.caption(images(5), o);
    ASSERT_EQ(caps.size(), 5u);
    for (size_t i = 0; i < caps.size(); ++i) {
      const Caption& k = caps[i];
      EXPECT_EQ(k.text, f.sp->decode({k.hypothesis.tokens.begin(), k.hypothesis.tokens.end()}));
      EXPECT_EQ(k.words.size(), k.hypothesis.tokens.size());
      EXPECT_EQ(k.rows, 4);
      EXPECT_EQ(k.cols, 4);
      ASSERT_EQ(k.attention.size(), k.words.size() + (k.hypothesis.finished ? 1 : 0));
      for (const auto& a : k.attention) {
        ASSERT_EQ(a.size(), 16u);
        EXPECT_NEAR(std::accumulate(a.begin(), a.end(), 0.0), 1.0, 1e-5);
      }
      // the same image alone gets the same caption (batching does not change the search)
      if (i == 4) {
        CaptionOptions one = o;
        one.batch_size = 1;
        EXPECT_EQ(c.caption(images(5).slice(0, 4, 5).contiguous(), one)[0].hypothesis.tokens, k.hypothesis.tokens);
      }
    }
  }
}

// Issue 49: which step's attention is drawn under which word. attention[t] is the α the decoder
// computed while predicting words[t] — the step fed BOS, y₁ … y_{t−1}, whose output chose y_t — not
// the one after y_t was emitted. Pinned against the model's own step-by-step forward: the last
// attention row of the prefix BOS … y_{t−1} equals attention[t], and that position's logits pick y_t
// (greedy) — the EOS for the step after the last word.
TEST(Caption, EachWordsAttentionIsTheStepThatPredictedIt) {
  Fixture f;
  const ImageCaptioner c(*f.model, *f.sp);
  CaptionOptions o;
  o.attention = true, o.beam_size = 1;  // greedy: each step's token is its logits' argmax
  const Tensor img = images(3);
  const std::vector<Caption> caps = c.caption(img, o);
  const models::SpecialTokens ids = f.model->special_tokens();
  int64_t checked = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const Caption& k = caps[static_cast<size_t>(i)];
    const Tensor one = img.slice(0, i, i + 1).contiguous();
    for (size_t t = 0; t < k.attention.size(); ++t) {
      SCOPED_TRACE(::testing::Message() << "image " << i << ", step " << t);
      std::vector<int32_t> prefix = {ids.bos};
      prefix.insert(prefix.end(), k.hypothesis.tokens.begin(), k.hypothesis.tokens.begin() + static_cast<long>(t));
      nn::AttentionMaps maps;
      const Tensor logits = f.model->forward(one, Tensor::from_ints(prefix, {1, static_cast<int64_t>(prefix.size())}), &maps);
      ASSERT_EQ(maps.cross.size(), 1u);
      const Tensor& a = maps.cross[0];  // [1, 1, t + 1, L]
      ASSERT_EQ(a.size(2), static_cast<int64_t>(t + 1));
      const std::vector<float> row = a.select(2, static_cast<int64_t>(t)).contiguous().to_vector();
      ASSERT_EQ(row.size(), k.attention[t].size());
      for (size_t j = 0; j < row.size(); ++j) EXPECT_NEAR(row[j], k.attention[t][j], 1e-6f);
      // the same position's logits chose this step's token
      const std::vector<float> lg = logits.select(1, static_cast<int64_t>(t)).contiguous().to_vector();
      const auto best = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      EXPECT_EQ(best, t < k.hypothesis.tokens.size() ? k.hypothesis.tokens[t] : ids.eos);
      ++checked;
    }
    // and it is not the step after: the step after the first word attends differently (a shift by
    // one would draw attention[t + 1] under word t)
    if (k.attention.size() >= 2) {
      double diff = 0;
      for (size_t j = 0; j < k.attention[0].size(); ++j) diff += std::abs(k.attention[0][j] - k.attention[1][j]);
      EXPECT_GT(diff, 1e-4);
    }
  }
  EXPECT_GT(checked, 3);
}

TEST(Caption, MeanFeatureCaptionerHasNoAttentionToReturn) {
  Fixture f(json{{"attention", "none"}, {"gate", false}});
  CaptionOptions o;
  o.attention = true;
  const std::vector<Caption> caps = ImageCaptioner(*f.model, *f.sp).caption(images(2), o);
  ASSERT_EQ(caps.size(), 2u);
  EXPECT_TRUE(caps[0].attention.empty());
}

TEST(Caption, WrongModelsAndShapesAreClearErrors) {
  Fixture f;
  const ImageCaptioner c(*f.model, *f.sp);
  EXPECT_NE(testing::error_of([&] { c.caption(Tensor::zeros({1, 1, 9, 8}), {}); }).find("the model takes [N, 1, 8, 8]"),
            std::string::npos);
  // a translator cannot caption; the translator refuses a captioner
  Generator g(1);
  auto rnn = models::build_seq2seq("rnn-attention", json{{"vocab_size", f.sp->vocab_size()}, {"embedding_dim", 4},
                                                           {"hidden_size", 4}, {"max_len", 8}},
                                   &g);
  EXPECT_NE(testing::error_of([&] { ImageCaptioner(*rnn, *f.sp); }).find("it does not caption images"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { Translator(*f.model, *f.sp); }).find("takes images, not text"), std::string::npos);
}

// Image-to-text is a kind of its own (models::Kind::image_to_text): the registry and the model say
// so, its loader reads the shipped captioner, and the translators' loader refuses it by that name
// (as the captioners' loader refuses a translator) before a translation command would run it.
TEST(Caption, ImageToTextIsAKindOfItsOwn) {
  Fixture f;
  EXPECT_EQ(f.model->kind(), models::Kind::image_to_text);
  EXPECT_EQ(models::model_type("captioner").kind, models::Kind::image_to_text);
  EXPECT_EQ(models::model_type("rnn-attention").kind, models::Kind::seq2seq);
  const std::string captioner = std::string(QKV_SOURCE_DIR) + "/models/captioner.safetensors";
  const std::string translator = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";
  EXPECT_EQ(models::model_file_kind(captioner), models::Kind::image_to_text);
  EXPECT_EQ(models::load_image_to_text(captioner).model->kind(), models::Kind::image_to_text);
  EXPECT_NE(testing::error_of([&] { models::load_seq2seq(captioner); })
                .find("holds a \"captioner\" model (image-to-text), not a sequence-to-sequence (translation) model"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { models::load_image_to_text(translator); })
                .find("not an image-to-text (captioning) model"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::decode
