// Issue 43, item 3: JSON nested 100,000 deep in a config, a model file's metadata or a safetensors
// header is a clear error naming the input (before: a stack overflow in the recursive copies and
// destructors of the parsed value).
#include "qkv/io/json.h"

#include <filesystem>
#include <fstream>

#include "qkv/core/tensor.h"
#include "qkv/io/file.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/model_file.h"
#include "testing.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonDepth, ParseRefusesDeepNesting) {
  EXPECT_NO_THROW(io::parse_json(nested(io::kMaxJsonDepth), "x"));
  const std::string e = testing::error_of([] { io::parse_json(nested(100000), "config 'deep.json'"); });
  EXPECT_NE(e.find("config 'deep.json': JSON nested deeper than 256 levels"), std::string::npos) << e;
  // brackets inside strings, escaped quotes included, are text, not nesting
  EXPECT_NO_THROW(io::parse_json("{\"a\": \"\\\"" + nested(1000) + "\"}", "x"));
  EXPECT_EQ(io::json_depth("{\"a\": [1, {\"b\": []}]}"), 4);
}

// A key twice in one object (nlohmann keeps the last): an error naming the input, the key and the
// path of the object holding it; the same key in different objects is fine.
TEST(JsonDuplicateKeys, ParseRefusesAKeyTwiceInOneObject) {
  EXPECT_EQ(io::parse_json(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]})", "x")["c"][1]["x"], 4);
  std::string e = testing::error_of([] { io::parse_json(R"({"lr": 1, "lr": 2})", "config 'c.json'"); });
  EXPECT_NE(e.find("config 'c.json': key \"lr\" appears twice"), std::string::npos) << e;
  EXPECT_EQ(e.find("(in"), std::string::npos) << e;  // the top level: no path
  e = testing::error_of([] {
    io::parse_json(R"({"model": {"layers": [{"d": 1}, 5, [], {"d": 2, "d": 3}]}, "d": 0})", "config 'c.json'");
  });
  EXPECT_NE(e.find("key \"d\" appears twice (in \"model\".\"layers\"[3])"), std::string::npos) << e;
  // a key spelled differently (an escape) is the same key once decoded
  e = testing::error_of([] { io::parse_json(R"({"a": 1, "\u0061": 2})", "x"); });
  EXPECT_NE(e.find("key \"a\" appears twice"), std::string::npos) << e;
  // malformed JSON is still nlohmann's parse error, for the callers' messages
  EXPECT_THROW(io::parse_json(R"({"a": 1, "b")", "x"), nlohmann::json::parse_error);
}

TEST(JsonDepth, SafetensorsHeaderTooDeep) {
  testing::TempDir dir("json-depth");
  const std::string path = (dir.path / "deep.safetensors").string();
  const std::string header = "{\"__metadata__\": {\"x\": \"y\"}, \"junk\": " + nested(100000) + "}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  io::write_file_atomic(path, bytes + header);
  const std::string e = testing::error_of([&] { io::load_safetensors(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("nested deeper than 256"), std::string::npos) << e;
}

TEST(JsonDepth, ModelMetadataTooDeep) {
  // a model file's qkv metadata with an extra key nested deep (what `qkv average` copies)
  testing::TempDir dir("json-depth");
  const std::string path = (dir.path / "deep-meta.safetensors").string();
  const std::string meta = "{\"format\": \"qkv\", \"version\": 1, \"model_type\": \"gpt\", \"model\": {}, \"extra\": " +
                           nested(100000) + "}";
  io::save_safetensors(path, std::vector<std::pair<std::string, TensorBase>>{{"w", TensorBase::zeros({2})}},
                       {{"qkv", meta}});
  const std::string e = testing::error_of([&] { models::load_model_metadata(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("nested deeper than 256"), std::string::npos) << e;
}

TEST(JsonDepth, CommandLineConfigAndSetTooDeep) {
  testing::TempDir dir("json-depth");
  const std::string cfg = (dir.path / "deep.json").string();
  io::write_file_atomic(cfg, "{\"task\": \"lm\", \"description\": " + nested(100000) + "}");
  testing::ShellResult r = testing::run_shell(std::string(QKV_CLI_PATH) + " train " + cfg + " -o " +
                                              (dir.path / "out").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("config '" + cfg + "': JSON nested deeper than 256 levels"), std::string::npos) << r.out;
  // --set with a deep value (through a file: the argument list holds no 200,000 characters)
  const std::string value = (dir.path / "value").string();
  io::write_file_atomic(value, nested(20000));
  r = testing::run_shell(std::string(QKV_CLI_PATH) + " train " + QKV_SOURCE_DIR +
                         "/configs/shakespeare-char.json -o " + (dir.path / "out").string() +
                         " --set \"train.x=$(cat " + value + ")\"");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--set train.x: JSON nested deeper than 256 levels"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace qkv
