// Fine-tuning extractive question answering (train/question_answering_task.h) and the new span head
// `qkv convert --head span` puts on an encoder's checkpoint (models/hf_convert.h).
//
// Against transformers (tests/golden/hf_qa_finetune.json, tests/golden/make_qa_finetune_golden.py): for
// each family's tiny random …ForQuestionAnswering, run_qa.py's windows (max_length 40, doc_stride 10: one
// context in many) and their start and end positions; the loss before any step, the gradients' L2 norm
// and the loss after one AdamW step; run_qa.py's answers read from the logits, SQuAD 1.1's way and 2.0's,
// and their exact match and F1. Then a new span head learns to answer, its file answers as `qkv answer`
// does, SQuAD's JSON reads as its JSONL does, and hostile data and configs are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/thread_budget.h"
#include "qkv/decode/question_answering.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/train/question_answering_task.h"
#include "testing.h"

namespace qkv::train::question_answering_test {  // (its own: the test files of a folder compile as one unit)
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::TempDir;

const fs::path kGolden = fs::path(QKV_GOLDEN_DIR);

TrainResult run(const json& cfg, const fs::path& out) {
  QuestionAnsweringTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.full_config = cfg, o.quiet = true;
  return run_training(task, task.train_config(), o);
}

void write_jsonl(const fs::path& path, const json& examples, size_t count) {
  std::ofstream out(path);
  for (size_t i = 0; i < count; ++i) out << examples[i].dump() << "\n";
}

TEST(QuestionAnswering, WindowsAndOneStepAreRunQasAndAdamW) {
  const FixedThreads fixed;
  const json golden = json::parse(io::read_file((kGolden / "hf_qa_finetune.json").string()));
  ASSERT_GE(golden["cases"].size(), 8u);
  const json& examples = golden["examples"];
  for (const json& c : golden["cases"]) {
    const std::string name = c["case"];
    SCOPED_TRACE(name);
    TempDir d("qa-golden");
    const std::string model = (d.path / "model.safetensors").string();
    models::convert_hf((kGolden / "hf" / c["folder"].get<std::string>()).string(), model);
    write_jsonl(d.path / "all.jsonl", examples, examples.size());
    write_jsonl(d.path / "answered.jsonl", examples, examples.size() - 1);  // (the last has no answer)
    const auto windows = static_cast<int64_t>(c["windows"].size());
    auto config = [&](const std::string& file, bool v2) {
      return json{{"task", "question_answering"},
                  {"init_from", model},
                  {"data",
                   {{"train", (d.path / file).string()},
                    {"val", (d.path / file).string()},
                    {"max_length", golden["max_length"]},
                    {"doc_stride", golden["doc_stride"]},
                    {"version_2_with_negative", v2}}},
                  {"model", testing::dropout_off(model)},
                  {"train", testing::exact_train_section(1, windows)}};
    };
    const json cfg = config("all.jsonl", true);
    {
      QuestionAnsweringTask task(cfg, "");
      const QaWindows& w = task.train_windows();
      ASSERT_EQ(w.size(), windows);
      for (int64_t i = 0; i < windows; ++i) {
        const json& g = c["windows"][static_cast<size_t>(i)];
        SCOPED_TRACE(i);
        EXPECT_EQ(w.example[static_cast<size_t>(i)], g["example"].get<int32_t>());
        EXPECT_EQ(w.encodings[static_cast<size_t>(i)].ids, g["input_ids"].get<std::vector<int32_t>>());
        EXPECT_EQ(w.start[static_cast<size_t>(i)], g["start_position"].get<int32_t>());
        EXPECT_EQ(w.end[static_cast<size_t>(i)], g["end_position"].get<int32_t>());
      }
      // run_qa.py's answers before any step, SQuAD 2.0's way, and their scores
      task.model().module().eval();
      const auto m = task.evaluate(0);
      ASSERT_EQ(m.size(), 3u);
      EXPECT_NEAR(m[0].second, c["loss"].get<double>(), 2e-6 + 1e-5 * c["loss"].get<double>());
      EXPECT_NEAR(m[1].second, c["metrics"]["v2"]["exact_match"].get<double>(), 1e-9);
      EXPECT_NEAR(m[2].second, c["metrics"]["v2"]["f1"].get<double>(), 1e-9);
      for (size_t k = 0; k < examples.size(); ++k)
        EXPECT_EQ(task.last_answers()[k], c["answers_v2"][examples[k]["id"].get<std::string>()].get<std::string>())
            << examples[k]["id"];
    }
    {
      // SQuAD 1.1's way (every example answered): the best span, never ""
      QuestionAnsweringTask task(config("answered.jsonl", false), "");
      task.model().module().eval();
      const auto m = task.evaluate(0);
      EXPECT_NEAR(m[1].second, c["metrics"]["v1"]["exact_match"].get<double>(), 1e-9);
      EXPECT_NEAR(m[2].second, c["metrics"]["v1"]["f1"].get<double>(), 1e-9);
      for (size_t k = 0; k + 1 < examples.size(); ++k)
        EXPECT_EQ(task.last_answers()[k], c["answers_v1"][examples[k]["id"].get<std::string>()].get<std::string>())
            << examples[k]["id"];
    }
    // one step on every window at once
    run(cfg, d.path / "run");
    std::vector<json> evals, steps;
    for (const json& r : testing::metrics_rows(d.path / "run")) (r.contains("val_loss") ? evals : steps).push_back(r);
    ASSERT_EQ(evals.size(), 2u);
    ASSERT_EQ(steps.size(), 1u);
    const double loss = c["loss"], norm = c["grad_norm"], after = c["loss_after_step"];
    EXPECT_NEAR(steps[0]["loss"].get<double>(), loss, 2e-6 + 1e-5 * loss);
    EXPECT_NEAR(steps[0]["grad_norm"].get<double>(), norm, 1e-4 * norm);
    EXPECT_NEAR(evals[1]["val_loss"].get<double>(), after, 1e-5 + 1e-4 * after);
  }
}

// Questions on made-up lines of Shakespeare's words: "who is king?" — the name after "king".
json king_example(int i) {
  static const std::vector<std::string> names = {"romeo", "juliet", "tybalt",   "mercutio", "benvolio", "richard",
                                                 "henry", "edward", "clarence", "hastings", "catesby",  "gaunt"};
  static const std::vector<std::string> words = {"good", "lord", "my",   "the",   "sweet", "night", "love",  "death",
                                                 "and",  "of",   "fair", "noble", "heart", "blood", "peace", "grace"};
  const std::string name = names[static_cast<size_t>(i * 7 + i / 12) % names.size()];
  std::string context;
  const int before = 2 + i % 9, after = 1 + (i * 5) % 7;
  for (int k = 0; k < before; ++k) context += words[static_cast<size_t>(i * 3 + k * 5) % words.size()] + " ";
  const auto start = static_cast<int64_t>(context.size()) + 5;  // (ASCII: bytes are characters)
  context += "king " + name;
  for (int k = 0; k < after; ++k) context += " " + words[static_cast<size_t>(i * 11 + k * 3) % words.size()];
  return {{"id", "k" + std::to_string(i)},
          {"question", "who is king?"},
          {"context", context},
          {"answers", {{"text", {name}}, {"answer_start", {start}}}}};
}

// `qkv convert --head span` on a BertForMaskedLM, fine-tuned 600 steps: exact match rises from ~0 to ≥ 90 %
// (100 under every oneDNN ISA, SSE4.1 to AVX-512 BF16; after 300 steps AVX2's was 90, at the edge), and
// the written file answers a new question as `qkv answer` reads it.
TEST(QuestionAnswering, ANewSpanHeadLearnsToAnswer) {
  TempDir d("qa-learns");
  const std::string model = (d.path / "qa.safetensors").string();
  models::HfConvertOptions o;
  o.head = "span";
  models::HfHeadReport report;
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model, o, &report);
  EXPECT_EQ(report.architecture, "BertForQuestionAnswering");
  EXPECT_EQ(report.initialized, (std::vector<std::string>{"classifier.bias", "classifier.weight"}));
  std::ofstream train(d.path / "train.jsonl"), val(d.path / "val.jsonl");
  for (int i = 0; i < 240; ++i) train << king_example(i).dump() << "\n";
  for (int i = 240; i < 280; ++i) val << king_example(i).dump() << "\n";
  train.close(), val.close();
  const json cfg = {{"task", "question_answering"},
                    {"init_from", model},
                    {"data",
                     {{"train", (d.path / "train.jsonl").string()},
                      {"val", (d.path / "val.jsonl").string()},
                      {"max_length", 32},
                      {"doc_stride", 8}}},
                    {"train",
                     {{"max_iters", 600},
                      {"batch_size", 16},
                      {"learning_rate", 1e-2},
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
    if (r.contains("val_exact_match")) evals.push_back(r);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_LT(evals[0]["val_exact_match"].get<double>(), 30.0) << evals[0].dump();
  EXPECT_GE(evals[1]["val_exact_match"].get<double>(), 90.0) << evals[1].dump();
  EXPECT_GE(evals[1]["val_f1"].get<double>(), evals[1]["val_exact_match"].get<double>());
  models::LoadedMaskedLanguageModel tuned =
      models::load_masked_language_model((d.path / "run" / "model.safetensors").string());
  const auto answers = decode::question_answering(*tuned.model, *tuned.tokenizer.hf(), {"who is king?"},
                                                  {"sweet peace and my lord the king henry of fair blood"});
  ASSERT_EQ(answers.size(), 1u);
  ASSERT_EQ(answers[0].size(), 1u);
  EXPECT_EQ(answers[0][0].answer, "henry");
}

// SQuAD's own JSON (v2.0: is_impossible) reads as the same examples as Hugging Face datasets' JSONL rows.
TEST(QuestionAnswering, SquadJsonReadsAsItsJsonl) {
  TempDir d("qa-squad-json");
  const json golden = json::parse(io::read_file((kGolden / "hf_qa_finetune.json").string()));
  const json& examples = golden["examples"];
  write_jsonl(d.path / "rows.jsonl", examples, examples.size());
  // the examples grouped by context into paragraphs, as SQuAD's files hold them
  json paragraphs = json::array();
  for (const json& e : examples) {
    json qa = {{"id", e["id"]}, {"question", e["question"]}, {"answers", json::array()}};
    for (size_t i = 0; i < e["answers"]["text"].size(); ++i)
      qa["answers"].push_back({{"text", e["answers"]["text"][i]}, {"answer_start", e["answers"]["answer_start"][i]}});
    qa["is_impossible"] = e["answers"]["text"].empty();
    if (paragraphs.empty() || paragraphs.back()["context"] != e["context"])
      paragraphs.push_back({{"context", e["context"]}, {"qas", json::array()}});
    paragraphs.back()["qas"].push_back(qa);
  }
  io::write_file_atomic(
      (d.path / "squad.json").string(),
      json{{"version", "v2.0"}, {"data", {{{"title", "Verona"}, {"paragraphs", paragraphs}}}}}.dump());
  const std::vector<QaExample> a = read_qa_examples((d.path / "rows.jsonl").string(), true),
                               b = read_qa_examples((d.path / "squad.json").string(), true);
  ASSERT_EQ(a.size(), examples.size());
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].question, b[i].question);
    EXPECT_EQ(a[i].context, b[i].context);
    EXPECT_EQ(a[i].answers, b[i].answers);
    EXPECT_EQ(a[i].answer_begin, b[i].answer_begin);
    EXPECT_EQ(a[i].answer_end, b[i].answer_end);
    if (!a[i].answers.empty()) {
      EXPECT_EQ(a[i].context.substr(a[i].answer_begin, a[i].answer_end - a[i].answer_begin), a[i].answers[0]);
    }
  }
  // the answer after "café" starts at character 41 and byte 42
  EXPECT_EQ(a[4].answer_begin, 42u);
  EXPECT_EQ(examples[4]["answers"]["answer_start"][0].get<int64_t>(), 41);
  // SQuAD 1.1's way, a question without an answer is refused by name
  EXPECT_NE(error_of([&] { read_qa_examples((d.path / "squad.json").string(), false); }).find("question 6 (id q6)"),
            std::string::npos);
}

