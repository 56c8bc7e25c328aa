// The training loop end to end on a tiny language model: it learns, checkpoints round-trip, a
// resumed run reproduces the uninterrupted loss curve exactly, and bad files are clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "qkv/core/cuda.h"
#include "qkv/decode/generate.h"
#include "qkv/io/file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/train/lm_task.h"
#include "testing.h"

namespace qkv::train {
namespace {

namespace fs = std::filesystem;
using testing::logged_losses;
using testing::TempDir;
using nlohmann::json;

// A text with an obvious pattern, so a tiny model learns it in a few dozen steps.
json tiny_config(const fs::path& dir, int64_t max_iters) {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "abcdefgh\n";
  std::ofstream(dir / "text.txt") << text;
  return {{"task", "lm"},
          {"data", {{"path", (dir / "text.txt").string()}}},
          {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 16}, {"dropout", 0.1}}},
          {"train",
           {{"max_iters", max_iters}, {"batch_size", 4}, {"learning_rate", 1e-2}, {"min_lr", 1e-3},
            {"warmup_iters", 5}, {"lr_decay_iters", 40}, {"eval_interval", 10}, {"eval_iters", 2},
            {"log_interval", 1}, {"checkpoint_interval", 0}, {"gradient_accumulation_steps", 2}}}};
}

TrainResult train(const json& cfg, const fs::path& out, bool resume, Device device = Device::cpu()) {
  LMTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.resume = resume, o.full_config = cfg, o.quiet = true, o.device = device;
  return run_training(task, task.train_config(), o);
}

TEST(Trainer, LearnsAndWritesItsFiles) {
  TempDir d("trainer");
  TrainResult r = train(tiny_config(d.path, 40), d.path / "run", false);
  EXPECT_EQ(r.steps_done, 40);
  ASSERT_FALSE(r.last_eval.empty());
  EXPECT_LT(r.last_eval.back().second, 1.0) << "val loss after 40 steps on a periodic text";
  for (const char* f : {"checkpoint.safetensors", "model.safetensors", "metrics.jsonl", "metrics.csv", "loss.svg", "loss.png"})
    EXPECT_TRUE(fs::exists(d.path / "run" / f)) << f;
  for (auto& e : fs::directory_iterator(d.path / "run"))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "temporary file left: " << e.path();
  // the model file loads back into an identical model
  models::LoadedLanguageModel g = models::load_language_model((d.path / "run" / "model.safetensors").string());
  LMTask fresh(tiny_config(d.path, 40), "");
  EXPECT_EQ(g.model->width(), 16);
  EXPECT_EQ(g.tokenizer.decode(g.tokenizer.encode("abc\n")), "abc\n");
}

TEST(Trainer, ResumeReproducesTheUninterruptedLossCurve) {
  TempDir d("trainer");
  json full = tiny_config(d.path, 30);
  train(full, d.path / "straight", false);
  json part = full;
  part["train"]["max_iters"] = 13;  // stops at 13 (with dropout, accumulation and an lr schedule)
  train(part, d.path / "resumed", false);
  train(full, d.path / "resumed", true);
  std::vector<double> a = logged_losses(d.path / "straight"), b = logged_losses(d.path / "resumed");
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  // and the final weights are bit-identical
  models::ModelFile ma = models::load_model_file((d.path / "straight" / "model.safetensors").string());
  models::ModelFile mb = models::load_model_file((d.path / "resumed" / "model.safetensors").string());
  for (auto& [name, t] : ma.params) EXPECT_EQ(t.to_vector(), mb.params.at(name).to_vector()) << name;
}

// "dtype": "bf16" trains with bf16 GEMMs (Autocast) and f32 master weights: the loss curve follows
// f32's closely but is not the same numbers, and the model learns as well.
TEST(Trainer, Bf16MixedPrecisionFollowsTheF32LossCurve) {
  TempDir d("trainer");
  json f32 = tiny_config(d.path, 40), bf16 = f32;
  bf16["train"]["dtype"] = "bf16";
  train(f32, d.path / "f32", false);
  TrainResult r = train(bf16, d.path / "bf16", false);
  std::vector<double> a = logged_losses(d.path / "f32"), b = logged_losses(d.path / "bf16");
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  int differing = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i], a[i], 0.03 * std::max(1.0, a[i])) << "step " << i;
    differing += a[i] != b[i];
  }
  EXPECT_GT(differing, 0) << "bf16 gave bit-identical losses: the GEMMs did not run in bf16";
  ASSERT_FALSE(r.last_eval.empty());
  EXPECT_LT(r.last_eval.back().second, 1.0);
}

