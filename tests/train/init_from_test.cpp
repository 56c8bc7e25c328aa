// Fine-tuning converted Hugging Face models (train/init_from.h): the golden tiny GPT-2, Llama and
// Marian folders (tests/golden/hf/) converted, then trained a few steps with "init_from". The run
// starts from the file's weights (its first loss is the loss the imported model computes on that
// batch), learns, resumes exactly, and writes files that keep the tokenizer, the stop ids and
// "converted_from". A missing or corrupt file, a model of the wrong kind, a "model" field that
// differs and a tokenizer section are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/autograd/grad_mode.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/translator.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/text/batching.h"
#include "qkv/train/lm_task.h"
#include "qkv/train/translation_task.h"
#include "qkv/core/thread_budget.h"
#include "testing.h"

namespace qkv::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::logged_losses;
using testing::TempDir;

const fs::path kGolden = fs::path(QKV_GOLDEN_DIR) / "hf";

// The golden folder `name` converted into dir/<name>.safetensors.
std::string converted(const std::string& name, const fs::path& dir) {
  const std::string out = (dir / (name + ".safetensors")).string();
  models::convert_hf((kGolden / name).string(), out);
  return out;
}

// 12 KB of Shakespeare (what the golden tokenizers were trained on).
std::string shakespeare(const fs::path& dir) {
  const std::string text = io::read_file((fs::path(QKV_SOURCE_DIR) / "data" / "tinyshakespeare" / "input.txt").string());
  const fs::path p = dir / "text.txt";
  std::ofstream(p) << text.substr(0, 12000);
  return p.string();
}

json lm_config(const std::string& model, const std::string& text, int64_t max_iters) {
  return {{"task", "lm"},
          {"init_from", model},
          {"data", {{"path", text}, {"block_size", 32}}},
          {"model", {{"dropout", 0.0}}},  // (GPT-2's 0.1 off: step 0's loss is then the imported model's)
          {"train",
           {{"max_iters", max_iters}, {"batch_size", 8}, {"learning_rate", 3e-3}, {"min_lr", 3e-4}, {"warmup_iters", 2},
            {"lr_decay_iters", 60}, {"eval_interval", 0}, {"log_interval", 1}, {"checkpoint_interval", 0},
            {"weight_decay", 0.0}}}};
}

TrainResult train_lm(const json& cfg, const fs::path& out, bool resume = false) {
  LMTask task(cfg, "", out.string(), resume);
  TrainerOptions o;
  o.out_dir = out.string(), o.resume = resume, o.full_config = cfg, o.quiet = true;
  return run_training(task, task.train_config(), o);
}

