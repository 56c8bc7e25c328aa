// The ConvNet and the image_classification task: a tiny ConvNet with a non-local block overfits a
// small batch; the task trains on a small IDX data set, resumes exactly, writes a model file that
// loads back as the same classifier (and not as a translator); configs that cannot work are clear
// errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <vector>

#include "qkv/io/file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/load.h"
#include "qkv/models/registry.h"
#include "qkv/nn/convnet.h"
#include "qkv/ops.h"
#include "qkv/eval/classification.h"
#include "qkv/train/image_task.h"
#include "qkv/eval/classification.h"
#include "qkv/train/optim.h"
#include "qkv/core/thread_budget.h"
#include "testing.h"

namespace qkv::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::TempDir;

const json kTinyNet = {{"channels", {8, 16}}, {"blocks", {1, 1}}, {"non_local", {1}}, {"non_local_heads", 2},
                       {"mean", {0.5}}, {"std", {0.5}}};

TEST(ConvNet, OverfitsASmallBatch) {
  Generator g(5);
  json cfg = kTinyNet;
  cfg.update({{"in_channels", 1}, {"image_height", 8}, {"image_width", 8}, {"num_classes", 4}});
  auto m = models::build_image_classifier("convnet", cfg, &g);
  EXPECT_NE(m->describe().find("1 non-local block"), std::string::npos) << m->describe();
  Generator data(9);
  const Tensor x = Tensor::rand({16, 1, 8, 8}, data);
  std::vector<int32_t> y(16);
  for (int i = 0; i < 16; ++i) y[i] = i % 4;
  const Tensor labels = Tensor::from_ints(y, {16});
  AdamOptions ao;
  ao.lr = 1e-2f;
  Adam opt({{m->module().named_parameters(), 0.f}}, ao);
  const double first = m->loss(x, labels).item();
  double last = first;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = m->loss(x, labels);
    last = loss.item();
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_GT(first, 1.2);
  EXPECT_LT(last, 0.05) << "a ConvNet that cannot memorize 16 images";
  // the attention maps: one non-local block over the 4×4 positions of stage 1, two heads
  nn::AttentionMaps maps;
  m->module().eval();
  m->forward(x, &maps);
  ASSERT_EQ(maps.image.size(), 1u);
  EXPECT_EQ(maps.image[0].shape(), (Shape{16, 2, 16, 16}));
}

TEST(ConvNet, ConfigsThatCannotWorkAreClearErrors) {
  auto err = [](json extra) {
    json cfg = kTinyNet;
    cfg.update(extra);
    return testing::error_of([&] { models::build_image_classifier("convnet", cfg); });
  };
  EXPECT_NE(err({{"non_local", {2}}}).find("names stage 2"), std::string::npos);
  EXPECT_NE(err({{"blocks", {1}}}).find("same stages"), std::string::npos);
  EXPECT_NE(err({{"class_names", {"a", "b"}}}).find("2 class_names for 10 classes"), std::string::npos);
  EXPECT_NE(err({{"channels", {8, 16, 32, 64, 128, 256}}, {"blocks", {1, 1, 1, 1, 1, 1}}, {"non_local", json::array()}})
                .find("to nothing"),
            std::string::npos);
  EXPECT_NE(err({{"non_local_heads", 3}}).find("heads"), std::string::npos);
  EXPECT_NE(err({{"channels", "wide"}}).find("\"channels\" must be a list"), std::string::npos);
  EXPECT_NE(testing::error_of([] { models::build_seq2seq("convnet", json::object()); }).find("image classification"),
            std::string::npos);
}

// A small IDX data set: class k's images are bright in quadrant k, with noise.
void write_idx(const fs::path& path, const std::vector<uint32_t>& shape, const std::vector<uint8_t>& data) {
  std::string s = {0, 0, 8, static_cast<char>(shape.size())};
  for (uint32_t n : shape)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((n >> (8 * k)) & 0xFF));
  s.append(data.begin(), data.end());
  io::write_file_atomic(path.string(), s);
}

