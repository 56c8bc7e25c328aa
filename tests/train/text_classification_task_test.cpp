// Fine-tuning encoders' sequence classifiers (train/text_classification_task.h) and the new heads
// `qkv convert --head` puts on encoders' checkpoints (models/hf_convert.h).
//
// Against transformers (tests/golden/hf_finetune.json, tests/golden/make_finetune_golden.py): for each
// family's tiny random classifier, the batch's loss before any step, the gradients' L2 norm and the
// loss after one AdamW step equal …ForSequenceClassification's with torch.optim.AdamW — single-label
// (cross-entropy), multi-label (BCE with logits) and regression (MSE), single texts and pairs, one
// text cut to max_length. Then a new head learns a task, a stopped run resumes exactly, the trained
// file classifies, and hostile data and configs are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/thread_budget.h"
#include "qkv/decode/classify.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/train/from_config.h"
#include "qkv/train/text_classification_task.h"
#include "testing.h"

namespace qkv::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::TempDir;

const fs::path kGolden = fs::path(QKV_GOLDEN_DIR);

// The metrics rows of a run's folder.
std::vector<json> metric_rows(const fs::path& dir) {
  std::vector<json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  return rows;
}

TrainResult run(const json& cfg, const fs::path& out, bool resume = false) {
  TextClassificationTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.resume = resume, o.full_config = cfg, o.quiet = true;
  return run_training(task, task.train_config(), o);
}

// The file's model section with every dropout rate 0 (transformers' eval mode: the gradients of the
// network itself).
json no_dropout(const std::string& model_file) {
  json m = json::object();
  const json meta = models::load_model_metadata(model_file);
  for (const auto& [k, v] : meta["model"].items())
    if (k.find("dropout") != std::string::npos) m[k] = 0.0;
  EXPECT_FALSE(m.empty()) << "no dropout rate in '" << model_file << "'";
  return m;
}

json train_section(int64_t max_iters, int64_t batch_size) {
  return {{"max_iters", max_iters},
          {"batch_size", batch_size},
          {"learning_rate", 1e-3},
          {"schedule", "constant"},
          {"warmup_iters", 0},
          {"beta2", 0.999},
          {"eps", 1e-8},
          {"weight_decay", 0.01},
          {"grad_clip", 1e9},  // (no clipping, but the norm logged)
          {"eval_interval", 1},
          {"log_interval", 1},
          {"checkpoint_interval", 0}};
}

TEST(TextClassification, OneStepIsTransformersAndAdamW) {
  const FixedThreads fixed;
  const json golden = json::parse(io::read_file((kGolden / "hf_finetune.json").string()));
  ASSERT_GE(golden["cases"].size(), 9u);
  for (const json& c : golden["cases"]) {
    const std::string name = c["case"];
    SCOPED_TRACE(name);
    TempDir d("text-classification-golden");
    const std::string model = (d.path / "model.safetensors").string();
    models::HfConvertOptions o;
    if (!c["from_folder"].get<bool>()) {  // the folder's classifier with the case's problem_type (kept: same labels)
      o.head = "sequence", o.labels = c["labels"].get<std::vector<std::string>>();
      o.problem_type = c["problem_type"];
    }
    models::HfHeadReport report;
    models::convert_hf((kGolden / "hf" / c["folder"].get<std::string>()).string(), model, o, &report);
    EXPECT_TRUE(report.initialized.empty()) << "the folder's own classifier was not kept";
    // the examples as JSONL: a label id, a list of them, or a number
    std::ofstream jsonl(d.path / "examples.jsonl");
    bool pairs = false;
    for (const json& e : c["examples"]) {
      jsonl << e.dump() << "\n";
      pairs = pairs || e.contains("pair");
    }
    jsonl.close();
    const std::string data = (d.path / "examples.jsonl").string();
    json data_section = {{"train", data}, {"val", data}, {"max_length", golden["max_length"]}};
    if (pairs) data_section["text_pair"] = "pair";
    const json cfg = {{"task", "text_classification"},
                      {"init_from", model},
                      {"data", data_section},
                      {"model", no_dropout(model)},
                      {"train", train_section(1, static_cast<int64_t>(c["examples"].size()))}};
    {
      TextClassificationTask task(cfg, "");
      EXPECT_EQ(std::string(enum_name(task.problem())), c["problem_type"].get<std::string>());
      std::vector<int64_t> tokens;
      for (const auto& e : task.train_set().encodings) tokens.push_back(static_cast<int64_t>(e.ids.size()));
      EXPECT_EQ(tokens, c["tokens"].get<std::vector<int64_t>>()) << "tokenized, paired or cut otherwise";
    }
    run(cfg, d.path / "run");
    const std::vector<json> rows = metric_rows(d.path / "run");
    // rows: the evaluation at step 0, the step's, the evaluation at step 1
    std::vector<json> evals, steps;
    for (const json& r : rows) (r.contains("val_loss") ? evals : steps).push_back(r);
    ASSERT_EQ(evals.size(), 2u);
    ASSERT_EQ(steps.size(), 1u);
    const double loss = c["loss"], norm = c["grad_norm"], after = c["loss_after_step"];
    EXPECT_NEAR(evals[0]["val_loss"].get<double>(), loss, 2e-6 + 1e-5 * loss);
    EXPECT_NEAR(steps[0]["loss"].get<double>(), loss, 2e-6 + 1e-5 * loss);
    EXPECT_NEAR(steps[0]["grad_norm"].get<double>(), norm, 1e-4 * norm);
    EXPECT_NEAR(evals[1]["val_loss"].get<double>(), after, 1e-5 + 1e-4 * after);
  }
}

