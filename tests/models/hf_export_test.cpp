// export_hf (models/hf_export.h) against the golden folders that transformers' save_pretrained wrote
// (tests/golden/hf/): a converted checkpoint goes back to its own folder — the same names and values —
// and converts again to the same model; a head qkv put on an encoder takes the names transformers'
// class of that head has (the golden folder of that class); a fine-tuned file's weights and labels go
// into the folder; what cannot go back is refused by name, with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>

#include "hf_golden.h"
#include "qkv/core/half.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/hf_export.h"
#include "qkv/models/model_file.h"
#include "qkv/models/quantize.h"
#include "qkv/nn/module.h"
#include "qkv/ops.h"

namespace qkv::models::hf_export_test {
namespace {

namespace fs = std::filesystem;
using hf_golden::kGolden;

// A folder's weights by name (every shard), widened to f32.
std::map<std::string, Tensor> folder_weights(const fs::path& dir) {
  std::map<std::string, Tensor> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors")
      for (auto& [name, t] : io::load_safetensors(entry.path().string()).tensors) out.emplace(name, Tensor(t));
  return out;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(io::read_file(p.string())); }

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data<float>(), y.data<float>(), static_cast<size_t>(x.numel()) * 4) == 0;
}

float max_abs_difference(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  float m = 0.f;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(x.data<float>()[i] - y.data<float>()[i]));
  return m;
}

// Two model files hold the same model: type, config and every parameter, bit for bit.
void expect_same_model(const std::string& a, const std::string& b) {
  const ModelFile x = load_model_file(a), y = load_model_file(b);
  EXPECT_EQ(x.meta["model_type"], y.meta["model_type"]);
  EXPECT_EQ(x.meta["model"], y.meta["model"]) << a << " vs " << b;
  EXPECT_EQ(x.meta.value("tokenizer", nlohmann::json()), y.meta.value("tokenizer", nlohmann::json()));
  ASSERT_EQ(x.params.size(), y.params.size());
  for (const auto& [name, t] : x.params) {
    ASSERT_TRUE(y.params.count(name)) << name;
    EXPECT_TRUE(bits_equal(t, y.params.at(name))) << name << " differs between " << a << " and " << b;
  }
}

// The golden folder's weights that a conversion reads: not its buffers, nor a tied model's copies.
std::set<std::string> read_names(const std::string& golden, const ModelFile& converted) {
  const HfArchitecture& arch = hf_architecture(read_json(kGolden / golden / "config.json")["architectures"][0]);
  std::set<std::string> out;
  for (const auto& [name, t] : folder_weights(kGolden / golden)) {
    const auto target = arch.map(name);
    if (!target || (target->name.empty() && target->rows_of.empty())) continue;
    if (target->rows_of.empty() && !converted.params.count(target->name)) continue;  // (a tied copy)
    out.insert(name);
  }
  return out;
}

std::set<std::string> names_of(const std::map<std::string, Tensor>& weights) {
  std::set<std::string> out;
  for (const auto& [name, t] : weights) out.insert(name);
  return out;
}

// Every golden folder: converted, exported, the export holds the folder's weights under its names (a
// Gemma norm's w such that 1 + w in f32 is the γ the model holds, as Gemma computes it), and converting
// the export gives the same model file.
TEST(HfExport, EveryGoldenFolderGoesBackToItsOwnNamesAndValues) {
  testing::TempDir dir("hf-export-golden");
  int folders = 0;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    const std::string name = entry.path().filename().string();
    if (!fs::exists(entry.path() / "config.json") || name == "gemma3-multimodal") continue;
    SCOPED_TRACE(name);
    const std::string model = (dir.path / (name + ".safetensors")).string();
    convert_hf(entry.path().string(), model);
    const fs::path out = dir.path / (name + "-hf");
    const HfExportReport report = export_hf(model, out.string());
    EXPECT_EQ(report.architecture, read_json(entry.path() / "config.json")["architectures"][0]);
    const ModelFile converted = load_model_file(model);
    const auto golden = folder_weights(entry.path()), exported = folder_weights(out);
    EXPECT_EQ(names_of(exported), read_names(name, converted));
    const HfArchitecture& arch = hf_architecture(report.architecture);
    for (const auto& [w, t] : exported) {
      ASSERT_TRUE(golden.count(w)) << w;
      const Tensor g = golden.at(w);
      if (arch.map(w)->plus_one) {  // γ = 1 + w, rounded in f32: the exported w gives the same γ
        EXPECT_TRUE(bits_equal(add(t, 1.f), add(g, 1.f))) << w;
        EXPECT_LE(max_abs_difference(t, g), 1.2e-7f) << w;
      } else {
        EXPECT_TRUE(bits_equal(t, g)) << w;
      }
    }
    // the folder converts again to the same model, its tokenizer and config included
    const std::string again = (dir.path / (name + "-again.safetensors")).string();
    convert_hf(out.string(), again);
    expect_same_model(model, again);
    ++folders;
  }
  EXPECT_GE(folders, 60);
}