void write_quadrants(const fs::path& dir, const std::string& split, uint32_t n, uint64_t seed) {
  std::vector<uint8_t> img(n * 64), lab(n);
  for (uint32_t i = 0; i < n; ++i) {
    lab[i] = static_cast<uint8_t>(i % 4);
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        const int q = (y >= 4) * 2 + (x >= 4);
        const auto noise = static_cast<int>(Generator::bits(seed, i * 64 + y * 8 + x) % 60);
        img[i * 64 + y * 8 + x] = static_cast<uint8_t>((q == lab[i] ? 180 : 20) + noise);
      }
  }
  write_idx(dir / (split + "-images"), {n, 8, 8}, img);
  write_idx(dir / (split + "-labels"), {n}, lab);
}

json task_config(const fs::path& dir, int64_t max_iters) {
  return {{"task", "image_classification"},
          {"data",
           {{"dataset", "idx"}, {"train_images", (dir / "train-images").string()},
            {"train_labels", (dir / "train-labels").string()}, {"test_images", (dir / "test-images").string()},
            {"test_labels", (dir / "test-labels").string()}, {"num_classes", 4}, {"val_size", 32},
            {"crop_padding", 1}}},  // (no flips: they would swap the quadrant classes)
          {"model", kTinyNet},
          {"train",
           {{"max_iters", max_iters}, {"batch_size", 16}, {"learning_rate", 1e-2}, {"min_lr", 1e-3},
            {"warmup_iters", 2}, {"lr_decay_iters", max_iters}, {"eval_interval", 10}, {"log_interval", 1},
            {"checkpoint_interval", 0}, {"label_smoothing", 0.1}}}};
}

TrainResult train(const json& cfg, const fs::path& out, bool resume, Device device = Device::cpu()) {
  ImageTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.resume = resume, o.full_config = cfg, o.quiet = true, o.device = device;
  return run_training(task, task.train_config(), o);
}

TEST(ImageTask, TrainsResumesAndTheModelFileClassifies) {
  const FixedThreads fixed;  // the bits of one thread count (core/thread_budget.h), whatever the machine does
  TempDir d("image-task");
  write_quadrants(d.path, "train", 160, 1);
  write_quadrants(d.path, "test", 40, 2);
  TrainResult r = train(task_config(d.path, 30), d.path / "run", false);
  EXPECT_EQ(r.steps_done, 30);
  ASSERT_EQ(r.last_eval.size(), 2u);
  EXPECT_EQ(r.last_eval[1].first, "val_accuracy");
  EXPECT_GT(r.last_eval[1].second, 0.9) << "quadrant classes after 30 steps";
  // Stopped at 12 and resumed: the same model as the run straight through.
  json first = task_config(d.path, 30);
  first["train"]["max_iters"] = 12;  // the schedule still that of 30 steps (lr_decay_iters)
  train(first, d.path / "half", false);
  train(task_config(d.path, 30), d.path / "half", true);
  models::LoadedImageClassifier a = models::load_image_classifier((d.path / "run" / "model.safetensors").string()),
                                b = models::load_image_classifier((d.path / "half" / "model.safetensors").string());
  ImageData data = load_image_data(ImageDataConfig::fields().from_json(task_config(d.path, 1)["data"]), "");
  const eval::ClassifierScores ea = eval::score_classifier(*a.model, data.test), eb = eval::score_classifier(*b.model, data.test);
  EXPECT_EQ(ea.predictions, eb.predictions);
  EXPECT_DOUBLE_EQ(ea.loss, eb.loss);
  EXPECT_GT(ea.accuracy, 0.9);
  EXPECT_EQ(a.model->image_shape().height, 8);
  EXPECT_EQ(a.model->class_name(3), "3");
  // Not a translator, and a translator's loader says what it holds.
  const std::string msg = testing::error_of([&] { models::load_seq2seq((d.path / "run" / "model.safetensors").string()); });
  EXPECT_NE(msg.find("\"convnet\" model (image classification)"), std::string::npos) << msg;
}

