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
#include <sstream>
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

namespace qkv::train::text_classification_test {  // (its own: the test files of a folder compile as one unit)
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::TempDir;

const fs::path kGolden = fs::path(QKV_GOLDEN_DIR);

TrainResult run(const json& cfg, const fs::path& out, bool resume = false) {
  TextClassificationTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.resume = resume, o.full_config = cfg, o.quiet = true;
  return run_training(task, task.train_config(), o);
}

// A one-step run against a golden case: its rows are the evaluation at step 0, the step's, the
// evaluation at step 1 — the loss (both before the step), the gradients' norm and the loss after it
// as transformers and torch AdamW computed them. Returns the evaluations.
std::vector<json> expect_one_step_as_golden(const json& c, const fs::path& run_dir) {
  std::vector<json> evals, steps;
  for (const json& r : testing::metrics_rows(run_dir)) (r.contains("val_loss") ? evals : steps).push_back(r);
  EXPECT_EQ(evals.size(), 2u);
  EXPECT_EQ(steps.size(), 1u);
  if (evals.size() != 2 || steps.size() != 1) return {};
  const double loss = c["loss"], norm = c["grad_norm"], after = c["loss_after_step"];
  EXPECT_NEAR(evals[0]["val_loss"].get<double>(), loss, 2e-6 + 1e-5 * loss);
  EXPECT_NEAR(steps[0]["loss"].get<double>(), loss, 2e-6 + 1e-5 * loss);
  EXPECT_NEAR(steps[0]["grad_norm"].get<double>(), norm, 1e-4 * norm);
  EXPECT_NEAR(evals[1]["val_loss"].get<double>(), after, 1e-5 + 1e-4 * after);
  return evals;
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
                      {"model", testing::dropout_off(model)},
                      {"train", testing::exact_train_section(1, static_cast<int64_t>(c["examples"].size()))}};
    {
      TextClassificationTask task(cfg, "");
      EXPECT_EQ(std::string(enum_name(task.problem())), c["problem_type"].get<std::string>());
      std::vector<int64_t> tokens;
      for (const auto& e : task.train_set().encodings) tokens.push_back(static_cast<int64_t>(e.ids.size()));
      EXPECT_EQ(tokens, c["tokens"].get<std::vector<int64_t>>()) << "tokenized, paired or cut otherwise";
      // the same examples as CSV (every field quoted, quotes doubled), as run_glue.py's --train_file x.csv:
      // the same ids and targets (a label list, multi-label's, has no CSV form)
      bool scalar = true;
      for (const json& e : c["examples"]) scalar = scalar && !e["label"].is_array();
      if (scalar) {
        auto quoted = [](const std::string& f) {
          std::string q = "\"";
          for (char ch : f) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
          return q + "\"";
        };
        std::ofstream csv(d.path / "examples.csv");
        csv << "text," << (pairs ? "pair," : "") << "label\r\n";
        for (const json& e : c["examples"])
          csv << quoted(e["text"]) << "," << (pairs ? quoted(e["pair"]) + "," : "")
              << quoted(e["label"].is_string() ? e["label"].get<std::string>() : e["label"].dump()) << "\r\n";
        csv.close();
        json csv_cfg = cfg;
        csv_cfg["data"]["train"] = csv_cfg["data"]["val"] = (d.path / "examples.csv").string();
        TextClassificationTask from_csv(csv_cfg, "");
        ASSERT_EQ(from_csv.train_set().size(), task.train_set().size());
        for (int64_t i = 0; i < task.train_set().size(); ++i)
          EXPECT_EQ(from_csv.train_set().encodings[i].ids, task.train_set().encodings[i].ids) << i;
        EXPECT_EQ(from_csv.train_set().labels, task.train_set().labels);
        EXPECT_EQ(from_csv.train_set().values, task.train_set().values);
      }
    }
    run(cfg, d.path / "run");
    expect_one_step_as_golden(c, d.path / "run");
  }
}

