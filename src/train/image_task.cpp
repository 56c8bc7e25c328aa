#include "qkv/train/image_task.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "qkv/autograd/grad_mode.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/eval/classification.h"
#include "qkv/io/data_file.h"
#include "qkv/io/progress.h"
#include "qkv/io/sample.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/train/memory_plan.h"
#include "qkv/ops.h"

namespace qkv::train {

namespace fs = std::filesystem;
using nlohmann::json;

const io::Fields<ImageDataConfig>& ImageDataConfig::fields() {
  using F = io::Fields<ImageDataConfig>;
  using C = ImageDataConfig;
  static const F f("image_classification task: data",
                   {
                       F::text("dataset", &C::dataset),
                       F::text("path", &C::path),
                       F::text("train_images", &C::train_images),
                       F::text("train_labels", &C::train_labels),
                       F::text("test_images", &C::test_images),
                       F::text("test_labels", &C::test_labels),
                       F::integer("num_classes", &C::num_classes, 2, 256),
                       F::integer("val_size", &C::val_size, 0),
                       F::integer("eval_images", &C::eval_images, 0),
                       F::integer("crop_padding", &C::crop_padding, 0, 64),
                       F::boolean("horizontal_flip", &C::horizontal_flip),
                   });
  return f;
}

const io::Fields<ImageTaskConfig>& ImageTaskConfig::fields() {
  using F = io::Fields<ImageTaskConfig>;
  using C = ImageTaskConfig;
  static const F f("image_classification task", {
                                                    F::text("task", &C::task),
                                                    F::text("description", &C::description),
                                                    F::text("_comment", &C::description),
                                                    F::section("data", &C::data),
                                                    F::any("model", &C::model),
                                                    F::section("train", &C::train),
                                                });
  return f;
}

ImageData load_image_data(const ImageDataConfig& d, const std::string& base_dir) {
  auto resolve = [&](const std::string& p) { return io::config_path(p, base_dir); };
  ImageData r;
  if (d.dataset == "fashion-mnist") {
    r.train = vision::load_fashion_mnist(resolve(d.path), "train");
    r.test = vision::load_fashion_mnist(resolve(d.path), "test");
  } else {
    QKV_CHECK(d.dataset == "idx", "image_classification task: data.dataset must be \"fashion-mnist\" or \"idx\", got \"",
              d.dataset, "\"");
    for (const std::string* f : {&d.train_images, &d.train_labels, &d.test_images, &d.test_labels})
      QKV_CHECK(!f->empty(), "image_classification task: an \"idx\" data set needs train_images, train_labels, "
                "test_images and test_labels");
    r.train = vision::load_idx_images(resolve(d.train_images), resolve(d.train_labels), d.num_classes);
    r.test = vision::load_idx_images(resolve(d.test_images), resolve(d.test_labels), d.num_classes);
  }
  QKV_CHECK(r.train.channels == r.test.channels && r.train.height == r.test.height && r.train.width == r.test.width,
            "image_classification task: the train images are ", r.train.channels, "×", r.train.height, "×",
            r.train.width, ", the test images ", r.test.channels, "×", r.test.height, "×", r.test.width);
  return r;
}

ImageTask::ImageTask(const json& config, const std::string& base_dir) {
  QKV_CHECK(io::get_or(config, "task", "") == "image_classification",
            "image_classification task: the config's \"task\" must be \"image_classification\"");
  for (const char* k : {"data", "model", "train"})
    QKV_CHECK(config.contains(k), "image_classification task: the config needs a \"", k, "\" section");
  const ImageTaskConfig c = ImageTaskConfig::fields().from_json(config);
  cfg_ = c.train, data_cfg_ = c.data;
  auto [type, m] = model_section(c.model, "convnet");
  QKV_CHECK(models::model_type(type).kind == models::Kind::image_classifier, "image_classification task: model.type \"",
            type, "\" is not an image classifier");
  ImageData data = load_image_data(c.data, base_dir);
  // The model's input and classes follow the data (a config may state them; then they must agree).
  const bool fashion = c.data.dataset == "fashion-mnist";
  const json derived = {{"in_channels", data.train.channels},
                        {"image_height", data.train.height},
                        {"image_width", data.train.width},
                        {"num_classes", fashion ? 10 : c.data.num_classes}};
  for (auto& [k, v] : derived.items()) {
    QKV_CHECK(!m.contains(k) || m[k] == v, "image_classification task: model.", k, " ", m[k].dump(),
              " differs from the data's ", v.dump(), " (leave it out)");
    m[k] = v;
  }
  if (fashion && !m.contains("class_names")) m["class_names"] = vision::fashion_mnist_classes();

  const int64_t n = data.train.size(), val = c.data.val_size;
  QKV_CHECK(val < n, "image_classification task: data.val_size ", val, " leaves no training images (", n, " in all)");
  if (val > 0) {
    // The last val images of the training set, held out.
    eval_.channels = data.train.channels, eval_.height = data.train.height, eval_.width = data.train.width;
    const size_t bytes = static_cast<size_t>(data.train.image_bytes()), cut = static_cast<size_t>(n - val);
    eval_.pixels.assign(data.train.pixels.begin() + static_cast<std::ptrdiff_t>(cut * bytes), data.train.pixels.end());
    eval_.labels.assign(data.train.labels.begin() + static_cast<std::ptrdiff_t>(cut), data.train.labels.end());
    data.train.pixels.resize(cut * bytes);
    data.train.labels.resize(cut);
  } else {
    eval_ = std::move(data.test);
    eval_is_test_ = true;
  }
  if (c.data.eval_images > 0 && c.data.eval_images < eval_.size()) {
    // eval_images of them, drawn once (seeded by train.seed): every evaluation scores the same images
    const std::vector<int64_t> keep = io::sample_indices(eval_.size(), c.data.eval_images, cfg_.seed ^ 0xE7A1ull);
    const size_t bytes = static_cast<size_t>(eval_.image_bytes());
    vision::ImageSet kept;
    kept.channels = eval_.channels, kept.height = eval_.height, kept.width = eval_.width;
    kept.pixels.reserve(keep.size() * bytes);
    kept.labels.reserve(keep.size());
    for (const int64_t i : keep) {
      const auto from = eval_.pixels.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * bytes);
      kept.pixels.insert(kept.pixels.end(), from, from + static_cast<std::ptrdiff_t>(bytes));
      kept.labels.push_back(eval_.labels[static_cast<size_t>(i)]);
    }
    eval_sampled_from_ = eval_.size();
    eval_ = std::move(kept);
  }
  train_ = std::move(data.train);
  order_ = io::EpochOrder(train_.size(), cfg_.seed);
  // Sizes first (train/memory_plan.h): the model, then a batch of images B·C·H·W floats.
  const int64_t params = check_model_fits(
      "image task", m, [&type = type, &m = m] { return models::build_image_classifier(type, m, nullptr)->module().num_parameters(); });
  gen_ = Generator(cfg_.seed);
  model_ = models::build_image_classifier(type, m, &gen_);
  const int64_t B = cfg_.batch_size, pixels = train_.channels * train_.height * train_.width;
  const char* keys = "image task: train.batch_size × pixels × 4 bytes";
  check_batch_fits("image task", params, checked_mul(checked_mul(B, pixels, keys), 4, keys),
                   detail::concat("train.batch_size ", B, " images of ", pixels, " floats"));
}

