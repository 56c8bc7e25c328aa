// Data-parallel `qkv train` under mpirun, end to end over loopback TCP (--mca btl tcp,self): 2, 3
// and 4 processes reproduce one process's loss curve and weights (GPT and translation, dropout on,
// gradient accumulation, an uneven split), only rank 0 writes, a resumed 2-process run continues
// the same curve, Ctrl-C stops every rank after the same step with rank 0's checkpoint, and a rank
// killed mid-run stops the job with a message and a loadable checkpoint.
// Skipped when the build has no MPI (-DQKV_MPI=OFF) or mpirun is missing.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/model_file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using testing::logged_losses;
using testing::TempDir;

#ifdef QKV_TEST_MPIEXEC
constexpr const char* kMpiexec = QKV_TEST_MPIEXEC;
#else
constexpr const char* kMpiexec = "";
#endif

using Shell = testing::ShellResult;
Shell shell(const std::string& cmd) { return testing::run_shell(cmd); }

// `qkv train ARGS` on `np` processes (0: plain, no mpirun), one thread each.
std::string train_cmd(int np, const std::string& args) {
  const std::string qkv = std::string(QKV_CLI_PATH) + " train " + args + " -q";
  if (np == 0) return "env OMP_NUM_THREADS=1 " + qkv;
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 " +
         std::string(kMpiexec) + " -np " + std::to_string(np) + " --mca btl tcp,self -x OMP_NUM_THREADS=1 " + qkv;
}

class MpiTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(kMpiexec).empty() || !fs::exists(kMpiexec))
      GTEST_SKIP() << "built without MPI (-DQKV_MPI=ON) or mpirun missing";
  }
};

// The f32 parameters of a checkpoint (not its optimizer state).
std::map<std::string, std::vector<float>> weights(const fs::path& dir) {
  std::map<std::string, std::vector<float>> w;
  for (auto& [name, t] : models::load_model_file((dir / "checkpoint.safetensors").string()).params)
    w[name] = t.to_vector();
  return w;
}

// One process and N processes agree: per-step loss within rel_tol, weights within abs_tol.
void expect_same_run(const fs::path& one, const fs::path& many, double rel_tol, double abs_tol) {
  const auto la = logged_losses(one), lb = logged_losses(many);
  ASSERT_FALSE(la.empty());
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(lb[i], la[i], rel_tol * std::abs(la[i])) << "step " << i;
  const auto wa = weights(one), wb = weights(many);
  ASSERT_EQ(wa.size(), wb.size());
  double worst = 0;
  std::string where;
  for (auto& [name, v] : wa)
    for (size_t i = 0; i < v.size(); ++i) {
      // The key bias shifts every score of a query's row alike, which softmax ignores: its gradient
      // is zero in exact arithmetic and rounding noise in practice — noise Adam turns into full
      // steps of either sign, in one process as in many. It is no measure of agreement.
      if (name.ends_with("in_proj_bias") && i >= v.size() / 3 && i < 2 * v.size() / 3) continue;
      if (const double e = std::abs(v[i] - wb.at(name)[i]); e > worst)
        worst = e, where = name + "[" + std::to_string(i) + "] " + std::to_string(v[i]) + " vs " + std::to_string(wb.at(name)[i]);
    }
  EXPECT_LE(worst, abs_tol) << where;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> s;
  for (auto& e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}

// configs/shakespeare-char.json (the "done when"), with dropout on and two micro-batches
// per step, for a few steps.
std::string gpt_args(const fs::path& out, int steps) {
  return std::string(QKV_SOURCE_DIR) + "/configs/shakespeare-char.json -o " + out.string() +
         " --set model.dropout=0.1 --set train.gradient_accumulation_steps=2 --set train.max_iters=" +
         std::to_string(steps) +
         " --set train.lr_decay_iters=20 --set train.warmup_iters=2 --set train.eval_interval=0"
         " --set train.log_interval=1 --set train.checkpoint_interval=0";
}

TEST_F(MpiTrain, GptOnTwoAndFourProcessesIsOneProcessRun) {
  TempDir d("mpi-gpt");
  const Shell one = shell(train_cmd(0, gpt_args(d.path / "one", 12)));
  ASSERT_EQ(one.code, 0) << one.out;
  for (int np : {2, 4}) {
    const fs::path out = d.path / ("np" + std::to_string(np));
    const Shell r = shell(train_cmd(np, gpt_args(out, 12)));
    ASSERT_EQ(r.code, 0) << r.out;
    expect_same_run(d.path / "one", out, 1e-5, 1e-5);
    // only rank 0 writes and speaks: the same files as one process, one announcement
    EXPECT_EQ(files_in(out), files_in(d.path / "one"));
    size_t said = 0;
    for (size_t at = 0; (at = r.out.find("qkv train: GPT", at)) != std::string::npos; ++at) ++said;
    EXPECT_EQ(said, 1u) << r.out;
    EXPECT_NE(r.out.find(std::to_string(np) + " processes"), std::string::npos) << r.out;
  }
}

// Early stopping (issue 49): rank 0 decides and every rank stops at the same evaluation, as one
// process does; one message, one best.safetensors.
TEST_F(MpiTrain, EarlyStoppingStopsEveryRankAtTheSameEvaluation) {
  TempDir d("mpi-early");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "abcdefgh\n";
  io::write_file_atomic((d.path / "text.txt").string(), text);
  const nlohmann::json cfg = {
      {"task", "lm"},
      {"data", {{"path", (d.path / "text.txt").string()}}},
      {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 16}, {"dropout", 0.1}}},
      {"train",
       {{"max_iters", 300}, {"batch_size", 4}, {"learning_rate", 1e-2}, {"min_lr", 1e-3}, {"warmup_iters", 5},
        {"lr_decay_iters", 300}, {"eval_interval", 10}, {"eval_iters", 2}, {"log_interval", 10},
        {"checkpoint_interval", 0}, {"early_stopping_patience", 3}, {"early_stopping_threshold", 0.01}}}};
  io::write_file_atomic((d.path / "tiny.json").string(), cfg.dump());
  auto last_step = [](const fs::path& dir) {
    int64_t step = -1;
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) step = nlohmann::json::parse(line)["step"].get<int64_t>();
    return step;
  };
  const std::string args = (d.path / "tiny.json").string() + " -o ";
  const Shell one = shell(train_cmd(0, args + (d.path / "one").string()));
  ASSERT_EQ(one.code, 0) << one.out;
  const Shell two = shell(train_cmd(2, args + (d.path / "two").string()));
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_LT(last_step(d.path / "one"), 300);  // it stopped early
  EXPECT_EQ(last_step(d.path / "two"), last_step(d.path / "one"));
  EXPECT_TRUE(fs::exists(d.path / "two" / "best.safetensors"));
  size_t said = 0;
  for (size_t at = 0; (at = two.out.find("early stopping at step", at)) != std::string::npos; ++at) ++said;
  EXPECT_EQ(said, 1u) << two.out;
}