// Token classification (run_ner.py's way), one step against transformers' …ForTokenClassification
// with labels and AdamW: each sentence's ids and word ids as tokenizer(words, is_split_into_words=True)
// gives them (a ByteLevel tokenizer with add_prefix_space=True), the first token of each word tagged
// (or every token: label_all_tokens), the loss over the tagged tokens, its gradients' norm, the loss
// after the step.
TEST(TokenClassification, OneStepIsTransformersAndAdamW) {
  const FixedThreads fixed;
  const json golden = json::parse(io::read_file((kGolden / "hf_finetune.json").string()));
  ASSERT_GE(golden["token_cases"].size(), 7u);
  for (const json& c : golden["token_cases"]) {
    const std::string name = c["case"];
    SCOPED_TRACE(name);
    TempDir d("token-classification-golden");
    const std::string model = (d.path / "model.safetensors").string();
    models::convert_hf((kGolden / "hf" / c["folder"].get<std::string>()).string(), model);
    std::ofstream jsonl(d.path / "sentences.jsonl");
    for (const json& e : c["examples"]) jsonl << e.dump() << "\n";
    jsonl.close();
    const std::string data = (d.path / "sentences.jsonl").string();
    const json cfg = {{"task", "token_classification"},
                      {"init_from", model},
                      {"data",
                       {{"train", data},
                        {"val", data},
                        {"max_length", golden["max_length"]},
                        {"label_all_tokens", c["label_all_tokens"]}}},
                      {"model", testing::dropout_off(model)},
                      {"train", testing::exact_train_section(1, static_cast<int64_t>(c["examples"].size()))}};
    {
      TextClassificationTask task(cfg, "");
      ASSERT_EQ(task.train_set().size(), static_cast<int64_t>(c["input_ids"].size()));
      for (size_t i = 0; i < c["input_ids"].size(); ++i) {
        const text::HfEncoding& e = task.train_set().encodings[i];
        EXPECT_EQ(e.ids, c["input_ids"][i].get<std::vector<int32_t>>()) << "sentence " << i;
        EXPECT_EQ(e.word_ids, c["word_ids"][i].get<std::vector<int32_t>>()) << "sentence " << i;
      }
    }
    run(cfg, d.path / "run");
    const std::vector<json> evals = expect_one_step_as_golden(c, d.path / "run");
    ASSERT_EQ(evals.size(), 2u);
    // seqeval's figures on the predictions after the step
    for (const char* k : {"accuracy", "precision", "recall", "f1"})
      EXPECT_NEAR(evals[1][std::string("val_") + k].get<double>(), c["metrics_after_step"][k].get<double>(), 1e-9) << k;
  }
}

// `qkv convert --head token` on a BertForMaskedLM, fine-tuned from CoNLL text to tag "romeo" (put
// into Shakespeare's lines at random) as a person: the entities' F1 rises, and the written file tags
// as the token-classification pipeline does. The tiny random model predicts every tag O for ~150 steps,
// then learns the name within ~100 (F1 1.0 by step 200–300 whatever GEMM kernels oneDNN picks, AVX2
// to AVX-512 VNNI): 500 steps leave room on every CPU, where 300 ended at 0.87 on AVX-512.
TEST(TokenClassification, ANewTokenHeadLearnsFromCoNLL) {
  TempDir d("token-classification-learns");
  const std::string model = (d.path / "ner.safetensors").string();
  models::HfConvertOptions o;
  o.head = "token", o.labels = {"O", "B-PER", "I-PER"};
  models::HfHeadReport report;
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model, o, &report);
  EXPECT_EQ(report.architecture, "BertForTokenClassification");
  EXPECT_EQ(report.initialized, (std::vector<std::string>{"classifier.bias", "classifier.weight"}));
  const std::string text =
      io::read_file((fs::path(QKV_SOURCE_DIR) / "data" / "tinyshakespeare" / "input.txt").string());
  std::ofstream conll(d.path / "train.conll");
  conll << "-DOCSTART- -X- O O\n\n";
  size_t from = 0;
  for (int i = 0; i < 300;) {
    const size_t end = text.find('\n', from);
    std::istringstream line(text.substr(from, end - from));
    from = end + 1;
    std::vector<std::string> words;
    for (std::string w; line >> w && words.size() < 8;) words.push_back(w);
    if (words.size() < 3) continue;
    const size_t at = static_cast<size_t>(i) % words.size();
    words.insert(words.begin() + static_cast<std::ptrdiff_t>(at), "romeo");
    for (size_t k = 0; k < words.size(); ++k) conll << words[k] << " NN " << (k == at ? "B-PER" : "O") << "\n";
    conll << "\n";
    ++i;
  }
  conll.close();
  const json cfg = {{"task", "token_classification"},
                    {"init_from", model},
                    {"data", {{"train", (d.path / "train.conll").string()}, {"max_length", 24}}},
                    {"train",
                     {{"max_iters", 500},
                      {"batch_size", 16},
                      {"learning_rate", 1e-2},
                      {"min_lr", 3e-4},
                      {"warmup_iters", 5},
                      {"lr_decay_iters", 500},
                      {"eval_interval", 500},
                      {"log_interval", 10},
                      {"checkpoint_interval", 0},
                      {"weight_decay", 0.01}}}};
  {
    TextClassificationTask task(cfg, "");
    EXPECT_EQ(task.train_set().size() + task.val_set().size(), 300);
  }
  run(cfg, d.path / "run");
  std::vector<json> evals;
  for (const json& r : testing::metrics_rows(d.path / "run"))
    if (r.contains("val_f1")) evals.push_back(r);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_LT(evals[0]["val_f1"].get<double>(), 0.5);
  EXPECT_GE(evals[1]["val_f1"].get<double>(), 0.9) << evals[1].dump();
  models::LoadedMaskedLanguageModel tuned =
      models::load_masked_language_model((d.path / "run" / "model.safetensors").string());
  decode::TokenClassificationOptions t;
  t.aggregation = decode::Aggregation::simple;
  const auto found = decode::token_classification(*tuned.model, *tuned.tokenizer.hf(), {"my lord romeo is here"}, t);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(found[0].size(), 1u);
  EXPECT_EQ(found[0][0].entity, "PER");
  EXPECT_EQ(found[0][0].word, "romeo");
}

