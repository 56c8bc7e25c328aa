// The captioning task (train/caption_task.h): scene batches as pixels / 255, a task whose batches
// depend only on the step, an evaluation that reports the captioning figures
// (eval/caption_scores.h), and clear errors for configs that cannot work.
#include <gtest/gtest.h>

#include <fstream>

#include "qkv/core/error.h"
#include "qkv/train/caption_task.h"
#include "testing.h"

namespace qkv::train {
namespace {

using nlohmann::json;

// 40 stand-in items per split (labels i % 10, bright rectangles) as Fashion-MNIST's four IDX files.
void write_items(const std::filesystem::path& d) {
  auto idx = [](const std::filesystem::path& p, const std::vector<uint32_t>& shape, const std::vector<uint8_t>& v) {
    std::string s = {0, 0, 8, static_cast<char>(shape.size())};
    for (uint32_t n : shape)
      for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((n >> (8 * k)) & 0xFF));
    s.append(v.begin(), v.end());
    std::ofstream(p, std::ios::binary) << s;
  };
  for (const char* stem : {"train", "t10k"}) {
    std::vector<uint8_t> img(40 * 28 * 28, 0), lab;
    for (unsigned i = 0; i < 40; ++i) {
      for (unsigned y = 3 + i % 4; y < 25; ++y)
        for (unsigned x = 5 + i % 5; x < 23; ++x) img[(i * 28 + y) * 28 + x] = static_cast<uint8_t>(90 + 3 * i);
      lab.push_back(static_cast<uint8_t>(i % 10));
    }
    idx(d / (std::string(stem) + "-images-idx3-ubyte"), {40, 28, 28}, img);
    idx(d / (std::string(stem) + "-labels-idx1-ubyte"), {40}, lab);
  }
}

json tiny_config(const std::filesystem::path& data) {
  return {{"task", "captioning"},
          {"data", {{"path", data.string()}, {"val_scenes", 6}, {"tokenizer_scenes", 300}}},
          {"model", {{"type", "captioner"}, {"channels", {4, 4, 8, 8}}, {"embedding_dim", 8}, {"hidden_size", 16}}},
          {"train", {{"max_iters", 2}, {"batch_size", 3}, {"seed", 5}}},
          {"eval", {{"scenes", 4}}}};
}

TEST(CaptionTask, BatchesDependOnlyOnTheStepAndEvaluationReportsTheFigures) {
  testing::TempDir d("caption-task");
  write_items(d.path);
  CaptionTask a(tiny_config(d.path), "", (d.path / "a").string(), false, false);
  EXPECT_EQ(a.tokenizer().vocab_size(), 29);  // the grammar's 25 words and pad, unk, BOS, EOS
  EXPECT_EQ(a.captioner().source_image().height, 96);
  const StepStats s1 = a.train_micro_step(7, 0, 1);
  EXPECT_EQ(s1.tokens, 3);  // images
  EXPECT_GT(s1.loss, 0.0);
  CaptionTask b(tiny_config(d.path), "", (d.path / "b").string(), false, false);
  EXPECT_DOUBLE_EQ(b.train_micro_step(7, 0, 1).loss, s1.loss);  // the same scenes, the same initial weights
  a.model().module().eval();
  std::map<std::string, double> m;
  for (auto& [k, v] : a.evaluate(0)) m[k] = v;
  for (const char* k : {"val_loss", "val_bleu4", "val_exact"}) EXPECT_TRUE(m.count(k)) << k;
  EXPECT_GE(m["val_exact"], 0.0);
  EXPECT_LE(m["val_exact"], 1.0);
  // the scores of four validation scenes: captions for each, attention over the 12×12 grid
  const decode::ImageCaptioner cap(a.captioner(), a.tokenizer());
  const eval::CaptionScores s = eval::score_captions(cap, a.scenes(), vision::SceneSplit::val, 0, 4, {});
  EXPECT_EQ(s.captions.size(), 4u);
  EXPECT_EQ(s.captions[0].rows, 12);
  EXPECT_TRUE(s.has_attention);
  if (s.named_words) {
    EXPECT_GT(s.uniform_in_box, 0.0);
    // the by-step figures (issue 49): the own step is attention_in_box; the noun phrase's best
    // step is at least it; every class's words add up to all of them
    EXPECT_EQ(s.by_step.words, s.named_words);
    EXPECT_NEAR(s.by_step.own, s.attention_in_box, 1e-9);
    EXPECT_GE(s.by_step.phrase, s.by_step.own - 1e-12);
    int64_t words = 0;
    for (const eval::CaptionScores::ByStep& b : s.by_class) words += b.words;
    EXPECT_EQ(words, s.named_words);
  }
  // the scene batch is the canvases' bytes / 255
  const vision::Scene sc = a.scenes().generate(vision::SceneSplit::val, 0);
  const std::vector<float> px = eval::scene_images({sc}).to_vector();
  ASSERT_EQ(px.size(), sc.pixels.size());
  for (size_t i = 0; i < px.size(); i += 97) EXPECT_FLOAT_EQ(px[i], sc.pixels[i] / 255.f);
}

// On a GPU (the ConvNet encoder, the GRU decoder and its additive attention on CUDA kernels): the
// same first steps' losses as on the CPU within TF32 noise, and an evaluation that reports the
// captioning figures, decoding on the GPU.
TEST(CaptionTask, TrainsAndCaptionsOnAGpuAsOnTheCpu) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  testing::TempDir d("caption-task-gpu");
  write_items(d.path);
  CaptionTask cpu(tiny_config(d.path), "", (d.path / "cpu").string(), false, false);
  CaptionTask gpu(tiny_config(d.path), "", (d.path / "gpu").string(), false, false);
  gpu.model().module().to(Device::cuda());
  for (int64_t step = 0; step < 3; ++step) {
    const double a = cpu.train_micro_step(step, 0, 1).loss, b = gpu.train_micro_step(step, 0, 1).loss;
    EXPECT_NEAR(b, a, 1e-2 + 1e-2 * a) << "step " << step;  // (no optimizer step: the same weights)
  }
  gpu.model().module().eval();
  std::map<std::string, double> m;
  for (auto& [k, v] : gpu.evaluate(0)) m[k] = v;
  for (const char* k : {"val_loss", "val_bleu4", "val_exact", "val_attention"}) EXPECT_TRUE(m.count(k)) << k;
}