// A run into dir/eager, or with its steps recorded (train/step_graph.h) into dir/replayed.
TrainResult train_eager_or_recorded(const json& cfg, const fs::path& dir, bool recorded, Device device) {
  ImageTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = (dir / (recorded ? "replayed" : "eager")).string(), o.full_config = cfg, o.quiet = true;
  o.device = device;
  o.step_graphs = recorded ? TrainerOptions::StepGraphs::on : TrainerOptions::StepGraphs::off;
  return run_training(task, task.train_config(), o);
}

// Recorded steps (train/step_graph.h) of a ConvNet with batch norm (its running statistics updated
// inside the recording) and a non-local block, augmented images copied in before each replay: on the
// CPU's emulation, the eager run's weights and curve bit for bit.
TEST(ImageTask, RecordedStepsAreTheEagerStepsBitForBit) {
  const FixedThreads fixed;
  TempDir d("image-task");
  write_quadrants(d.path, "train", 160, 1);
  write_quadrants(d.path, "test", 40, 2);
  json cfg = task_config(d.path, 8);
  cfg["train"]["gradient_accumulation_steps"] = 2;
  const TrainResult runs[2] = {train_eager_or_recorded(cfg, d.path, false, Device::cpu()),
                               train_eager_or_recorded(cfg, d.path, true, Device::cpu())};
  EXPECT_EQ(runs[1].recorded_steps, 7);
  const std::vector<double> a = testing::logged_losses(d.path / "eager"), b = testing::logged_losses(d.path / "replayed");
  ASSERT_EQ(a.size(), 8u);
  EXPECT_EQ(a, b);
  const io::SafetensorsFile fa = io::load_safetensors((d.path / "eager" / "checkpoint.safetensors").string()),
                            fb = io::load_safetensors((d.path / "replayed" / "checkpoint.safetensors").string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    const TensorBase* other = fb.find(name);
    ASSERT_NE(other, nullptr) << name;
    if (t.dtype() == DType::f32) {
      EXPECT_EQ(t.to_vector(), other->to_vector()) << name;
    }
  }
}

// data.eval_images caps what each evaluation during training scores: a seeded sample of the
// held-out images, the same at every evaluation and for the same seed, whose loss is the model's
// loss over exactly those images.
TEST(ImageTask, EvalImagesScoresTheSameSeededSample) {
  TempDir d("image-eval-cap");
  write_quadrants(d.path, "train", 160, 1);
  write_quadrants(d.path, "test", 40, 2);
  json cfg = task_config(d.path, 1);
  cfg["data"]["eval_images"] = 10;
  ImageTask capped(cfg, ""), again(cfg, "");
  ASSERT_EQ(capped.eval_set().size(), 10);
  EXPECT_EQ(capped.eval_sampled_from(), 32);
  EXPECT_EQ(capped.eval_set().pixels, again.eval_set().pixels);
  EXPECT_EQ(capped.eval_set().labels, again.eval_set().labels);
  cfg["data"]["eval_images"] = 0;
  ImageTask all(cfg, "");
  ASSERT_EQ(all.eval_set().size(), 32);
  EXPECT_EQ(all.eval_sampled_from(), 0);
  // every sampled image is one of the held-out ones, each at most once
  std::set<std::vector<uint8_t>> held;
  const size_t bytes = static_cast<size_t>(all.eval_set().image_bytes());
  for (int64_t i = 0; i < 32; ++i)
    held.insert(std::vector<uint8_t>(all.eval_set().pixels.begin() + i * bytes, all.eval_set().pixels.begin() + (i + 1) * bytes));
  std::set<std::vector<uint8_t>> picked;
  for (int64_t i = 0; i < 10; ++i) {
    std::vector<uint8_t> img(capped.eval_set().pixels.begin() + i * bytes, capped.eval_set().pixels.begin() + (i + 1) * bytes);
    EXPECT_TRUE(held.count(img)) << "image " << i << " is not a held-out image";
    picked.insert(img);
  }
  EXPECT_EQ(picked.size(), 10u);
  // the evaluation scores those 10: its loss is the loss over the sample
  const auto e = capped.evaluate(0);
  const eval::ClassifierScores direct = eval::score_classifier(capped.classifier(), capped.eval_set());
  EXPECT_DOUBLE_EQ(e[0].second, direct.loss);
  EXPECT_NE(direct.loss, eval::score_classifier(all.classifier(), all.eval_set()).loss);
  cfg["data"]["eval_images"] = -1;
  EXPECT_NE(testing::error_of([&] { ImageTask t(cfg, ""); }).find("eval_images"), std::string::npos);
}