TEST(TokenClassification, RefusesHostileDataByName) {
  TempDir d("token-classification-hostile");
  const std::string model = (d.path / "ner.safetensors").string();
  models::HfConvertOptions o;
  o.head = "token", o.labels = {"O", "B-PER", "I-PER"};
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model, o);
  auto error = [&](const std::string& name, const std::string& text) {
    std::ofstream(d.path / name) << text;
    const json cfg = {{"task", "token_classification"},
                      {"init_from", model},
                      {"data", {{"train", (d.path / name).string()}, {"val", (d.path / name).string()}}},
                      {"train", {{"max_iters", 1}, {"batch_size", 2}}}};
    return error_of([&] { TextClassificationTask task(cfg, ""); });
  };
  EXPECT_NE(error("a.conll", "Romeo B-PER\nwent\n").find("a.conll' line 2: a word without a tag"), std::string::npos);
  EXPECT_NE(error("b.conll", "Romeo B-LOC\n").find("the label \"B-LOC\" is not one of the model's (O, B-PER, I-PER)"),
            std::string::npos);
  EXPECT_NE(error("c.jsonl", "{\"tokens\": [\"a\", \"b\"], \"ner_tags\": [0]}\n").find("lists of one length"),
            std::string::npos);
  EXPECT_NE(error("d.jsonl", "{\"words\": [\"a\"], \"ner_tags\": [0]}\n").find("not an object with \"tokens\""),
            std::string::npos);
  EXPECT_NE(error("e.jsonl", "{\"tokens\": [1], \"ner_tags\": [0]}\n").find("the word 1 is not a string"),
            std::string::npos);
  EXPECT_NE(error("f.tsv", "a\tO\n").find("is neither .jsonl"), std::string::npos);
  EXPECT_NE(error("g.conll", "-DOCSTART- -X- O\n\n\n").find("holds no sentences"), std::string::npos);
  // a sequence classifier is not a token classifier
  const std::string seq = (d.path / "seq.safetensors").string();
  o.head = "sequence";
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), seq, o);
  const json cfg = {{"task", "token_classification"},
                    {"init_from", seq},
                    {"data", {{"train", "x.conll"}}},
                    {"train", {{"max_iters", 1}}}};
  EXPECT_NE(error_of([&] {
              TextClassificationTask task(cfg, "");
            }).find("holds a sequence classifier, not a token classifier: convert the checkpoint with one"),
            std::string::npos);
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
  const std::vector<json> rows = testing::metrics_rows(d.path / "run");
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

// Mixed precision ("dtype": "bf16": bf16 GEMMs and attention, f32 master weights) fine-tunes a new head
// as f32 does: its first loss within bf16's rounding of f32's, the task learned, the file's weights f32.
TEST(TextClassification, InBf16ANewHeadLearnsAsInF32) {
  TempDir d("text-classification-bf16");
  const std::string cls = (d.path / "cls.safetensors").string();
  models::HfConvertOptions o;
  o.head = "sequence", o.labels = {"neg", "pos"};
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), cls, o);
  const std::string data = yes_no(d.path, 400);
  json f32 = yes_no_config(cls, data, 150), bf16 = f32;
  bf16["train"]["dtype"] = "bf16";
  run(f32, d.path / "f32");
  run(bf16, d.path / "bf16");
  const std::vector<json> a = testing::metrics_rows(d.path / "f32"), b = testing::metrics_rows(d.path / "bf16");
  auto first_loss = [](const std::vector<json>& rows) {
    for (const json& row : rows)
      if (row.contains("loss")) return row["loss"].get<double>();
    return -1.0;
  };
  const double first_f32 = first_loss(a), first_bf16 = first_loss(b);
  ASSERT_GT(first_f32, 0);
  EXPECT_NEAR(first_bf16, first_f32, 5e-3) << "the first step's loss";
  EXPECT_NE(first_bf16, first_f32) << "the bf16 run computed in f32";
  double acc = -1;
  for (const json& row : b)
    if (row.contains("val_accuracy")) acc = row["val_accuracy"];
  EXPECT_GE(acc, 0.95) << "the bf16 run did not learn the first word";
  for (const auto& [name, t] : models::load_model_file((d.path / "bf16" / "model.safetensors").string()).params)
    EXPECT_EQ(t.dtype(), DType::f32) << name;
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
  EXPECT_NE(error(cls, write("h.parquet", "text,label\n")).find("is neither .tsv"), std::string::npos);
  EXPECT_NE(error(cls, write("h.csv", "text,label\n")).find("holds no examples (its header line only)"),
            std::string::npos);
  EXPECT_NE(error(cls, write("h2.csv", "text,label\n\"a, b\",pos\nc\n")).find("line 3: 1 fields, but the header"),
            std::string::npos);
  EXPECT_NE(error(cls, write("h3.csv", "text,label\na\"b,pos\n")).find("line 2: not CSV"), std::string::npos);
  EXPECT_NE(
      error(cls, write("h4.csv", "sentence,label\n\"a\",pos\n"), {{"text", "review"}}).find("has no column \"review\""),
      std::string::npos);
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
}  // namespace qkv::train::text_classification_test