// A texts file of `n` lines, "yes, …" labelled pos and "no, …" labelled neg, as TSV.
std::string yes_no(const fs::path& dir, int n) {
  const std::string text =
      io::read_file((fs::path(QKV_SOURCE_DIR) / "data" / "tinyshakespeare" / "input.txt").string());
  std::ofstream out(dir / "yes-no.tsv");
  out << "sentence\tlabel\n";
  size_t from = 0;
  for (int i = 0; i < n;) {
    const size_t end = text.find('\n', from);
    const std::string line = text.substr(from, end - from);
    from = end + 1;
    if (line.size() < 12) continue;
    const bool yes = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull >> 61) & 1;
    out << (yes ? "yes, " : "no, ") << line << "\t" << (yes ? "pos" : "neg") << "\n";
    ++i;
  }
  return (dir / "yes-no.tsv").string();
}

json yes_no_config(const std::string& model, const std::string& data, int64_t max_iters) {
  return {{"task", "text_classification"},
          {"init_from", model},
          {"data", {{"train", data}, {"max_length", 16}}},
          {"train",
           {{"max_iters", max_iters},
            {"batch_size", 16},
            {"learning_rate", 2e-3},
            {"min_lr", 2e-4},
            {"warmup_iters", 5},
            {"lr_decay_iters", max_iters},
            {"eval_interval", max_iters},
            {"log_interval", 1},
            {"checkpoint_interval", 0},
            {"weight_decay", 0.01},
            {"metric_for_best_model", "val_accuracy"}}}};
}