// The imported model's own loss on the first training batch, and on training, its first logged loss.
void fine_tune_language_model(const std::string& name) {
  SCOPED_TRACE(name);
  TempDir d("init-from");
  const std::string model = converted(name, d.path), text = shakespeare(d.path);
  const json cfg = lm_config(model, text, 40);

  // (a) step 0 is the imported model: the same batch (lm_batch of the task's seed, counter 0) through
  // the converted file loaded for inference gives the loss the run logs first.
  models::LoadedLanguageModel imported = models::load_language_model(model);
  double before = 0;
  {
    LMTask task(cfg, "", (d.path / "probe").string());
    EXPECT_EQ(task.data().train.size() + task.data().val.size() > 1000, true);
    auto [x, y] = lm_batch(task.data().train, 8, 32, task.train_config().seed, 0);
    NoGradGuard no_grad;
    before = imported.model->loss(x, y).item();
  }
  // (the same architecture freshly initialised computes another loss there: the golden models'
  // random weights are not qkv's initialisation)
  double fresh = 0;
  {
    Generator gen(7);
    auto m = models::build_language_model(imported.meta["model_type"].get<std::string>(), imported.meta["model"], &gen);
    LMTask task(cfg, "", (d.path / "probe").string());
    auto [x, y] = lm_batch(task.data().train, 8, 32, task.train_config().seed, 0);
    NoGradGuard no_grad;
    m->module().eval();
    fresh = m->loss(x, y).item();
  }
  EXPECT_GT(std::abs(fresh - before), 0.1) << "fresh " << fresh << ", imported " << before;
  train_lm(cfg, d.path / "run");
  const std::vector<double> losses = logged_losses(d.path / "run");
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses[0], before, 1e-5 * before) << "the first step did not start from the file's weights";
  // (b) it learns: the last steps' mean loss well under the first steps'
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) first += losses[i] / 5, last += losses[losses.size() - 1 - i] / 5;
  EXPECT_LT(last, first - 0.3) << "first " << first << ", last " << last;

  // (c) the trained file is the imported one's kind: its tokenizer, stop ids and provenance kept
  models::LoadedLanguageModel tuned = models::load_language_model((d.path / "run" / "model.safetensors").string());
  EXPECT_EQ(tuned.meta["model_type"], imported.meta["model_type"]);
  EXPECT_EQ(tuned.meta["model"]["dropout"], 0.0);
  EXPECT_EQ(tuned.meta["tokenizer"], imported.meta["tokenizer"]);
  EXPECT_EQ(tuned.tokenizer.type(), "hf");
  EXPECT_EQ(tuned.stop_ids, imported.stop_ids);
  EXPECT_EQ(tuned.meta["converted_from"], imported.meta["converted_from"]);
  EXPECT_EQ(tuned.meta["init_from"], model);
  const std::vector<int32_t> prompt = tuned.tokenizer.encode("ROMEO:");
  EXPECT_EQ(prompt, imported.tokenizer.encode("ROMEO:"));
  decode::GenerateOptions g;
  g.max_new_tokens = 12;
  g.sampling.temperature = 0;
  g.stop_ids = tuned.stop_ids;
  const std::vector<int32_t> out = decode::generate(*tuned.model, prompt, g);
  EXPECT_FALSE(out.empty());
  EXPECT_NO_THROW(tuned.tokenizer.decode(out));
  // the weights moved
  models::ModelFile a = models::load_model_file(model), b = models::load_model_file((d.path / "run" / "model.safetensors").string());
  int changed = 0;
  for (auto& [n, t] : a.params) changed += t.to_vector() != b.params.at(n).to_vector();
  EXPECT_EQ(changed, static_cast<int>(a.params.size()));
}

TEST(InitFrom, FineTunesAConvertedGpt2) { fine_tune_language_model("gpt2"); }
TEST(InitFrom, FineTunesAConvertedLlama) { fine_tune_language_model("llama-gqa"); }

// --resume continues a fine-tuning run as if it had not stopped (dropout on: GPT-2's own 0.1).
TEST(InitFrom, ResumeReproducesTheUninterruptedRun) {
  const FixedThreads fixed;  // the bits of one thread count (core/thread_budget.h), whatever the machine does
  TempDir d("init-from-resume");
  json full = lm_config(converted("gpt2", d.path), shakespeare(d.path), 16);
  full.erase("model");
  train_lm(full, d.path / "straight");
  json part = full;
  part["train"]["max_iters"] = 7;
  train_lm(part, d.path / "resumed");
  train_lm(full, d.path / "resumed", true);
  const std::vector<double> a = logged_losses(d.path / "straight"), b = logged_losses(d.path / "resumed");
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 16u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
}

