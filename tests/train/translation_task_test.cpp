// The translation task end to end on a tiny synthetic corpus: SentencePiece trained by qkv, token
// batches, a training run that writes its files, a model file that carries its tokenizer and
// translates, exact resume, cached = uncached translation, ensembles, and clear errors for bad input.
#include <gtest/gtest.h>

#include <functional>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/decode/translator.h"
#include "qkv/io/base64.h"
#include "qkv/io/file.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/train/translation_task.h"
#include "testing.h"

namespace qkv::train {
namespace {

namespace fs = std::filesystem;
using testing::logged_losses;
using testing::TempDir;
using nlohmann::json;

json tiny_translation(const fs::path& dir, int64_t max_iters) {
  return testing::tiny_translation_config(dir, max_iters);
}

TrainResult train_translation(const json& cfg, const fs::path& out, bool resume, Device device = Device::cpu()) {
  TranslationTask task(cfg, "", out.string(), resume, false);
  TrainerOptions o;
  o.out_dir = out.string(), o.resume = resume, o.full_config = cfg, o.quiet = true, o.device = device;
  return run_training(task, task.train_config(), o);
}

// The Transformer trains on a GPU along the CPU's loss curve (TF32 products: within a few
// hundredths), evaluates (dev loss and BLEU through beam search on the GPU), and its model translates
// on the GPU as on the CPU, greedy and beam 4, with the KV cache (static decoding's CUDA graphs, a
// GPU's default, and the usual cache: QKV_CUDA_GRAPHS=0) and without.
TEST(TranslationTask, TrainsAndTranslatesOnAGpuAsOnTheCpu) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  TempDir d("translation-gpu");
  const json cfg = tiny_translation(d.path, 30);
  train_translation(cfg, d.path / "cpu", false);
  TrainResult r = train_translation(cfg, d.path / "gpu", false, Device::cuda());
  EXPECT_EQ(r.steps_done, 30);
  const std::vector<double> cpu = logged_losses(d.path / "cpu"), gpu = logged_losses(d.path / "gpu");
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 + 2e-2 * cpu[i]) << "step " << i + 1;
  models::LoadedSeq2Seq t = models::load_seq2seq((d.path / "gpu" / "model.safetensors").string());
  const std::vector<std::string> src = text::read_lines((d.path / "gpu" / "dev.src").string());
  for (int64_t beam : {1, 4}) {
    decode::TranslateOptions o;
    o.beam_size = beam;
    t.model->module().to(Device::cpu());
    const std::vector<std::string> on_cpu = decode::Translator(*t.model, *t.tokenizer).translate(src, o);
    t.model->module().to(Device::cuda());
    int same = 0;
    using Run = std::pair<bool, const char*>;  // the cache; QKV_CUDA_GRAPHS (unset: a GPU's default, graphs)
    for (const auto& [cache, graphs] : {Run{true, nullptr}, Run{true, "0"}, Run{false, "0"}}) {
      testing::ScopedEnv env("QKV_CUDA_GRAPHS", graphs);
      o.use_cache = cache;
      const std::vector<std::string> on_gpu = decode::Translator(*t.model, *t.tokenizer).translate(src, o);
      ASSERT_EQ(on_gpu.size(), on_cpu.size());
      for (size_t i = 0; i < src.size(); ++i) same += on_gpu[i] == on_cpu[i];
    }
    // (TF32 products may tip a near tie between two candidates; nearly every line is identical)
    EXPECT_GE(same, static_cast<int>(3 * src.size()) - 3) << "beam " << beam;
  }
}