TEST_F(MpiTrain, TranslationOnTwoAndThreeProcessesIsOneProcessRun) {
  // token batches of ~30 sentences of different lengths: 3 processes split them unevenly
  TempDir d("mpi-translation");
  nlohmann::json c = testing::tiny_translation_config(d.path, 8);
  c["train"]["eval_interval"] = 0, c["train"]["model_dtype"] = "f32";
  io::write_file_atomic((d.path / "tiny.json").string(), c.dump());
  auto args = [&](const std::string& name) { return (d.path / "tiny.json").string() + " -o " + (d.path / name).string(); };
  const Shell one = shell(train_cmd(0, args("one")));
  ASSERT_EQ(one.code, 0) << one.out;
  for (int np : {2, 3}) {
    const Shell r = shell(train_cmd(np, args("np" + std::to_string(np))));
    ASSERT_EQ(r.code, 0) << r.out;
    expect_same_run(d.path / "one", d.path / ("np" + std::to_string(np)), 1e-5, 1e-5);
  }
}

TEST_F(MpiTrain, MaskedLMOnTwoAndThreeProcessesIsOneProcessRun) {
  // a tiny BERT's masked-LM training, dropout on and two micro-batches a step, grouped blocks and
  // padded lines: each rank masks its blocks as one process does, pads to the micro-batch's longest
  // and weighs its loss by its share of the step's chosen tokens
  TempDir d("mpi-mlm");
  const std::string model = (d.path / "bert.safetensors").string();
  models::convert_hf(std::string(QKV_GOLDEN_DIR) + "/hf/bert-uncased", model);
  {
    std::ofstream text(d.path / "text.txt");
    const std::vector<std::string> words = {"romeo", "loves", "juliet", "the", "king", "of", "rome", "is", "old"};
    for (size_t i = 0; i < 300; ++i) {
      for (size_t k = 0; k < 2 + i % 9; ++k) text << (k ? " " : "") << words[(i * 5 + k * 7) % words.size()];
      text << "\n";
    }
  }
  for (const bool lines : {false, true}) {
    SCOPED_TRACE(lines ? "line_by_line" : "grouped");
    const nlohmann::json c = {
        {"task", "masked_lm"},
        {"init_from", model},
        {"data", {{"train", (d.path / "text.txt").string()}, {"max_length", 12}, {"line_by_line", lines}}},
        {"model", {{"dropout", 0.1}}},
        {"train",
         {{"max_iters", 6},
          {"batch_size", 12},
          {"gradient_accumulation_steps", 2},
          {"learning_rate", 1e-3},
          {"eval_interval", 0},
          {"log_interval", 1},
          {"checkpoint_interval", 0}}}};
    const fs::path cfg = d.path / (lines ? "lines.json" : "grouped.json");
    io::write_file_atomic(cfg.string(), c.dump());
    const std::string tag = lines ? "lines-" : "grouped-";
    auto args = [&](const std::string& name) { return cfg.string() + " -o " + (d.path / (tag + name)).string(); };
    const Shell one = shell(train_cmd(0, args("one")));
    ASSERT_EQ(one.code, 0) << one.out;
    for (int np : {2, 3}) {
      const Shell r = shell(train_cmd(np, args("np" + std::to_string(np))));
      ASSERT_EQ(r.code, 0) << r.out;
      expect_same_run(d.path / (tag + "one"), d.path / (tag + "np" + std::to_string(np)), 1e-5, 1e-5);
    }
  }
}

