// The qkv command as a user runs it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <array>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <sched.h>

#include "qkv/core/device.h"
#include "qkv/vision/image.h"

namespace {

struct CliRun {
  int code;
  std::string out;
};

// `env` goes before the command, e.g. "env -u OMP_NUM_THREADS OMP_PROC_BIND=true ".
CliRun run(const std::string& args, const std::string& env = "") {
  std::string cmd = env + std::string(QKV_CLI_PATH) + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

TEST(Cli, HelpListsCommands) {
  CliRun r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("demo"), std::string::npos);
  EXPECT_NE(r.out.find("bench"), std::string::npos);
  EXPECT_EQ(run("bench attention --help").code, 0);
  EXPECT_EQ(run("demo --help").code, 0);
}

TEST(Cli, DemoPrintsTheSeedsTrueNumbers) {
  CliRun r = run("demo");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("56.46%"), std::string::npos) << r.out;            // seed 000, position 0
  EXPECT_NE(r.out.find("[1.339029, 1.439029]"), std::string::npos) << r.out;  // seed 002, "quick"
}

TEST(Cli, BenchAttentionJson) {
  CliRun r = run("bench attention --seq-len 64 --heads 2 --head-dim 16 --causal --json --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"forward_ms\"", "\"forward_backward_ms\"", "\"gflops\"", "\"peak_extra_mib\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  // the training step's dropout on the weights (the GPT recipe's shape in gpu_session.sh's breakdown)
  r = run("bench attention --seq-len 64 --heads 2 --head-dim 16 --causal --dropout 0.2 --json --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"dropout\": 0.2,"), std::string::npos) << r.out;
  EXPECT_NE(run("bench attention --dropout 1").code, 0);
  // Gemma 2's soft-capped scores (gpu_session.sh's softcap step); a cap that is no normal float named
  r = run("bench attention --seq-len 64 --heads 2 --head-dim 16 --causal --softcap 50 --json --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"softcap\": 50,"), std::string::npos) << r.out;
  for (const char* cap : {"-1", "nan", "inf"}) {
    r = run(std::string("bench attention --seq-len 8 --softcap ") + cap);
    EXPECT_NE(r.code, 0) << cap;
    EXPECT_NE(r.out.find("softcap"), std::string::npos) << r.out;
  }
}

TEST(Cli, BenchPagedAttentionJson) {
  CliRun r = run("bench paged-attention -B 2 -L 40 --heads 4 --kv-heads 2 -d 16 --page-size 4 --window 7 --repeats 1 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key :
       {"\"paged_ms\"", "\"dense_ms\"", "\"paged_gbs\"", "\"window\": 7", "\"paged_kernel\": \"cpu\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " in " << r.out;
  // a shared prefix: whole pages (557 keys → 139 pages of 4: 556), more than the sequences hold refused
  r = run("bench paged-attention -B 3 -L 600 --heads 4 --kv-heads 2 -d 16 --page-size 4 --shared-prefix 557 --repeats 1 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"shared_prefix\": 556"), std::string::npos) << r.out;
  // the cache in e4m3 (vLLM's name for it)
  r = run("bench paged-attention -B 2 -L 40 --heads 4 --kv-heads 2 -d 16 --page-size 4 --kv-dtype fp8 --repeats 1 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"kv_dtype\": \"fp8\""), std::string::npos) << r.out;
  r = run("bench paged-attention -L 40 --shared-prefix 41");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--shared-prefix 41 is longer than --kv-len 40"), std::string::npos) << r.out;
  r = run("bench paged-attention --heads 3 --kv-heads 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--heads 3 is not a multiple of --kv-heads 2"), std::string::npos) << r.out;
  r = run("bench paged-attention -L 9223372036854775807");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("more pages than a block table numbers"), std::string::npos) << r.out;
}

// The output layer's loss both ways: the same loss, and the chunks' peak well under the logits' (512 × 2,000
// floats, twice: 7.8 MB; a chunk of 64 rows 0.5 MB beside dx and dW, 0.16 MB).
TEST(Cli, BenchLinearCrossEntropyJson) {
  CliRun r = run("bench linear-cross-entropy -N 512 -d 16 -V 2000 --chunk-rows 0 64 --repeats 1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j.at("forms").size(), 3u) << r.out;
  EXPECT_EQ(j["forms"][0]["form"], "unfused");
  EXPECT_EQ(j["forms"][2]["chunk_rows"], 64);
  EXPECT_NEAR(j["loss_unfused"].get<double>(), j["loss_fused"].get<double>(), 1e-5) << r.out;
  EXPECT_GT(j["loss_unfused"].get<double>(), 7.0) << r.out;  // ≈ ln 2000 = 7.6 for logits near 0
  const double unfused = j["forms"][0]["peak_mb"], chunked = j["forms"][2]["peak_mb"];
  EXPECT_GT(unfused, 7.0) << r.out;
  EXPECT_LT(chunked, 2.0) << r.out;
  r = run("bench linear-cross-entropy -N 4 -d 4 -V 4 --dtype bf16 --no-unfused --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  r = run("bench linear-cross-entropy -N 9223372036854775807 -d 2 -V 3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("this machine has"), std::string::npos) << r.out;
  r = run("bench linear-cross-entropy -V 2147483648");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("past int32"), std::string::npos) << r.out;
}

// Issue 25: output that cannot be written (a full disk: /dev/full) is a failure, not exit 0.
TEST(Cli, WriteErrorsExitNonZero) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  EXPECT_EQ(run("demo > /dev/null").code, 0);
  EXPECT_NE(run("demo > /dev/full").code, 0);
  EXPECT_NE(run("translate \"I like tea.\" > /dev/full").code, 0);
  EXPECT_NE(run("generate -n 20 > /dev/full").code, 0);
}

