// `qkv convert --from hf` as a user runs it: a folder in, a model file out that the other commands
// take; a bad folder is one line and exit status 1, with nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/io/file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
const std::string kQkv = QKV_CLI_PATH;
const fs::path kGolden = fs::path(QKV_GOLDEN_DIR) / "hf";

TEST(CliConvert, ConvertsAndTheOtherCommandsTakeTheFile) {
  testing::TempDir dir("cli-convert");
  const std::string out = (dir.path / "opus.safetensors").string();
  auto r = testing::run_shell(kQkv + " convert --from hf " + (kGolden / "marian").string() + " -o " + out +
                              " --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(MarianMTModel) -> "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("as transformer (bf16)"), std::string::npos) << r.out;
  r = testing::run_shell(kQkv + " translate -m " + out + " --beam 2 \"I like tea.\"");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(r.out.empty());
}

// A converted language model's attention: qkv attend draws its causal self-attention and names,
// for each token, the earlier token it looks at most.
TEST(CliConvert, AttendShowsAConvertedLanguageModelsSelfAttention) {
  testing::TempDir dir("cli-attend-lm");
  const std::string model = (dir.path / "llama.safetensors").string(), out = (dir.path / "att").string();
  ASSERT_EQ(testing::run_shell(kQkv + " convert " + (kGolden / "llama-gqa").string() + " -o " + model).code, 0);
  auto r = testing::run_shell(kQkv + " attend -m " + model + " \"The cat sat because it was tired.\" --out " + out +
                              " --format svg");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the earlier token each token looks at most"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path / "att" / "self.svg"));
  EXPECT_TRUE(fs::exists(dir.path / "att" / "self-mean.svg"));
  EXPECT_NE(io::read_file((dir.path / "att" / "rollout.svg").string()).find("Attention rollout (causal)"),
            std::string::npos);
  EXPECT_NE(io::read_file((dir.path / "att" / "flow.svg").string()).find("Attention flow (causal)"), std::string::npos);
}

// Converted encoders from the shell: qkv classify-text prints pipeline("text-classification")'s labels
// (--json: its list; texts from standard input, a line each) and a token classifier's entities; qkv
// embed prints SentenceTransformer.encode's vectors and their cosine similarities.
TEST(CliConvert, ClassifyTextAndEmbedConvertedEncoders) {
  testing::TempDir dir("cli-encoders");
  auto convert = [&](const char* name) {
    const std::string out = (dir.path / (std::string(name) + ".safetensors")).string();
    const auto r = testing::run_shell(kQkv + " convert " + (kGolden / name).string() + " -o " + out);
    EXPECT_EQ(r.code, 0) << r.out;
    return out;
  };
  auto golden = [](const char* name) {
    return nlohmann::json::parse(io::read_file((kGolden / name / "reference.json").string()));
  };
  const std::string seq = convert("bert-seqcls"), tok = convert("bert-tokcls"), st = convert("st-bert");
  const nlohmann::json sref = golden("bert-seqcls");
  std::ofstream((dir.path / "texts.txt").string()) << sref["text_classification"][0]["text"].get<std::string>() << "\n"
                                                   << sref["text_classification"][1]["text"].get<std::string>() << "\n";
  auto r = testing::run_shell(kQkv + " classify-text " + seq + " -k 0 --json < " + (dir.path / "texts.txt").string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream lines(r.out);
  for (int i = 0; i < 2; ++i) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << r.out;
    const auto got = nlohmann::json::parse(line), want = sref["text_classification"][i]["all"];
    ASSERT_EQ(got.size(), want.size()) << line;
    for (size_t j = 0; j < want.size(); ++j) {
      EXPECT_EQ(got[j]["label"], want[j]["label"]);
      EXPECT_NEAR(got[j]["score"].get<double>(), want[j]["score"].get<double>(), 1e-5);
    }
  }
  r = testing::run_shell(kQkv + " classify-text -m " + seq + " \"The cat sat on the mat.\"");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(sref["text_classification"][0]["top1"][0]["label"].get<std::string>()), std::string::npos)
      << r.out;
  const nlohmann::json ner = golden("bert-tokcls")["token_classification"][0];
  r = testing::run_shell(kQkv + " classify-text " + tok + " --aggregation simple --json \"" +
                         ner["text"].get<std::string>() + "\"");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto groups = nlohmann::json::parse(r.out);
  ASSERT_EQ(groups.size(), ner["simple"].size()) << r.out;
  for (size_t j = 0; j < groups.size(); ++j) EXPECT_EQ(groups[j]["word"], ner["simple"][j]["word"]);
  const nlohmann::json emb = golden("st-bert")["sentence_embeddings"];
  r = testing::run_shell(kQkv + " embed " + st + " --json \"" + emb["texts"][0].get<std::string>() + "\"");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto v = nlohmann::json::parse(r.out).get<std::vector<float>>();
  EXPECT_LE(testing::rel_error(v, emb["embeddings"][0].get<std::vector<float>>()), 1e-5);
  r = testing::run_shell(kQkv + " embed " + st + " --similarity \"A cat.\" \"A cat.\" \"The king is dead.\"");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(" 1.0000  1.0000 "), std::string::npos) << r.out;
  r = testing::run_shell(kQkv + " classify-text " + st + " x");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("no sequence classifier"), std::string::npos) << r.out;
}