// A converted OPUS-MT model fine-tuned on a few pairs: the first evaluation (before any step) is the
// imported model's dev loss, the dev loss falls, and the trained file translates with the Marian
// vocabulary it kept.
TEST(InitFrom, FineTunesAConvertedMarianTranslator) {
  TempDir d("init-from-marian");
  const std::string model = converted("marian", d.path);
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"I like tea.", "J'aime le thé."},       {"The cat sleeps.", "Le chat dort."},
      {"I am tired.", "Je suis fatigué."},     {"Where is the station?", "Où est la gare ?"},
      {"We are here.", "Nous sommes ici."},    {"He reads a book.", "Il lit un livre."},
      {"It is cold.", "Il fait froid."},       {"Thank you very much.", "Merci beaucoup."}};
  std::string tsv;
  for (auto& [s, t] : pairs) tsv += s + "\t" + t + "\n";
  std::ofstream(d.path / "pairs.tsv") << tsv;
  const json cfg = {{"task", "translation"},
                    {"init_from", model},
                    {"data", {{"train", {{"tsv", (d.path / "pairs.tsv").string()}}},
                              {"dev", {{"tsv", (d.path / "pairs.tsv").string()}}}}},
                    {"train",
                     {{"max_iters", 30}, {"batch_size", 400}, {"learning_rate", 2e-3}, {"schedule", "constant"},
                      {"warmup_iters", 1}, {"weight_decay", 0.0}, {"eval_interval", 30}, {"log_interval", 1},
                      {"checkpoint_interval", 0}}},
                    {"eval", {{"bleu_sentences", 4}}}};

  // The imported model's token-weighted dev loss, pair by pair (sources by source.spm, targets by
  // target.spm, as MarianTokenizer's text / text_target).
  models::LoadedSeq2Seq imported = models::load_seq2seq(model);
  const models::SpecialTokens ids = imported.model->special_tokens();
  double sum = 0;
  int64_t count = 0;
  {
    NoGradGuard no_grad;
    for (auto& [s, t] : pairs) {
      text::EncodedPair e;
      for (int id : imported.tokenizer->encode(s)) e.src.push_back(id);
      e.src.push_back(ids.eos);
      e.tgt.push_back(ids.bos);
      for (int id : imported.tokenizer->encode_target(t)) e.tgt.push_back(id);
      e.tgt.push_back(ids.eos);
      text::Batch b = text::make_batch({e}, {0}, ids.pad);
      sum += imported.model->loss(b.src, b.tgt_in, b.tgt_out).item() * static_cast<double>(b.tgt_tokens);
      count += b.tgt_tokens;
    }
  }
  const double before = sum / static_cast<double>(count);

  std::vector<double> val;
  {
    TranslationTask task(cfg, "", (d.path / "run").string(), false, false);
    TrainerOptions o;
    o.out_dir = (d.path / "run").string(), o.full_config = cfg, o.quiet = true;
    o.on_metrics = [&](const json& row) {
      if (row.contains("val_loss")) val.push_back(row["val_loss"].get<double>());
      return true;
    };
    run_training(task, task.train_config(), o);
  }
  ASSERT_EQ(val.size(), 2u);
  EXPECT_NEAR(val[0], before, 1e-5 * before) << "step 0 is not the imported model";
  EXPECT_LT(val[1], val[0] - 0.5) << "the dev loss did not fall on the training pairs";
  EXPECT_FALSE(fs::exists(d.path / "run" / "spm.model")) << "no tokenizer is trained";

  models::LoadedSeq2Seq tuned = models::load_seq2seq((d.path / "run" / "model.safetensors").string());
  EXPECT_TRUE(tuned.tokenizer->is_marian());
  EXPECT_EQ(tuned.meta["tokenizer"], imported.meta["tokenizer"]);
  EXPECT_EQ(tuned.meta["converted_from"], imported.meta["converted_from"]);
  EXPECT_EQ(tuned.model->special_tokens().bos, imported.model->special_tokens().bos);
  decode::TranslateOptions to;
  to.beam_size = 2;
  const std::vector<std::string> out = decode::Translator(*tuned.model, *tuned.tokenizer).translate({"I like tea."}, to);
  ASSERT_EQ(out.size(), 1u);
}