TEST(Cli, BadArgumentsGiveAClearErrorAndNonZeroExit) {
  CliRun r = run("bench attention --seq-len -3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("seq-len"), std::string::npos) << r.out;
  r = run("bench attention --seq-len 8 --heads 3 --kv-heads 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
  EXPECT_NE(run("no-such-command").code, 0);
  // Out-of-range numbers name the option, the allowed values and the value given.
  for (auto [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"generate -n -1", "--max-new-tokens: must be a number ≥ 0, got -1"},
           {"generate --temperature -0.5", "--temperature: must be a number ≥ 0, got -0.5"},
           {"generate --top-p 0", "--top-p: must be in (0, 1], got 0"},
           {"bench gpt train --iters 0", "--iters: must be a number greater than 0, got 0"},
           {"translate --beam 65", "--beam: must be in [1, 64], got 65"},
           {"translate --threads x", "--threads: must be a number greater than 0, got x"},
           {"serve --kv-cache-dtype fp8_e5m2", "--kv-cache-dtype: fp8_e5m2 not in {f32,bf16,fp8,fp8_e4m3,f8e4m3}"}}) {
    r = run(args);
    // a usage error: exit 2 (as getopt's tools), one line naming the command and the flag — not
    // CLI11's own exit codes (105, 106) and its second "Run with --help" line
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
    EXPECT_EQ(r.out.rfind("qkv " + args.substr(0, args.find(' ')), 0), 0u) << args << ": " << r.out;
    EXPECT_NE(r.out.find(": error: "), std::string::npos) << args << ": " << r.out;
    EXPECT_LT(r.out.size(), 200u) << args << ": " << r.out;
  }
  // a file argument that is not there, or is a folder, is bad input: exit 1, naming it
  r = run("train /no/such/config.json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("/no/such/config.json"), std::string::npos) << r.out;
}

TEST(Cli, OpenMpBindingKeepsEveryCpu) {
  // qkv re-executes itself to bound OpenMP's spinning (tools/qkv/main.cpp). With OMP_PROC_BIND
  // set, libgomp had already pinned the first process to one CPU, and the second inherited that:
  // it ran one thread. Without OMP_NUM_THREADS, qkv must use every CPU this test may use.
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cpus = CPU_COUNT(&set);
  if (cpus < 2) GTEST_SKIP() << "needs 2 CPUs, has " << cpus;
  for (const char* bind : {"true", "close", "spread"}) {
    CliRun r = run("bench gpt train --iters 1 --warmup 0 --json",
                   std::string("env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_PROC_BIND=") + bind + " ");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("\"threads\":" + std::to_string(cpus) + ","), std::string::npos)
        << "OMP_PROC_BIND=" << bind << ": " << r.out;
  }
}

}  // namespace

// ---- train / generate --------------------------------------------------------------------------

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace {

std::string tmp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("qkv-cli-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string tiny_lm_config(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "to be or not to be\n";
  std::ofstream(dir + "/text.txt") << text;
  std::ofstream(dir + "/cfg.json") << R"({"task": "lm", "data": {"path": "text.txt"},
    "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 32},
    "train": {"max_iters": 60, "batch_size": 8, "learning_rate": 0.01, "warmup_iters": 5, "lr_decay_iters": 60,
              "eval_interval": 30, "eval_iters": 2, "checkpoint_interval": 0}})";
  return dir + "/cfg.json";
}

// --set train.keep_best / early_stopping_patience (issue 49): the best model's file and step are
// said at the end, and the TensorBoard event file sits beside metrics.jsonl; best.safetensors
// generates as model.safetensors does.
TEST(Cli, TrainKeepsTheBestModelAndStopsEarly) {
  const std::string d = tmp_dir("train-best");
  const std::string cfg = tiny_lm_config(d);
  CliRun t = run("train " + cfg + " -o " + d + "/out -q --set train.keep_best=true --set train.eval_interval=20");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("best evaluation: step "), std::string::npos) << t.out;
  EXPECT_TRUE(std::filesystem::exists(d + "/out/events.out.tfevents.qkv"));
  EXPECT_EQ(run("generate -m " + d + "/out/best.safetensors -p 'to be' -n 5 --seed 1").code, 0);
  // a threshold no evaluation can beat: stopped at the second evaluation with patience 1
  CliRun e = run("train " + cfg + " -o " + d + "/early -q --set train.eval_interval=20"
                 " --set train.early_stopping_patience=1 --set train.early_stopping_threshold=100");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("early stopping at step 20: val_loss has not improved"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("best evaluation: step 0"), std::string::npos) << e.out;
  std::filesystem::remove_all(d);
}