// A converted BertForMaskedLM: qkv fill-mask prints pipeline("fill-mask")'s top-k for each [MASK]
// (as text and as JSON); a text without a mask or longer than the model's positions is one line
// naming the text; qkv attend draws its bidirectional self-attention.
TEST(CliConvert, FillMaskAndAttendTakeAConvertedBert) {
  testing::TempDir dir("cli-bert");
  const std::string model = (dir.path / "bert.safetensors").string();
  ASSERT_EQ(testing::run_shell(kQkv + " convert --from hf " + (kGolden / "bert-uncased").string() + " -o " + model).code,
            0);
  const nlohmann::json ref =
      nlohmann::json::parse(io::read_file((kGolden / "bert-uncased" / "reference.json").string()));
  const auto& want = ref["fill_mask"][0]["masks"][0];  // "The cat [MASK] on the mat."
  auto r = testing::run_shell(kQkv + " fill-mask " + model + " \"The cat [MASK] on the mat.\"");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(want[0]["token_str"].get<std::string>()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(want[0]["sequence"].get<std::string>()), std::string::npos) << r.out;
  r = testing::run_shell(kQkv + " fill-mask -m " + model + " --top-k 5 --json \"The cat [MASK] on the mat.\" 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json got = nlohmann::json::parse(r.out);
  ASSERT_EQ(got["masks"].size(), 1u);
  ASSERT_EQ(got["masks"][0].size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got["masks"][0][j]["token"], want[j]["token"]);
    EXPECT_NEAR(got["masks"][0][j]["score"].get<double>(), want[j]["score"].get<double>(), 1e-5);
  }
  r = testing::run_shell(kQkv + " fill-mask " + model + " \"The cat sat on the mat.\"");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("'The cat sat on the mat.' has no [MASK] token"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  std::string longer = "[MASK]";
  for (int i = 0; i < 30; ++i) longer += " the cat";
  r = testing::run_shell(kQkv + " fill-mask " + model + " \"" + longer + "\"");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("more than the model's 40 positions"), std::string::npos) << r.out;

  const std::string out = (dir.path / "att").string();
  r = testing::run_shell(kQkv + " attend -m " + model + " \"The cat sat because it was tired.\" --out " + out +
                         " --format svg");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the other token each token looks at most"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[CLS] → "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.path / "att" / "self.svg"));
  EXPECT_TRUE(fs::exists(dir.path / "att" / "self-mean.svg"));
  EXPECT_NE(io::read_file((dir.path / "att" / "rollout.svg").string()).find("Attention rollout over 2 layers"),
            std::string::npos);
  EXPECT_NE(io::read_file((dir.path / "att" / "flow.svg").string()).find("Attention flow through 2 layers"),
            std::string::npos);
}