TEST(CaptionTask, ConfigsThatCannotWorkAreClearErrors) {
  testing::TempDir d("caption-task-bad");
  write_items(d.path);
  json short_len = tiny_config(d.path);
  short_len["model"]["max_len"] = 6;
  CaptionTask t(short_len, "", (d.path / "s").string(), false, false);
  std::string e;
  for (int64_t step = 0; step < 20 && e.empty(); ++step) e = testing::error_of([&] { t.train_micro_step(step, 0, 1); });
  EXPECT_NE(e.find("does not fit the model's max_len 6"), std::string::npos) << e;
  json vocab = tiny_config(d.path);
  vocab["model"]["vocab_size"] = 99;
  EXPECT_NE(testing::error_of([&] { CaptionTask(vocab, "", (d.path / "v").string(), false, false); })
                .find("model.vocab_size 99 differs from the data's 29"),
            std::string::npos);
  json items = tiny_config(d.path);
  items["data"]["min_items"] = 4, items["data"]["max_items"] = 2;
  EXPECT_NE(testing::error_of([&] { CaptionTask(items, "", (d.path / "i").string(), false, false); })
                .find("min_items 4 exceeds max_items 2"),
            std::string::npos);
  json translator = tiny_config(d.path);
  translator["model"] = {{"type", "rnn-attention"}};
  EXPECT_NE(testing::error_of([&] { CaptionTask(translator, "", (d.path / "r").string(), false, false); })
                .find("does not take images"),
            std::string::npos);
  json missing = tiny_config(d.path);
  missing["data"]["path"] = (d.path / "none").string();
  EXPECT_NE(testing::error_of([&] { CaptionTask(missing, "", (d.path / "m").string(), false, false); }).find("none"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::train
