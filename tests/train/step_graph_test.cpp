// Recorded training steps (train/step_graph.h): a replayed step is the eager step, bit for bit — its
// dropout masks, its learning rate and bias corrections, its clipping — over a run with dropout,
// gradient accumulation, a warm-up and cosine schedule and evaluations between the replays. On the
// CPU the recording is emulated: each replay runs the recorded step's host code with the host state
// of the recording, so a number that does not travel through device memory repeats the recorded
// step's and the run leaves the eager one. On a GPU (StepGraphOnAGpu) the step is a CUDA graph.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "qkv/core/cuda.h"
#include "qkv/core/thread_budget.h"
#include "qkv/decode/paged_graphs.h"
#include "qkv/io/safetensors.h"
#include "qkv/nn/static_decoding.h"
#include "qkv/train/lm_task.h"
#include "qkv/train/step_graph.h"
#include "testing.h"

namespace qkv::train::step_graph_test {  // (its own: the test files of a folder compile as one unit)
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

json tiny_config(const fs::path& dir, int64_t max_iters) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the cat sat on the mat; it was warm.\n";
  std::ofstream(dir / "text.txt") << text;
  return {{"task", "lm"},
          {"data", {{"path", (dir / "text.txt").string()}}},
          {"model", {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"dropout", 0.2}}},
          {"train",
           {{"max_iters", max_iters}, {"batch_size", 4}, {"learning_rate", 1e-2}, {"min_lr", 1e-3},
            {"warmup_iters", 4}, {"lr_decay_iters", 12}, {"eval_interval", 5}, {"eval_iters", 1},
            {"log_interval", 1}, {"checkpoint_interval", 0}, {"gradient_accumulation_steps", 2},
            {"grad_clip", 0.5}}}};
}

struct TrainedRun {
  TrainResult result;
  std::vector<json> rows;  // the logged steps
};

TrainedRun train(const json& cfg, const fs::path& out, TrainerOptions::StepGraphs graphs, Device device = Device::cpu()) {
  LMTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.full_config = cfg, o.quiet = true, o.device = device, o.step_graphs = graphs;
  TrainedRun r;
  o.on_metrics = [&r](const json& row) {
    if (row.contains("loss")) r.rows.push_back(row);
    return true;
  };
  r.result = run_training(task, task.train_config(), o);
  return r;
}

// The error of a run of `task` with its steps recorded ("" when it ends well).
std::string recorded_run_error(LMTask& task, const json& cfg, const fs::path& out) {
  TrainerOptions o;
  o.out_dir = out.string(), o.full_config = cfg, o.quiet = true;
  o.step_graphs = TrainerOptions::StepGraphs::on;
  return testing::error_of([&] { run_training(task, task.train_config(), o); });
}

// The checkpoint's tensors: the weights and Adam's moments after the last step.
std::map<std::string, std::vector<float>> final_state(const fs::path& run) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, t] : io::load_safetensors((run / "checkpoint.safetensors").string()).tensors)
    if (t.dtype() == DType::f32) out[name] = Tensor(t).to_vector();
  return out;
}

void expect_the_same_run(const fs::path& a, const TrainedRun& ra, const fs::path& b, const TrainedRun& rb) {
  ASSERT_EQ(ra.rows.size(), rb.rows.size());
  for (size_t i = 0; i < ra.rows.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i);
    EXPECT_EQ(ra.rows[i]["loss"].get<double>(), rb.rows[i]["loss"].get<double>());
    EXPECT_EQ(ra.rows[i]["grad_norm"].get<double>(), rb.rows[i]["grad_norm"].get<double>());
    EXPECT_EQ(ra.rows[i]["lr"].get<double>(), rb.rows[i]["lr"].get<double>());
  }
  const auto sa = final_state(a), sb = final_state(b);
  ASSERT_EQ(sa.size(), sb.size());
  ASSERT_GT(sa.size(), 10u) << "the weights and the optimizer's moments";
  for (const auto& [name, values] : sa) EXPECT_EQ(values, sb.at(name)) << name;
}

TEST(StepGraph, ReplaysAreTheEagerStepsBitForBit) {
  const FixedThreads fixed;  // the bits of one thread count (core/thread_budget.h), whatever the machine does
  TempDir d("step_graph");
  const json cfg = tiny_config(d.path, 14);
  const TrainedRun eager = train(cfg, d.path / "eager", TrainerOptions::StepGraphs::off);
  const TrainedRun replayed = train(cfg, d.path / "replayed", TrainerOptions::StepGraphs::on);
  EXPECT_EQ(eager.result.recorded_steps, 0);
  EXPECT_EQ(replayed.result.recorded_steps, 13) << "every step after the first";
  expect_the_same_run(d.path / "eager", eager, d.path / "replayed", replayed);
  // the dropout masks moved (the losses differ from step to step beyond the schedule's doing)
  EXPECT_NE(replayed.rows[2]["loss"], replayed.rows[3]["loss"]);
}