TEST_F(MpiTrain, ResumedTwoProcessRunContinuesTheCurve) {
  TempDir d("mpi-resume");
  ASSERT_EQ(shell(train_cmd(2, gpt_args(d.path / "full", 10))).code, 0);
  ASSERT_EQ(shell(train_cmd(2, gpt_args(d.path / "part", 5))).code, 0);
  const Shell r = shell(train_cmd(2, gpt_args(d.path / "part", 10) + " --resume"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming from"), std::string::npos) << r.out;
  expect_same_run(d.path / "full", d.path / "part", 1e-6, 1e-6);
}

// The pid of rank `rank` of the run writing to `out` (its command line names the folder).
int find_rank(const fs::path& out, int rank) {
  for (auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline, environ;
    try {
      cmdline = io::read_file((e.path() / "cmdline").string());
      environ = io::read_file((e.path() / "environ").string());
    } catch (const std::exception&) {
      continue;
    }
    std::replace(environ.begin(), environ.end(), '\0', '\n');
    if (cmdline.find(out.string()) != std::string::npos && cmdline.find("mpirun") == std::string::npos &&
        environ.find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos)
      return std::stoi(pid);
  }
  return -1;
}

// A 2-process run of (practically) endless steps with a checkpoint every 3, started in the
// background; the constructor returns once the first checkpoint is on disk.
struct LongJob {
  fs::path out, ckpt;
  Shell result{};
  std::thread job;
  explicit LongJob(const fs::path& dir) : out(dir / "run"), ckpt(out / "checkpoint.safetensors") {
    std::string args = gpt_args(out, 100000);
    args.replace(args.find("checkpoint_interval=0"), 21, "checkpoint_interval=3");
    job = std::thread([this, args] { result = shell("timeout 120 " + train_cmd(2, args)); });
    const auto t0 = std::chrono::steady_clock::now();
    while (!fs::exists(ckpt) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const Shell& wait() {
    job.join();
    return result;
  }
  ~LongJob() {
    if (job.joinable()) job.join();
  }
};

TEST_F(MpiTrain, AKilledRankStopsTheJobAndLeavesTheLastCheckpoint) {
  TempDir d("mpi-kill");
  LongJob job(d.path);
  int pid = -1;
  for (int tries = 0; tries < 100 && (pid = find_rank(job.out, 1)) <= 0; ++tries)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(pid, 0) << "rank 1 not found";
  ::kill(pid, SIGKILL);
  const Shell& r = job.wait();
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.code, 124) << "the surviving rank did not stop: " << r.out;  // timeout's code
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  const models::ModelFile f = models::load_model_file(job.ckpt.string());
  EXPECT_GE(f.meta["train_state"]["step"].get<int64_t>(), 3);
}

TEST_F(MpiTrain, CtrlCStopsEveryRankAfterTheSameStepAndRankZeroSaves) {
  TempDir d("mpi-interrupt");
  LongJob job(d.path);
  // Ctrl-C at mpirun, which passes SIGTERM on to every rank
  shell("pkill -INT -f '^" + std::string(kMpiexec) + ".*" + job.out.string() + "'");
  const Shell& r = job.wait();
  EXPECT_NE(r.code, 124) << "the job did not stop: " << r.out;
  ASSERT_NE(r.out.find("interrupted: saved"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("error"), std::string::npos) << r.out;
  const models::ModelFile f = models::load_model_file(job.ckpt.string());
  const auto step = f.meta["train_state"]["step"].get<int64_t>();
  EXPECT_NE(r.out.find("at step " + std::to_string(step) + ";"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qkv
