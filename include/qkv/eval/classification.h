// An image classifier scored on a labelled set, as `qkv eval`, training's evaluation and Python's
// ImageClassifier.evaluate report it (the "evaluation" floor: scores of a model's outputs, beside
// decode; docs/ARCHITECTURE.md):
//
//   loss        (1/N) Σ_i −log softmax(f(x_i))[y_i]           (cross-entropy, no label smoothing)
//   accuracy    (1/N) Σ_i [argmax_k f(x_i)_k = y_i]
//   confusion   C[t][p] = #{i : y_i = t, argmax f(x_i) = p}    (rows: the true class)
//   per class   C[k][k] / Σ_p C[k][p]
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/vision/dataset.h"

namespace qkv::eval {

struct ClassifierScores {
  int64_t images = 0, classes = 0;
  double loss = 0, accuracy = 0;
  std::vector<int32_t> predictions;  // the predicted class of every image, in set order
  std::vector<int64_t> confusion;    // [classes × classes], row t = true class t
  std::vector<int64_t> per_class_images() const;      // Σ_p C[t][p] for each t
  std::vector<double> per_class_accuracy() const;     // C[t][t] / Σ_p C[t][p] (0 for a class with no image)
  std::vector<float> confusion_fractions() const;     // each row as fractions of its class (the heat map)
};

// Scores `model` over `set` (no tape; batches of batch_size images; a progress bar when it runs
// long). The set's image shape must be the model's (qkv::Error naming both otherwise) and its labels
// below num_classes.
ClassifierScores score_classifier(const models::ImageClassifier& model, const vision::ImageSet& set,
                                  int64_t batch_size = 500);
// The same over images f32 [N, C, H, W] (pixels in [0, 1]) and their N labels (Python's
// ImageClassifier.evaluate).
ClassifierScores score_classifier(const models::ImageClassifier& model, const Tensor& images,
                                  const std::vector<int32_t>& labels, int64_t batch_size = 500);

}  // namespace qkv::eval