// `qkv convert --head sequence` on a BertForMaskedLM: the encoder's weights are the checkpoint's,
// the pooler and classifier new (N(0, 0.02), biases 0), the MLM head's tensors left out; then the
// file is fine-tuned to tell "yes, …" from "no, …", and the result classifies as the pipeline does.
TEST(TextClassification, ANewHeadOnAMaskedLanguageModelLearns) {
  TempDir d("text-classification-new-head");
  const std::string mlm = (d.path / "mlm.safetensors").string(), cls = (d.path / "cls.safetensors").string();
  const std::string folder = (kGolden / "hf" / "bert-uncased").string();
  models::convert_hf(folder, mlm);
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"neg", "pos"};
  models::HfHeadReport report;
  const json meta = models::convert_hf(folder, cls, o, &report);
  EXPECT_EQ(report.architecture, "BertForSequenceClassification");
  EXPECT_EQ(report.initialized,
            (std::vector<std::string>{"classifier.bias", "classifier.weight", "pooler.bias", "pooler.weight"}));
  ASSERT_EQ(report.unused.size(), 5u);
  for (const auto& n : report.unused) EXPECT_TRUE(n.starts_with("cls.predictions.")) << n;
  EXPECT_EQ(meta["model"]["labels"], json({"neg", "pos"}));
  EXPECT_EQ(meta["converted_from"]["architecture"], "BertForSequenceClassification");
  EXPECT_EQ(meta["converted_from"]["new_head"]["checkpoint_architecture"], "BertForMaskedLM");
  const models::ModelFile a = models::load_model_file(mlm), b = models::load_model_file(cls);
  int shared = 0;
  for (const auto& [name, t] : b.params) {
    if (a.params.count(name)) {
      EXPECT_EQ(t.to_vector(), a.params.at(name).to_vector()) << name;
      ++shared;
    }
  }
  EXPECT_EQ(shared + 4, static_cast<int>(b.params.size()));
  const std::vector<float> w = b.params.at("classifier.weight").to_vector();
  double ss = 0;
  for (float v : w) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(w.size())), 0.02, 0.006);
  for (float v : b.params.at("classifier.bias").to_vector()) EXPECT_EQ(v, 0.f);
  // the same seed, the same head; another seed, another
  o.seed = 0;
  const std::string again = (d.path / "again.safetensors").string(), other = (d.path / "other.safetensors").string();
  models::convert_hf(folder, again, o);
  o.seed = 1;
  models::convert_hf(folder, other, o);
  EXPECT_EQ(models::load_model_file(again).params.at("classifier.weight").to_vector(), w);
  EXPECT_NE(models::load_model_file(other).params.at("classifier.weight").to_vector(), w);

  const std::string data = yes_no(d.path, 400);
  const TrainResult r = run(yes_no_config(cls, data, 150), d.path / "run");
  const std::vector<json> rows = metric_rows(d.path / "run");
  double acc = -1;
  for (const json& row : rows)
    if (row.contains("val_accuracy")) acc = row["val_accuracy"];
  EXPECT_GE(acc, 0.95) << "a new head did not learn the first word";
  (void)r;
  // the written file is a classifier of the same labels, read as classify-text reads it
  models::LoadedMaskedLanguageModel tuned =
      models::load_masked_language_model((d.path / "run" / "model.safetensors").string());
  EXPECT_EQ(tuned.model->task().labels, (std::vector<std::string>{"neg", "pos"}));
  EXPECT_EQ(tuned.meta["init_from"], cls);
  EXPECT_EQ(tuned.meta["converted_from"]["new_head"]["checkpoint_architecture"], "BertForMaskedLM");
  const auto scores = decode::text_classification(*tuned.model, *tuned.tokenizer.hf(),
                                                  {"yes, my lord, I will.", "no, my lord, I will."});
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_EQ(scores[0][0].label, "pos");
  EXPECT_EQ(scores[1][0].label, "neg");
}

// A stopped run resumes to the same losses bit for bit (dropout on: the file's 0.1; the epoch order).
TEST(TextClassification, ResumeReproducesTheUninterruptedRun) {
  const FixedThreads fixed;
  TempDir d("text-classification-resume");
  const std::string model = (d.path / "cls.safetensors").string();
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"neg", "pos"};
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model, o);
  const std::string data = yes_no(d.path, 40);  // (36 train examples: the run passes an epoch's end)
  json full = yes_no_config(model, data, 12);
  full["train"]["eval_interval"] = 0;
  run(full, d.path / "straight");
  json part = full;
  part["train"]["max_iters"] = 5;
  run(part, d.path / "resumed");
  run(full, d.path / "resumed", true);
  const std::vector<double> a = testing::logged_losses(d.path / "straight"),
                            b = testing::logged_losses(d.path / "resumed");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
}