// bf16 mixed precision: the weights' bf16 copies written by the recorded update (ops/autocast.h),
// the activations' copies lent inside the recording
TEST(StepGraph, Bf16ReplaysAreTheEagerStepsBitForBit) {
  const FixedThreads fixed;  // the bits of one thread count (core/thread_budget.h), whatever the machine does
  TempDir d("step_graph");
  json cfg = tiny_config(d.path, 8);
  cfg["train"]["dtype"] = "bf16";
  const TrainedRun eager = train(cfg, d.path / "eager", TrainerOptions::StepGraphs::off);
  const TrainedRun replayed = train(cfg, d.path / "replayed", TrainerOptions::StepGraphs::on);
  EXPECT_EQ(replayed.result.recorded_steps, 7);
  expect_the_same_run(d.path / "eager", eager, d.path / "replayed", replayed);
}

// A resumed run records its first step after the eager one it starts with, from the restored
// generator, t and schedule: the uninterrupted eager run's curve.
TEST(StepGraph, AResumedRunReplaysFromTheCheckpoint) {
  const FixedThreads fixed;  // the bits of one thread count (core/thread_budget.h), whatever the machine does
  TempDir d("step_graph");
  const json full = tiny_config(d.path, 12);
  json part = full;
  part["train"]["max_iters"] = 7;
  const TrainedRun eager = train(full, d.path / "eager", TrainerOptions::StepGraphs::off);
  train(part, d.path / "resumed", TrainerOptions::StepGraphs::on);
  LMTask task(full, "");
  TrainerOptions o;
  o.out_dir = (d.path / "resumed").string(), o.resume = true, o.full_config = full, o.quiet = true;
  o.step_graphs = TrainerOptions::StepGraphs::on;
  const TrainResult r = run_training(task, task.train_config(), o);
  EXPECT_EQ(r.recorded_steps, 4) << "steps 8–11 (7 eager)";
  const std::vector<double> a = testing::logged_losses(d.path / "eager"), b = testing::logged_losses(d.path / "resumed");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  const auto sa = final_state(d.path / "eager"), sb = final_state(d.path / "resumed");
  for (const auto& [name, values] : sa) EXPECT_EQ(values, sb.at(name)) << name;
}

TEST(StepGraph, RefusesWhatARecordingCannotHold) {
  TempDir d("step_graph");
  LMTask task(tiny_config(d.path, 2), "");
  EXPECT_EQ(StepGraph::refusal(task, false), "");
  EXPECT_NE(StepGraph::refusal(task, true).find("data-parallel"), std::string::npos);
  // a GPU's recording is a CUDA graph; on the CPU only the emulation records
  Adam adam(task.param_groups(0.1f), {});
  AutocastWeights casts(task.model().module().parameters());
  EXPECT_NE(testing::error_of([&] { StepGraph g(task, task.train_config(), adam, casts, StepGraph::Mode::graph); })
                .find("on a GPU"),
            std::string::npos);
}

// QKV_CUDA_GRAPHS (core/cuda.h's graph_use): unset, a GPU's decoding steps are graphs and its training
// steps are not; 1 adds the training steps; 0 neither; the CPU never, whatever it says; another value
// is an error naming the variable and the value.
TEST(StepGraph, QkvCudaGraphsAsksForDecodingGraphsUnlessZeroAndTrainingStepsWithOne) {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  struct Want {
    bool decoding, translation, training;
  };
  const auto wanted = [](Device d) {
    bool graphs = false;
    const bool fixed = nn::static_decoding_wanted(d, &graphs);
    return Want{decode::decode_graphs_wanted(d), fixed && graphs, train::step_graphs_wanted(d)};
  };
  testing::ScopedEnv static_decoding("QKV_STATIC_DECODING", nullptr);
  for (const char* v : {static_cast<const char*>(nullptr), ""}) {
    testing::ScopedEnv env("QKV_CUDA_GRAPHS", v);
    EXPECT_EQ(cuda::graph_use(), cuda::GraphUse::decoding);
    const Want w = wanted(gpu);
    EXPECT_TRUE(w.decoding && w.translation);
    EXPECT_FALSE(w.training);
  }
  {
    testing::ScopedEnv env("QKV_CUDA_GRAPHS", "1");
    EXPECT_EQ(cuda::graph_use(), cuda::GraphUse::decoding_and_training);
    const Want w = wanted(gpu);
    EXPECT_TRUE(w.decoding && w.translation && w.training);
  }
  {
    testing::ScopedEnv env("QKV_CUDA_GRAPHS", "0");
    testing::ScopedEnv unset("QKV_STATIC_DECODING", nullptr);
    EXPECT_EQ(cuda::graph_use(), cuda::GraphUse::none);
    const Want w = wanted(gpu);
    EXPECT_FALSE(w.decoding || w.translation || w.training);
    bool graphs = true;
    EXPECT_FALSE(nn::static_decoding_wanted(gpu, &graphs));  // the usual cache
    testing::ScopedEnv fixed("QKV_STATIC_DECODING", "1");    // static decoding without graphs
    EXPECT_TRUE(nn::static_decoding_wanted(gpu, &graphs));
    EXPECT_FALSE(graphs);
  }
  {  // QKV_STATIC_DECODING=0 asks for the usual cache, which has no graphs; 1 for the steps graphs replay
    testing::ScopedEnv env("QKV_CUDA_GRAPHS", nullptr);
    bool graphs = true;
    testing::ScopedEnv usual("QKV_STATIC_DECODING", "0");
    EXPECT_FALSE(nn::static_decoding_wanted(gpu, &graphs));
    EXPECT_FALSE(graphs);
    EXPECT_FALSE(nn::static_decoding_wanted(cpu, &graphs));
    testing::ScopedEnv fixed("QKV_STATIC_DECODING", "1");
    EXPECT_TRUE(nn::static_decoding_wanted(gpu, &graphs));
    EXPECT_TRUE(graphs);
    EXPECT_TRUE(nn::static_decoding_wanted(cpu, &graphs));
    EXPECT_FALSE(graphs);
  }
  for (const char* v : {static_cast<const char*>(nullptr), "0", "1"}) {
    testing::ScopedEnv env("QKV_CUDA_GRAPHS", v);
    const Want w = wanted(cpu);
    EXPECT_FALSE(w.decoding || w.translation || w.training) << (v ? v : "unset");
  }
  testing::ScopedEnv env("QKV_CUDA_GRAPHS", "yes");
  const std::string e = testing::error_of([] { cuda::graph_use(); });
  EXPECT_NE(e.find("QKV_CUDA_GRAPHS"), std::string::npos) << e;
  EXPECT_NE(e.find("'yes'"), std::string::npos) << e;
  EXPECT_NE(testing::error_of([&] { decode::decode_graphs_wanted(gpu); }).find("QKV_CUDA_GRAPHS"), std::string::npos);
}

