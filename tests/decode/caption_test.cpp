// Captioning images through the shared search (decode/caption.h): captions for every image in
// input order, the text the tokenizer makes of the chosen ids, one attention distribution over the
// grid per step written, and clear errors for a model that does not take images, images of the
// wrong shape, and a captioner given to the translator.
#include <gtest/gtest.h>

#include <numeric>

#include "qkv/decode/caption.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
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

}  // namespace
}  // namespace qkv::decode