// A model qkv trained itself (a character GPT) continues from where it stopped: its first step's
// loss is the loss its file computes, and its characters read the new text.
TEST(InitFrom, ContinuesAModelQkvTrained) {
  TempDir d("init-from-qkv");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "abcdefgh\n";
  std::ofstream(d.path / "text.txt") << text;
  const json first = {{"task", "lm"},
                      {"data", {{"path", (d.path / "text.txt").string()}}},
                      {"model", {{"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 16}, {"dropout", 0.0}}},
                      {"train",
                       {{"max_iters", 10}, {"batch_size", 4}, {"learning_rate", 1e-2}, {"eval_interval", 0},
                        {"log_interval", 1}, {"checkpoint_interval", 0}}}};
  train_lm(first, d.path / "a");
  const std::string model = (d.path / "a" / "model.safetensors").string();
  json next = first;
  next.erase("model");
  next["data"].erase("tokenizer");
  next["init_from"] = model;
  next["train"]["seed"] = 7;
  models::LoadedLanguageModel a = models::load_language_model(model);
  double before = 0;
  {
    LMTask task(next, "", (d.path / "probe").string());
    auto [x, y] = lm_batch(task.data().train, 4, 16, 7, 0);
    NoGradGuard no_grad;
    before = a.model->loss(x, y).item();
  }
  train_lm(next, d.path / "b");
  const std::vector<double> losses = logged_losses(d.path / "b");
  ASSERT_EQ(losses.size(), 10u);
  EXPECT_NEAR(losses[0], before, 1e-5 * before);
  models::LoadedLanguageModel b = models::load_language_model((d.path / "b" / "model.safetensors").string());
  EXPECT_EQ(b.tokenizer.type(), "char");
  EXPECT_EQ(b.meta["tokenizer"], a.meta["tokenizer"]);
  EXPECT_FALSE(b.meta.contains("converted_from"));
  EXPECT_EQ(b.meta["init_from"], model);
}

TEST(InitFrom, HostileFilesAndConfigs) {
  TempDir d("init-from-hostile");
  const std::string text = shakespeare(d.path), gpt = converted("gpt2", d.path), marian = converted("marian", d.path);
  auto error = [&](json lc) { return testing::error_of([&] { LMTask t(lc, "", (d.path / "out").string()); }); };
  json cfg = lm_config(gpt, text, 2);

  json c = cfg;
  c["init_from"] = (d.path / "nothing.safetensors").string();
  std::string e = error(c);
  EXPECT_NE(e.find("init_from '" + (d.path / "nothing.safetensors").string() + "'"), std::string::npos) << e;

  std::ofstream(d.path / "junk.safetensors") << "not a safetensors file at all";
  c["init_from"] = (d.path / "junk.safetensors").string();
  e = error(c);
  EXPECT_NE(e.find("junk.safetensors"), std::string::npos) << e;

  {  // a file cut short: its header holds, its tensors do not
    const std::string bytes = io::read_file(gpt);
    std::ofstream(d.path / "cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() - 1000);
  }
  c["init_from"] = (d.path / "cut.safetensors").string();
  e = error(c);
  EXPECT_NE(e.find("init_from"), std::string::npos) << e;
  EXPECT_NE(e.find("cut.safetensors"), std::string::npos) << e;

  c["init_from"] = marian;  // a translator in an LM task
  e = error(c);
  EXPECT_NE(e.find(marian), std::string::npos) << e;
  EXPECT_NE(e.find("sequence-to-sequence"), std::string::npos) << e;

  c = cfg;
  c["model"] = {{"n_layer", 3}};
  e = error(c);
  EXPECT_NE(e.find("model.n_layer 3 differs from 2"), std::string::npos) << e;
  c["model"] = {{"type", "llama"}};
  e = error(c);
  EXPECT_NE(e.find("model.type \"llama\" differs"), std::string::npos) << e;
  c["model"] = {{"n_embd", 48}, {"no_such_field", 1}};
  e = error(c);
  EXPECT_NE(e.find("model.no_such_field is not a hyper-parameter"), std::string::npos) << e;

  c = cfg;
  c["data"]["tokenizer"] = "char";
  e = error(c);
  EXPECT_NE(e.find("data.tokenizer"), std::string::npos) << e;

  c = cfg;
  c.erase("model");
  c["data"]["block_size"] = 1000;  // past GPT-2's 96 positions
  e = error(c);
  EXPECT_NE(e.find("data.block_size 1000"), std::string::npos) << e;

  // the translation task: an LM file, and a tokenizer section
  testing::tiny_translation_config(d.path, 2);
  json t = {{"task", "translation"},
            {"init_from", gpt},
            {"data", {{"train", {{"tsv", (d.path / "pairs.tsv").string()}}}}},
            {"train", {{"max_iters", 2}}}};
  auto terror = [&](json tc) {
    return testing::error_of([&] { TranslationTask x(tc, "", (d.path / "tout").string(), false, false); });
  };
  e = terror(t);
  EXPECT_NE(e.find(gpt), std::string::npos) << e;
  EXPECT_NE(e.find("language"), std::string::npos) << e;
  t["init_from"] = marian;
  t["tokenizer"] = {{"vocab_size", 100}};
  e = terror(t);
  EXPECT_NE(e.find("\"tokenizer\" would train a new SentencePiece model"), std::string::npos) << e;
}

}  // namespace
}  // namespace qkv::train