// keep_checkpoints leaves the newest N numbered model files, and `average` writes their mean.
TEST(Trainer, KeepsNumberedCheckpointsAndAveragesThem) {
  TempDir d("trainer");
  json cfg = tiny_config(d.path, 40);
  cfg["train"]["checkpoint_interval"] = 10;
  cfg["train"]["keep_checkpoints"] = 2;
  train(cfg, d.path / "run", false);
  const fs::path a = d.path / "run" / "model-30.safetensors", b = d.path / "run" / "model-40.safetensors";
  EXPECT_TRUE(fs::exists(a));
  EXPECT_TRUE(fs::exists(b));
  EXPECT_FALSE(fs::exists(d.path / "run" / "model-10.safetensors"));
  EXPECT_FALSE(fs::exists(d.path / "run" / "model-20.safetensors"));
  const fs::path avg = d.path / "avg.safetensors";
  models::average_model_files({a.string(), b.string()}, avg.string());
  models::ModelFile ma = models::load_model_file(a.string()), mb = models::load_model_file(b.string()),
                    mavg = models::load_model_file(avg.string());
  EXPECT_FALSE(mavg.meta.contains("train_state"));
  EXPECT_EQ(mavg.meta.at("averaged_from").size(), 2u);
  double moved = 0;
  for (auto& [name, t] : mavg.params) {
    std::vector<float> va = ma.params.at(name).to_vector(), vb = mb.params.at(name).to_vector(), v = t.to_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_FLOAT_EQ(v[i], static_cast<float>((static_cast<double>(va[i]) + vb[i]) / 2)) << name << "[" << i << "]";
      moved += std::abs(va[i] - vb[i]);
    }
  }
  EXPECT_GT(moved, 0) << "the two checkpoints should differ";
  models::LoadedLanguageModel g = models::load_language_model(avg.string());  // the average is a usable model file
  EXPECT_EQ(g.model->width(), 16);
  // a different model is refused, naming the file
  json other = cfg;
  other["model"]["n_embd"] = 8;
  other["train"]["keep_checkpoints"] = 0;
  train(other, d.path / "other", false);
  const std::string o = (d.path / "other" / "model.safetensors").string();
  try {
    models::average_model_files({a.string(), o}, (d.path / "bad.safetensors").string());
    ADD_FAILURE() << "averaging different models should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(d.path / "bad.safetensors"));
}

