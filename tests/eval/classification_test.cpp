// An image classifier's scores (eval/classification.h) against their definitions: the confusion
// matrix counts (truth, prediction) pairs, accuracy is its trace over N, the loss the mean
// cross-entropy; a set and the same pictures as a tensor score alike at any batch size; labels past
// the classes and a wrong picture shape are errors naming them.
#include "qkv/eval/classification.h"

#include <gtest/gtest.h>

#include <cmath>

#include "qkv/autograd/grad_mode.h"
#include "qkv/models/registry.h"
#include "qkv/ops.h"
#include "testing.h"

namespace qkv::eval {
namespace {

std::unique_ptr<models::ImageClassifier> tiny_convnet() {
  Generator g(5);
  auto m = models::build_image_classifier(
      "convnet", {{"in_channels", 1}, {"image_height", 8}, {"image_width", 8}, {"num_classes", 3}, {"channels", {4, 8}}, {"blocks", {1, 1}}}, &g);
  m->module().eval();
  return m;
}

TEST(ClassifierScores, CountTruthAgainstPredictionAndAgreeOverBatchesAndInputs) {
  auto m = tiny_convnet();
  vision::ImageSet set;
  set.channels = 1, set.height = 8, set.width = 8;
  for (int i = 0; i < 13; ++i) {
    for (int p = 0; p < 64; ++p) set.pixels.push_back(static_cast<uint8_t>((i * 37 + p * 11 + p * p * i) % 256));
    set.labels.push_back(i % 3);
  }
  const ClassifierScores s = score_classifier(*m, set, 4);
  // the definition: predictions from the logits of all 13 at once
  Tensor x = Tensor::empty({13, 1, 8, 8});
  for (size_t i = 0; i < set.pixels.size(); ++i) x.data<float>()[i] = static_cast<float>(set.pixels[i]) / 255.f;
  NoGradGuard no_grad;
  const Tensor logits = m->forward(x);
  const std::vector<float> l = logits.to_vector(), lp = log_softmax(logits, -1).to_vector();
  std::vector<int64_t> confusion(9, 0);
  double nll = 0;
  int64_t right = 0;
  for (int i = 0; i < 13; ++i) {
    const float* r = l.data() + i * 3;
    const int p = static_cast<int>(std::max_element(r, r + 3) - r), t = set.labels[static_cast<size_t>(i)];
    EXPECT_EQ(s.predictions[static_cast<size_t>(i)], p);
    ++confusion[static_cast<size_t>(t * 3 + p)];
    right += p == t;
    nll -= lp[static_cast<size_t>(i * 3 + t)];
  }
  EXPECT_EQ(s.confusion, confusion);
  EXPECT_DOUBLE_EQ(s.accuracy, static_cast<double>(right) / 13);
  EXPECT_NEAR(s.loss, nll / 13, 1e-5);
  EXPECT_EQ(s.per_class_images(), (std::vector<int64_t>{5, 4, 4}));
  for (int k = 0; k < 3; ++k)
    EXPECT_DOUBLE_EQ(s.per_class_accuracy()[static_cast<size_t>(k)],
                     static_cast<double>(confusion[static_cast<size_t>(k * 4)]) / (k == 0 ? 5 : 4));
  // the same pictures as a tensor, one batch
  const ClassifierScores t = score_classifier(*m, x, set.labels, 500);
  EXPECT_EQ(t.confusion, s.confusion);
  EXPECT_NEAR(t.loss, s.loss, 1e-6);
}

TEST(ClassifierScores, LabelsAndShapesThatCannotWorkNameThemselves) {
  auto m = tiny_convnet();
  const Tensor x = Tensor::zeros({2, 1, 8, 8});
  EXPECT_NE(testing::error_of([&] { score_classifier(*m, x, {0, 3}); }).find("image 1 is labelled 3"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { score_classifier(*m, x, {0}); }).find("2 images but 1 labels"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { score_classifier(*m, Tensor::zeros({2, 1, 9, 8}), {0, 1}); }).find("[N, 1, 8, 8]"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { score_classifier(*m, x, {0, 1}, 0); }).find("batch_size"), std::string::npos);
}

}  // namespace
}  // namespace qkv::eval
