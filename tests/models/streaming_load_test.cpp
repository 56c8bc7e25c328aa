// Loading a model for inference streams its file: the model is built without drawing initial
// values (nn::init::SkipInit), then each tensor is read into it and let go, optimizer state is
// skipped unread, and every name and shape is checked before any data is read. The loaded model
// equals one loaded the whole-file way, bit for bit; a missing, extra or misshapen tensor is an
// error naming the file.
#include <gtest/gtest.h>

#include <filesystem>

#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/nn/init.h"
#include "qkv/nn/linear.h"
#include "testing.h"

namespace qkv::models {
namespace {

using testing::error_of;

const std::string kShippedLm = std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors";

TEST(SkipInit, InitializersDrawNothingWhileItLives) {
  Generator a(7), b(7);
  {
    nn::init::SkipInit outer;
    {
      nn::init::SkipInit inner;
    }
    Tensor t = Tensor::full({3, 4}, 5.f);
    nn::init::uniform_(t, a, -1.f, 1.f);  // still skipping: the inner guard restored the outer one
    nn::init::zeros_(t);
    EXPECT_EQ(t.to_vector(), std::vector<float>(12, 5.f));
  }
  Tensor x = Tensor::zeros({3, 4}), y = Tensor::zeros({3, 4});
  nn::init::uniform_(x, a, -1.f, 1.f);  // a drew nothing above: it draws what b draws now
  nn::init::uniform_(y, b, -1.f, 1.f);
  EXPECT_EQ(x.to_vector(), y.to_vector());
  EXPECT_NE(x.to_vector(), std::vector<float>(12, 0.f));
}

TEST(StreamingLoad, EqualsTheWholeFileLoadAndSkipsOptimizerState) {
  ModelFile whole = load_model_file(kShippedLm);
  LoadedLanguageModel lm = load_language_model(kShippedLm);
  EXPECT_EQ(lm.meta, whole.meta);
  auto params = lm.model->module().state_dict();
  ASSERT_EQ(params.size(), whole.params.size());
  for (const auto& [name, t] : whole.params) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params.at(name).to_vector(), t.to_vector()) << name;
  }

  // A checkpoint (optimizer moments beside the parameters) loads the same model.
  testing::TempDir d("streaming-load");
  const std::string ckpt = (d.path / "ckpt.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> moments;
  for (const auto& [name, t] : whole.params) moments.emplace_back("exp_avg." + name, Tensor::full(t.shape(), 3.f));
  nlohmann::json meta = whole.meta;
  save_model_file(ckpt, lm.model->module(), meta, io::StoreAs::kF32, moments);
  LoadedLanguageModel again = load_language_model(ckpt);
  for (const auto& [name, t] : again.model->module().state_dict())
    EXPECT_EQ(t.to_vector(), params.at(name).to_vector()) << name;
}

TEST(StreamingLoad, AMissingExtraOrMisshapenTensorIsAnErrorNamingTheFile) {
  ModelFile whole = load_model_file(kShippedLm);
  testing::TempDir d("streaming-load-bad");
  auto write = [&](const std::string& file, std::map<std::string, Tensor> tensors) {
    const std::string path = (d.path / file).string();
    std::vector<std::pair<std::string, Tensor>> list(tensors.begin(), tensors.end());
    io::save_safetensors(path, list, {{"qkv", whole.meta.dump()}});
    return path;
  };
  const std::string victim = whole.params.begin()->first;

  auto missing = whole.params;
  missing.erase(victim);
  const std::string p1 = write("missing.safetensors", missing);
  std::string e = error_of([&] { load_language_model(p1); });
  EXPECT_NE(e.find("'" + p1 + "' does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("missing parameter \"" + victim + "\""), std::string::npos) << e;

  auto extra = whole.params;
  extra["lm_head.extra"] = Tensor::zeros({2});
  const std::string p2 = write("extra.safetensors", extra);
  e = error_of([&] { load_language_model(p2); });
  EXPECT_NE(e.find("'" + p2 + "' does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected parameter \"lm_head.extra\""), std::string::npos) << e;

  auto misshapen = whole.params;
  misshapen[victim] = Tensor::zeros({misshapen[victim].numel() + 1});
  const std::string p3 = write("misshapen.safetensors", misshapen);
  e = error_of([&] { load_language_model(p3); });
  EXPECT_NE(e.find("'" + p3 + "' does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("parameter \"" + victim + "\" has shape"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv::models
