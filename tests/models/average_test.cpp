// qkv average writes only what loading accepts: inputs whose metadata lies are refused before
// anything is written, and a "different model" error says which keys differ.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "testing.h"

namespace qkv::models {
namespace {

// The shipped character GPT saved again with its metadata edited.
std::string edited(const testing::TempDir& d, const LoadedLanguageModel& lm, const std::string& name,
                   const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json meta = lm.meta;
  meta.erase("format"), meta.erase("version");
  edit(meta);
  const std::string path = (d.path / name).string();
  save_model_file(path, lm.model->module(), meta);
  return path;
}

TEST(Average, InputsWhoseConfigLiesAreRefusedBeforeWriting) {
  testing::TempDir d("average");
  const LoadedLanguageModel lm = load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  const std::string out = (d.path / "avg.safetensors").string();
  const std::pair<const char*, std::function<void(nlohmann::json&)>> lies[] = {
      {"no tokenizer", [](nlohmann::json& m) { m.erase("tokenizer"); }},
      {"n_embd 2^62", [](nlohmann::json& m) { m["model"]["n_embd"] = int64_t{1} << 62; }},
      {"vocabulary a character short",
       [](nlohmann::json& m) { m["tokenizer"]["chars"].erase(0); }},
  };
  int i = 0;
  for (const auto& [what, lie] : lies) {
    SCOPED_TRACE(what);
    const std::string p = edited(d, lm, "lie-" + std::to_string(i++) + ".safetensors", lie);
    const std::string msg = testing::error_of([&] { average_model_files({p, p}, out); });
    EXPECT_EQ(msg.rfind("average: '" + p + "'", 0), 0u) << msg;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

TEST(Average, DifferentModelsNameTheKeysThatDiffer) {
  testing::TempDir d("average");
  const LoadedLanguageModel lm = load_language_model(std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors");
  const std::string a = edited(d, lm, "a.safetensors", [](nlohmann::json&) {});
  const std::string b = edited(d, lm, "b.safetensors", [](nlohmann::json& m) { m["model"]["dropout"] = 0.25; });
  const std::string msg = testing::error_of([&] { average_model_files({a, b}, (d.path / "avg.safetensors").string()); });
  EXPECT_NE(msg.find("is a different model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.dropout 0.25 vs "), std::string::npos) << msg;
  EXPECT_EQ(msg.find("n_embd"), std::string::npos) << msg;  // only what differs
}

}  // namespace
}  // namespace qkv::models
