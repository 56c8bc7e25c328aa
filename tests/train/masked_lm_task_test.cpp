// Masked-language-model training continued on a text (train/masked_lm_task.h), and the MLM head split
// into its transform and decoder (models/model.h) that lets the loss read the chosen tokens alone.
//
// Against transformers (tests/golden/hf_mlm.json, tests/golden/make_mlm_golden.py): for each family's
// tiny random …ForMaskedLM, run_mlm.py's blocks — grouped (1,150 lines: the first 5 % validation, each
// 1,000 lines' remainder dropped) and line_by_line — by count, first blocks, special-token masks and a
// digest of every id; then one step on qkv's masks (drawn in the script by the same hash): the loss,
// the gradients' L2 norm, the validation loss and accuracy before and after one AdamW step, grouped
// and padded line_by_line. Then the masks' rates, a model that learns to fill a mask (its file read by
// fill-mask), and hostile data and configs refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/thread_budget.h"
#include "qkv/decode/fill_mask.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/train/masked_lm_task.h"
#include "testing.h"

namespace qkv::train::masked_lm_test {  // (its own: the test files of a folder compile as one unit)
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::TempDir;

const fs::path kGolden = fs::path(QKV_GOLDEN_DIR);

TrainResult run(const json& cfg, const fs::path& out) {
  MaskedLMTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.full_config = cfg, o.quiet = true;
  return run_training(task, task.train_config(), o);
}

void write_lines(const fs::path& path, const json& lines) {
  std::ofstream out(path);
  for (const json& l : lines) out << l.get<std::string>() << "\n";
}

// The golden script's digest of every block's ids.
std::string digest(const TokenBlocks& b) {
  uint64_t h = 0;
  for (int64_t i = 0; i < b.size(); ++i) {
    for (int64_t k = b.begin[static_cast<size_t>(i)]; k < b.begin[static_cast<size_t>(i + 1)]; ++k)
      h = h * 1000003u + static_cast<uint64_t>(b.ids[static_cast<size_t>(k)]) + 1u;
    h *= 1000003u;
  }
  return std::to_string(h);
}

void expect_blocks(const TokenBlocks& b, const json& g) {
  ASSERT_EQ(b.size(), g["count"].get<int64_t>());
  EXPECT_EQ(b.tokens(), g["tokens"].get<int64_t>());
  EXPECT_EQ(digest(b), g["digest"].get<std::string>());
  for (size_t i = 0; i < g["first"].size(); ++i) {
    const auto from = b.begin[i], to = b.begin[i + 1];
    EXPECT_EQ(std::vector<int32_t>(b.ids.begin() + from, b.ids.begin() + to),
              g["first"][i]["ids"].get<std::vector<int32_t>>());
    std::vector<int> special;
    for (auto k = from; k < to; ++k) special.push_back(b.flags[static_cast<size_t>(k)] & TokenBlocks::kSpecial);
    EXPECT_EQ(special, g["first"][i]["special"].get<std::vector<int>>());
  }
}

TEST(MaskedLM, BlocksAndOneStepAreRunMlmsAndAdamW) {
  const FixedThreads fixed;
  const json golden = json::parse(io::read_file((kGolden / "hf_mlm.json").string()));
  ASSERT_GE(golden["cases"].size(), 9u);
  for (const json& c : golden["cases"]) {
    const std::string name = c["case"];
    SCOPED_TRACE(name);
    TempDir d("mlm-golden");
    const std::string model = (d.path / "model.safetensors").string();
    models::convert_hf((kGolden / "hf" / c["folder"].get<std::string>()).string(), model);
    write_lines(d.path / "lines.txt", golden["lines"]);
    write_lines(d.path / "step.txt", golden["step_lines"]);
    for (const std::string mode : {"grouped", "line_by_line", "whole_word"}) {
      SCOPED_TRACE(mode);
      const bool lbl = mode == "line_by_line";
      const int64_t max_length = golden[lbl ? "max_length_line_by_line" : "max_length"];
      // run_mlm.py's split and blocks
      if (mode != "whole_word") {
        const json split = {{"task", "masked_lm"},
                            {"init_from", model},
                            {"data",
                             {{"train", (d.path / "lines.txt").string()},
                              {"val_fraction", golden["val_fraction"]},
                              {"max_length", max_length},
                              {"line_by_line", lbl}}},
                            {"train", testing::exact_train_section(1, 4)}};
        MaskedLMTask task(split, "");
        expect_blocks(task.train_blocks(), c[mode]["train"]);
        expect_blocks(task.val_blocks(), c[mode]["val"]);
      }
      // one step on every block at once, validated on the same blocks under their own masks
      const json& g = c["step_" + mode];
      const json cfg = {{"task", "masked_lm"},
                        {"init_from", model},
                        {"data",
                         {{"train", (d.path / "step.txt").string()},
                          {"val", (d.path / "step.txt").string()},
                          {"max_length", max_length},
                          {"line_by_line", lbl},
                          {"whole_word_mask", mode == "whole_word"}}},
                        {"model", testing::dropout_off(model)},
                        {"train", testing::exact_train_section(1, g["blocks"].get<int64_t>())}};
      run(cfg, d.path / "run");
      std::vector<json> evals, steps;
      for (const json& r : testing::metrics_rows(d.path / "run")) (r.contains("val_loss") ? evals : steps).push_back(r);
      ASSERT_EQ(evals.size(), 2u);
      ASSERT_EQ(steps.size(), 1u);
      const double loss = g["loss"], norm = g["grad_norm"], val = g["val_loss"], after = g["val_loss_after_step"];
      EXPECT_NEAR(steps[0]["loss"].get<double>(), loss, 2e-6 + 1e-5 * loss);
      EXPECT_NEAR(steps[0]["grad_norm"].get<double>(), norm, 1e-4 * norm);
      EXPECT_NEAR(evals[0]["val_loss"].get<double>(), val, 2e-6 + 1e-5 * val);
      EXPECT_NEAR(evals[0]["val_perplexity"].get<double>(), std::exp(val), 2e-5 * std::exp(val));
      EXPECT_NEAR(evals[0]["val_accuracy"].get<double>(), g["val_accuracy"].get<double>(), 1e-12);
      EXPECT_NEAR(evals[1]["val_loss"].get<double>(), after, 1e-5 + 1e-4 * after);
      EXPECT_NEAR(evals[1]["val_accuracy"].get<double>(), g["val_accuracy_after_step"].get<double>(), 1e-12);
    }
  }
}

// The loss is the mean over the step's chosen tokens, whatever its micro-batches (the Trainer's
// num_items_in_batch): one step of N blocks equals two micro-batches of N / 2 — padded line by line,
// each micro-batch choosing its own count of tokens.
TEST(MaskedLM, TwoMicroBatchesAreOneBatch) {
  const FixedThreads fixed;
  const json golden = json::parse(io::read_file((kGolden / "hf_mlm.json").string()));
  TempDir d("mlm-accumulation");
  const std::string model = (d.path / "model.safetensors").string();
  models::convert_hf((kGolden / "hf" / "roberta-mlm").string(), model);
  write_lines(d.path / "step.txt", golden["step_lines"]);
  json cfg = {{"task", "masked_lm"},
              {"init_from", model},
              {"data",
               {{"train", (d.path / "step.txt").string()},
                {"val", (d.path / "step.txt").string()},
                {"max_length", 12},
                {"line_by_line", true}}},
              {"model", testing::dropout_off(model)},
              {"train", testing::exact_train_section(1, 16)}};
  run(cfg, d.path / "one");
  cfg["train"]["batch_size"] = 8, cfg["train"]["gradient_accumulation_steps"] = 2;
  run(cfg, d.path / "two");
  const std::vector<json> one = testing::metrics_rows(d.path / "one"), two = testing::metrics_rows(d.path / "two");
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i)
    for (const char* key : {"loss", "grad_norm", "val_loss", "val_accuracy"})
      if (one[i].contains(key)) {
        const double a = one[i][key], b = two[i][key];
        EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << key << " row " << i;
      }
}