// A head qkv put on an encoder's checkpoint (convert --head) is written under the names transformers'
// class of that head gives it — the golden folder of that class, which save_pretrained wrote — the
// body under the class's base-model prefix (a BertModel's "embeddings…" becomes "bert.embeddings…").
TEST(HfExport, ANewHeadTakesTheNamesOfTransformersClass) {
  struct Case {
    const char* from;
    const char* head;
    const char* like;         // the golden folder of the class it becomes
    const char* unlike = "";  // a module of the source's config that the like folder's config has not
  };
  const Case cases[] = {
      {"bert-uncased", "sequence", "bert-seqcls"},
      {"bert-uncased", "token", "bert-tokcls"},
      {"bert-uncased", "span", "qa-bert"},
      {"bert-uncased", "choice", "mc-bert"},
      {"bert-model", "sequence", "bert-seqcls"},
      {"roberta-mlm", "sequence", "roberta-seqcls"},
      {"roberta-mlm", "token", "roberta-tokcls"},
      {"roberta-mlm", "span", "qa-roberta"},
      {"roberta-mlm", "choice", "mc-roberta"},
      {"xlmr-mlm", "token", "xlmr-tokcls"},
      {"xlmr-mlm", "span", "qa-xlmr"},
      {"xlmr-mlm", "choice", "mc-xlmr"},
      {"electra-mlm", "sequence", "electra-seqcls"},
      {"electra-mlm", "token", "electra-tokcls", "embeddings_project"},
      {"electra-mlm", "span", "qa-electra"},
      {"electra-mlm", "choice", "mc-electra"},
      {"albert-mlm", "sequence", "albert-seqcls"},
      {"albert-mlm", "token", "albert-tokcls"},
      {"albert-mlm", "span", "qa-albert"},
      {"albert-mlm", "choice", "mc-albert"},
      {"deberta-mlm", "sequence", "deberta-seqcls"},
      {"deberta-mlm", "token", "deberta-tokcls"},
      {"deberta-mlm", "span", "qa-deberta"},
      {"deberta-mlm", "choice", "mc-deberta"},
      {"distilbert-mlm", "sequence", "distilbert-seqcls"},
      {"distilbert-mlm", "span", "qa-distilbert"},
      {"distilbert-mlm", "choice", "mc-distilbert"},
      {"mpnet-mlm", "sequence", "mpnet-seqcls"},
      {"mpnet-mlm", "choice", "mc-mpnet"},
      {"modernbert-mlm", "token", "modernbert-tokcls"},
      {"modernbert-mlm", "span", "qa-modernbert"},
      {"modernbert-mlm", "choice", "mc-modernbert"},
  };
  testing::TempDir dir("hf-export-heads");
  // names with the layer index left out: the golden folders differ in depth, not in names
  auto layerless = [](const std::set<std::string>& names, const std::string& unlike = "") {
    static const std::regex index(R"(\.\d+\.)");
    std::set<std::string> out;
    for (const auto& n : names)
      if (unlike.empty() || n.find(unlike) == std::string::npos) out.insert(std::regex_replace(n, index, ".N."));
    return out;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.from) + " --head " + c.head);
    const std::string model = (dir.path / (std::string(c.from) + "-" + c.head + ".safetensors")).string();
    HfConvertOptions o;
    o.head = c.head;
    if (o.head == "sequence" || o.head == "token") o.labels = {"neg", "pos", "mixed"};
    convert_hf((kGolden / c.from).string(), model, o);
    const fs::path out = dir.path / (std::string(c.from) + "-" + c.head + "-hf");
    const HfExportReport report = export_hf(model, out.string());
    EXPECT_EQ(report.architecture, read_json(kGolden / c.like / "config.json")["architectures"][0]);
    const ModelFile like_file = [&] {
      const std::string like = (dir.path / (std::string(c.like) + ".safetensors")).string();
      convert_hf((kGolden / c.like).string(), like);
      return load_model_file(like);
    }();
    EXPECT_EQ(layerless(names_of(folder_weights(out)), c.unlike), layerless(read_names(c.like, like_file)));
    const nlohmann::json config = read_json(out / "config.json");
    if (o.labels.size() == 3) {
      EXPECT_EQ(config["id2label"], nlohmann::json({{"0", "neg"}, {"1", "pos"}, {"2", "mixed"}}));
      EXPECT_EQ(config["label2id"]["mixed"], 2);
    }
    const std::string again = (dir.path / (std::string(c.from) + "-" + c.head + "-again.safetensors")).string();
    convert_hf(out.string(), again);  // as its own class now, no new head
    expect_same_model(model, again);
  }
}

