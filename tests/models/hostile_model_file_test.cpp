// Issue 25: model files whose metadata a user (or an attacker) edited. Each is refused by the
// command that loads it with a message naming the file, never a crash and never a JSON library's
// own message ("[json.exception.type_error.302] …", which names neither the file nor the key).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "testing.h"

namespace qkv::models {
namespace {

using CliResult = testing::ShellResult;
CliResult run_cli(const std::string& args) { return testing::run_shell(std::string(QKV_CLI_PATH) + " " + args); }

TEST(HostileModelFile, EditedMetadataIsAClearErrorNamingTheFile) {
  testing::TempDir d("hostile-meta");
  const std::string shipped = std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors";
  ASSERT_TRUE(std::filesystem::exists(shipped));
  LoadedLanguageModel lm = load_language_model(shipped);
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> edits = {
      {"tokenizer type a number", [](nlohmann::json& m) { m["tokenizer"]["type"] = 5; }},
      {"tokenizer missing", [](nlohmann::json& m) { m.erase("tokenizer"); }},
      {"model null", [](nlohmann::json& m) { m["model"] = nullptr; }},
      {"model not an object", [](nlohmann::json& m) { m["model"] = "gpt"; }},
      {"n_layer a string", [](nlohmann::json& m) { m["model"]["n_layer"] = "four"; }},
      {"n_embd 2^62", [](nlohmann::json& m) { m["model"]["n_embd"] = int64_t{1} << 62; }},
      {"block_size 2^40", [](nlohmann::json& m) { m["model"]["block_size"] = int64_t{1} << 40; }},
      {"model_type a number", [](nlohmann::json& m) { m["model_type"] = 12; }},
      {"model_type unknown", [](nlohmann::json& m) { m["model_type"] = "mamba"; }},
      {"model_type of another kind", [](nlohmann::json& m) { m["model_type"] = "transformer"; }},
  };
  int i = 0;
  for (const auto& [what, edit] : edits) {
    SCOPED_TRACE(what);
    nlohmann::json meta = lm.meta;
    meta.erase("format"), meta.erase("version");  // save_model_file writes them
    edit(meta);
    const std::string path = (d.path / ("edited-" + std::to_string(i++) + ".safetensors")).string();
    save_model_file(path, lm.model->module(), meta);
    const CliResult r = run_cli("generate -n 5 -m " + path);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace qkv::models