// DataCollatorForLanguageModeling's rates: 15 % of the tokens that are not special chosen, of them 80 %
// the mask token, 10 % a random one, 10 % kept; the same stream draws the same, another stream not.
TEST(MaskedLM, MasksAreTheCollatorsRates) {
  const int64_t n = 200000, vocab = 1000;
  std::vector<int32_t> ids(n);
  std::vector<uint8_t> special(n, 0);
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(5 + i % 900);
  for (int64_t i = 0; i < n; i += 10) special[static_cast<size_t>(i)] = 1;
  const MaskedLMDataConfig d;
  std::vector<int32_t> x = ids;
  const std::vector<int32_t> y = mask_tokens(x, special.data(), 1337, 7, d, /*mask_id=*/3, vocab);
  int64_t chosen = 0, as_mask = 0, as_random = 0, kept = 0, changed_unchosen = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (y[i] == -100) {
      changed_unchosen += x[i] != ids[i];
      continue;
    }
    ASSERT_FALSE(special[i]) << i;
    EXPECT_EQ(y[i], ids[i]);
    ++chosen;
    if (x[i] == 3)
      ++as_mask;
    else if (x[i] == ids[i])
      ++kept;
    else
      ++as_random;
    EXPECT_LT(x[i], vocab);
  }
  EXPECT_EQ(changed_unchosen, 0);
  const double eligible = 0.9 * static_cast<double>(n);  // (±4σ bounds)
  EXPECT_NEAR(static_cast<double>(chosen) / eligible, 0.15, 0.004);
  EXPECT_NEAR(static_cast<double>(as_mask) / static_cast<double>(chosen), 0.8, 0.012);
  EXPECT_NEAR(static_cast<double>(as_random) / static_cast<double>(chosen), 0.1, 0.01);
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(chosen), 0.1, 0.01);
  std::vector<int32_t> again = ids, other = ids;
  EXPECT_EQ(mask_tokens(again, special.data(), 1337, 7, d, 3, vocab), y);
  EXPECT_EQ(again, x);
  EXPECT_NE(mask_tokens(other, special.data(), 1337, 8, d, 3, vocab), y);
  // no random replacement, and every chosen token masked
  MaskedLMDataConfig all = d;
  all.mask_replace_prob = 1, all.random_replace_prob = 0;
  std::vector<int32_t> z = ids;
  const std::vector<int32_t> yz = mask_tokens(z, special.data(), 1337, 7, all, 3, vocab);
  EXPECT_EQ(yz, y);  // (the same tokens chosen)
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(z[i], y[i] == -100 ? ids[i] : 3);
  // whole words: tokens 3k + 1 and 3k + 2 continue token 3k's word (special every 10th, as above, and a
  // word begins after one); a word is chosen whole with p = 0.15, every token of it the mask token
  std::vector<uint8_t> flags = special;
  for (size_t i = 0; i < flags.size(); ++i)
    if (!flags[i] && i % 3 != 0) flags[i] = TokenBlocks::kContinuesWord;
  MaskedLMDataConfig words = d;
  words.whole_word_mask = true;
  std::vector<int32_t> w = ids;
  const std::vector<int32_t> yw = mask_tokens(w, flags.data(), 1337, 7, words, 3, vocab);
  int64_t starts = 0, chosen_words = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (flags[i] & TokenBlocks::kSpecial) {
      EXPECT_EQ(yw[i], -100);
      continue;
    }
    EXPECT_EQ(w[i], yw[i] == -100 ? ids[i] : 3);
    const bool starts_word =
        i == 0 || !(flags[i] & TokenBlocks::kContinuesWord) || (flags[i - 1] & TokenBlocks::kSpecial);
    if (starts_word) {
      ++starts, chosen_words += yw[i] != -100;
    } else {
      ASSERT_EQ(yw[i] != -100, yw[i - 1] != -100) << i;  // (the word's tokens go together)
    }
  }
  EXPECT_NEAR(static_cast<double>(chosen_words) / static_cast<double>(starts), 0.15, 0.006);
}

