// Issue 49 (a newcomer's first hour): `qkv eval --limit` draws a seeded sample of every kind of
// model's data, `qkv data prepare` makes a config's split and tokenizer without training, long
// phases show a progress bar.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "testing.h"

namespace {

using Shell = qkv::testing::ShellResult;

// the qkv command with ARGS (stderr joined to stdout)
Shell qkv_cli(const std::string& args) { return qkv::testing::run_shell(std::string(QKV_CLI_PATH) + " " + args); }

// The JSON line of a --json run's output.
nlohmann::json json_line(const std::string& out) {
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    if (out[at] == '{') return nlohmann::json::parse(out.substr(at, end - at));
    at = end + 1;
  }
  ADD_FAILURE() << "no JSON line in: " << out;
  return {};
}

const std::string kWords[] = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"};

}  // namespace

// A file sorted by length (as Tatoeba's test split): --limit N scores N lines drawn with --seed from
// the whole file, not its N shortest; the same seed draws the same lines.
TEST(Newcomer, EvalLimitDrawsASeededSampleNotTheFirstLines) {
  const qkv::testing::TempDir tmp("newcomer");
  const std::string dir = tmp.path.string();
  {
    std::ofstream ref(dir + "/ref");
    for (int i = 1; i <= 200; ++i) {  // line i: i words
      for (int w = 0; w < i; ++w) ref << (w ? " " : "") << kWords[(i + w) % 8];
      ref << "\n";
    }
  }
  const std::string files = "--hyp " + dir + "/ref --ref " + dir + "/ref";
  Shell r = qkv_cli("eval " + files + " --limit 20 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = json_line(r.out);
  EXPECT_EQ(j["sentences"], 20);
  EXPECT_GT(j["hyp_len"].get<int>(), 3 * 210) << "the 20 shortest lines hold 210 words: " << j.dump();
  EXPECT_EQ(json_line(qkv_cli("eval " + files + " --limit 20 --json").out)["hyp_len"], j["hyp_len"]);  // seeded
  EXPECT_NE(json_line(qkv_cli("eval " + files + " --limit 20 --seed 5 --json").out)["hyp_len"], j["hyp_len"]);
  EXPECT_EQ(json_line(qkv_cli("eval " + files + " --json").out)["sentences"], 200);
  Shell said = qkv_cli("eval " + files + " --limit 20");
  EXPECT_NE(said.out.find("--limit 20: 20 of the 200 lines, drawn with seed 0"), std::string::npos) << said.out;
}

// The image classifier honours --limit too (it evaluated all 10,000 test images).
TEST(Newcomer, ImageEvalHonoursTheLimit) {
  const std::string m = std::string(QKV_SOURCE_DIR) + "/models/fashion-mnist-nonlocal.safetensors";
  Shell r = qkv_cli("eval -m " + m + " --limit 10 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = json_line(r.out);
  EXPECT_EQ(j["images"], 10);
  int64_t per_class = 0;
  for (const auto& c : j["per_class"]) per_class += c["images"].get<int64_t>();
  EXPECT_EQ(per_class, 10);
  EXPECT_EQ(json_line(qkv_cli("eval -m " + m + " --limit 10 --json").out)["accuracy"], j["accuracy"]);
}

// A language model's perplexity samples --limit windows; a captioner scores at most --limit scenes.
TEST(Newcomer, LanguageModelAndCaptionerEvalHonourTheLimit) {
  const std::string src = QKV_SOURCE_DIR;
  const qkv::testing::TempDir tmp("newcomer");
  const std::string dir = tmp.path.string();
  {
    std::ofstream text(dir + "/text.txt");
    for (int i = 0; i < 200; ++i) text << "ROMEO: What light through yonder window breaks?\n";
  }
  const std::string lm = "eval -m " + src + "/models/shakespeare-char.safetensors --text " + dir + "/text.txt";
  Shell all = qkv_cli(lm + " --json");
  ASSERT_EQ(all.code, 0) << all.out;
  Shell some = qkv_cli(lm + " --limit 3 --json");
  ASSERT_EQ(some.code, 0) << some.out;
  const int64_t block = json_line(some.out)["block_size"].get<int64_t>();
  EXPECT_LE(json_line(some.out)["tokens"].get<int64_t>(), 3 * block) << some.out;
  EXPECT_GT(json_line(all.out)["tokens"].get<int64_t>(), 3 * block) << all.out;
  Shell cap = qkv_cli("eval -m " + src + "/models/captioner.safetensors --split test --beam 1 --limit 3 --json");
  ASSERT_EQ(cap.code, 0) << cap.out;
  EXPECT_EQ(json_line(cap.out)["scenes"], 3);
}

// qkv data prepare: the split files and the tokenizer, no training; qkv eval reads them after it,
// and a later qkv train of the same folder reuses the tokenizer.
TEST(Newcomer, DataPrepareWritesTheSplitAndTokenizerWithoutTraining) {
  const qkv::testing::TempDir tmp("newcomer");
  const std::string dir = tmp.path.string();
  {
    std::ofstream pairs(dir + "/pairs.tsv");
    for (int i = 0; i < 60; ++i)
      pairs << kWords[i % 8] << " " << kWords[(i / 8) % 8] << "\t" << kWords[(i + 3) % 8] << " " << kWords[(i / 8) % 8]
            << "\n";
    std::ofstream(dir + "/cfg.json") << R"({"task": "translation",
      "data": {"train": {"tsv": "pairs.tsv"}, "split": {"dev": 5, "test": 5, "seed": 1}},
      "tokenizer": {"type": "word", "vocab_size": 10},
      "model": {"type": "transformer", "preset": "tiny", "d_model": 4, "nhead": 1, "num_encoder_layers": 1,
                "num_decoder_layers": 1, "dim_feedforward": 4, "max_len": 8},
      "train": {"max_iters": 2, "batch_size": 20, "eval_interval": 0, "checkpoint_interval": 0},
      "eval": {"bleu_sentences": 1}})";
  }
  const std::string out = dir + "/out";
  Shell p = qkv_cli("data prepare " + dir + "/cfg.json -o " + out);
  ASSERT_EQ(p.code, 0) << p.out;
  for (const char* f : {"dev.src", "dev.ref", "test.src", "test.ref", "spm.model"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f << "\n" << p.out;
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors")) << "trained: " << p.out;
  EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.safetensors"));
  EXPECT_NE(p.out.find("qkv eval --src " + out + "/test.src --ref " + out + "/test.ref"), std::string::npos) << p.out;
  Shell e = qkv_cli("eval --hyp " + out + "/test.ref --ref " + out + "/test.ref --json");
  EXPECT_EQ(e.code, 0) << e.out;
  Shell t = qkv_cli("train " + dir + "/cfg.json -o " + out);
  EXPECT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("(reused)"), std::string::npos) << t.out;
  // the help, and a config that is not there
  EXPECT_EQ(qkv_cli("data prepare --help").code, 0);
  EXPECT_NE(qkv_cli("data prepare " + dir + "/nothing.json").code, 0);
  EXPECT_NE(qkv_cli("data").code, 0);
}