// The ConvNet with a non-local block trains on a GPU along the CPU's loss curve (TF32 convolutions
// and GEMMs: within a few hundredths), and the model it writes classifies on the CPU.
TEST(ImageTask, TrainsOnAGpuAlongTheCpusLossCurve) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  TempDir d("image-task-gpu");
  write_quadrants(d.path, "train", 160, 1);
  write_quadrants(d.path, "test", 40, 2);
  json cfg = task_config(d.path, 20);
  cfg["train"]["eval_interval"] = 0;
  train(cfg, d.path / "cpu", false);
  train(cfg, d.path / "gpu", false, Device::cuda());
  const std::vector<double> cpu = testing::logged_losses(d.path / "cpu"), gpu = testing::logged_losses(d.path / "gpu");
  ASSERT_EQ(cpu.size(), gpu.size());
  ASSERT_GE(cpu.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 + 2e-2 * cpu[i]) << "step " << i + 1;
  // (20 steps: the CPU's own model classifies 0.475 of the test images, the GPU's run on the CPU 0.45)
  models::LoadedImageClassifier on_cpu = models::load_image_classifier((d.path / "cpu" / "model.safetensors").string()),
                                from_gpu = models::load_image_classifier((d.path / "gpu" / "model.safetensors").string());
  ImageData data = load_image_data(ImageDataConfig::fields().from_json(cfg["data"]), "");
  EXPECT_NEAR(eval::score_classifier(*from_gpu.model, data.test).accuracy, eval::score_classifier(*on_cpu.model, data.test).accuracy,
              0.1)
      << "on the CPU, from the GPU's model file";
}

// The ConvNet's step as a CUDA graph (train/step_graph.h): its convolutions' GEMMs, batch norm's
// statistics and the non-local block captured; the replays follow the eager GPU run (the same kernels
// in the same order; atomics may sum in another order).
TEST(ImageTask, RecordedStepsOnAGpuFollowTheEagerSteps) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  TempDir d("image-task-gpu-graph");
  write_quadrants(d.path, "train", 160, 1);
  write_quadrants(d.path, "test", 40, 2);
  json cfg = task_config(d.path, 12);
  cfg["train"]["eval_interval"] = 0;
  const TrainResult runs[2] = {train_eager_or_recorded(cfg, d.path, false, Device::cuda()),
                               train_eager_or_recorded(cfg, d.path, true, Device::cuda())};
  EXPECT_EQ(runs[1].recorded_steps, 11) << "every step after the first, as CUDA graph replays";
  const std::vector<double> a = testing::logged_losses(d.path / "eager"), b = testing::logged_losses(d.path / "replayed");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-4 * std::max(1.0, a[i])) << "step " << i;
}

TEST(ImageTask, DataThatCannotWorkIsAClearError) {
  TempDir d("image-task-bad");
  write_quadrants(d.path, "train", 40, 1);
  write_quadrants(d.path, "test", 8, 2);
  json cfg = task_config(d.path, 5);
  cfg["data"]["val_size"] = 40;
  EXPECT_NE(testing::error_of([&] { ImageTask t(cfg, ""); }).find("leaves no training images"), std::string::npos);
  cfg = task_config(d.path, 5);
  cfg["model"]["num_classes"] = 7;
  EXPECT_NE(testing::error_of([&] { ImageTask t(cfg, ""); }).find("differs from the data's 4"), std::string::npos);
  cfg = task_config(d.path, 5);
  cfg["data"]["num_classes"] = 3;  // label 3 is out of range
  EXPECT_NE(testing::error_of([&] { ImageTask t(cfg, ""); }).find("label 3"), std::string::npos);
  cfg = task_config(d.path, 5);
  cfg["model"]["type"] = "transformer";
  EXPECT_NE(testing::error_of([&] { ImageTask t(cfg, ""); }).find("not an image classifier"), std::string::npos);
}

}  // namespace
}  // namespace qkv::train