// The README's way out for a language model qkv trained: the shipped character GPT exported as GPT-2
// and converted back generates what the file generates.
TEST(CliConvert, TheShippedGptGoesToHuggingFaceAndBack) {
  testing::TempDir dir("cli-export-native");
  const std::string model = std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors";
  const std::string folder = (dir.path / "shakespeare-gpt2").string(), back = (dir.path / "back.safetensors").string();
  auto r = testing::run_shell(kQkv + " export --to hf " + model + " " + folder);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(GPT2LMHeadModel: 52 weights"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
  ASSERT_EQ(testing::run_shell(kQkv + " convert " + folder + " -o " + back).code, 0);
  auto generate = [&](const std::string& m) {
    return testing::run_shell(kQkv + " generate -m " + m + " -p \"ROMEO:\" -n 40 -t 0").out;
  };
  EXPECT_EQ(generate(back), generate(model));
  EXPECT_NE(generate(back).find("ROMEO:"), std::string::npos);
}

TEST(CliConvert, ABadFolderIsOneLineAndNothingWritten) {
  testing::TempDir dir("cli-convert-bad");
  const std::string out = (dir.path / "x.safetensors").string();
  auto r = testing::run_shell(kQkv + " convert " + dir.path.string() + " -o " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("has no config.json"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_FALSE(fs::exists(out));
  r = testing::run_shell(kQkv + " convert --from onnx " + (kGolden / "gpt2").string() + " -o " + out);
  EXPECT_EQ(r.code, 2) << r.out;  // a bad flag value: the usage error
  EXPECT_FALSE(fs::exists(out));
}

// A folder's chat_template.jinja goes into the model file: `generate --chat` renders the prompt as
// a user's message (after --system's) in it and prints the answer only, `qkv chat` each line read
// with the conversation before it; a template that does not
// compile converts with a warning, and a chat is refused naming the reason; without one, --chat is
// refused naming the model.
TEST(Convert, ChatTemplateForGenerateChat) {
  testing::TempDir dir("convert-chat");
  const fs::path folder = dir.path / "qwen2-chat";
  fs::copy(kGolden / "qwen2", folder);
  fs::copy_file(fs::path(QKV_GOLDEN_DIR) / "hf-chat" / "chat_template.jinja", folder / "chat_template.jinja");
  const std::string model = (dir.path / "chat.safetensors").string(), cli = QKV_CLI_PATH;
  ASSERT_EQ(testing::run_shell(cli + " convert --from hf " + folder.string() + " -o " + model).code, 0);
  const auto r = testing::run_shell(cli + " generate -m " + model +
                                    " --chat -p 'Hello there' --system 'Be brief' -n 4 -t 0 --print-prompt");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string rendered =
      "<|im_start|>system\nBe brief<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n";
  const size_t at = r.out.find(rendered);  // (--print-prompt's, on stderr)
  EXPECT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Hello there", at + rendered.size()), std::string::npos) << r.out;  // the answer only

  // qkv chat: a turn a line, each rendered with the history (the answers before it in it)
  const auto first = testing::run_shell("(" + cli + " generate -m " + model + " --chat -p 'Hello there' -n 4 -t 0 2>/dev/null)");
  ASSERT_EQ(first.code, 0) << first.out;
  const std::string answer = first.out.substr(0, first.out.size() - 1);  // (less its newline)
  const auto talk = testing::run_shell("printf 'Hello there\\nAnd again?\\n' | " + cli + " chat " + model +
                                       " -n 4 -t 0 --print-prompt");
  ASSERT_EQ(talk.code, 0) << talk.out;
  EXPECT_NE(talk.out.find("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n" + answer +
                          "<|im_end|>\n<|im_start|>user\nAnd again?<|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos)
      << talk.out;

  const std::string plain = (dir.path / "plain.safetensors").string();
  ASSERT_EQ(testing::run_shell(cli + " convert --from hf " + (kGolden / "qwen2").string() + " -o " + plain).code, 0);
  const auto none = testing::run_shell(cli + " generate -m " + plain + " --chat -p Hi -n 2");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.out.find("has no chat template"), std::string::npos) << none.out;
  const auto none_chat = testing::run_shell("echo Hi | " + cli + " chat " + plain);
  EXPECT_NE(none_chat.code, 0);
  EXPECT_NE(none_chat.out.find("has no chat template"), std::string::npos) << none_chat.out;

  { std::ofstream(folder / "chat_template.jinja") << "{% for m in messages %}"; }
  const std::string bad = (dir.path / "bad.safetensors").string();
  const auto conv = testing::run_shell(cli + " convert --from hf " + folder.string() + " -o " + bad);
  ASSERT_EQ(conv.code, 0) << conv.out;
  EXPECT_NE(conv.out.find("does not compile"), std::string::npos) << conv.out;
  const auto refused = testing::run_shell(cli + " generate -m " + bad + " --chat -p Hi -n 2");
  EXPECT_NE(refused.code, 0);
  EXPECT_NE(refused.out.find("endfor"), std::string::npos) << refused.out;
}

}  // namespace
}  // namespace qkv