// A run trained from a conversion (its metadata carries converted_from; qkv train may change dropout):
// the folder holds the trained weights, and converts back to them; in bf16 their rounded values; past
// max_shard_bytes in shards with save_pretrained's index.
TEST(HfExport, ATrainedFileItsDtypeAndItsShards) {
  testing::TempDir dir("hf-export-trained");
  const std::string base = (dir.path / "base.safetensors").string();
  HfConvertOptions o;
  o.head = "sequence", o.labels = {"a", "b"};
  convert_hf((kGolden / "roberta-mlm").string(), base, o);
  // "training": every weight moved, dropout changed as a training config's "model" may
  ModelFile f = load_model_file(base);
  Generator gen(7);
  const std::unique_ptr<Model> m = model_type(f.meta["model_type"]).build(f.meta["model"], nullptr);
  for (auto& [name, p] : m->module().named_parameters()) {
    const Tensor t = f.params.at(name);
    p.detach().copy_(add(t, Tensor::randn(t.shape(), gen, 0.f, 0.01f)));
  }
  nlohmann::json meta = f.meta;
  meta["model"]["dropout"] = 0.3;
  const std::string trained = (dir.path / "trained.safetensors").string();
  save_model_file(trained, m->module(), meta);
  // dropout differs from the checkpoint's: the model's config says 0.3, the folder the checkpoint's
  const fs::path out = dir.path / "trained-hf";
  export_hf(trained, out.string());
  const std::string back = (dir.path / "back.safetensors").string();
  convert_hf(out.string(), back);
  const ModelFile a = load_model_file(trained), b = load_model_file(back);
  for (const auto& [name, t] : a.params) EXPECT_TRUE(bits_equal(t, b.params.at(name))) << name;
  EXPECT_EQ(read_json(out / "config.json")["hidden_dropout_prob"],
            read_json(kGolden / "roberta-mlm" / "config.json").value("hidden_dropout_prob", 0.1));
  // bf16: each weight rounded once
  HfExportOptions bf16;
  bf16.store = io::StoreAs::kBF16;
  const fs::path out16 = dir.path / "trained-bf16";
  export_hf(trained, out16.string(), bf16);
  EXPECT_EQ(read_json(out16 / "config.json").value("torch_dtype", read_json(out16 / "config.json").value("dtype", "")),
            "bfloat16");
  const auto w16 = folder_weights(out16);
  const Tensor word = w16.at("roberta.embeddings.word_embeddings.weight");
  EXPECT_TRUE(bits_equal(word, a.params.at("word_embeddings.weight").to(DType::bf16).to(DType::f32)));
  // shards of at most 40 kB, and the index naming each weight's
  HfExportOptions small;
  small.max_shard_bytes = 40'000;
  const fs::path sharded = dir.path / "trained-sharded";
  const HfExportReport r = export_hf(trained, sharded.string(), small);
  const nlohmann::json index = read_json(sharded / "model.safetensors.index.json");
  std::set<std::string> files;
  for (auto& [w, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_GT(files.size(), 2u);
  EXPECT_EQ(index["weight_map"].size(), static_cast<size_t>(r.tensors));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), r.bytes);
  const std::string back_sharded = (dir.path / "back-sharded.safetensors").string();
  convert_hf(sharded.string(), back_sharded);
  expect_same_model(back, back_sharded);
}

