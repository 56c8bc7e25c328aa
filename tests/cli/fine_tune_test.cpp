// Converted Hugging Face models through the command line as a user runs them: `qkv train` with
// "init_from" fine-tunes one, `qkv generate` runs on the result, and `qkv eval` scores both kinds —
// a language model's perplexity over a text file (its own tokenizer), a translator's BLEU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/io/file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
const std::string kCli = QKV_CLI_PATH;
const fs::path kHfGolden = fs::path(QKV_GOLDEN_DIR) / "hf";

void write_text(const fs::path& p, size_t bytes) {
  const std::string text = io::read_file((fs::path(QKV_SOURCE_DIR) / "data" / "tinyshakespeare" / "input.txt").string());
  std::ofstream(p) << text.substr(0, bytes);
}

TEST(CliFineTune, TrainFromAConvertedLlamaThenGenerateAndEval) {
  testing::TempDir dir("cli-fine-tune");
  ASSERT_EQ(testing::run_shell(kCli + " convert " + (kHfGolden / "llama-gqa").string() + " -o " +
                               (dir.path / "llama.safetensors").string())
                .code,
            0);
  write_text(dir.path / "text.txt", 8000);
  // relative paths: from the config's folder
  const nlohmann::json cfg = {{"task", "lm"},
                              {"init_from", "llama.safetensors"},
                              {"data", {{"path", "text.txt"}, {"block_size", 32}}},
                              {"train",
                               {{"max_iters", 20}, {"batch_size", 4}, {"learning_rate", 3e-3}, {"warmup_iters", 2},
                                {"lr_decay_iters", 20}, {"eval_interval", 10}, {"eval_iters", 2}, {"log_interval", 5},
                                {"checkpoint_interval", 0}}}};
  std::ofstream(dir.path / "fine-tune.json") << cfg.dump(2);
  const std::string out = (dir.path / "run").string(), model = out + "/model.safetensors";
  auto r = testing::run_shell(kCli + " train " + (dir.path / "fine-tune.json").string() + " -o " + out + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Llama"), std::string::npos) << r.out;
  r = testing::run_shell(kCli + " generate -m " + model + " -p \"ROMEO:\" -t 0 -n 8");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ROMEO:"), std::string::npos) << r.out;

  // perplexity of the text, before and after fine-tuning on it
  auto ppl = [&](const std::string& m) {
    auto e = testing::run_shell(kCli + " eval -m " + m + " --text " + (dir.path / "text.txt").string() + " --json");
    EXPECT_EQ(e.code, 0) << e.out;
    const nlohmann::json j = nlohmann::json::parse(e.out.substr(e.out.find('{')));
    EXPECT_GT(j["tokens"].get<int64_t>(), 1000);
    EXPECT_EQ(j["block_size"], 128);  // the model's context
    return j["perplexity"].get<double>();
  };
  const double before = ppl((dir.path / "llama.safetensors").string()), after = ppl(model);
  EXPECT_GT(before, 100.0);  // a random model over 512 tokens
  EXPECT_LT(after, before * 0.8);
  r = testing::run_shell(kCli + " eval -m " + model + " --text " + (dir.path / "text.txt").string() +
                         " --block-size 16");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("perplexity "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("windows of 16"), std::string::npos) << r.out;
  r = testing::run_shell(kCli + " eval -m " + model);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("give --text"), std::string::npos) << r.out;

  // a config whose model differs from the file's: one line naming the field
  nlohmann::json bad = cfg;
  bad["model"] = {{"num_hidden_layers", 4}};
  std::ofstream(dir.path / "bad.json") << bad.dump(2);
  r = testing::run_shell(kCli + " train " + (dir.path / "bad.json").string() + " -o " + out + "-bad -q");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("model.num_hidden_layers 4 differs from 2"), std::string::npos) << r.out;
}