// A machine without the picture libraries (librsvg2-2: a GPU container, a minimal image) trains all the
// same: loss.svg without loss.png, said once (Metrics writes the plot at each evaluation), and exit 0.
// librsvg's file is hidden by a mount namespace (unshare -m; skipped where that is not allowed).
TEST(Cli, TrainWithoutThePictureLibrariesWritesTheSvgAlone) {
  const std::string d = tmp_dir("train-no-png");
  const std::string cfg = tiny_lm_config(d);
  std::ofstream(d + "/hide.sh") << R"sh(lib=$(readlink -f "$(/sbin/ldconfig -p | awk '/librsvg-2[.]so[.]2 / {print $NF; exit}')")
[ -f "$lib" ] && mount --bind /dev/null "$lib" || exit 77
exec "$@"
)sh";
  const std::string hide = "unshare -m sh " + d + "/hide.sh ";
  if (std::system((hide + "true >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "cannot hide librsvg here (unshare -m and mount --bind need the privilege)";
  CliRun t = run("train " + cfg + " -o " + d + "/out -q", hide);
  ASSERT_EQ(t.code, 0) << t.out;
  const std::string said = "qkv: loss.svg without loss.png: cannot open librsvg";
  const size_t at = t.out.find(said);
  EXPECT_NE(at, std::string::npos) << t.out;
  EXPECT_EQ(t.out.find(said, at + 1), std::string::npos) << "said once: " << t.out;
  EXPECT_NE(t.out.find("apt-get install librsvg2-2"), std::string::npos) << t.out;
  EXPECT_TRUE(std::filesystem::exists(d + "/out/loss.svg"));
  EXPECT_TRUE(std::filesystem::exists(d + "/out/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(d + "/out/loss.png"));
  // and with them, the PNG beside it
  ASSERT_EQ(run("train " + cfg + " -o " + d + "/with -q").code, 0);
  EXPECT_TRUE(std::filesystem::exists(d + "/with/loss.png"));
  std::filesystem::remove_all(d);
}

TEST(Cli, TrainThenGenerate) {
  const std::string d = tmp_dir("train");
  const std::string cfg = tiny_lm_config(d);
  CliRun t = run("train " + cfg + " -o " + d + "/out");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("val_loss"), std::string::npos) << t.out;
  CliRun g = run("generate -m " + d + "/out/model.safetensors -p 'to be' -n 40 --seed 3 -t 0.8 -k 5");
  ASSERT_EQ(g.code, 0) << g.out;
  EXPECT_EQ(g.out.rfind("to be", 0), 0u) << g.out;
  EXPECT_GE(g.out.size(), 45u);
  // a fixed seed reproduces the sample; cached and uncached agree
  EXPECT_EQ(run("generate -m " + d + "/out/model.safetensors -p 'to be' -n 40 --seed 3 -t 0.8 -k 5").out, g.out);
  EXPECT_EQ(run("generate -m " + d + "/out/model.safetensors -p 'to be' -n 40 --seed 3 -t 0.8 -k 5 --no-cache").out,
            g.out);
  // samples run together (decode/batching_generator.h) print what each seed gives alone, in order
  const std::string gen = "generate -m " + d + "/out/model.safetensors -p 'to be' -n 30 -t 0.8 ";
  std::string alone;
  for (int s = 7; s < 10; ++s) alone += run(gen + "--seed " + std::to_string(s)).out + "---------------\n";
  EXPECT_EQ(run(gen + "--seed 7 --num-samples 3").out, alone);
  // a character outside the vocabulary
  CliRun bad = run("generate -m " + d + "/out/model.safetensors -p 'to be?' -n 5");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("'?'"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("not in the model's vocabulary"), std::string::npos) << bad.out;
  // a missing model, a corrupt model
  CliRun missing = run("generate -m " + d + "/nope.safetensors");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.out.find("nope.safetensors"), std::string::npos) << missing.out;
  std::ofstream(d + "/junk.safetensors") << "this is not a model";
  CliRun junk = run("generate -m " + d + "/junk.safetensors");
  EXPECT_NE(junk.code, 0);
  EXPECT_NE(junk.out.find("junk.safetensors"), std::string::npos) << junk.out;
  EXPECT_EQ(junk.out.find("terminate"), std::string::npos) << junk.out;
  std::filesystem::remove_all(d);
}

TEST(Cli, TrainCtrlCSavesAndResumes) {
  const std::string d = tmp_dir("sigint");
  const std::string cfg = tiny_lm_config(d);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen((d + "/stderr.txt").c_str(), "w", stderr);
    execl(QKV_CLI_PATH, QKV_CLI_PATH, "train", cfg.c_str(), "-o", (d + "/out").c_str(), "--set",
          "train.max_iters=1000000", (char*)nullptr);
    _exit(127);
  }
  // wait until the training loop runs (its first evaluation, "step 0: …", is said after Ctrl-C's
  // handler is in place — the output folder alone came earlier, and a busy machine took over
  // 500 ms from there to the loop: the test's signal then found no handler), then Ctrl-C
  auto said = [&](const std::string& what) {
    std::stringstream text;
    text << std::ifstream(d + "/stderr.txt").rdbuf();
    return text.str().find(what) != std::string::npos;
  };
  for (int i = 0; i < 1200 && !said("step 0:"); ++i) usleep(50 * 1000);
  usleep(300 * 1000);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  // (which signal, and what the run said: a Ctrl-C that found no handler, or a crash after it)
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status))
                                 << ") instead of saving; its stderr:\n"
                                 << [&] {
                                      std::stringstream text;
                                      text << std::ifstream(d + "/stderr.txt").rdbuf();
                                      return text.str();
                                    }();
  EXPECT_EQ(WEXITSTATUS(status), 130);
  ASSERT_TRUE(std::filesystem::exists(d + "/out/checkpoint.safetensors"));
  // the summary: the step it stopped at with that step's loss; the last evaluation named with its own
  // step (not step 0's losses as if they were the stopping step's)
  std::stringstream err_text;
  err_text << std::ifstream(d + "/stderr.txt").rdbuf();
  const std::string err = err_text.str();
  const size_t at = err.find("stopped at step ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string summary = err.substr(at, err.find('\n', at) - at);
  const long stopped = std::stol(summary.substr(16));
  EXPECT_NE(summary.find(": loss "), std::string::npos) << summary;
  const size_t ev = summary.find("last evaluation (step ");
  ASSERT_NE(ev, std::string::npos) << summary;  // step 0 at least was evaluated
  const long evaluated = std::stol(summary.substr(ev + 22));
  EXPECT_EQ(evaluated % 30, 0) << summary;  // eval_interval 30: the evaluation's own step, not the stop's
  // (equal where the Ctrl-C came before the step after an evaluation — a loaded machine's run may
  // not have gone past step 0 in the 300 ms)
  EXPECT_LE(evaluated, stopped) << summary;
  CliRun r = run("train " + cfg + " -o " + d + "/out --resume --set train.max_iters=1");
  // already past max_iters: resumes, evaluates, saves, exits cleanly
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming from"), std::string::npos) << r.out;
  std::filesystem::remove_all(d);
}

// QKV_PROFILE=1: torch.profiler's table at exit — every op the run dispatched, its backward apart,
// calls and host times; the calls add up to what QKV_COUNT_OPS=1 counts.
TEST(Cli, ProfileTablesEveryOpsCallsAndTimes) {
  const std::string d = tmp_dir("profile");
  const std::string cfg = tiny_lm_config(d);
  const std::string args = "train " + cfg + " -o " + d + "/out -q --set train.max_iters=3 --set train.eval_interval=0";
  CliRun p = run(args, "QKV_PROFILE=1 ");
  ASSERT_EQ(p.code, 0) << p.out;
  for (const char* want : {"qkv: profile (QKV_PROFILE=1)", "µs/call", "device ms", "linear (backward)",
                           "scaled_dot_product_attention", "linear_cross_entropy", "adam_update_", "all ops",
                           "host time outside the dispatches"})
    EXPECT_NE(p.out.find(want), std::string::npos) << want << " in " << p.out;
  CliRun c = run(args, "QKV_COUNT_OPS=1 ");
  ASSERT_EQ(c.code, 0) << c.out;
  const std::string counted = "op dispatches (QKV_COUNT_OPS=1): ";
  const size_t at = c.out.find(counted);
  ASSERT_NE(at, std::string::npos) << c.out;
  const size_t from = at + counted.size();
  const std::string count = c.out.substr(from, c.out.find(' ', from) - from);
  const size_t h = p.out.find("to exit; ") + 9;
  std::string profiled = p.out.substr(h, p.out.find(" dispatches,", h) - h);
  std::erase(profiled, ',');
  EXPECT_EQ(profiled, count) << p.out;
  EXPECT_EQ(run(args).out.find("qkv: profile"), std::string::npos) << "nothing without the variable";
  std::filesystem::remove_all(d);
}

TEST(Cli, TrainAndGenerateHelp) {
  for (const char* c : {"train --help", "generate --help"}) {
    CliRun r = run(c);
    EXPECT_EQ(r.code, 0) << c;
    EXPECT_NE(r.out.find("Options"), std::string::npos) << r.out;
  }
  CliRun r = run("train /nonexistent.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("nonexistent"), std::string::npos) << r.out;
  if (!qkv::device_available(qkv::Device::cuda())) {  // --device cuda where there is none: a clear refusal
    CliRun g = run("train " + std::string(QKV_SOURCE_DIR) + "/configs/shakespeare-char.json --device cuda -o /nonexistent/x");
    EXPECT_NE(g.code, 0);
    EXPECT_NE(g.out.find("--device cuda"), std::string::npos) << g.out;
    CliRun s = run("serve -m /nonexistent.safetensors --device cuda");  // refused before any file is read
    EXPECT_NE(s.code, 0);
    EXPECT_NE(s.out.find("serve --device cuda"), std::string::npos) << s.out;
  }
}

// qkv plot draws one metric of several runs; qkv average refuses what it cannot average.
TEST(Cli, PlotAndAverage) {
  for (const char* c : {"plot --help", "average --help"}) EXPECT_EQ(run(c).code, 0) << c;
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-plot-" + std::to_string(getpid());
  std::filesystem::create_directories(d + "/a");
  std::filesystem::create_directories(d + "/b");
  {
    std::FILE* f = std::fopen((d + "/a/metrics.csv").c_str(), "w");
    std::fputs("step,val_loss,loss\n0,4.0,\n10,,3.5\n20,2.5,\n", f);
    std::fclose(f);
    f = std::fopen((d + "/b/metrics.csv").c_str(), "w");
    std::fputs("step,val_loss\n0,4.1\n20,2.75\n", f);
    std::fclose(f);
  }
  CliRun r = run("plot " + d + "/a " + d + "/b -n f32 -n bf16 -o " + d + "/cmp.svg");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("f32: 2 points, last 2.5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16: 2 points"), std::string::npos) << r.out;
  ASSERT_TRUE(std::filesystem::exists(d + "/cmp.svg"));
  r = run("plot " + d + "/a -y nope -o " + d + "/x.svg");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no column \"nope\""), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(d + "/x.svg"));
  r = run("average " + d + "/a/metrics.csv -o " + d + "/avg.safetensors");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("metrics.csv"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(d + "/avg.safetensors"));
  std::filesystem::remove_all(d);
}