TEST(TranslationTask, TrainsWritesFilesAndTheModelTranslates) {
  TempDir d("translation");
  TrainResult r = train_translation(tiny_translation(d.path, 60), d.path / "run", false);
  EXPECT_EQ(r.steps_done, 60);
  for (const char* f : {"checkpoint.safetensors", "model.safetensors", "metrics.jsonl", "loss.svg", "spm.model",
                        "dev.src", "dev.ref", "test.src", "test.ref"})
    EXPECT_TRUE(fs::exists(d.path / "run" / f)) << f;
  ASSERT_EQ(r.last_eval.size(), 2u);
  EXPECT_EQ(r.last_eval[0].first, "val_loss");
  EXPECT_LT(r.last_eval[0].second, 1.5) << "dev cross-entropy after 60 steps";
  EXPECT_EQ(r.last_eval[1].first, "val_bleu");
  // the f16 model file carries the tokenizer: it translates by itself
  models::LoadedSeq2Seq t = models::load_seq2seq((d.path / "run" / "model.safetensors").string());
  decode::Translator tr(*t.model, *t.tokenizer);
  decode::TranslateOptions o;
  auto out = tr.translate({"one two", "", "   ", "three"}, o);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1], "") << "empty lines translate to empty lines";
  EXPECT_EQ(out[2], "");
  EXPECT_FALSE(out[0].empty());
  // the KV cache changes nothing but speed: greedy and beam, cached and recomputed, same tokens
  std::vector<std::string> src = text::read_lines((d.path / "run" / "dev.src").string());
  for (int64_t beam : {1, 4}) {
    o.beam_size = beam, o.use_cache = true;
    std::vector<decode::Hypothesis> a, b;
    tr.translate(src, o, &a);
    o.use_cache = false;
    tr.translate(src, o, &b);
    for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << "beam " << beam << " line " << i;
    // the n-best lists start with the translation; greedy's list is that one hypothesis
    o.use_cache = true;
    auto nb = tr.translate_nbest(src, o);
    ASSERT_EQ(nb.size(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      ASSERT_FALSE(nb[i].empty()) << i;
      EXPECT_LE(nb[i].size(), static_cast<size_t>(beam)) << i;
      EXPECT_EQ(nb[i][0].tokens, a[i].tokens) << "beam " << beam << " line " << i;
      EXPECT_EQ(nb[i][0].score, a[i].score) << "beam " << beam << " line " << i;
    }
  }
  EXPECT_TRUE(tr.translate_nbest({"one", ""}, o)[1].empty()) << "an empty line has an empty n-best list";
  // an over-long line is truncated with a warning naming it (the other lines translate), or, with
  // max_input_length −1, a clear error naming it
  std::string long_line;
  for (int i = 0; i < 40; ++i) long_line += "one ";
  std::vector<std::string> warnings;
  decode::TranslateOptions warn = o;
  warn.on_warning = [&](const std::string& w) { warnings.push_back(w); };
  const std::vector<std::string> cut = tr.translate({"two", long_line}, warn);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("line 2: "), std::string::npos) << warnings[0];
  EXPECT_EQ(cut[0], tr.translate({"two"}, o)[0]);
  warn.max_input_length = -1;
  try {
    tr.translate({"two", long_line}, warn);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

// An ensemble of one model with itself translates exactly as the model alone (the mean of two equal
// distributions is the distribution; the search over mixed members is tested in search_test.cpp);
// models trained with different vocabularies are refused.
TEST(TranslationTask, EnsemblesShareOneVocabulary) {
  TempDir d("translation");
  train_translation(tiny_translation(d.path, 40), d.path / "a", false);
  const std::string a = (d.path / "a" / "model.safetensors").string();
  std::vector<models::LoadedSeq2Seq> ts = models::load_seq2seq_ensemble({a, a});
  ASSERT_EQ(ts.size(), 2u);
  std::vector<std::string> src = text::read_lines((d.path / "a" / "dev.src").string());
  decode::TranslateOptions o;
  std::vector<decode::Hypothesis> alone, twice;
  // Each model first translates once alone, so that both read their packed copies (made on a
  // weight's second batch: inference_weight.h) from the first batch on — packed and unpacked f32
  // products agree to rounding only (on AVX2 they differed in the last bit of a score).
  decode::Translator(*ts[1].model, *ts[1].tokenizer).translate(src, o, &alone);
  decode::Translator(*ts[0].model, *ts[0].tokenizer).translate(src, o, &alone);
  decode::Translator(*ts[0].model, *ts[0].tokenizer).translate(src, o, &alone);
  decode::Translator({ts[0].model.get(), ts[1].model.get()}, *ts[0].tokenizer).translate(src, o, &twice);
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(alone[i].tokens, twice[i].tokens) << "line " << i;
    EXPECT_EQ(alone[i].score, twice[i].score) << "line " << i;
  }
  // another corpus ("zero" for "ten") trains another vocabulary
  TempDir d2("translation-vocab");
  json third = tiny_translation(d2.path, 2);
  std::string tsv = io::read_file((d2.path / "pairs.tsv").string());
  for (size_t at; (at = tsv.find("ten")) != std::string::npos;) tsv.replace(at, 3, "zero");
  io::write_file_atomic((d2.path / "pairs.tsv").string(), tsv);
  train_translation(third, d2.path / "c", false);
  try {
    models::load_seq2seq_ensemble({a, (d2.path / "c" / "model.safetensors").string()});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one vocabulary"), std::string::npos) << e.what();
  }
  // models whose configurations disagree on the vocabulary size
  nlohmann::json c = ts[0].model->config_json();
  c["vocab_size"] = c["vocab_size"].get<int64_t>() + 1;
  auto bigger = models::build_seq2seq("transformer", c);
  EXPECT_THROW(decode::translate_ids({ts[0].model.get(), bigger.get()}, {{5, 6}}, o), Error);
}