TEST(CliFineTune, EvalScoresAConvertedMarianTranslator) {
  testing::TempDir dir("cli-eval-marian");
  const std::string model = (dir.path / "opus.safetensors").string();
  ASSERT_EQ(testing::run_shell(kCli + " convert " + (kHfGolden / "marian").string() + " -o " + model).code, 0);
  std::ofstream(dir.path / "src.txt") << "I like tea.\nThe cat sleeps.\n";
  std::ofstream(dir.path / "ref.txt") << "J'aime le thé.\nLe chat dort.\n";
  auto r = testing::run_shell(kCli + " eval -m " + model + " --src " + (dir.path / "src.txt").string() + " --ref " +
                              (dir.path / "ref.txt").string() + " --beam 2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["sentences"], 2);
  EXPECT_GE(j["bleu"].get<double>(), 0.0);
  EXPECT_GT(j["hyp_len"].get<int64_t>(), 0);
}

// An encoder's checkpoint given a new classifier (`qkv convert --head sequence --labels …`), fine-tuned
// on a TSV of labelled sentences (`qkv train`, task text_classification), then read by
// `qkv classify-text` with the labels it was given.
TEST(CliFineTune, ConvertWithANewHeadThenTrainAndClassifyText) {
  testing::TempDir dir("cli-fine-tune-classifier");
  const std::string model = (dir.path / "bert.safetensors").string();
  auto r = testing::run_shell(kCli + " convert " + (kHfGolden / "bert-uncased").string() +
                              " --head sequence --labels neg,pos -o " + model);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("new sequence head (2 labels): classifier.bias, classifier.weight, pooler.bias, pooler.weight "
                       "drawn at random"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("left out: 5 tensors of the checkpoint's own head (cls.predictions."), std::string::npos)
      << r.out;
  r = testing::run_shell(kCli + " convert " + (kHfGolden / "bert-uncased").string() + " --head sequence -o " + model);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("needs --labels"), std::string::npos) << r.out;
  // "yes, …" is pos, "no, …" neg
  const std::string text =
      io::read_file((fs::path(QKV_SOURCE_DIR) / "data" / "tinyshakespeare" / "input.txt").string());
  std::ofstream tsv(dir.path / "train.tsv");
  tsv << "sentence\tlabel\n";
  size_t from = 0;
  for (int i = 0; i < 300;) {
    const size_t end = text.find('\n', from);
    const std::string line = text.substr(from, end - from);
    from = end + 1;
    if (line.size() < 12) continue;
    tsv << (i % 3 == 1 ? "yes, " : "no, ") << line << "\t" << (i % 3 == 1 ? "pos" : "neg") << "\n";
    ++i;
  }
  tsv.close();
  const nlohmann::json cfg = {{"task", "text_classification"},
                              {"init_from", "bert.safetensors"},
                              {"data", {{"train", "train.tsv"}, {"max_length", 16}}},
                              {"train",
                               {{"max_iters", 150},
                                {"batch_size", 16},
                                {"learning_rate", 2e-3},
                                {"warmup_iters", 5},
                                {"lr_decay_iters", 150},
                                {"min_lr", 2e-4},
                                {"eval_interval", 150},
                                {"log_interval", 50},
                                {"checkpoint_interval", 0},
                                {"weight_decay", 0.01}}}};
  std::ofstream(dir.path / "classify.json") << cfg.dump(2);
  const std::string out = (dir.path / "run").string();
  r = testing::run_shell(kCli + " train " + (dir.path / "classify.json").string() + " -o " + out + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("270 train / 30 val examples, 2 labels (single_label_classification)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("val_accuracy"), std::string::npos) << r.out;
  r = testing::run_shell("printf 'yes, my good lord\\nno, my good lord\\n' | " + kCli + " classify-text -m " + out +
                         "/model.safetensors");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("pos"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("pos"), r.out.find("neg")) << r.out;

  // and back to a Hugging Face folder (qkv export --to hf): its config names the labels, and the folder,
  // converted again, classifies as the trained file does, score for score
  const std::string folder = (dir.path / "bert-hf").string(), back = (dir.path / "back.safetensors").string();
  r = testing::run_shell(kCli + " export --to hf " + out + "/model.safetensors " + folder);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(BertForSequenceClassification: "), std::string::npos) << r.out;
  const nlohmann::json config = nlohmann::json::parse(io::read_file(folder + "/config.json"));
  EXPECT_EQ(config["id2label"], nlohmann::json({{"0", "neg"}, {"1", "pos"}}));
  ASSERT_EQ(testing::run_shell(kCli + " convert " + folder + " -o " + back).code, 0);
  auto scores = [&](const std::string& m) {
    return testing::run_shell(kCli + " classify-text -m " + m + " --json -k 0 \"yes, my lord\" \"no, sir\"").out;
  };
  EXPECT_EQ(scores(back), scores(out + "/model.safetensors"));
  EXPECT_NE(scores(back).find("\"score\""), std::string::npos);
}

// `qkv convert --head span` puts a new question-answering head on a BertForMaskedLM, `qkv train` (task
// question_answering) fine-tunes it on JSONL questions ("who is king?": the name after "king"), and
// `qkv answer` reads the answer of a context it has not seen.
TEST(CliFineTune, ConvertWithASpanHeadThenTrainAndAnswer) {
  testing::TempDir dir("cli-fine-tune-qa");
  const std::string model = (dir.path / "qa.safetensors").string();
  auto r = testing::run_shell(kCli + " convert " + (kHfGolden / "bert-uncased").string() + " --head span -o " + model);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("new question-answering head: classifier.bias, classifier.weight drawn at random"),
            std::string::npos)
      << r.out;
  r = testing::run_shell(kCli + " convert " + (kHfGolden / "bert-uncased").string() + " --head span --labels a -o " +
                         model + ".x");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("takes no labels"), std::string::npos) << r.out;
  const std::vector<std::string> names = {"romeo", "juliet", "tybalt", "richard", "henry", "edward"},
                                 words = {"good", "my", "lord", "sweet", "night", "the", "fair", "noble"};
  std::ofstream jsonl(dir.path / "train.jsonl");
  for (size_t i = 0; i < 200; ++i) {
    std::string context;
    for (size_t k = 0; k < 1 + i % 5; ++k) context += words[(i + 3 * k) % words.size()] + " ";
    const size_t start = context.size() + 5;
    context += "king " + names[(i * 5 + i / 6) % names.size()] + " " + words[(i * 7) % words.size()];
    jsonl << nlohmann::json{{"id", std::to_string(i)},
                            {"question", "who is king?"},
                            {"context", context},
                            {"answers",
                             {{"text", {names[(i * 5 + i / 6) % names.size()]}}, {"answer_start", {start}}}}}
                 .dump()
          << "\n";
  }
  jsonl.close();
  const nlohmann::json cfg = {{"task", "question_answering"},
                              {"init_from", "qa.safetensors"},
                              {"data", {{"train", "train.jsonl"}, {"max_length", 24}, {"doc_stride", 8}}},
                              {"train",
                               {{"max_iters", 300},
                                {"batch_size", 16},
                                {"learning_rate", 1e-2},
                                {"warmup_iters", 5},
                                {"lr_decay_iters", 300},
                                {"min_lr", 3e-4},
                                {"eval_interval", 300},
                                {"log_interval", 100},
                                {"checkpoint_interval", 0},
                                {"weight_decay", 0.01}}}};
  std::ofstream(dir.path / "qa.json") << cfg.dump(2);
  const std::string out = (dir.path / "run").string();
  r = testing::run_shell(kCli + " train " + (dir.path / "qa.json").string() + " -o " + out + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("180 train / 20 val windows (20 val questions)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_exact_match"), std::string::npos) << r.out;
  r = testing::run_shell(kCli + " answer " + out + "/model.safetensors \"who is king?\" \"sweet night and the king " +
                         "edward of the fair lord\"");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("edward"), std::string::npos) << r.out;
}