TEST(Cli, EvalGroupsLinesBySource) {
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-eval-" + std::to_string(getpid());
  std::filesystem::create_directories(d);
  auto write = [&](const std::string& name, const char* text) {
    std::FILE* f = std::fopen((d + "/" + name).c_str(), "w");
    std::fputs(text, f);
    std::fclose(f);
  };
  // "I am tired." has two translations on two lines; the output matches the second one.
  write("src", "I am tired.\nThe cat sleeps on the mat.\nI am tired.\n");
  write("ref", "Je suis épuisé, vraiment.\nLe chat dort sur le tapis.\nJe suis fatigué.\n");
  write("hyp", "Je suis fatigué.\nLe chat dort sur le tapis.\nJe suis fatigué.\n");
  CliRun grouped = run("eval --src " + d + "/src --ref " + d + "/ref --hyp " + d + "/hyp --group-by-source");
  EXPECT_EQ(grouped.code, 0) << grouped.out;
  EXPECT_NE(grouped.out.find("BLEU = 100.00"), std::string::npos) << grouped.out;
  EXPECT_NE(grouped.out.find("2 distinct sources on 3 lines"), std::string::npos) << grouped.out;
  CliRun lines = run("eval --ref " + d + "/ref --hyp " + d + "/hyp");
  EXPECT_EQ(lines.code, 0) << lines.out;
  EXPECT_EQ(lines.out.find("BLEU = 100.00"), std::string::npos) << lines.out;  // line 1 is held against "épuisé"
  write("short", "Je suis fatigué.\n");
  CliRun bad = run("eval --src " + d + "/src --ref " + d + "/ref --hyp " + d + "/short --group-by-source");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("1 lines in --hyp"), std::string::npos) << bad.out;
  bad = run("eval --ref " + d + "/ref --hyp " + d + "/hyp --group-by-source");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("--group-by-source needs --src"), std::string::npos) << bad.out;
  std::filesystem::remove_all(d);
}

// --by-length scores each bucket of source length as if its sentences were scored alone, and
// writes them as a CSV that qkv plot draws against the source length.
TEST(Cli, EvalByLength) {
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-bylen-" + std::to_string(getpid());
  std::filesystem::create_directories(d);
  auto write = [&](const std::string& name, const char* text) {
    std::FILE* f = std::fopen((d + "/" + name).c_str(), "w");
    std::fputs(text, f);
    std::fclose(f);
  };
  // 13a tokens: "I am tired." = 4 (bucket 0-5); the 7- and 8-token lines fall in 6-10; the 12-token one in 11-15
  write("src", "I am tired.\nThe cat sleeps on the mat.\nThe old dog sleeps on the mat.\n"
               "The old dog and the young cat sleep on the red mat.\n");
  write("ref", "Je suis fatigué.\nLe chat dort sur le tapis.\nLe vieux chien dort sur le tapis.\n"
               "Le vieux chien et le jeune chat dorment sur le tapis rouge.\n");
  write("hyp", "Je suis fatigué.\nLe chat dort sur la natte.\nLe vieux chien dort sur le tapis.\n"
               "Un chien et un chat dorment sur un tapis.\n");
  write("mid.ref", "Le chat dort sur le tapis.\nLe vieux chien dort sur le tapis.\n");
  write("mid.hyp", "Le chat dort sur la natte.\nLe vieux chien dort sur le tapis.\n");
  CliRun r = run("eval --src " + d + "/src --ref " + d + "/ref --hyp " + d + "/hyp --by-length --by-length-csv " + d +
                 "/bylen.csv");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0-5                    1  100.00"), std::string::npos) << r.out;
  CliRun mid = run("eval --ref " + d + "/mid.ref --hyp " + d + "/mid.hyp --json");
  ASSERT_EQ(mid.code, 0) << mid.out;
  const double mid_bleu = nlohmann::json::parse(mid.out.substr(mid.out.find('{'))).at("bleu").get<double>();
  CliRun js = run("eval --src " + d + "/src --ref " + d + "/ref --hyp " + d + "/hyp --by-length --json");
  ASSERT_EQ(js.code, 0) << js.out;
  const nlohmann::json j = nlohmann::json::parse(js.out.substr(js.out.find('{')));
  ASSERT_EQ(j.at("by_length").size(), 3u) << js.out;
  EXPECT_EQ(j["by_length"][1]["from"], 6);
  EXPECT_EQ(j["by_length"][1]["to"], 10);
  EXPECT_EQ(j["by_length"][1]["sentences"], 2);
  EXPECT_NEAR(j["by_length"][1]["bleu"].get<double>(), mid_bleu, 1e-9);
  EXPECT_EQ(j["by_length"][2]["from"], 11);
  EXPECT_LT(j["by_length"][2]["bleu"].get<double>(), 50.0);
  ASSERT_TRUE(std::filesystem::exists(d + "/bylen.csv"));
  r = run("plot " + d + "/bylen.csv -x source_length -y bleu --markers -o " + d + "/bylen.svg");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 points"), std::string::npos) << r.out;
  r = run("plot " + d + "/bylen.csv -y bleu -o " + d + "/nostep.svg");  // no "step" column there
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("no \"step\" column"), std::string::npos) << r.out;
  r = run("eval --ref " + d + "/ref --hyp " + d + "/hyp --by-length");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--by-length needs --src"), std::string::npos) << r.out;
  std::filesystem::remove_all(d);
}