TEST(TranslationTask, ResumeReproducesTheLossCurve) {
  TempDir d("translation");
  json full = tiny_translation(d.path, 24);
  full["train"]["eval_interval"] = 0;
  train_translation(full, d.path / "straight", false);
  json part = full;
  part["train"]["max_iters"] = 9;
  train_translation(part, d.path / "resumed", false);
  train_translation(full, d.path / "resumed", true);
  std::vector<double> a = logged_losses(d.path / "straight"), b = logged_losses(d.path / "resumed");
  ASSERT_EQ(a.size(), 24u);
  ASSERT_EQ(b.size(), 24u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
}

TEST(TranslationTask, BadFilesAreClearErrors) {
  TempDir d("translation");
  train_translation(tiny_translation(d.path, 2), d.path / "run", false);
  const std::string model = (d.path / "run" / "model.safetensors").string();
  EXPECT_THROW(models::load_seq2seq((d.path / "missing.safetensors").string()), Error);
  std::string bytes = io::read_file(model);
  io::write_file_atomic((d.path / "trunc.safetensors").string(), bytes.substr(0, bytes.size() - 100));
  EXPECT_THROW(models::load_seq2seq((d.path / "trunc.safetensors").string()), Error);
  // a tokenizer whose vocabulary does not match the model's
  models::ModelFile f = models::load_model_file(model);
  json meta = f.meta;
  meta["model"]["vocab_size"] = 24;
  TranslationTask task(tiny_translation(d.path, 2), "", (d.path / "run").string(), true, false);
  try {
    models::save_model_file((d.path / "mismatch.safetensors").string(), task.model().module(), meta);
    models::load_seq2seq((d.path / "mismatch.safetensors").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocab_size"), std::string::npos) << e.what();
  }
  // a GPT file is not a translator
  EXPECT_THROW(io::base64_decode("abc"), Error);
  json bad = tiny_translation(d.path, 2);
  bad["data"]["train"] = {{"tsv", (d.path / "nope.tsv").string()}};
  EXPECT_THROW(TranslationTask(bad, "", (d.path / "x").string(), false, false), Error);
  bad = tiny_translation(d.path, 2);
  bad["data"]["shuffle"] = true;
  EXPECT_THROW(TranslationTask(bad, "", (d.path / "x").string(), false, false), Error);
  // the model type a config names must be a sequence-to-sequence one, and is checked first
  bad = tiny_translation(d.path, 2);
  bad["model"]["type"] = "gpt";
  EXPECT_NE(testing::error_of([&] { TranslationTask(bad, "", (d.path / "y").string(), false, false); })
                .find("model.type \"gpt\" is not a sequence-to-sequence model type"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d.path / "y" / "spm.model")) << "refused before training a tokenizer";
  bad = tiny_translation(d.path, 2);
  bad["evaluation"] = json::object();
  EXPECT_NE(testing::error_of([&] { TranslationTask(bad, "", (d.path / "x").string(), false, false); })
                .find("unknown key \"evaluation\""),
            std::string::npos);
}

// The recurrent translators go through the same pipeline: config → training → model file →
// translate and draw the alignment; and a file or checkpoint of one type is never taken for another.
// The recurrent translator with Bahdanau's attention (GRU scans, additive scores on CUDA kernels)
// trains on a GPU along the CPU's loss curve and translates there as on the CPU.
TEST(TranslationTask, RecurrentModelsTrainAndTranslateOnAGpuAsOnTheCpu) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  TempDir d("translation-rnn-gpu");
  json cfg = tiny_translation(d.path, 20);
  cfg["model"] = {{"type", "rnn-attention"}, {"embedding_dim", 16}, {"hidden_size", 24}, {"dropout", 0.1},
                  {"max_len", 24}};
  cfg["train"]["learning_rate"] = 1e-2;
  train_translation(cfg, d.path / "cpu", false);
  train_translation(cfg, d.path / "gpu", false, Device::cuda());
  const std::vector<double> cpu = logged_losses(d.path / "cpu"), gpu = logged_losses(d.path / "gpu");
  ASSERT_EQ(cpu.size(), gpu.size());
  ASSERT_GE(cpu.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(gpu[i], cpu[i], 2e-2 + 2e-2 * cpu[i]) << "step " << i + 1;
  models::LoadedSeq2Seq t = models::load_seq2seq((d.path / "gpu" / "model.safetensors").string());
  const std::vector<std::string> src = text::read_lines((d.path / "gpu" / "dev.src").string());
  decode::TranslateOptions o;
  o.beam_size = 4;
  const std::vector<std::string> on_cpu = decode::Translator(*t.model, *t.tokenizer).translate(src, o);
  t.model->module().to(Device::cuda());
  const std::vector<std::string> on_gpu = decode::Translator(*t.model, *t.tokenizer).translate(src, o);
  ASSERT_EQ(on_gpu.size(), on_cpu.size());
  int same = 0;
  for (size_t i = 0; i < src.size(); ++i) same += on_gpu[i] == on_cpu[i];
  EXPECT_GE(same, static_cast<int>(src.size()) - 1) << "(TF32 may tip one near tie)";
}

TEST(TranslationTask, RecurrentModelsTrainTranslateAndAreNotTakenForTransformers) {
  TempDir d("translation-rnn");
  json cfg = tiny_translation(d.path, 40);
  cfg["model"] = {{"type", "rnn-attention"}, {"embedding_dim", 16}, {"hidden_size", 24}, {"dropout", 0.1},
                  {"max_len", 24}};
  cfg["train"]["learning_rate"] = 1e-2;
  TrainResult r = train_translation(cfg, d.path / "run", false);
  EXPECT_EQ(r.steps_done, 40);
  ASSERT_FALSE(r.last_eval.empty());
  const std::vector<double> losses = logged_losses(d.path / "run");
  EXPECT_LT(losses.back(), 0.8 * losses.front()) << "the loss falls";
  const std::string model = (d.path / "run" / "model.safetensors").string();
  models::LoadedSeq2Seq t = models::load_seq2seq(model);
  EXPECT_EQ(t.model->type(), "rnn-attention");
  decode::Translator tr(*t.model, *t.tokenizer);
  auto out = tr.translate({"one two", "", "three"}, decode::TranslateOptions{});
  EXPECT_FALSE(out[0].empty());
  EXPECT_EQ(out[1], "");
  nn::AttentionMaps maps;
  t.model->forward(Tensor::from_ints({5, 6, 3}, {1, 3}), Tensor::from_ints({2, 7}, {1, 2}), &maps);
  ASSERT_EQ(maps.cross.size(), 1u);
  EXPECT_EQ(maps.cross[0].shape(), (Shape{1, 1, 2, 3}));
  // resuming this run with a Transformer config: an error naming both types
  json other = cfg;
  other["model"] = tiny_translation(d.path, 40)["model"];
  const std::string e = testing::error_of([&] { train_translation(other, d.path / "run", true); });
  EXPECT_NE(e.find("\"rnn-attention\" model; the config describes a \"transformer\""), std::string::npos) << e;
  // a file that says "transformer" but holds the recurrent model's tensors: an error naming the type
  models::ModelFile f = models::load_model_file(model);
  json meta = f.meta;
  meta["model_type"] = "transformer";
  meta["model"] = tiny_translation(d.path, 40)["model"];
  meta["model"]["vocab_size"] = t.model->vocab_size();
  models::save_model_file((d.path / "lying.safetensors").string(), t.model->module(), meta);
  const std::string e2 = testing::error_of([&] { models::load_seq2seq((d.path / "lying.safetensors").string()); });
  EXPECT_NE(e2.find("does not fit the \"transformer\" model it describes"), std::string::npos) << e2;
}

TEST(TranslationTask, TokenBatchesRespectTheBudget) {
  using text::EncodedPair;
  std::vector<EncodedPair> pairs;
  for (int n = 1; n <= 30; ++n) pairs.push_back({std::vector<int32_t>(static_cast<size_t>(n), 5),
                                                 std::vector<int32_t>(static_cast<size_t>(n % 7 + 2), 6)});
  std::vector<size_t> order(pairs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto batches = text::token_batches(pairs, order, 60);
  size_t seen = 0;
  for (auto& b : batches) {
    size_t longest = 0;
    for (size_t i : b) longest = std::max({longest, pairs[i].src.size(), pairs[i].tgt.size() - 1});
    EXPECT_TRUE(longest * b.size() <= 60 || b.size() == 1);
    seen += b.size();
  }
  EXPECT_EQ(seen, pairs.size());
  text::Batch b = text::make_batch(pairs, {0, 3}, 0);
  EXPECT_EQ(b.src.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.tgt_in.size(1), b.tgt_out.size(1));
  EXPECT_EQ(b.tgt_tokens, static_cast<int64_t>(pairs[0].tgt.size() - 1 + pairs[3].tgt.size() - 1));
}

}  // namespace
}  // namespace qkv::train

namespace qkv::train {
namespace {

// Issue 25: a model file whose config is edited to describe a huge model is refused before the
// model is built (no allocation beyond what its tensors justify), naming the file; a metadata
// without a tokenizer names the key, not a JSON library message.
TEST(TranslationTask, CraftedConfigsAreRefusedBeforeAllocating) {
  TempDir d("translation-crafted");
  train_translation(tiny_translation(d.path, 2), d.path / "run", false);
  const std::string model = (d.path / "run" / "model.safetensors").string();
  const models::ModelFile f = models::load_model_file(model);
  TranslationTask task(tiny_translation(d.path, 2), "", (d.path / "run").string(), true, false);
  auto crafted = [&](const std::string& name, const std::function<void(json&)>& edit) {
    json meta = f.meta;
    edit(meta);
    const std::string p = (d.path / name).string();
    models::save_model_file(p, task.model().module(), meta);
    return testing::error_of([&] { models::load_seq2seq(p); });
  };
  for (auto [key, value] : {std::pair{"max_len", int64_t{1} << 40}, std::pair{"dim_feedforward", int64_t{1} << 40},
                            std::pair{"num_encoder_layers", int64_t{100000}}}) {
    SCOPED_TRACE(key);
    const std::string msg = crafted("big.safetensors", [&](json& m) { m["model"][key] = value; });
    EXPECT_NE(msg.find("big.safetensors"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("larger than") != std::string::npos || msg.find(key) != std::string::npos) << msg;
  }
  const std::string msg = crafted("notok.safetensors", [](json& m) { m.erase("tokenizer"); });
  EXPECT_NE(msg.find("no \"tokenizer\""), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

}  // namespace
}  // namespace qkv::train