TrainingTask::MicroBatch ImageTask::micro_batch(int64_t step, int64_t micro, int64_t accum) {
  // this process's images of the batch (all of it in one process)
  const int64_t batch = cfg_.batch_size;
  const Rows rows = shard_rows(batch, gen_, "image task");
  const int64_t B = rows.count;
  const auto first = static_cast<uint64_t>((step * accum + micro) * batch + rows.first);
  std::vector<int64_t> index(static_cast<size_t>(B));
  std::vector<int32_t> labels(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    index[static_cast<size_t>(i)] = order_.at(first + static_cast<uint64_t>(i));
    labels[static_cast<size_t>(i)] = train_.labels[static_cast<size_t>(index[static_cast<size_t>(i)])];
  }
  Tensor x = Tensor::empty({B, train_.channels, train_.height, train_.width});
  vision::fill_batch(train_, index, {data_cfg_.crop_padding, data_cfg_.horizontal_flip}, cfg_.seed ^ 0xA06E7ull, first,
                     x.data());
  return {{x, Tensor::from_ints(labels, {B})}, B, static_cast<double>(B) / static_cast<double>(batch)};
}

Tensor ImageTask::micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum) {
  Tensor loss = model_->loss(inputs.at(0), inputs.at(1), static_cast<float>(cfg_.label_smoothing));
  backward_share(loss, share, accum);
  return loss;
}

StepStats ImageTask::train_micro_step(int64_t step, int64_t micro, int64_t accum) {
  const MicroBatch b = micro_batch(step, micro, accum);
  const Tensor loss = micro_loss({b.inputs[0].to(device_), b.inputs[1].to(device_)}, b.share, accum);
  return {loss.item(), b.tokens, b.share};  // (read after the backward is queued: a GPU runs it meanwhile)
}

std::vector<std::pair<std::string, double>> ImageTask::evaluate(int64_t) {
  const eval::ClassifierScores e = eval::score_classifier(*model_, eval_);
  const std::string split = eval_is_test_ ? "test" : "val";
  return {{split + "_loss", e.loss}, {split + "_accuracy", e.accuracy}};
}

json ImageTask::model_metadata() const { return models::metadata(*model_, nullptr); }

}  // namespace qkv::train