TEST(Cli, AttendDrawsHeatMapsAsSvgAndPng) {
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-attend-" + std::to_string(getpid());
  CliRun r = run("attend \"The cat is tired.\" -m " + std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors -o " + d);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* kind : {"encoder-self", "decoder-self", "cross", "cross-mean"})
    for (const char* ext : {".svg", ".png"})
      EXPECT_GT(std::filesystem::file_size(d + "/" + kind + ext), 1000u) << kind << ext;
  std::filesystem::remove_all(d);
  r = run("attend \"The cat is tired.\" -m " + std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors --format svg -o " + d);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(d + "/cross.svg"));
  EXPECT_FALSE(std::filesystem::exists(d + "/cross.png"));
  std::filesystem::remove_all(d);
}

// qkv probe (issue 50): the coreference probe's table for the shipped translator, on items from a
// file (one pair), every head of every kind that has the pronoun and both candidates scored.
TEST(Cli, ProbeScoresEveryHeadOnPronounPairs) {
  const std::string items = std::filesystem::temp_directory_path().string() + "/qkv-cli-probe-" + std::to_string(getpid()) + ".tsv";
  std::ofstream(items) << "# text, pronoun, antecedent, other\n"
                           "The cat didn't cross the street because it was too tired.\tit\tcat\tstreet\n"
                           "The cat didn't cross the street because it was too wide.\tit\tstreet\tcat\n";
  CliRun r = run("probe -m " + std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors --items " + items + " --top 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(translator): 2 of 2 items scored, 24 heads; chance is 50%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| rank | attention | layer | head | right | accuracy |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 3 | "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| 4 | "), std::string::npos) << r.out;  // --top 3
  // two models: each its table, then every head of both ranked together (the head search across
  // models), as many rows as both tables have heads, best accuracy first
  CliRun both = run("probe -m " + std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors -m " +
                    std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors --items " + items + " --top 0");
  ASSERT_EQ(both.code, 0) << both.out;
  const size_t at = both.out.find("### Every head of every model, ranked together: ");
  ASSERT_NE(at, std::string::npos) << both.out;
  EXPECT_NE(both.out.find("| rank | model | attention | layer | head | right | accuracy |", at), std::string::npos);
  size_t rows = 0, per_model = 0, gpt = 0;
  double last = 101;
  bool together = false;  // (past the heading of the table across models)
  std::istringstream lines(both.out);
  for (std::string line; std::getline(lines, line);) {
    together = together || line.rfind("### Every head of every model", 0) == 0;
    if (line.rfind("| ", 0) != 0 || line.size() < 3 || !std::isdigit(static_cast<unsigned char>(line[2]))) continue;
    if (!together) {
      ++per_model;
      continue;
    }
    ++rows;
    gpt += line.find("shakespeare-char.safetensors | decoder_self |") != std::string::npos;
    const size_t pct = line.find('%');
    const double acc = std::stod(line.substr(line.rfind(' ', pct) + 1));
    EXPECT_LE(acc, last) << line;
    last = acc;
  }
  EXPECT_EQ(rows, per_model) << both.out;
  EXPECT_GT(gpt, 0u) << both.out;
  EXPECT_GT(rows, 24u) << both.out;  // the translator's 24 heads and the GPT's
  CliRun bad = run("probe -m " + std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors --items /nonexistent.tsv");
  EXPECT_NE(bad.code, 0);
  // an endless input stops at the limit, named, instead of reading until the memory runs out
  CliRun endless = run("probe -m " + std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors --items /dev/zero");
  EXPECT_NE(endless.code, 0);
  EXPECT_NE(endless.out.find("qkv probe --items '/dev/zero' is larger than the limit of 16 MiB"), std::string::npos)
      << endless.out;
  std::filesystem::remove(items);
}

// The shipped recurrent translator (issue 22): it translates right after the build, and attend draws
// its one alignment (no self-attention maps: a GRU has none).
TEST(Cli, ShippedRecurrentTranslatorTranslatesAndDrawsItsAlignment) {
  const std::string m = std::string(QKV_SOURCE_DIR) + "/models/en-fr-gru.safetensors";
  CliRun t = run("translate -m " + m + " \"I think it is going to rain tomorrow.\"");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("pleuvoir demain"), std::string::npos) << t.out;
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-attend-gru-" + std::to_string(getpid());
  CliRun a = run("attend \"The cat is tired.\" -m " + m + " --format svg -o " + d);
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_GT(std::filesystem::file_size(d + "/cross.svg"), 1000u);
  EXPECT_FALSE(std::filesystem::exists(d + "/encoder-self.svg"));
  // one attention: no "last layer, mean over heads", no "cross layer 1, head 1" (issue 49)
  EXPECT_NE(a.out.find("the decoder's attention (one; no layers or heads): the source token"), std::string::npos)
      << a.out;
  EXPECT_EQ(a.out.find("mean over heads"), std::string::npos) << a.out;
  std::stringstream svg;
  svg << std::ifstream(d + "/cross.svg").rdbuf();
  EXPECT_EQ(svg.str().find("cross layer 1"), std::string::npos);
  EXPECT_NE(svg.str().find("attention (one; no layers or heads)"), std::string::npos);
  std::filesystem::remove_all(d);
}

// The shipped captioner (models/captioner.safetensors) on a test scene — a class pair no training
// caption joins — writes the scene's own caption, and draws its attention word by word.
TEST(Cli, ShippedCaptionerDescribesATestScene) {
  const std::string m = std::string(QKV_SOURCE_DIR) + "/models/captioner.safetensors";
  CliRun c = run("caption -m " + m + " --scenes 8 --split test --json");
  ASSERT_EQ(c.code, 0) << c.out;
  const auto j = nlohmann::json::parse(c.out.substr(c.out.find('{')));
  EXPECT_EQ(j["caption"], "a coat above and to the left of a shirt and a boot to the left of a sandal") << c.out;
  EXPECT_EQ(j["caption"], j["reference"]);
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-attend-cap-" + std::to_string(getpid());
  CliRun a = run("attend -m " + m + " --scenes 8 --split test --format png -o " + d);
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_NE(a.out.find("of the attention inside its box"), std::string::npos) << a.out;
  EXPECT_GT(std::filesystem::file_size(d + "/caption-test-8.png"), 10000u);
  // issue 49: test scene 0's "a pair of trousers" — the model looks at the trousers while writing
  // "a" and "pair" (where it chooses the class); attend marks those words with the trousers' box
  CliRun t = run("attend -m " + m + " --scenes 0 --split test --format png -o " + d);
  EXPECT_EQ(t.code, 0) << t.out;
  const size_t pair = t.out.find("  pair ");
  ASSERT_NE(pair, std::string::npos) << t.out;
  const std::string line = t.out.substr(pair, t.out.find('\n', pair) - pair);
  EXPECT_NE(line.find("inside the box of the trousers its phrase names"), std::string::npos) << line;
  EXPECT_GT(std::stod(line.substr(6)), 50.0) << line;
  // eval reports the same words' attention at the steps around them and over their phrase
  CliRun e = run("eval -m " + m + " --split test --scenes 4 --beam 1 --json");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto ej = nlohmann::json::parse(e.out.substr(e.out.find('{')));
  ASSERT_TRUE(ej.contains("attention_by_step")) << e.out;
  EXPECT_NEAR(ej["attention_by_step"]["own"].get<double>(), ej["attention_in_box"].get<double>(), 1e-9);
  EXPECT_GE(ej["attention_by_step"]["phrase"].get<double>(), ej["attention_in_box"].get<double>());
  EXPECT_TRUE(ej["attention_by_step_per_class"].contains("trousers")) << e.out;
  std::filesystem::remove_all(d);
}

// The shipped image classifier (models/fashion-mnist-nonlocal.safetensors, the default of classify)
// names the first Fashion-MNIST test images right and draws its non-local block's attention.
TEST(Cli, ShippedImageClassifierClassifiesAndAttends) {
  const std::string m = std::string(QKV_SOURCE_DIR) + "/models/fashion-mnist-nonlocal.safetensors";
  CliRun c = run("classify -m " + m + " --test-images 0,1,2 --json");
  ASSERT_EQ(c.code, 0) << c.out;
  std::istringstream lines(c.out);
  int n = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["top"][0]["class"], j["true_class"]) << line;
    ++n;
  }
  EXPECT_EQ(n, 3) << c.out;
  const std::string d = std::filesystem::temp_directory_path().string() + "/qkv-cli-attend-fm-" + std::to_string(getpid());
  CliRun a = run("attend -m " + m + " --test-images 0 --grid 2 --format svg -o " + d);
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_TRUE(std::filesystem::exists(d + "/attention-image.svg")) << a.out;
  std::filesystem::remove_all(d);
}

// Repeated -m translate with an ensemble; the sentences after them stay sentences. The shipped model
// twice is the shipped model; a model of another kind is a clear error.
TEST(Cli, TranslateWithAnEnsemble) {
  const std::string m = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";
  CliRun one = run("translate -m " + m + " \"The cat is tired.\" \"I like tea.\"");
  ASSERT_EQ(one.code, 0) << one.out;
  CliRun two = run("translate -m " + m + " -m " + m + " \"The cat is tired.\" \"I like tea.\"");
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_EQ(two.out, one.out);
  EXPECT_EQ(std::count(two.out.begin(), two.out.end(), '\n'), 2) << two.out;
  CliRun bad = run("translate -m " + m + " -m " + std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors hello");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("not a sequence-to-sequence (translation) model"), std::string::npos) << bad.out;
}

// --n-best prints Marian's "LINE ||| translation ||| F0= log p ||| score" lines, best first: the first
// of each line is the plain translation, and an empty input line gets one empty entry.
TEST(Cli, TranslateNBest) {
  const std::string m = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";
  CliRun plain = run("translate -m " + m + " -b 3 \"The cat is tired.\" \"\" \"I like tea.\"");
  ASSERT_EQ(plain.code, 0) << plain.out;
  CliRun nb = run("translate -m " + m + " -b 3 --n-best \"The cat is tired.\" \"\" \"I like tea.\"");
  ASSERT_EQ(nb.code, 0) << nb.out;
  std::vector<std::string> want, first;
  for (size_t a = 0, b; (b = plain.out.find('\n', a)) != std::string::npos; a = b + 1) want.push_back(plain.out.substr(a, b - a));
  ASSERT_EQ(want.size(), 3u) << plain.out;
  std::vector<int> per_line(3, 0);
  std::vector<double> scores;
  for (size_t a = 0, b; (b = nb.out.find('\n', a)) != std::string::npos; a = b + 1) {
    const std::string l = nb.out.substr(a, b - a);
    const size_t s1 = l.find(" ||| "), s2 = l.find(" ||| F0= "), s3 = l.rfind(" ||| ");
    ASSERT_TRUE(s1 != std::string::npos && s2 != std::string::npos && s3 > s2) << l;
    const int line = std::stoi(l.substr(0, s1));
    ASSERT_TRUE(line >= 0 && line < 3) << l;
    if (per_line[static_cast<size_t>(line)]++ == 0) first.push_back(l.substr(s1 + 5, s2 - s1 - 5)), scores.clear();
    scores.push_back(std::stod(l.substr(s3 + 5)));
    if (scores.size() > 1) {
      EXPECT_GE(scores[scores.size() - 2], scores.back()) << "best first: " << l;
    }
  }
  EXPECT_EQ(first, want);
  EXPECT_EQ(per_line[1], 1) << nb.out;
  EXPECT_GE(per_line[0], 2) << nb.out;
  EXPECT_LE(per_line[0], 3) << nb.out;
}

}  // namespace

namespace {

// An IDX file of bytes.
void write_idx(const std::string& path, const std::vector<uint32_t>& shape, const std::vector<uint8_t>& data) {
  std::string s = {0, 0, 8, static_cast<char>(shape.size())};
  for (uint32_t n : shape)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((n >> (8 * k)) & 0xFF));
  s.append(data.begin(), data.end());
  std::ofstream(path, std::ios::binary) << s;
}

// 8×8 images whose class is the bright quadrant (0 top-left … 3 bottom-right).
std::vector<uint8_t> quadrant_image(int q, unsigned noise_seed) {
  std::vector<uint8_t> img(64);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x)
      img[y * 8 + x] = static_cast<uint8_t>(((y >= 4) * 2 + (x >= 4) == q ? 200 : 20) + (noise_seed * 31 + y * 7 + x) % 40);
  return img;
}

}  // namespace