TEST(QuestionAnswering, RefusesHostileDataAndConfigsByName) {
  TempDir d("qa-hostile");
  const std::string model = (d.path / "qa.safetensors").string();
  models::convert_hf((kGolden / "hf" / "qa-bert").string(), model);
  const json good = {{"id", "a"},
                     {"question", "who is king?"},
                     {"context", "the king henry"},
                     {"answers", {{"text", {"henry"}}, {"answer_start", {9}}}}};
  auto config = [&](const std::string& file) {
    return json{{"task", "question_answering"},
                {"init_from", model},
                {"data", {{"train", file}, {"val", file}, {"max_length", 32}, {"doc_stride", 8}}},
                {"train", testing::exact_train_section(1, 2)}};
  };
  int n = 0;
  // a file of these lines (the good example first): the error names the file and says what is wrong
  auto refused = [&](const std::vector<std::string>& lines, const std::string& ext = ".jsonl") {
    const fs::path p = d.path / ("case" + std::to_string(n++) + ext);
    std::ofstream out(p);
    for (const std::string& l : lines) out << l << "\n";
    out.close();
    return error_of([&] { QuestionAnsweringTask task(config(p.string()), ""); });
  };
  auto with = [&](const char* key, const json& value) {
    json e = good;
    if (value.is_null())
      e.erase(key);
    else
      e[key] = value;
    return e.dump();
  };
  struct Case {
    std::string error, want;
  };
  const std::vector<Case> cases = {
      {refused({good.dump(), "{not json"}), "line 2: not JSON"},
      {refused({good.dump(), "[1, 2]"}), "line 2: not an object"},
      {refused({good.dump(), with("context", nullptr)}), "line 2: no string \"context\""},
      {refused({good.dump(), with("question", 7)}), "line 2: no string \"question\""},
      {refused({good.dump(), with("question", "   ")}), "line 2: the question is empty"},
      {refused({good.dump(), with("context", "")}), "line 2: the context is empty"},
      {refused({good.dump(), with("answers", {{"text", {"henry"}}, {"answer_start", {99}}})}),
       "line 2: the answer \"henry\" does not stand at character 99"},
      {refused({good.dump(), with("answers", {{"text", {"king"}}, {"answer_start", {9}}})}),
       "does not stand at character 9"},
      {refused({good.dump(), with("answers", {{"text", {"henry"}}, {"answer_start", {-1}}})}),
       "answer_start -1 is not a character index"},
      {refused({good.dump(), with("answers", {{"text", {"henry"}}, {"answer_start", {9, 10}}})}),
       "lists \"text\" and \"answer_start\" of one length"},
      {refused({good.dump(), with("answers", {{"text", {7}}, {"answer_start", {9}}})}), "is not a string"},
      {refused({good.dump(), with("answers", "henry")}), "neither a list nor an object"},
      {refused({good.dump(), with("answers", {{"text", json::array()}, {"answer_start", json::array()}})}),
       "line 2: the question has no answer — set data.version_2_with_negative"},
      {refused({good.dump()}, ".txt"), "is neither .json"},
      {refused({"{\"data\": 3}"}, ".json"), "is not SQuAD's JSON"},
      {refused({"{\"data\": [{\"paragraphs\": [{\"qas\": []}]}]}"}, ".json"), "no string \"context\""},
      {refused({"{\"data\": [{\"paragraphs\": [{\"context\": \"x\"}]}]}"}, ".json"), "without a list \"qas\""},
      {refused({"{\"data\": []}"}, ".json"), "holds no questions"},
  };
  for (const Case& c : cases) {
    EXPECT_NE(c.error.find(c.want), std::string::npos) << c.error;
    EXPECT_NE(c.error.find("question_answering task"), std::string::npos) << c.error;
  }
  // configs: a stride of the window or more, a window past the positions, a classifier instead of a span head
  const fs::path ok = d.path / "ok.jsonl";
  write_jsonl(ok, json::array({good}), 1);
  json c = config(ok.string());
  c["data"]["doc_stride"] = 32;
  EXPECT_NE(error_of([&] { QuestionAnsweringTask t(c, ""); }).find("data.doc_stride 32 must be less than"),
            std::string::npos);
  c = config(ok.string());
  c["data"]["max_length"] = 4096;
  EXPECT_NE(error_of([&] { QuestionAnsweringTask t(c, ""); }).find("is more than the model's 64 positions"),
            std::string::npos);
  const std::string classifier = (d.path / "cls.safetensors").string();
  models::convert_hf((kGolden / "hf" / "bert-seqcls").string(), classifier);
  c = config(ok.string());
  c["init_from"] = classifier;
  const std::string e = error_of([&] { QuestionAnsweringTask t(c, ""); });
  EXPECT_NE(e.find("holds a sequence classifier, not a question-answering head"), std::string::npos) << e;
  EXPECT_NE(e.find("--head span -o FILE"), std::string::npos) << e;
  // a span head takes no labels
  models::HfConvertOptions o;
  o.head = "span", o.labels = {"a"};
  EXPECT_NE(error_of([&] {
              models::convert_hf((kGolden / "hf" / "bert-uncased").string(), classifier, o);
            }).find("a new span head (question answering) takes no labels"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::train::question_answering_test