// Six sentences, each word told by the others: a tiny BERT's accuracy on the chosen tokens rises from
// ~10 % to ≥ 60 % in 600 steps (79–84 % under oneDNN's AVX-512, AVX2 and SSE4.1; perplexity 1.8–2.1),
// and the written file fills a mask as `qkv fill-mask` reads it.
TEST(MaskedLM, ATinyBertLearnsToFillTheMask) {
  TempDir d("mlm-learns");
  const std::string model = (d.path / "bert.safetensors").string();
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model);
  const std::vector<std::string> sentences = {
      "romeo loves juliet and juliet loves romeo", "the king of rome is old",
      "sweet night is the lord of love",           "my lord the king is dead",
      "fair juliet is the sun of verona",          "romeo is the friend of the king"};
  {
    std::ofstream train(d.path / "train.txt"), val(d.path / "val.txt");
    for (int i = 0; i < 600; ++i) train << sentences[static_cast<size_t>(i * 5) % sentences.size()] << "\n";
    for (int i = 0; i < 60; ++i) val << sentences[static_cast<size_t>(i) % sentences.size()] << "\n";
  }
  const json cfg = {{"task", "masked_lm"},
                    {"init_from", model},
                    {"data",
                     {{"train", (d.path / "train.txt").string()},
                      {"val", (d.path / "val.txt").string()},
                      {"max_length", 16},
                      {"line_by_line", true}}},
                    {"model", {{"dropout", 0.0}}},
                    {"train",
                     {{"max_iters", 600},
                      {"batch_size", 16},
                      {"learning_rate", 3e-3},
                      {"min_lr", 3e-4},
                      {"warmup_iters", 5},
                      {"lr_decay_iters", 600},
                      {"eval_interval", 600},
                      {"log_interval", 10},
                      {"checkpoint_interval", 0},
                      {"weight_decay", 0.01}}}};
  run(cfg, d.path / "run");
  std::vector<json> evals;
  for (const json& r : testing::metrics_rows(d.path / "run"))
    if (r.contains("val_accuracy")) evals.push_back(r);
  ASSERT_EQ(evals.size(), 2u);
  // (before: ~10 % — the chosen tokens left as they were, which a tied decoder echoes)
  EXPECT_LT(evals[0]["val_accuracy"].get<double>(), 0.25) << evals[0].dump();
  EXPECT_GE(evals[1]["val_accuracy"].get<double>(), 0.6) << evals[1].dump();
  EXPECT_LT(evals[1]["val_perplexity"].get<double>(), 5.0) << evals[1].dump();
  models::LoadedMaskedLanguageModel tuned =
      models::load_masked_language_model((d.path / "run" / "model.safetensors").string());
  const auto guesses = decode::fill_mask(*tuned.model, *tuned.tokenizer.hf(), "the king of [MASK] is old");
  ASSERT_EQ(guesses.size(), 1u);
  EXPECT_EQ(guesses[0][0].sequence, "the king of rome is old");
}