// Masked-language-model pre-training continued from the shell: a converted BertForMaskedLM trained on a
// text (the first 5 % of its lines held out), then its file fills a mask.
TEST(CliFineTune, ContinueMaskedLMPretrainingThenFillMask) {
  testing::TempDir dir("cli-fine-tune-mlm");
  auto r = testing::run_shell(kCli + " convert " + (kHfGolden / "bert-uncased").string() + " -o " +
                              (dir.path / "bert.safetensors").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<std::string> sentences = {"romeo loves juliet and juliet loves romeo", "the king of rome is old",
                                              "sweet night is the lord of love", "my lord the king is dead"};
  std::ofstream text(dir.path / "text.txt");
  for (size_t i = 0; i < 400; ++i) text << sentences[(i * 3) % sentences.size()] << "\n";
  text.close();
  const nlohmann::json cfg = {{"task", "masked_lm"},
                              {"init_from", "bert.safetensors"},
                              {"data", {{"train", "text.txt"}, {"max_length", 16}, {"line_by_line", true}}},
                              {"model", {{"dropout", 0.0}}},
                              {"train",
                               {{"max_iters", 400},
                                {"batch_size", 16},
                                {"learning_rate", 3e-3},
                                {"warmup_iters", 5},
                                {"lr_decay_iters", 400},
                                {"min_lr", 3e-4},
                                {"eval_interval", 400},
                                {"log_interval", 100},
                                {"checkpoint_interval", 0},
                                {"weight_decay", 0.01}}}};
  std::ofstream(dir.path / "mlm.json") << cfg.dump(2);
  const std::string out = (dir.path / "run").string();
  r = testing::run_shell(kCli + " train " + (dir.path / "mlm.json").string() + " -o " + out + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("380 train / 20 val blocks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_perplexity"), std::string::npos) << r.out;
  r = testing::run_shell(kCli + " fill-mask " + out + "/model.safetensors \"the king of [MASK] is old\" -k 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the king of rome is old"), std::string::npos) << r.out;
  // and a classifier goes on the pre-trained encoder, as from_pretrained(run_mlm.py's output, num_labels=2)
  r = testing::run_shell(kCli + " convert " + out + "/model.safetensors --head sequence --labels old,young -o " +
                         (dir.path / "cls.safetensors").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("-> " + (dir.path / "cls.safetensors").string() + " as bert"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("left out: 5 tensors of the checkpoint's own head"), std::string::npos) << r.out;
}

// Multiple choice from the shell: a new choice head on a BertForMaskedLM, trained on SWAG-shaped JSONL
// ("the king is X" … which ending names X), then `qkv choose` picks the ending.
TEST(CliFineTune, ConvertWithAChoiceHeadThenTrainAndChoose) {
  testing::TempDir dir("cli-fine-tune-mc");
  auto r = testing::run_shell(kCli + " convert " + (kHfGolden / "bert-uncased").string() + " --head choice -o " +
                              (dir.path / "mc.safetensors").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("new multiple-choice head: classifier.bias, classifier.weight, pooler.bias, pooler.weight"),
            std::string::npos)
      << r.out;
  const std::vector<std::string> names = {"romeo", "juliet", "richard", "henry", "edward", "gaunt"};
  std::ofstream jsonl(dir.path / "swag.jsonl");
  for (size_t i = 0; i < 240; ++i) {
    const std::string king = names[(i * 5 + i / 6) % names.size()];
    nlohmann::json row = {{"sent1", "good night the king is " + king}, {"sent2", "now"}, {"label", i % 3}};
    for (size_t k = 0; k < 3; ++k) {
      const std::string other = names[(i * 5 + i / 6 + k + 1) % names.size()];
      row["ending" + std::to_string(k)] = (k == i % 3 ? king : other == king ? "nobody" : other) + " rules";
    }
    jsonl << row.dump() << "\n";
  }
  jsonl.close();
  const nlohmann::json cfg = {
      {"task", "multiple_choice"},
      {"init_from", "mc.safetensors"},
      {"data", {{"train", "swag.jsonl"}, {"max_length", 24}, {"endings", {"ending0", "ending1", "ending2"}}}},
      {"model", {{"dropout", 0.0}}},
      {"train",
       {{"max_iters", 300},
        {"batch_size", 8},
        {"learning_rate", 3e-3},
        {"warmup_iters", 5},
        {"lr_decay_iters", 300},
        {"min_lr", 3e-4},
        {"eval_interval", 300},
        {"log_interval", 100},
        {"checkpoint_interval", 0},
        {"weight_decay", 0.01}}}};
  std::ofstream(dir.path / "mc.json") << cfg.dump(2);
  const std::string out = (dir.path / "run").string();
  r = testing::run_shell(kCli + " train " + (dir.path / "mc.json").string() + " -o " + out + " -q");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("216 train / 24 val examples, 3 choices each"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_accuracy 1.0"), std::string::npos) << r.out;
  r = testing::run_shell(kCli + " choose " + out +
                         "/model.safetensors \"good night the king is henry\" \"gaunt rules\" \"henry rules\" --header now");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("* "), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("* "), r.out.size());
  EXPECT_NE(r.out.substr(r.out.find("* ")).find("henry rules"), std::string::npos) << r.out;
  r = testing::run_shell(kCli + " choose " + out + "/model.safetensors \"a context\" \"one ending\"");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("two endings or more"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qkv