TEST(Cli, ImageClassifierTrainsEvaluatesClassifiesAndAttends) {
  const std::string d = tmp_dir("images");
  for (auto [split, n] : {std::pair{"train", 160u}, std::pair{"test", 40u}}) {
    std::vector<uint8_t> img, lab;
    for (unsigned i = 0; i < n; ++i) {
      auto im = quadrant_image(static_cast<int>(i % 4), i);
      img.insert(img.end(), im.begin(), im.end());
      lab.push_back(static_cast<uint8_t>(i % 4));
    }
    write_idx(d + "/" + split + "-images", {n, 8, 8}, img);
    write_idx(d + "/" + split + "-labels", {n}, lab);
  }
  std::ofstream(d + "/cfg.json") << R"({"task": "image_classification",
    "data": {"dataset": "idx", "train_images": "train-images", "train_labels": "train-labels",
             "test_images": "test-images", "test_labels": "test-labels", "num_classes": 4, "val_size": 0},
    "model": {"channels": [8, 16], "blocks": [1, 1], "non_local": [1], "mean": [0.5], "std": [0.5],
              "class_names": ["top-left", "top-right", "bottom-left", "bottom-right"]},
    "train": {"max_iters": 40, "batch_size": 16, "learning_rate": 0.01, "warmup_iters": 2, "lr_decay_iters": 40,
              "eval_interval": 20, "checkpoint_interval": 0}})";
  CliRun t = run("train " + d + "/cfg.json -o " + d + "/out -q");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("test_accuracy"), std::string::npos) << t.out;
  const std::string m = d + "/out/model.safetensors";
  // eval: accuracy, per class, the confusion matrix
  CliRun e = run("eval -m " + m + " --images " + d + "/test-images --labels " + d + "/test-labels --json --confusion " +
                 d + "/confusion.svg");
  ASSERT_EQ(e.code, 0) << e.out;
  const size_t brace = e.out.find('{');
  ASSERT_NE(brace, std::string::npos) << e.out;
  const auto j = nlohmann::json::parse(e.out.substr(brace, e.out.find('\n', brace) - brace));
  EXPECT_GT(j["accuracy"].get<double>(), 0.9) << e.out;
  EXPECT_EQ(j["per_class"].size(), 4u);
  EXPECT_EQ(j["per_class"][3]["class"], "bottom-right");
  EXPECT_TRUE(std::filesystem::exists(d + "/confusion.svg"));
  // classify a picture file (PNG: qkv reads PNG and JPEG only), bright bottom-right
  {
    auto im = quadrant_image(3, 5);
    qkv::vision::Image pic;
    pic.height = pic.width = 8;
    for (const auto v : im) pic.pixels.push_back(static_cast<float>(v) / 255.f);
    qkv::vision::write_png(d + "/br.png", pic);
  }
  CliRun c = run("classify -m " + m + " " + d + "/br.png --top 2");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("br.png:  bottom-right"), std::string::npos) << c.out;
  // attend: the non-local block's attention over the picture
  CliRun a = run("attend -m " + m + " " + d + "/br.png --grid 2 --format svg -o " + d + "/att");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_TRUE(std::filesystem::exists(d + "/att/attention-image.svg")) << a.out;
  // a translation-only option, a missing picture, a translator asked to classify
  EXPECT_NE(run("classify -m " + m + " " + d + "/none.png").out.find("none.png"), std::string::npos);
  CliRun wrong = run("classify -m " + m + " --block 3 " + d + "/br.png");
  EXPECT_NE(wrong.code, 0);
  std::ofstream(d + "/text.png") << "not a picture";
  CliRun bad = run("classify -m " + m + " " + d + "/text.png");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("cannot read the image"), std::string::npos) << bad.out;
  std::filesystem::remove_all(d);
}