TEST(TextClassification, RefusesHostileDataAndConfigsByName) {
  TempDir d("text-classification-hostile");
  const std::string folder = (kGolden / "hf" / "bert-uncased").string();
  const std::string cls = (d.path / "cls.safetensors").string(), mlm = (d.path / "mlm.safetensors").string();
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"neg", "pos"};
  models::convert_hf(folder, cls, o);
  models::convert_hf(folder, mlm);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(d.path / name) << text;
    return (d.path / name).string();
  };
  auto error = [&](const std::string& model, const std::string& data, json extra = json::object()) {
    json cfg = yes_no_config(model, data, 1);
    for (auto& [k, v] : extra.items()) cfg["data"][k] = v;
    return error_of([&] { TextClassificationTask task(cfg, ""); });
  };
  const std::string good = yes_no(d.path, 20);
  EXPECT_NE(error(mlm, good).find("not a sequence classifier: convert the checkpoint with one"), std::string::npos)
      << error(mlm, good);
  EXPECT_NE(error(cls, write("a.tsv", "sentence\tlabel\nfine\tpos\nbad line\n")).find("a.tsv' line 3: 1 fields"),
            std::string::npos);
  EXPECT_NE(error(cls, write("b.tsv", "sentence\tlabel\nfine\tmaybe\n"))
                .find("the label \"maybe\" is not one of the model's (neg, pos)"),
            std::string::npos);
  EXPECT_NE(error(cls, write("c.tsv", "sentence\tlabel\nfine\t7\n")).find("nor an id 0 … 1"), std::string::npos);
  EXPECT_NE(error(cls, write("d.tsv", "words\tlabel\nfine\tpos\n"))
                .find("has no column \"text\" (data.text); its header names words, label"),
            std::string::npos);
  EXPECT_NE(error(cls, write("e.jsonl", "{\"text\": \"a\", \"label\": 0}\n{oops\n")).find("e.jsonl' line 2: not JSON"),
            std::string::npos);
  EXPECT_NE(error(cls, write("f.jsonl", "{\"text\": 5, \"label\": 0}\n")).find("\"text\" is not a string"),
            std::string::npos);
  EXPECT_NE(error(cls, write("g.jsonl", "{\"text\": \"a\", \"label\": 2}\n"))
                .find("the label 2 is not one of the model's ids"),
            std::string::npos);
  EXPECT_NE(error(cls, write("h.csv", "text,label\n")).find("is neither .tsv"), std::string::npos);
  EXPECT_NE(error(cls, write("i.tsv", "\n\n")).find("holds no examples"), std::string::npos);
  EXPECT_NE(error(cls, good, {{"max_length", 4096}}).find("data.max_length 4096 is more than the model's"),
            std::string::npos);
  EXPECT_NE(error(cls, (d.path / "missing.tsv").string()).find("missing.tsv"), std::string::npos);
  EXPECT_NE(error(cls, write("j.tsv", "sentence\tlabel\nonly\tpos\n")).find("leaves 0 to validate on"),
            std::string::npos);
  // a new head on a language model, or without labels
  models::HfConvertOptions bad = o;
  EXPECT_NE(error_of([&] {
              models::convert_hf((kGolden / "hf" / "gpt2").string(), (d.path / "x.safetensors").string(), bad);
            }).find("only an encoder's checkpoint"),
            std::string::npos);
  bad.labels.clear();
  EXPECT_NE(
      error_of([&] { models::convert_hf(folder, (d.path / "x.safetensors").string(), bad); }).find("needs its labels"),
      std::string::npos);
  bad.labels = {"a", "a"};
  EXPECT_NE(error_of([&] { models::convert_hf(folder, (d.path / "x.safetensors").string(), bad); }).find("given twice"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d.path / "x.safetensors"));
}

// A classifier of other labels re-headed: its classifier drawn anew (transformers'
// ignore_mismatched_sizes), the pooler kept.
TEST(TextClassification, ANewHeadOfOtherLabelsReplacesTheClassifier) {
  TempDir d("text-classification-relabel");
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"a", "b", "c", "d"};
  models::HfHeadReport report;
  models::convert_hf((kGolden / "hf" / "bert-seqcls").string(), (d.path / "m.safetensors").string(), o, &report);
  EXPECT_EQ(report.initialized, (std::vector<std::string>{"classifier.bias", "classifier.weight"}));
  EXPECT_EQ(report.unused, (std::vector<std::string>{"classifier.bias", "classifier.weight"}));
}

}  // namespace
}  // namespace qkv::train
