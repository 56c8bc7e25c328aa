// Image classification (a ConvNet on Fashion-MNIST): the "image_classification" task of `qkv train`.
//
//   data:   IDX image and label files (vision/dataset.h); Fashion-MNIST by its folder. The last
//           val_size training images are held out for evaluation (0: evaluate on the test set)
//   batch:  batch_size images of an epoch's shuffled order (a permutation per epoch, drawn from
//           (seed, epoch)), random crops and flips as augmentation
//   loss:   mean cross-entropy (label smoothing ε);  evaluation: loss and accuracy on the held-out
//           images ("val_loss", "val_accuracy"), or the test set ("test_loss", "test_accuracy")
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/io/config.h"
#include "qkv/io/sample.h"
#include "qkv/models/model.h"
#include "qkv/train/trainer.h"
#include "qkv/vision/dataset.h"

namespace qkv::train {

// The "data" section.
struct ImageDataConfig {
  std::string dataset = "fashion-mnist";  // "fashion-mnist" (path: its folder) | "idx" (the four files)
  std::string path = vision::kFashionMnistDir;
  std::string train_images, train_labels, test_images, test_labels;  // "idx": the files
  int64_t num_classes = 10;        // "idx": the classes (Fashion-MNIST: 10)
  int64_t val_size = 5000;         // the last val_size training images, held out; 0: evaluate on test
  // Images scored at each evaluation during training (an eval_iters for images): a seeded sample
  // of the held-out or test images, the same one at every evaluation; 0: all of them. `qkv eval`
  // of the trained model always scores all.
  int64_t eval_images = 0;
  int64_t crop_padding = 0;        // random crops after zero padding by this many pixels
  bool horizontal_flip = false;    // random left–right flips
  static const io::Fields<ImageDataConfig>& fields();
};

// The whole config: {"task": "image_classification", "description", "data", "model", "train"}.
struct ImageTaskConfig {
  std::string task, description;
  ImageDataConfig data;
  nlohmann::json model;  // {"type": "convnet", hyper-parameters}
  TrainConfig train;
  static const io::Fields<ImageTaskConfig>& fields();
};

// The train and test sets a data section names (the held-out images not yet split off).
struct ImageData {
  vision::ImageSet train, test;
};
ImageData load_image_data(const ImageDataConfig& d, const std::string& base_dir);

class ImageTask : public TrainingTask {
 public:
  // Relative paths resolve against base_dir (the config file's folder).
  ImageTask(const nlohmann::json& config, const std::string& base_dir);

  models::Model& model() override { return *model_; }
  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  bool has_fixed_shape_batches() const override { return true; }
  MicroBatch micro_batch(int64_t step, int64_t micro, int64_t accum) override;  // {images [B, C, H, W], labels [B] i32}
  Tensor micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum) override;
  Generator* dropout_generator() override { return &gen_; }
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  nlohmann::json model_metadata() const override;
  uint64_t rng_state() const override { return gen_.counter(); }
  // (batch norm's statistics stay per process, as DDP without SyncBatchNorm)
  void set_rng_state(uint64_t c) override { gen_.set_counter(c); }
  const char* unit() const override { return "img"; }

  const TrainConfig& train_config() const { return cfg_; }
  const models::ImageClassifier& classifier() const { return *model_; }
  const vision::ImageSet& train_set() const { return train_; }
  const vision::ImageSet& eval_set() const { return eval_; }
  bool evaluates_on_test() const { return eval_is_test_; }
  int64_t eval_sampled_from() const { return eval_sampled_from_; }  // 0: eval_set() is the whole set

 private:
  TrainConfig cfg_;
  ImageDataConfig data_cfg_;
  vision::ImageSet train_, eval_;
  bool eval_is_test_ = false;
  int64_t eval_sampled_from_ = 0;  // data.eval_images: the size of the set eval_ was drawn from
  Generator gen_;
  std::unique_ptr<models::ImageClassifier> model_;
  io::EpochOrder order_{1, 0};  // the training images in epochs: order_.at(k) is the k-th drawn in the run
};

}  // namespace qkv::train