namespace {
// A stand-in for Fashion-MNIST in folder d: 40 items per split (labels i % 10), each a bright rectangle.
void write_item_stand_in(const std::string& d) {
  for (auto [stem, n] : {std::pair{"train", 40u}, std::pair{"t10k", 40u}}) {
    std::vector<uint8_t> img(n * 28 * 28, 0), lab;
    for (unsigned i = 0; i < n; ++i) {
      for (unsigned y = 4; y < 24; ++y)
        for (unsigned x = 6 + i % 5; x < 22; ++x) img[(i * 28 + y) * 28 + x] = static_cast<uint8_t>(100 + i);
      lab.push_back(static_cast<uint8_t>(i % 10));
    }
    write_idx(d + "/" + stem + "-images-idx3-ubyte", {n, 28, 28}, img);
    write_idx(d + "/" + stem + "-labels-idx1-ubyte", {n}, lab);
  }
}
}  // namespace

TEST(Cli, ScenesWritesPicturesCaptionsAndBoxes) {
  const std::string d = tmp_dir("scenes");
  write_item_stand_in(d);
  CliRun r = run("scenes --fashion-mnist " + d + " --split test -n 3 --first 5 -o " + d + "/out");
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream lines(d + "/out/scenes.jsonl");
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["index"], 5 + n);
    EXPECT_NE(r.out.find(j["image"].get<std::string>() + "\t" + j["caption"].get<std::string>()), std::string::npos)
        << r.out;
    EXPECT_GE(j["items"].size(), 2u);  // a test scene joins a held-out pair
    // the PNG holds the scene: its item boxes are bright, outside them it is black
    const qkv::vision::Image img = qkv::vision::read_image(d + "/out/" + j["image"].get<std::string>());
    ASSERT_EQ(img.height, 96);
    double inside = 0, outside = 0;
    std::vector<bool> in_box(96 * 96, false);
    for (const auto& it : j["items"]) {
      const auto b = it["box"].get<std::vector<int>>();
      for (int y = b[1]; y < b[3]; ++y)
        for (int x = b[0]; x < b[2]; ++x) in_box[static_cast<size_t>(y * 96 + x)] = true;
    }
    for (size_t p = 0; p < in_box.size(); ++p) (in_box[p] ? inside : outside) += img.pixels[p];
    EXPECT_GT(inside, 100.0);
    EXPECT_EQ(outside, 0.0);
  }
  EXPECT_EQ(n, 3);
  EXPECT_TRUE(std::filesystem::exists(d + "/out/sheet.png"));
  // no data, a split that does not exist
  CliRun missing = run("scenes --fashion-mnist " + d + "/none -o " + d + "/out2");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.out.find("dataset-fashion-mnist"), std::string::npos) << missing.out;
  EXPECT_NE(run("scenes --split dev -o " + d + "/out2").code, 0);
  std::filesystem::remove_all(d);
}