// A new head on a qkv encoder file (a masked_lm run's output) is the one its Hugging Face checkpoint
// gets: the same architecture, the encoder's weights, the head drawn from the same seed — bit for bit.
TEST(MaskedLM, ANewHeadOnAnEncoderFileIsItsCheckpointsOwn) {
  TempDir d("mlm-new-head");
  for (const char* folder : {"bert-uncased", "distilbert-mlm", "deberta-mlm", "modernbert-mlm"}) {
    SCOPED_TRACE(folder);
    const std::string dir = (kGolden / "hf" / folder).string(), mlm = (d.path / "mlm.safetensors").string();
    models::convert_hf(dir, mlm);
    for (const char* head : {"sequence", "token", "span"}) {
      SCOPED_TRACE(head);
      models::HfConvertOptions o;
      o.head = head, o.seed = 7;
      if (std::string(head) != "span") o.labels = {"neg", "pos", "mixed"};
      models::HfHeadReport from_folder, from_file;
      const std::string a = (d.path / "a.safetensors").string(), b = (d.path / "b.safetensors").string();
      models::convert_hf(dir, a, o, &from_folder);
      const json meta = models::convert_hf(mlm, b, o, &from_file);
      EXPECT_EQ(from_file.architecture, from_folder.architecture);
      EXPECT_EQ(from_file.initialized, from_folder.initialized);
      EXPECT_FALSE(from_file.unused.empty());  // (the MLM head's)
      EXPECT_EQ(meta["converted_from"]["new_head"]["model_file"], mlm);
      const models::ModelFile fa = models::load_model_file(a), fb = models::load_model_file(b);
      EXPECT_EQ(fa.meta["model"], fb.meta["model"]);
      ASSERT_EQ(fa.params.size(), fb.params.size());
      for (const auto& [name, t] : fa.params) {
        ASSERT_TRUE(fb.params.count(name)) << name;
        EXPECT_EQ(t.to_vector(), fb.params.at(name).to_vector()) << name;
      }
    }
  }
  // a file is given a head and nothing else; a decoder's file takes none
  const std::string bert = (d.path / "mlm.safetensors").string();
  EXPECT_NE(error_of([&] { models::convert_hf(bert, (d.path / "x.safetensors").string()); }).find("takes a new head"),
            std::string::npos);
  const std::string gpt = (d.path / "gpt2.safetensors").string();
  models::convert_hf((kGolden / "hf" / "gpt2").string(), gpt);
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"a", "b"};
  EXPECT_NE(error_of([&] { models::convert_hf(gpt, (d.path / "x.safetensors").string(), o); }).find("only an encoder"),
            std::string::npos);
}

