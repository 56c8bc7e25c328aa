// What the qkv command says when it fails (issue 43): one line that names the input, in words a
// user reads — no JSON library tags, no 10 MB of echoed input — and exit 1 when stdout could not
// be written (--help into /dev/full).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "qkv/core/message.h"
#include "qkv/io/file.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "testing.h"

namespace qkv {
namespace {

testing::ShellResult qkv_cli(const std::string& args) { return testing::run_shell(std::string(QKV_CLI_PATH) + " " + args); }

TEST(Messages, JsonLibraryTagsAreStrippedAndEchoedInputCut) {
  EXPECT_EQ(plain_message("config 'c.json' is not valid JSON: [json.exception.parse_error.101] parse error at line 1, "
                          "column 7: syntax error"),
            "config 'c.json' is not valid JSON: JSON parse error at line 1, column 7: syntax error");
  EXPECT_EQ(plain_message("'m': [json.exception.type_error.302] type must be number, but is string"),
            "'m': type must be number, but is string");
  EXPECT_EQ(excerpt(std::string(100, 'x'), 10), "xxxxxxxxxx… (100 bytes)");
  EXPECT_EQ(excerpt("é" + std::string(20, 'e'), 1), "… (22 bytes)");  // never half a character
  EXPECT_EQ(excerpt("short"), "short");
}

TEST(Messages, BadConfigJsonSaysWhereInTheFile) {
  testing::TempDir d("messages");
  const std::string cfg = (d.path / "bad.json").string();
  io::write_file_atomic(cfg, "{\"model\": }");
  const auto r = qkv_cli("train " + cfg + " -o " + (d.path / "out").string() + " -q");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("config '" + cfg + "' is not valid JSON: JSON parse error at line 1, column"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << r.out;
}

TEST(Messages, HugeVocabularyEntryIsNotEchoedWhole) {
  testing::TempDir d("messages");
  models::LoadedLanguageModel lm = models::load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  nlohmann::json meta = lm.meta;
  meta.erase("format"), meta.erase("version");
  meta["tokenizer"]["chars"][0] = std::string(10'000'000, 'a');
  const std::string path = (d.path / "huge-entry.safetensors").string();
  models::save_model_file(path, lm.model->module(), meta);
  const auto r = qkv_cli("generate -n 5 -m " + path);
  EXPECT_EQ(r.code, 1) << r.out.substr(0, 500);
  EXPECT_LT(r.out.size(), 2000u) << r.out.substr(0, 500);
  EXPECT_NE(r.out.find(path), std::string::npos) << r.out.substr(0, 500);
  EXPECT_NE(r.out.find("(10000002 bytes)"), std::string::npos) << r.out.substr(0, 500);
}

TEST(Messages, SentencePieceErrorsNameTheModelFile) {
  testing::TempDir d("messages");
  const std::string shipped = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";
  models::ModelFile f = models::load_model_file(shipped);
  nlohmann::json meta = f.meta;
  meta["tokenizer"]["model_base64"] = "bm90IGEgbW9kZWw=";  // "not a model"
  std::vector<std::pair<std::string, Tensor>> tensors(f.params.begin(), f.params.end());
  const std::string path = (d.path / "bad-spm.safetensors").string();
  io::save_safetensors(path, tensors, {{"qkv", meta.dump()}});
  const auto r = qkv_cli("translate -m " + path + " Hello.");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("'" + path + "': the model file: SentencePiece"), std::string::npos) << r.out;
}

TEST(Messages, HelpIntoAFullDeviceIsAnError) {
  const auto r = testing::run_shell("( " + std::string(QKV_CLI_PATH) + " --help > /dev/full )");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write the output"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qkv