TEST(Trainer, BadCheckpointsAndConfigsAreClearErrors) {
  TempDir d("trainer");
  json cfg = tiny_config(d.path, 3);
  // resume without a checkpoint
  try {
    train(cfg, d.path / "none", true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint"), std::string::npos) << e.what();
  }
  train(cfg, d.path / "run", false);
  const std::string model = (d.path / "run" / "model.safetensors").string();
  // truncated file
  std::string bytes = io::read_file(model);
  io::write_file_atomic((d.path / "trunc.safetensors").string(), bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(models::load_language_model((d.path / "trunc.safetensors").string()), Error);
  // a safetensors file without qkv metadata
  io::save_safetensors((d.path / "plain.safetensors").string(), {{"w", Tensor::ones({2})}});
  try {
    models::load_language_model((d.path / "plain.safetensors").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a qkv model"), std::string::npos) << e.what();
  }
  // missing file
  EXPECT_THROW(models::load_language_model((d.path / "missing.safetensors").string()), Error);
  // resuming with another architecture
  json other = cfg;
  other["model"]["n_embd"] = 32;
  try {
    train(other, d.path / "run", true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
  // config errors
  json bad = cfg;
  bad["train"]["learning_rat"] = 1;
  EXPECT_THROW(LMTask(bad, ""), Error);
  bad = cfg;
  bad["model"]["n_head"] = 3;  // 16 % 3 != 0
  EXPECT_THROW(LMTask(bad, ""), Error);
  bad = cfg;
  bad["data"]["path"] = (d.path / "nope.txt").string();
  EXPECT_THROW(LMTask(bad, ""), Error);
  bad = cfg;
  bad["model"]["type"] = "transformer";
  EXPECT_NE(testing::error_of([&] { LMTask(bad, ""); }).find("not a language model type"), std::string::npos);
  // a seed is any non-negative integer, signed in JSON built by code or unsigned as parsed
  EXPECT_EQ(TrainConfig::from_json(json{{"seed", int64_t{2}}}).seed, 2u);
  EXPECT_EQ(TrainConfig::from_json(json::parse(R"({"seed": 18446744073709551615})")).seed, ~uint64_t{0});
  EXPECT_THROW(TrainConfig::from_json(json{{"seed", int64_t{-1}}}), Error);
  EXPECT_THROW(TrainConfig::from_json(json{{"seed", 1.5}}), Error);
}

// The paper's inverse-sqrt schedule scales by the model's width: n_embd for a GPT (which has no
// "d_model"). It used to be looked up as "d_model" in the model's JSON metadata, so a GPT silently
// got 512: lr(0) = 512^−½ · 5^−³ᐟ² instead of 16^−½ · 5^−³ᐟ².
TEST(Trainer, InverseSqrtScalesByTheModelsWidth) {
  TempDir d("trainer");
  json cfg = tiny_config(d.path, 3);
  cfg["train"]["schedule"] = "inverse_sqrt";
  cfg["train"]["learning_rate"] = 1.0;
  cfg["train"]["eval_interval"] = 0;
  train(cfg, d.path / "run", false);
  std::vector<double> lr;
  std::ifstream in(d.path / "run" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (json r = json::parse(line); r.contains("lr")) lr.push_back(r["lr"].get<double>());
  ASSERT_EQ(lr.size(), 3u);
  for (int s = 0; s < 3; ++s)  // in warm-up: lr · d^−½ · (s+1) · warmup^−³ᐟ²
    EXPECT_DOUBLE_EQ(lr[s], std::pow(16.0, -0.5) * (s + 1) * std::pow(5.0, -1.5)) << "step " << s;
}

TEST(Trainer, SubwordLanguageModel) {
  TempDir d("trainer");
  // Sentences of a 5-word grammar: subwords the model can learn quickly.
  const char* subj[] = {"the cat", "a dog", "my horse", "your bird"};
  const char* verb[] = {"sees", "likes", "follows", "hears"};
  const char* obj[] = {"the moon", "a tree", "the river", "an apple"};
  std::string text;
  uint32_t lcg = 7;
  for (int i = 0; i < 600; ++i) {
    lcg = lcg * 1103515245u + 12345u;
    text += std::string(subj[(lcg >> 8) % 4]) + " " + verb[(lcg >> 12) % 4] + " " + obj[(lcg >> 16) % 4] + "\n";
  }
  std::ofstream(d.path / "words.txt") << text;
  json cfg = tiny_config(d.path, 30);
  cfg["data"] = {{"path", (d.path / "words.txt").string()}, {"tokenizer", {{"type", "sentencepiece"}, {"vocab_size", 34}}}};
  LMTask task(cfg, "", (d.path / "run").string());
  EXPECT_EQ(task.language_model().vocab_size(), 34);
  EXPECT_TRUE(fs::exists(d.path / "run" / "spm.model"));
  // 34 pieces over ~25 characters leave room for a few multi-character pieces only
  EXPECT_LT(task.data().train.size(), text.size() * 9 / 10 * 9 / 10) << "subwords: fewer tokens than characters";
  TrainerOptions o;
  o.out_dir = (d.path / "run").string(), o.quiet = true, o.full_config = cfg;
  TrainResult r = run_training(task, task.train_config(), o);
  EXPECT_LT(r.last_eval.back().second, 3.0) << "val loss of a 64-sentence grammar (uniform: ln 34 = 3.53)";
  models::LoadedLanguageModel g = models::load_language_model((d.path / "run" / "model.safetensors").string());
  EXPECT_EQ(g.tokenizer.type(), "sentencepiece");
  EXPECT_EQ(g.tokenizer.decode(g.tokenizer.encode("a dog hears\nthe moon")), "a dog hears\nthe moon");

  json bad = cfg;
  bad["data"]["tokenizer"] = {{"type", "sentencepiece"}, {"vocab_sise", 16}};
  EXPECT_THROW(LMTask(bad, "", (d.path / "bad").string()), Error);
  bad["data"]["tokenizer"] = "bytes";
  EXPECT_THROW(LMTask(bad, "", (d.path / "bad").string()), Error);
}

// --device: a device this build or machine lacks is refused before anything is written; on a GPU
// (a CUDA build on a lent machine) the run follows the CPU's loss curve — dropout draws the same
// masks, the GEMMs run in TF32 — and its checkpoint resumes on the CPU.
TEST(Trainer, TrainsOnAGpuAlongTheCpusLossCurve) {
  TempDir d("trainer-gpu");
  if (!device_available(Device::cuda())) {
    LMTask task(tiny_config(d.path, 4), "");
    TrainerOptions o;
    o.out_dir = (d.path / "run").string(), o.quiet = true, o.device = Device::cuda();
    EXPECT_THROW(run_training(task, task.train_config(), o), Error);
    GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  }
  json cfg = tiny_config(d.path, 20);
  cfg["train"]["eval_interval"] = 0;
  train(cfg, d.path / "cpu", false);
  train(cfg, d.path / "gpu", false, Device::cuda());
  const std::vector<double> cpu = logged_losses(d.path / "cpu"), gpu = logged_losses(d.path / "gpu");
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-2 + 1e-2 * cpu[i]) << "step " << i + 1;
  {
    // A step's forward and backward wait for the GPU once, for the loss the log shows: the batch's
    // upload, the ids' and targets' checks and the loss's mean are queued with the kernels.
    LMTask task(cfg, "");
    task.model().module().to(Device::cuda());
    task.set_device(Device::cuda());
    task.train_micro_step(0, 0, 1);  // (the first: cuBLAS's handle and workspace)
    const int64_t before = cuda::host_waits();
    task.train_micro_step(1, 0, 1);
    EXPECT_EQ(cuda::host_waits() - before, 1);
  }
  // the GPU's checkpoint (the CPU's format) resumes on the CPU
  json more = cfg;
  more["train"]["max_iters"] = 24;
  TrainResult r = train(more, d.path / "gpu", true);
  EXPECT_EQ(r.steps_done, 24);
  // the trained model generates on the GPU with its KV cache as on the CPU (greedy, a periodic text:
  // the same continuation), and with the cache as without
  models::LoadedLanguageModel g = models::load_language_model((d.path / "gpu" / "model.safetensors").string());
  decode::GenerateOptions o;
  o.max_new_tokens = 12, o.sampling.temperature = 0;
  const std::vector<int32_t> prompt = g.tokenizer.encode("abcd");
  const std::vector<int32_t> on_cpu = decode::generate(*g.model, prompt, o);
  g.model->module().to(Device::cuda());
  EXPECT_EQ(decode::generate(*g.model, prompt, o), on_cpu);
  o.use_cache = false;
  EXPECT_EQ(decode::generate(*g.model, prompt, o), on_cpu);
}

// Mixed precision on the GPU (config "dtype": "bf16": bf16 GEMMs, and attention on the tensor-core
// kernels — head dim 64 here) follows the CPU's bf16 loss curve within bf16 noise.
TEST(Trainer, TrainsInBf16OnAGpuAlongTheCpusLossCurve) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  TempDir d("trainer-gpu-bf16");
  json cfg = tiny_config(d.path, 20);
  cfg["train"]["eval_interval"] = 0;
  cfg["train"]["dtype"] = "bf16";
  cfg["model"]["n_embd"] = 128;  // two heads of 64
  train(cfg, d.path / "cpu", false);
  train(cfg, d.path / "gpu", false, Device::cuda());
  const std::vector<double> cpu = logged_losses(d.path / "cpu"), gpu = logged_losses(d.path / "gpu");
  ASSERT_EQ(cpu.size(), gpu.size());
  ASSERT_GE(cpu.size(), 10u);
  // (the first 10 steps: later, at losses near 0.1, bf16's rounding of P and dS — the GPU's alone —
  // has had time to move the two runs apart by more than their noise)
  for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 + 4e-2 * cpu[i]) << "step " << i + 1;
  EXPECT_LT(gpu.back(), 0.25 * gpu.front()) << "it learns (the CPU: 2.41 → 0.03 in 20 steps)";
}

// ---- the best model, early stopping and TensorBoard (issue 49) -----------------------------------

std::vector<json> metric_rows(const fs::path& dir) {
  std::vector<json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

std::vector<json> evaluations(const fs::path& dir) {
  std::vector<json> e;
  for (const json& r : metric_rows(dir))
    if (r.contains("val_loss")) e.push_back(r);
  return e;
}

// keep_best writes best.safetensors at each improvement: at the end it holds the evaluation with the
// lowest val_loss, says so in its metadata, and loads as a model.
TEST(Trainer, KeepBestSavesTheModelOfTheBestEvaluation) {
  TempDir d("trainer");
  json cfg = tiny_config(d.path, 30);
  cfg["train"]["keep_best"] = true;
  TrainResult r = train(cfg, d.path / "run", false);
  EXPECT_EQ(r.steps_done, 30);
  EXPECT_FALSE(r.early_stopped);
  const std::vector<json> ev = evaluations(d.path / "run");
  ASSERT_EQ(ev.size(), 4u);  // steps 0, 10, 20, 30
  size_t lo = 0;
  for (size_t i = 1; i < ev.size(); ++i)
    if (ev[i]["val_loss"].get<double>() < ev[lo]["val_loss"].get<double>()) lo = i;
  EXPECT_EQ(r.best_step, ev[lo]["step"].get<int64_t>());
  EXPECT_DOUBLE_EQ(r.best_value, ev[lo]["val_loss"].get<double>());
  const fs::path best = d.path / "run" / "best.safetensors";
  ASSERT_TRUE(fs::exists(best));
  models::ModelFile m = models::load_model_file(best.string());
  EXPECT_EQ(m.meta["best"]["metric"], "val_loss");
  EXPECT_EQ(m.meta["best"]["step"].get<int64_t>(), r.best_step);
  EXPECT_EQ(m.meta["trained_steps"].get<int64_t>(), r.best_step);
  EXPECT_FALSE(m.meta.contains("train_state"));
  EXPECT_EQ(models::load_language_model(best.string()).model->width(), 16);
  // the best was the last evaluation here (the loss falls): the same weights as model.safetensors
  if (r.best_step == 30) {
    models::ModelFile last = models::load_model_file((d.path / "run" / "model.safetensors").string());
    for (auto& [name, t] : m.params) EXPECT_EQ(t.to_vector(), last.params.at(name).to_vector()) << name;
  }
  // without keep_best (or patience) no best.safetensors
  json plain = tiny_config(d.path, 10);
  train(plain, d.path / "plain", false);
  EXPECT_FALSE(fs::exists(d.path / "plain" / "best.safetensors"));
}

// early_stopping_patience = 2 with a threshold no evaluation can beat: the first evaluation is the
// best, the next two are not better by the threshold, and the run stops at the second of them —
// without training that step — keeping the step-0 weights as best.safetensors.
TEST(Trainer, EarlyStoppingStopsAfterPatienceEvaluationsWithoutImprovement) {
  TempDir d("trainer");
  json cfg = tiny_config(d.path, 200);
  cfg["train"]["eval_interval"] = 3;
  cfg["train"]["early_stopping_patience"] = 2;
  cfg["train"]["early_stopping_threshold"] = 100.0;  // the loss cannot fall by 100 nats
  TrainResult r = train(cfg, d.path / "run", false);
  EXPECT_TRUE(r.early_stopped);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.steps_done, 6);
  EXPECT_EQ(r.best_step, 0);
  const std::vector<json> ev = evaluations(d.path / "run");
  ASSERT_EQ(ev.size(), 3u);  // steps 0, 3, 6: no second evaluation of step 6
  EXPECT_EQ(ev.back()["step"].get<int64_t>(), 6);
  EXPECT_EQ(logged_losses(d.path / "run").size(), 6u);  // steps 0 … 5 trained
  models::ModelFile best = models::load_model_file((d.path / "run" / "best.safetensors").string());
  EXPECT_EQ(best.meta["best"]["step"].get<int64_t>(), 0);
  // the checkpoint is at the stopping step, and --resume stops again (still no improvement)
  models::ModelFile ck = models::load_model_file((d.path / "run" / "checkpoint.safetensors").string());
  EXPECT_EQ(ck.meta["train_state"]["step"].get<int64_t>(), 6);
  TrainResult again = train(cfg, d.path / "run", true);
  EXPECT_TRUE(again.early_stopped);
  EXPECT_EQ(again.steps_done, 6);

  // A metric where higher is better: greater_is_better = true on val_loss reads a falling loss
  // as getting worse, and stops after `patience` evaluations (the name alone would say lower).
  json up = tiny_config(d.path, 200);
  up["train"]["eval_interval"] = 5;
  up["train"]["early_stopping_patience"] = 1;
  up["train"]["greater_is_better"] = true;
  TrainResult u = train(up, d.path / "up", false);
  EXPECT_TRUE(u.early_stopped);
  EXPECT_EQ(u.steps_done, 5);
  EXPECT_EQ(u.best_step, 0);

  // A metric the task does not report is an error naming the ones it does, at the first evaluation
  json bad = tiny_config(d.path, 20);
  bad["train"]["keep_best"] = true;
  bad["train"]["metric_for_best_model"] = "val_bleu";
  const std::string e = testing::error_of([&] { train(bad, d.path / "bad", false); });
  EXPECT_NE(e.find("metric_for_best_model \"val_bleu\""), std::string::npos) << e;
  EXPECT_NE(e.find("val_loss"), std::string::npos) << e;
  json worse = tiny_config(d.path, 20);
  worse["train"]["greater_is_better"] = "yes";
  EXPECT_NE(testing::error_of([&] { train(worse, d.path / "worse", false); }).find("greater_is_better"),
            std::string::npos);
}

// A TensorBoard event file beside metrics.jsonl: TFRecord framing with masked CRC-32C, a version
// event, then one event a row whose scalars are the row's numbers.
uint32_t crc32c_of(const std::string& b) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char ch : b) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

uint64_t varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(i++));
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

struct Event {
  int64_t step = 0;
  double wall_time = 0;
  std::string version;
  std::map<std::string, float> scalars;
};

// The fields this test needs of an Event, by the protobuf wire format.
Event parse_event(const std::string& e) {
  Event ev;
  for (size_t i = 0; i < e.size();) {
    const uint64_t key = varint(e, i);
    const uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
    if (wire == 1) {
      std::memcpy(&ev.wall_time, e.data() + i, 8), i += 8;
    } else if (wire == 0) {
      const uint64_t v = varint(e, i);
      if (field == 2) ev.step = static_cast<int64_t>(v);
    } else {
      EXPECT_EQ(wire, 2u);
      const uint64_t n = varint(e, i);
      const std::string body = e.substr(i, n);
      i += n;
      if (field == 3) ev.version = body;
      if (field != 5) continue;
      for (size_t j = 0; j < body.size();) {  // Summary: repeated Value (field 1)
        EXPECT_EQ(varint(body, j), (1u << 3) | 2);
        const uint64_t m = varint(body, j);
        const std::string v = body.substr(j, m);
        j += m;
        size_t k = 0;
        EXPECT_EQ(varint(v, k), (1u << 3) | 2);
        const uint64_t tl = varint(v, k);
        const std::string tag = v.substr(k, tl);
        k += tl;
        EXPECT_EQ(varint(v, k), (2u << 3) | 5);
        float f;
        std::memcpy(&f, v.data() + k, 4);
        ev.scalars[tag] = f;
      }
    }
  }
  return ev;
}

TEST(Trainer, WritesATensorBoardEventFileOfItsMetrics) {
  TempDir d("trainer");
  train(tiny_config(d.path, 12), d.path / "run", false);
  std::ifstream in(d.path / "run" / "events.out.tfevents.qkv", std::ios::binary);
  ASSERT_TRUE(in.good());
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto masked = [](uint32_t c) { return ((c >> 15) | (c << 17)) + 0xA282EAD8u; };
  std::vector<Event> events;
  for (size_t i = 0; i < file.size();) {
    ASSERT_LE(i + 12, file.size());
    const std::string len = file.substr(i, 8);
    uint64_t n;
    uint32_t c1, c2;
    std::memcpy(&n, len.data(), 8);
    std::memcpy(&c1, file.data() + i + 8, 4);
    EXPECT_EQ(c1, masked(crc32c_of(len)));
    ASSERT_LE(i + 12 + n + 4, file.size());
    const std::string data = file.substr(i + 12, n);
    std::memcpy(&c2, file.data() + i + 12 + n, 4);
    EXPECT_EQ(c2, masked(crc32c_of(data)));
    events.push_back(parse_event(data));
    i += 12 + n + 4;
  }
  EXPECT_EQ(crc32c_of("123456789"), 0xE3069283u);  // the CRC-32C check value
  const std::vector<json> rows = metric_rows(d.path / "run");
  ASSERT_EQ(events.size(), rows.size() + 1);
  EXPECT_EQ(events[0].version, "brain.Event:2");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Event& e = events[i + 1];
    EXPECT_EQ(e.step, rows[i]["step"].get<int64_t>());
    EXPECT_GE(e.wall_time, events[0].wall_time);
    for (auto& [k, v] : rows[i].items()) {
      if (k == "step") continue;
      ASSERT_TRUE(e.scalars.count(k)) << k << " at row " << i;
      EXPECT_FLOAT_EQ(e.scalars.at(k), static_cast<float>(v.get<double>())) << k;
    }
  }
  // the loss rows and the evaluations are both there
  EXPECT_TRUE(events[1].scalars.count("val_loss"));
  EXPECT_TRUE(events[2].scalars.count("loss"));
}

}  // namespace
}  // namespace qkv::train