// A captioner trained for a few steps on stand-in scenes (configs/captions.json, shrunk): caption,
// eval and attend work end to end, and a missing, non-image or wrongly sized picture is a clear
// error naming the file; translate refuses a model that takes images.
TEST(Cli, CaptionerTrainsCaptionsEvaluatesAndDrawsItsAttention) {
  const std::string d = tmp_dir("caption");
  write_item_stand_in(d);
  CliRun t = run("train " + std::string(QKV_SOURCE_DIR) + "/configs/captions.json -q -o " + d + "/run --set data.path=" +
                 d + " --set train.max_iters=3 --set train.batch_size=4 --set train.eval_interval=3 --set " +
                 "data.val_scenes=8 --set data.tokenizer_scenes=300 --set eval.scenes=4 --set model.channels=[4,4,8,8] " +
                 "--set model.hidden_size=16 --set model.embedding_dim=8");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("val_attention"), std::string::npos) << t.out;
  const std::string m = d + "/run/model.safetensors";
  CliRun c = run("caption -m " + m + " --scenes 0,1 --split test --fashion-mnist " + d + " --beam 2 --json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(std::count(c.out.begin(), c.out.end(), '\n'), 2) << c.out;
  EXPECT_NE(c.out.find("\"reference\":\"a "), std::string::npos) << c.out;
  ASSERT_EQ(run("scenes --fashion-mnist " + d + " --split test -n 1 -o " + d + "/pics").code, 0);
  CliRun f = run("caption -m " + m + " " + d + "/pics/test-0.png");
  EXPECT_EQ(f.code, 0) << f.out;
  EXPECT_NE(f.out.find("test-0.png\t"), std::string::npos) << f.out;
  // hostile pictures
  CliRun missing = run("caption -m " + m + " " + d + "/nothing.png");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.out.find("nothing.png': no such file"), std::string::npos) << missing.out;
  std::ofstream(d + "/text.png") << "not a picture\n";
  CliRun text = run("caption -m " + m + " " + d + "/text.png");
  EXPECT_NE(text.code, 0);
  EXPECT_NE(text.out.find("text.png': cannot read the image"), std::string::npos) << text.out;
  qkv::vision::Image small;
  small.height = small.width = 28;
  small.pixels.assign(28 * 28, 0.5f);
  qkv::vision::write_png(d + "/small.png", small);
  CliRun sized = run("caption -m " + m + " " + d + "/small.png");
  EXPECT_NE(sized.code, 0);
  EXPECT_NE(sized.out.find("small.png': a 28×28 picture; the captioner takes 96×96"), std::string::npos) << sized.out;
  EXPECT_EQ(run("caption -m " + m + " --resize " + d + "/small.png").code, 0);
  // eval: BLEU-1…4, exact match, attention correctness on test scenes
  CliRun e = run("eval -m " + m + " --split test --scenes 6 --data " + d + " --beam 1 --json");
  ASSERT_EQ(e.code, 0) << e.out;
  const auto j = nlohmann::json::parse(e.out.substr(e.out.find('{')));
  for (const char* k : {"bleu1", "bleu2", "bleu3", "bleu4", "exact"}) EXPECT_TRUE(j.contains(k)) << e.out;
  EXPECT_EQ(j["scenes"], 6);
  // attend: the smooth figure (PNG, SVG) and the grid of cells (SVG)
  CliRun a = run("attend -m " + m + " --scenes 0 --split test --fashion-mnist " + d + " -o " + d + "/att");
  ASSERT_EQ(a.code, 0) << a.out;
  for (const char* f : {"/att/caption-test-0.png", "/att/caption-test-0.svg", "/att/caption-test-0-grid.svg"})
    EXPECT_GT(std::filesystem::file_size(d + f), 1000u) << f;
  // a captioner does not translate: its kind is image-to-text, which the translators' loader names
  CliRun tr = run("translate -m " + m + " hello");
  EXPECT_NE(tr.code, 0);
  EXPECT_NE(tr.out.find("holds a \"captioner\" model (image-to-text), not a sequence-to-sequence (translation) model"),
            std::string::npos)
      << tr.out;
  std::filesystem::remove_all(d);
}

namespace {

// metrics.jsonl's rows without their clock readings (elapsed time, rate), which differ between runs.
std::vector<std::string> metric_rows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    j.erase("elapsed_s"), j.erase("tokens_per_s");
    rows.push_back(j.dump());
  }
  return rows;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

// Issue 25: a training run killed with SIGKILL at random instants — mid-step, mid-evaluation,
// mid-write — and resumed each time ends with the same weights and the same metrics as a run that
// was never interrupted, and leaves no temporary files behind.
TEST(Cli, TrainKilledAtRandomInstantsResumesWithNothingLost) {
  const std::string d = tmp_dir("sigkill");
  const std::string cfg = tiny_lm_config(d);
  const std::string common = " --set train.max_iters=150 --set train.checkpoint_interval=3 --set train.eval_interval=10"
                             " --set train.log_interval=1 -q";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run("train " + cfg + " -o " + d + "/straight" + common).code, 0);
  // the kill instants spread over the uninterrupted run's duration (≈ 0.35 s; more under ASan)
  const double straight_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int kills = 0, finished = 0;
  unsigned seed = 12345;
  auto resume = [&] { return std::filesystem::exists(d + "/killed/checkpoint.safetensors") ? " --resume" : ""; };
  // The uninterrupted run's time is only a guide when the machine's load changes (ctest runs
  // other tests beside this one): a sequence that finished before 3 kills starts again from
  // nothing with kill instants half as late.
  for (double scale = 1.0; kills < 3 && scale > 0.1; scale /= 2) {
    std::filesystem::remove_all(d + "/killed");
    kills = 0, finished = 0;
    for (int attempt = 0; attempt < 60 && !finished; ++attempt) {
      seed = seed * 1103515245u + 12345u;
      const double after = scale * straight_s * (0.05 + static_cast<double>((seed >> 8) % 450) / 1000.0);  // 5–50%
      char t[32];
      std::snprintf(t, sizeof t, "%.3f", after);
      CliRun r = run("train " + cfg + " -o " + d + "/killed" + common + resume(),
                     std::string("timeout -s KILL ") + t + " ");
      if (r.code == 0) finished = 1;
      else ++kills;
    }
    if (!finished) {
      ASSERT_EQ(run("train " + cfg + " -o " + d + "/killed" + resume() + common).code, 0);
    }
  }
  EXPECT_GE(kills, 3) << "the runs should have been killed several times";
  std::printf("killed %d times before the run finished\n", kills);
  EXPECT_EQ(metric_rows(d + "/killed/metrics.jsonl"), metric_rows(d + "/straight/metrics.jsonl"));
  EXPECT_EQ(metric_rows(d + "/straight/metrics.jsonl").size(), 150u + 16u);  // 150 steps, evaluations at 0, 10, …, 150
  // the weights: the model files' tensors byte for byte (the metadata holds the same config and step)
  EXPECT_EQ(slurp(d + "/killed/model.safetensors"), slurp(d + "/straight/model.safetensors"));
  for (auto& e : std::filesystem::directory_iterator(d + "/killed"))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
  std::filesystem::remove_all(d);
}

// Issue 25: an over-long line is truncated with a warning naming it (or refused with
// --max-input-length -1), invalid UTF-8 is repaired with a warning; the other lines translate.
TEST(Cli, TranslateInputPolicies) {
  const std::string d = tmp_dir("policy");
  std::string longline;
  for (int i = 0; i < 40; ++i) longline += "the cat sat on the mat and ";
  std::ofstream(d + "/in.txt") << "I like tea.\n" << longline << "\nBonjour \xff\xfe mon ami.\nI like tea.\n";
  CliRun r = run("translate -i " + d + "/in.txt --max-input-length 20 --beam 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("line 2: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("truncated to the first 20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("line 3: 2 bytes of invalid UTF-8"), std::string::npos) << r.out;
  size_t thes = 0;
  for (size_t p = r.out.find("thé"); p != std::string::npos; p = r.out.find("thé", p + 1)) ++thes;
  EXPECT_EQ(thes, 2u) << "lines 1 and 4 translated: " << r.out;
  CliRun strict = run("translate -i " + d + "/in.txt --max-input-length -1 --beam 1");
  EXPECT_NE(strict.code, 0);
  EXPECT_NE(strict.out.find("line 2 has"), std::string::npos) << strict.out;
  std::filesystem::remove_all(d);
}
