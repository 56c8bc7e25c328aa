// Fine-tuning multiple choice (train/multiple_choice_task.h), the …ForMultipleChoice converters
// (models/hf/multiple_choice.cpp), the new choice head `qkv convert --head choice` puts on an encoder,
// and the scores decode/multiple_choice.h reads.
//
// Against transformers (tests/golden/hf_mc.json, tests/golden/make_mc_golden.py): for each family's tiny
// random …ForMultipleChoice, run_swag.py's pairs (one cut by longest_first, one header ""), the scores
// [B, C], the loss before any step, the gradients' L2 norm and the loss after one AdamW step. Then a new
// choice head learns, the endings read from one list column as from SWAG's columns, and hostile data and
// configs are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/core/thread_budget.h"
#include "qkv/decode/multiple_choice.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/train/multiple_choice_task.h"
#include "testing.h"

namespace qkv::train::multiple_choice_test {  // (its own: the test files of a folder compile as one unit)
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::TempDir;

const fs::path kGolden = fs::path(QKV_GOLDEN_DIR);

TrainResult run(const json& cfg, const fs::path& out) {
  MultipleChoiceTask task(cfg, "");
  TrainerOptions o;
  o.out_dir = out.string(), o.full_config = cfg, o.quiet = true;
  return run_training(task, task.train_config(), o);
}

void write_jsonl(const fs::path& path, const json& rows) {
  std::ofstream out(path);
  for (const json& r : rows) out << r.dump() << "\n";
}

TEST(MultipleChoice, PairsScoresAndOneStepAreRunSwagsAndAdamW) {
  const FixedThreads fixed;
  const json golden = json::parse(io::read_file((kGolden / "hf_mc.json").string()));
  ASSERT_GE(golden["cases"].size(), 9u);
  const json& examples = golden["examples"];
  const auto B = static_cast<int64_t>(examples.size());
  for (const json& c : golden["cases"]) {
    SCOPED_TRACE(c["case"].get<std::string>());
    TempDir d("mc-golden");
    const std::string model = (d.path / "model.safetensors").string();
    const json meta = models::convert_hf((kGolden / "hf" / c["folder"].get<std::string>()).string(), model);
    EXPECT_EQ(meta["converted_from"]["architecture"], c["architecture"]);
    write_jsonl(d.path / "swag.jsonl", examples);
    const json cfg = {{"task", "multiple_choice"},
                      {"init_from", model},
                      {"data",
                       {{"train", (d.path / "swag.jsonl").string()},
                        {"val", (d.path / "swag.jsonl").string()},
                        {"max_length", golden["max_length"]}}},
                      {"model", testing::dropout_off(model)},
                      {"train", testing::exact_train_section(1, B)}};
    // the same examples as SWAG's own CSV (run_swag.py's --train_file train.csv): every field quoted, the
    // columns in another order, one more (video-id), labels as digits
    {
      std::ofstream csv(d.path / "swag.csv");
      csv << "video-id,label,ending3,ending2,ending1,ending0,sent2,sent1\n";
      auto quoted = [](const std::string& f) {
        std::string q = "\"";
        for (char ch : f) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
        return q + "\"";
      };
      for (const json& x : examples) {
        csv << "anetv_1," << x["label"].get<int>();
        for (const char* k : {"ending3", "ending2", "ending1", "ending0", "sent2", "sent1"})
          csv << "," << quoted(x[k].get<std::string>());
        csv << "\n";
      }
    }
    {
      json csv_cfg = cfg;
      csv_cfg["data"]["train"] = csv_cfg["data"]["val"] = (d.path / "swag.csv").string();
      MultipleChoiceTask from_csv(csv_cfg, ""), task(cfg, "");
      ASSERT_EQ(from_csv.train_set().pairs.size(), task.train_set().pairs.size());
      for (size_t i = 0; i < task.train_set().pairs.size(); ++i)
        EXPECT_EQ(from_csv.train_set().pairs[i].ids, task.train_set().pairs[i].ids) << i;
      EXPECT_EQ(from_csv.train_set().labels, task.train_set().labels);
    }
    {
      MultipleChoiceTask task(cfg, "");
      const ChoiceSet& s = task.train_set();
      ASSERT_EQ(s.size(), B);
      ASSERT_EQ(s.choices, 4);
      for (int64_t n = 0; n < B; ++n)
        for (int64_t k = 0; k < 4; ++k)
          EXPECT_EQ(s.pairs[static_cast<size_t>(n * 4 + k)].ids,
                    c["input_ids"][static_cast<size_t>(n)][static_cast<size_t>(k)].get<std::vector<int32_t>>())
              << n << "/" << k;
      task.model().module().eval();
      const auto m = task.evaluate(0);
      EXPECT_NEAR(m[0].second, c["loss"].get<double>(), 2e-6 + 1e-5 * c["loss"].get<double>());
      EXPECT_NEAR(m[1].second, c["accuracy"].get<double>(), 1e-12);
    }
    // the scores as decode::multiple_choice reads them: softmax of the golden logits
    {
      const models::LoadedMaskedLanguageModel loaded = models::load_masked_language_model(model);
      const json& x = examples[0];
      const std::vector<decode::ChoiceScore> got = decode::multiple_choice(
          *loaded.model, *loaded.tokenizer.hf(), x["sent1"], {x["ending0"], x["ending1"], x["ending2"], x["ending3"]},
          x["sent2"], golden["max_length"]);
      const std::vector<double> z = c["logits"][0].get<std::vector<double>>();
      double sum = 0;
      for (double v : z) sum += std::exp(v);
      ASSERT_EQ(got.size(), 4u);
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_NEAR(got[k].logit, z[k], 1e-5 + 1e-5 * std::abs(z[k]));
        EXPECT_NEAR(got[k].score, std::exp(z[k]) / sum, 1e-6);
      }
    }
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

// A story and its endings: the right one names the king the context names ("the king is X" … "X rules").
json king_example(int i) {
  static const std::vector<std::string> names = {"romeo", "juliet", "richard", "henry", "edward", "gaunt"};
  static const std::vector<std::string> words = {"good", "my", "lord", "sweet", "night", "the", "fair", "noble"};
  const std::string king = names[static_cast<size_t>(i * 5 + i / 6) % names.size()];
  std::string context = words[static_cast<size_t>(i) % words.size()] + " " +
                        words[static_cast<size_t>(i * 3 + 1) % words.size()] + " the king is " + king;
  const int label = i % 4;
  json row = {{"sent1", context}, {"sent2", "now"}, {"label", label}};
  for (int k = 0; k < 4; ++k) {
    const std::string who = k == label ? king : names[static_cast<size_t>(i * 5 + i / 6 + k + 1) % names.size()];
    row["ending" + std::to_string(k)] = who == king && k != label ? "nobody rules" : who + " rules";
  }
  return row;
}

// `qkv convert --head choice` on a BertForMaskedLM, trained 300 steps without dropout: accuracy from chance
// to ≥ 90 % (100 %; with the file's dropout 0.1 this 48-wide BERT stays at chance for 600 steps, in
// transformers as here — BertForMultipleChoice from the same folder, AdamW, lr 3e-3), and
// the file picks the ending as decode::multiple_choice reads it. The endings read from a list column
// ("choices") make the same examples as SWAG's four columns.
TEST(MultipleChoice, ANewChoiceHeadLearnsToChoose) {
  TempDir d("mc-learns");
  const std::string model = (d.path / "mc.safetensors").string();
  models::HfConvertOptions o;
  o.head = "choice";
  models::HfHeadReport report;
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model, o, &report);
  EXPECT_EQ(report.architecture, "BertForMultipleChoice");
  EXPECT_EQ(report.initialized,
            (std::vector<std::string>{"classifier.bias", "classifier.weight", "pooler.bias", "pooler.weight"}));
  json train = json::array(), val = json::array(), listed = json::array();
  for (int i = 0; i < 200; ++i) train.push_back(king_example(i));
  for (int i = 200; i < 240; ++i) val.push_back(king_example(i));
  for (const json& r : val) {
    json l = {{"sent1", r["sent1"]}, {"sent2", r["sent2"]}, {"label", r["label"]}, {"choices", json::array()}};
    for (int k = 0; k < 4; ++k) l["choices"].push_back(r["ending" + std::to_string(k)]);
    listed.push_back(l);
  }
  write_jsonl(d.path / "train.jsonl", train);
  write_jsonl(d.path / "val.jsonl", val);
  write_jsonl(d.path / "listed.jsonl", listed);
  const json cfg = {
      {"task", "multiple_choice"},
      {"init_from", model},
      {"data",
       {{"train", (d.path / "train.jsonl").string()}, {"val", (d.path / "val.jsonl").string()}, {"max_length", 32}}},
      {"model", {{"dropout", 0.0}}},
      {"train",
       {{"max_iters", 300},
        {"batch_size", 8},
        {"learning_rate", 3e-3},
        {"min_lr", 3e-4},
        {"warmup_iters", 5},
        {"lr_decay_iters", 300},
        {"eval_interval", 300},
        {"log_interval", 10},
        {"checkpoint_interval", 0},
        {"weight_decay", 0.01}}}};
  {
    json l = cfg;
    l["data"]["val"] = (d.path / "listed.jsonl").string(), l["data"]["endings"] = "choices";
    l["data"]["train"] = l["data"]["val"];
    const MultipleChoiceTask a(cfg, ""), b(l, "");
    ASSERT_EQ(a.val_set().size(), b.val_set().size());
    for (size_t i = 0; i < a.val_set().pairs.size(); ++i) EXPECT_EQ(a.val_set().pairs[i].ids, b.val_set().pairs[i].ids);
    EXPECT_EQ(a.val_set().labels, b.val_set().labels);
  }
  run(cfg, d.path / "run");
  std::vector<json> evals;
  for (const json& r : testing::metrics_rows(d.path / "run"))
    if (r.contains("val_accuracy")) evals.push_back(r);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_LT(evals[0]["val_accuracy"].get<double>(), 0.5) << evals[0].dump();
  EXPECT_GE(evals[1]["val_accuracy"].get<double>(), 0.9) << evals[1].dump();
  const models::LoadedMaskedLanguageModel tuned =
      models::load_masked_language_model((d.path / "run" / "model.safetensors").string());
  const auto got = decode::multiple_choice(*tuned.model, *tuned.tokenizer.hf(), "sweet night the king is henry",
                                           {"romeo rules", "henry rules", "gaunt rules"}, "now");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_GT(got[1].score, std::max(got[0].score, got[2].score));
}

TEST(MultipleChoice, RefusesHostileDataAndConfigsByName) {
  TempDir d("mc-hostile");
  const std::string model = (d.path / "mc.safetensors").string();
  models::HfConvertOptions o;
  o.head = "choice";
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), model, o);
  const json good = king_example(1);
  auto config = [&](const json& data) {
    return json{{"task", "multiple_choice"},
                {"init_from", model},
                {"data", data},
                {"train", testing::exact_train_section(1, 2)}};
  };
  int n = 0;
  auto file = [&](const std::vector<std::string>& lines, const std::string& ext = ".jsonl") {
    const fs::path p = d.path / ("case" + std::to_string(n++) + ext);
    std::ofstream out(p);
    for (const std::string& l : lines) out << l << "\n";
    return p.string();
  };
  auto with = [&](const char* key, const json& value) {
    json e = good;
    if (value.is_null())
      e.erase(key);
    else
      e[key] = value;
    return e.dump();
  };
  auto error = [&](const json& data) { return error_of([&] { MultipleChoiceTask task(config(data), ""); }); };
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                             : ::testing::AssertionFailure() << "'" << e << "' lacks '" << part << "'";
  };
  const std::string ok = file({good.dump(), good.dump()});
  auto bad = [&](const std::string& line) { return error({{"train", file({good.dump(), line})}, {"val", ok}}); };
  EXPECT_TRUE(has(bad("{oops"), "line 2: not JSON"));
  EXPECT_TRUE(has(bad("[1]"), "line 2: not an object"));
  EXPECT_TRUE(has(bad(with("sent1", nullptr)), "line 2: no string \"sent1\""));
  EXPECT_TRUE(has(bad(with("ending3", 5)), "line 2: no string \"ending3\""));
  EXPECT_TRUE(has(bad(with("label", 4)), "line 2: \"label\" must be the right ending's index, 0 … 3, got 4"));
  EXPECT_TRUE(has(bad(with("label", -1)), "got -1"));
  EXPECT_TRUE(has(bad(with("label", "1")), "got \"1\""));
  EXPECT_TRUE(has(bad(with("label", nullptr)), "got none"));
  EXPECT_TRUE(has(error({{"train", file({good.dump()}, ".parquet")}, {"val", ok}}), "is neither .jsonl"));
  // CSV (run_swag.py's --train_file x.csv): a label of digits, the file's own errors by line
  const std::string header = "sent1,sent2,ending0,ending1,ending2,ending3,label";
  EXPECT_TRUE(has(error({{"train", file({header, "a,b,c,d,e,f,x"}, ".csv")}, {"val", ok}}), "got \"x\""));
  EXPECT_TRUE(has(error({{"train", file({header, "a,b,c,d,e,f,4"}, ".csv")}, {"val", ok}}), "got \"4\""));
  EXPECT_TRUE(has(error({{"train", file({header, "a,b,c,d,e,f,-1"}, ".csv")}, {"val", ok}}), "got \"-1\""));
  EXPECT_TRUE(has(error({{"train", file({header, "a,b,c,d,e,1"}, ".csv")}, {"val", ok}}),
                  "line 2: 6 fields, but the header names 7"));
  EXPECT_TRUE(has(error({{"train", file({header, "\"a,b,c,d,e,f,1"}, ".csv")}, {"val", ok}}), "not CSV"));
  EXPECT_TRUE(has(error({{"train", file({"sent1,label", "a,1"}, ".csv")}, {"val", ok}}), "no string \"sent2\""));
  EXPECT_TRUE(has(error({{"train", file({})}, {"val", ok}}), "holds no examples"));
  EXPECT_TRUE(has(error({{"train", ok}, {"val", ok}, {"endings", json::array()}}), "data.endings must be"));
  EXPECT_TRUE(has(error({{"train", ok}, {"val", ok}, {"endings", {"ending0"}}}), "1 endings (2 … 1,024"));
  EXPECT_TRUE(has(error({{"train", ok}, {"val", ok}, {"endings", {"ending0", "ending1"}}, {"max_length", 41}}),
                  "data.max_length 41 must be 4 … the model's 40 positions"));
  EXPECT_TRUE(has(error({{"train", ok}, {"val", ok}, {"endings", "choices"}}), "no list \"choices\" of endings"));
  EXPECT_TRUE(has(error({{"train", ok}, {"val_fraction", 0.1}}), "leaves 0 to validate on"));
  const std::string three =
      file({json{{"sent1", "a"}, {"sent2", "b"}, {"ending0", "x"}, {"ending1", "y"}, {"ending2", "z"}, {"label", 0}}
                .dump()});
  EXPECT_TRUE(has(error({{"train", ok}, {"val", three}}), "no string \"ending3\""));
  const std::string four = file(
                        {json{{"sent1", "a"}, {"sent2", "b"}, {"choices", {"w", "x", "y", "z"}}, {"label", 3}}.dump()}),
                    two = file({json{{"sent1", "a"}, {"sent2", "b"}, {"choices", {"w", "x"}}, {"label", 1}}.dump()});
  EXPECT_TRUE(has(error({{"train", four}, {"val", two}, {"endings", "choices"}}),
                  "data.val's examples have 2 endings, data.train's 4"));
  EXPECT_TRUE(has(
      error({{"train", file({json{{"sent1", "a"}, {"sent2", "b"}, {"choices", {"w", "x"}}, {"label", 1}}.dump(),
                             json{{"sent1", "a"}, {"sent2", "b"}, {"choices", {"w", "x", "y"}}, {"label", 1}}.dump()})},
             {"val", two},
             {"endings", "choices"}}),
      "line 2: 3 endings where the lines before have 2"));
  // a model file without the choice head
  const std::string mlm = (d.path / "mlm.safetensors").string();
  models::convert_hf((kGolden / "hf" / "bert-uncased").string(), mlm);
  json cfg = config({{"train", ok}, {"val", ok}});
  cfg["init_from"] = mlm;
  EXPECT_TRUE(has(error_of([&] { MultipleChoiceTask task(cfg, ""); }), "--head choice -o FILE"));
  models::HfConvertOptions l = o;
  l.labels = {"a"};
  EXPECT_TRUE(has(error_of([&] { models::convert_hf((kGolden / "hf" / "bert-uncased").string(), mlm + ".x", l); }),
                  "a new choice head (multiple choice) takes no labels"));
}

}  // namespace
}  // namespace qkv::train::multiple_choice_test