// A recording whose step draws dropout from the default generator, which no replay moves: an error
// naming it, not steps that repeat one mask.
TEST(StepGraph, ADrawFromTheDefaultGeneratorIsAnError) {
  TempDir d("step_graph");
  struct SharedStreamTask : LMTask {
    using LMTask::LMTask;
    Generator* dropout_generator() override { return nullptr; }
    Tensor micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum) override {
      Tensor loss = LMTask::micro_loss(inputs, share, accum);
      (void)dropout(Tensor::ones({8}), 0.5f, true, nullptr);  // the default generator's draw
      return loss;
    }
  };
  const json cfg = tiny_config(d.path, 3);
  SharedStreamTask task(cfg, "");
  EXPECT_NE(recorded_run_error(task, cfg, d.path / "run").find("default generator"), std::string::npos);
}

// A recorded step that reads a tensor on the host — a wait for the GPU, which a capture refuses —
// is refused by the CPU's emulation too, naming the read (cuda::EmulatedCapture); the eager steps
// around it may read as they like.
TEST(StepGraph, AHostReadInsideTheRecordedStepIsAnError) {
  TempDir d("step_graph");
  struct ReadingTask : LMTask {
    using LMTask::LMTask;
    Tensor micro_loss(const std::vector<Tensor>& inputs, double share, int64_t accum) override {
      Tensor loss = LMTask::micro_loss(inputs, share, accum);
      (void)loss.item();
      return loss;
    }
  };
  const json cfg = tiny_config(d.path, 3);
  ReadingTask task(cfg, "");
  const std::string msg = recorded_run_error(task, cfg, d.path / "run");
  EXPECT_NE(msg.find("Tensor::to_vector / item during a recorded step"), std::string::npos) << msg;
  {
    const cuda::EmulatedCapture recording;
    EXPECT_NE(testing::error_of([] { (void)Tensor::from_ints({1, 2}, {2}).to_ints(); }).find("Tensor::to_ints"),
              std::string::npos);
  }
  EXPECT_EQ(Tensor::from_ints({1, 2}, {2}).to_ints().size(), 2u) << "outside, reads are as always";
}

TEST(StepGraphOnAGpu, ReplaysFollowTheEagerSteps) {
  if (!cuda::is_available()) GTEST_SKIP() << "this machine shows no CUDA GPU";
  TempDir d("step_graph");
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    json cfg = tiny_config(d.path, 14);
    cfg["train"]["dtype"] = dtype;
    const fs::path a = d.path / (std::string("eager-") + dtype), b = d.path / (std::string("graph-") + dtype);
    const TrainedRun eager = train(cfg, a, TrainerOptions::StepGraphs::off, Device::cuda());
    const TrainedRun replayed = train(cfg, b, TrainerOptions::StepGraphs::on, Device::cuda());
    EXPECT_EQ(replayed.result.recorded_steps, 13) << "every step after the first, as CUDA graph replays";
    ASSERT_EQ(eager.rows.size(), replayed.rows.size());
    // the same kernels in the same order; the attention backward's atomics may sum in another order
    for (size_t i = 0; i < eager.rows.size(); ++i) {
      const double x = eager.rows[i]["loss"].get<double>(), y = replayed.rows[i]["loss"].get<double>();
      EXPECT_NEAR(y, x, 1e-4 * std::max(1.0, x)) << "step " << i;
    }
    EXPECT_NE(replayed.rows[2]["loss"], replayed.rows[3]["loss"]);
  }
}

}  // namespace
}  // namespace qkv::train::step_graph_test