// What cannot go back is refused, naming the file and why, and leaves nothing behind.
TEST(HfExport, RefusesWhatCannotGoBackWithNothingWritten) {
  testing::TempDir dir("hf-export-hostile");
  const std::string model = (dir.path / "gpt2.safetensors").string();
  convert_hf((kGolden / "gpt2").string(), model);
  auto refused = [&](const std::string& file, const std::string& out, const std::string& says,
                     const HfExportOptions& o = {}) {
    SCOPED_TRACE(says);
    const bool existed = fs::exists(out);
    try {
      export_hf(file, out, o);
      ADD_FAILURE() << "exported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    if (!existed) {
      EXPECT_FALSE(fs::exists(out));
    }
    for (const auto& entry : fs::directory_iterator(dir.path))
      EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  };
  // a model file whose metadata was edited
  auto edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    ModelFile f = load_model_file(model);
    edit(f.meta);
    const std::unique_ptr<Model> m = model_type(f.meta["model_type"]).build(f.meta["model"], nullptr);
    load_parameters(m->module(), f);
    const std::string path = (dir.path / name).string();
    save_model_file(path, m->module(), f.meta);
    return path;
  };
  const std::string out = (dir.path / "out").string();
  // (a file whose converted_from went is a GPT as qkv trains them: GPT-2 with its tokenizer.json)
  EXPECT_EQ(export_hf(edited("native.safetensors", [](nlohmann::json& m) { m.erase("converted_from"); }),
                      (dir.path / "native-hf").string())
                .architecture,
            "GPT2LMHeadModel");
  refused(edited("not-a-checkpoint.safetensors", [](nlohmann::json& m) { m["converted_from"] = "x"; }), out,
          "is not a Hugging Face checkpoint's");
  refused(edited("older.safetensors", [](nlohmann::json& m) { m["converted_from"].erase("tensors"); }), out,
          "converted by an older qkv");
  refused(edited("renamed.safetensors",
                 [](nlohmann::json& m) { m["converted_from"]["tensors"]["names"][0] = "transformer.h.0.nothing"; }),
          out, "is not one of GPT2LMHeadModel's");
  refused(edited("missing.safetensors", [](nlohmann::json& m) { m["converted_from"]["tensors"]["names"].erase(0); }),
          out, "holds the parameter");
  refused(edited("config.safetensors",
                 [](nlohmann::json& m) { m["converted_from"]["config"]["activation_function"] = "relu"; }),
          out, "the model's activation");
  refused(edited("multimodal.safetensors",
                 [](nlohmann::json& m) { m["converted_from"]["architecture"] = "Gemma3ForConditionalGeneration"; }),
          out, "vision tower");
  refused(edited("arch.safetensors", [](nlohmann::json& m) { m["converted_from"]["architecture"] = "BertModel"; }), out,
          "holds a \"gpt\" model");
  // an int8 file (qkv quantize: a translator's)
  const std::string marian = (dir.path / "marian.safetensors").string(),
                    int8 = (dir.path / "int8.safetensors").string();
  convert_hf((kGolden / "marian").string(), marian);
  quantize_model_file(marian, int8);
  refused(int8, out, "is int8 (qkv quantize)");
  // a destination that is a file, or a folder with files in it
  io::write_file_atomic((dir.path / "a-file").string(), "x");
  refused(model, (dir.path / "a-file").string(), "is not a folder");
  fs::create_directories(dir.path / "full");
  io::write_file_atomic((dir.path / "full" / "notes.txt").string(), "mine");
  refused(model, (dir.path / "full").string(), "is not empty");
  EXPECT_EQ(io::read_file((dir.path / "full" / "notes.txt").string()), "mine");
  // --force writes into it, keeping the other files, replacing an earlier export's shards
  HfExportOptions force;
  force.force = true, force.max_shard_bytes = 20'000;
  export_hf(model, (dir.path / "full").string(), force);
  EXPECT_TRUE(fs::exists(dir.path / "full" / "model.safetensors.index.json"));
  force.max_shard_bytes = 5'000'000'000;
  export_hf(model, (dir.path / "full").string(), force);
  EXPECT_TRUE(fs::exists(dir.path / "full" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path / "full" / "model.safetensors.index.json"));
  for (const auto& entry : fs::directory_iterator(dir.path / "full"))
    EXPECT_FALSE(entry.path().filename().string().starts_with("model-")) << entry.path();
  EXPECT_EQ(io::read_file((dir.path / "full" / "notes.txt").string()), "mine");
  // a folder named with a trailing slash is that folder; "/" names none
  export_hf(model, (dir.path / "slashed").string() + "/");
  EXPECT_TRUE(fs::exists(dir.path / "slashed" / "model.safetensors"));
  refused(model, "/", "names no folder");
  // sizes
  EXPECT_EQ(parse_shard_size("5GB", "s"), 5'000'000'000u);
  EXPECT_EQ(parse_shard_size("2GiB", "s"), uint64_t{2} << 30);
  EXPECT_EQ(parse_shard_size("1234", "s"), 1234u);
  for (const char* bad : {"", "GB", "-5GB", "5 GB", "1e9", "0", "5TB", "99999999999999GB"})
    EXPECT_THROW(parse_shard_size(bad, "s"), Error) << bad;
}

}  // namespace
}  // namespace qkv::models::hf_export_test
