#include "qkv/eval/classification.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_budget.h"
#include "qkv/io/progress.h"
#include "qkv/ops.h"

namespace qkv::eval {

std::vector<int64_t> ClassifierScores::per_class_images() const {
  std::vector<int64_t> n(static_cast<size_t>(classes), 0);
  for (int64_t t = 0; t < classes; ++t)
    for (int64_t p = 0; p < classes; ++p) n[static_cast<size_t>(t)] += confusion[static_cast<size_t>(t * classes + p)];
  return n;
}

std::vector<double> ClassifierScores::per_class_accuracy() const {
  const std::vector<int64_t> n = per_class_images();
  std::vector<double> a(static_cast<size_t>(classes), 0.0);
  for (int64_t k = 0; k < classes; ++k)
    if (n[static_cast<size_t>(k)] > 0)
      a[static_cast<size_t>(k)] = static_cast<double>(confusion[static_cast<size_t>(k * classes + k)]) /
                                  static_cast<double>(n[static_cast<size_t>(k)]);
  return a;
}

std::vector<float> ClassifierScores::confusion_fractions() const {
  const std::vector<int64_t> n = per_class_images();
  std::vector<float> v(confusion.size(), 0.f);
  for (int64_t t = 0; t < classes; ++t)
    for (int64_t p = 0; p < classes; ++p)
      if (n[static_cast<size_t>(t)] > 0)
        v[static_cast<size_t>(t * classes + p)] = static_cast<float>(confusion[static_cast<size_t>(t * classes + p)]) /
                                                  static_cast<float>(n[static_cast<size_t>(t)]);
  return v;
}

namespace {

// The scores of `labels.size()` images, batch_size at a time; batch(start, n) gives images
// start … start + n − 1 as f32 [n, C, H, W].
ClassifierScores score_batches(const models::ImageClassifier& model, const std::vector<int32_t>& labels,
                               int64_t batch_size, const std::function<Tensor(int64_t, int64_t)>& batch) {
  QKV_CHECK(batch_size >= 1, "score_classifier: batch_size must be ≥ 1, got ", batch_size);
  const int64_t K = model.num_classes(), N = static_cast<int64_t>(labels.size());
  for (size_t i = 0; i < labels.size(); ++i)
    QKV_CHECK(labels[i] >= 0 && labels[i] < K, "score_classifier: image ", i, " is labelled ", labels[i],
              "; the model has ", K, " classes");
  NoGradGuard no_grad;
  ClassifierScores r;
  r.images = N, r.classes = K;
  r.predictions.resize(static_cast<size_t>(N));
  r.confusion.assign(static_cast<size_t>(K * K), 0);
  double loss_sum = 0;
  int64_t correct = 0;
  io::ProgressBar bar("eval", N, 0, /*delay_seconds=*/2);  // images; shown when it runs long
  for (int64_t start = 0; start < N; start += batch_size) {
    const ThreadBudget threads;  // the cores free now, batch by batch (core/thread_budget.h)
    const int64_t n = std::min(batch_size, N - start);
    // x [n, C, H, W], labels [n] → logits [n, K]
    const std::vector<int32_t> y(labels.begin() + start, labels.begin() + start + n);
    const Tensor logits = model.forward(batch(start, n));
    loss_sum += cross_entropy(logits, Tensor::from_ints(y, {n}).to(logits.device()), -100, 0.f, "sum").item();
    const std::vector<float> l = logits.to_vector();  // (copied to the host from a GPU)
    for (int64_t i = 0; i < n; ++i) {
      const float* row = l.data() + i * K;
      const auto best = static_cast<int32_t>(std::max_element(row, row + K) - row);
      const int32_t truth = y[static_cast<size_t>(i)];
      r.predictions[static_cast<size_t>(start + i)] = best;
      ++r.confusion[static_cast<size_t>(truth * K + best)];
      correct += best == truth;
    }
    bar.update(n);
  }
  bar.close();
  r.loss = N ? loss_sum / static_cast<double>(N) : 0;
  r.accuracy = N ? static_cast<double>(correct) / static_cast<double>(N) : 0;
  return r;
}

}  // namespace

ClassifierScores score_classifier(const models::ImageClassifier& model, const vision::ImageSet& set,
                                  int64_t batch_size) {
  const models::ImageShape s = model.image_shape();
  QKV_CHECK(set.channels == s.channels && set.height == s.height && set.width == s.width,
            "score_classifier: the model takes ", s.channels, "×", s.height, "×", s.width, " images, the set has ",
            set.channels, "×", set.height, "×", set.width);
  return score_batches(model, set.labels, batch_size, [&](int64_t start, int64_t n) {
    std::vector<int64_t> index(static_cast<size_t>(n));
    std::iota(index.begin(), index.end(), start);
    Tensor x = Tensor::empty({n, set.channels, set.height, set.width});
    vision::fill_batch(set, index, {}, 0, 0, x.data());
    return x;
  });
}

ClassifierScores score_classifier(const models::ImageClassifier& model, const Tensor& images,
                                  const std::vector<int32_t>& labels, int64_t batch_size) {
  const models::ImageShape s = model.image_shape();
  QKV_CHECK(images.dim() == 4 && images.size(1) == s.channels && images.size(2) == s.height &&
                images.size(3) == s.width,
            "score_classifier: the model takes [N, ", s.channels, ", ", s.height, ", ", s.width, "] images, got ",
            shape_str(images.shape()));
  QKV_CHECK(images.size(0) == static_cast<int64_t>(labels.size()), "score_classifier: ", images.size(0),
            " images but ", labels.size(), " labels");
  return score_batches(model, labels, batch_size,
                       [&](int64_t start, int64_t n) { return images.slice(0, start, start + n); });
}

}  // namespace qkv::eval