TEST(MaskedLM, RefusesHostileDataAndConfigsByName) {
  TempDir d("mlm-hostile");
  const std::string model = (d.path / "bert.safetensors").string();
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model);
  auto config = [&](const json& data) {
    json c = {
        {"task", "masked_lm"}, {"init_from", model}, {"data", data}, {"train", testing::exact_train_section(1, 2)}};
    return c;
  };
  auto file = [&](const std::string& name, const std::string& text) {
    const fs::path p = d.path / name;
    std::ofstream(p) << text;
    return p.string();
  };
  auto error = [&](const json& data) { return error_of([&] { MaskedLMTask task(config(data), ""); }); };
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                             : ::testing::AssertionFailure() << "'" << e << "' lacks '" << part << "'";
  };
  const std::string good = file("good.txt", "romeo loves juliet\nthe king is old\nmy lord\n");
  EXPECT_TRUE(has(error({{"train", file("a.parquet", "x\n")}, {"val", good}}), "neither .txt"));
  EXPECT_TRUE(has(error({{"train", (d.path / "missing.txt").string()}, {"val", good}}), "missing.txt"));
  EXPECT_TRUE(has(error({{"train", file("bad.jsonl", "{\"text\": \"a\"}\n[1]\n")}, {"val", good}}), "line 2"));
  EXPECT_TRUE(has(error({{"train", file("col.jsonl", "{\"sentence\": \"a\"}\n")}, {"val", good}}), "data.text"));
  EXPECT_TRUE(has(error({{"train", file("notjson.jsonl", "{\"text\": \n")}, {"val", good}}), "not JSON"));
  EXPECT_TRUE(has(error({{"train", file("empty.txt", "")}, {"val", good}}), "holds no texts"));
  EXPECT_TRUE(has(error({{"train", file("col.csv", "sentence\nromeo\n")}, {"val", good}}), "no string \"text\""));
  EXPECT_TRUE(has(error({{"train", file("bad.csv", "text\n\"romeo\n")}, {"val", good}}), "not CSV"));
  // run_mlm.py's --train_file x.csv: its text column, quoted fields holding commas and line breaks, makes
  // the blocks the same texts make from .jsonl
  const std::string csv = file("texts.csv",
                               "id,text\n1,romeo loves juliet\n2,\"the king, \"\"old\"\"\nand grey\"\n"
                               "3,my lord\n4,romeo loves juliet\n5,the king is old\n");
  const std::string jsonl = file("texts.jsonl",
                                 "{\"text\": \"romeo loves juliet\"}\n"
                                 "{\"text\": \"the king, \\\"old\\\"\\nand grey\"}\n"
                                 "{\"text\": \"my lord\"}\n{\"text\": \"romeo loves juliet\"}\n"
                                 "{\"text\": \"the king is old\"}\n");
  // a .txt's lines end as Python's universal newlines end them (datasets reads it in text mode): "\r\n",
  // "\n" or a lone "\r" (old Mac files) — the same lines, grouped or a block each
  const std::string lf = file("lf.txt", "romeo loves juliet\n\nthe king is old\nmy lord\nromeo\n"),
                    cr = file("cr.txt", "romeo loves juliet\r\rthe king is old\r\nmy lord\rromeo");
  for (const bool by_line : {false, true}) {
    const MaskedLMTask a(config({{"train", lf}, {"val", good}, {"max_length", 4}, {"line_by_line", by_line}}), "");
    const MaskedLMTask b(config({{"train", cr}, {"val", good}, {"max_length", 4}, {"line_by_line", by_line}}), "");
    EXPECT_EQ(a.train_blocks().ids, b.train_blocks().ids) << by_line;
    EXPECT_EQ(a.train_blocks().begin, b.train_blocks().begin) << by_line;
  }
  {
    const MaskedLMTask a(config({{"train", csv}, {"val", good}, {"max_length", 4}}), "");
    const MaskedLMTask b(config({{"train", jsonl}, {"val", good}, {"max_length", 4}}), "");
    EXPECT_EQ(a.train_blocks().ids, b.train_blocks().ids);
    EXPECT_GT(a.train_blocks().ids.size(), 8u);
  }
  EXPECT_TRUE(has(error({{"train", file("blank.txt", "  \n\t\n")}, {"val", good}, {"line_by_line", true}}),
                  "every line is blank"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"max_length", 64}}), "the model's 40 positions"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"max_length", 1}}), "at least 2"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"max_length", 32}}), "makes no block"));
  EXPECT_TRUE(has(error({{"train", good}, {"val_fraction", 0.01}, {"max_length", 4}}), "leaves 0 to validate"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"mlm_probability", 0}}), "mlm_probability"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"mlm_probability", 1.5}}), "mlm_probability"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"mask_replace_prob", 0.9}, {"random_replace_prob", 0.2}}),
                  "more than 1"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"whole_word_masking", true}}), "whole_word_masking"));
  EXPECT_TRUE(has(error({{"train", good}, {"val", good}, {"whole_word_mask", true}, {"mask_replace_prob", 0.5}}),
                  "do not apply"));
  // a model file without the MLM head: a classifier, or a bare encoder
  const std::string classifier = (d.path / "cls.safetensors").string();
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"a", "b"};
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), classifier, o);
  json cfg = config({{"train", good}, {"val", good}});
  cfg["init_from"] = classifier;
  EXPECT_TRUE(has(error_of([&] { MaskedLMTask task(cfg, ""); }), "not a masked language model"));
  const std::string bare = (d.path / "bare.safetensors").string();
  models::convert_hf((kGolden / "hf" / "bert-model").string(), bare);
  cfg["init_from"] = bare;
  EXPECT_TRUE(has(error_of([&] { MaskedLMTask task(cfg, ""); }), "without its masked-language-model head"));
}

}  // namespace
}  // namespace qkv::train::masked_lm_test
