// export_hf of the language models qkv trains (models/hf/native.h): each exported folder converts back
// (hf_convert.h, whose conversions the golden folders check against transformers) to a model that
// computes the same logits and a tokenizer that cuts Tiny Shakespeare into the same ids; what no
// Hugging Face class holds is refused by name. (tests/golden/check_export_with_transformers.py runs the
// exports in transformers itself.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "qkv/core/rng.h"
#include "qkv/io/file.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/hf_export.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/ops.h"
#include "qkv/text/hf_tokenizer.h"
#include "testing.h"

namespace qkv::models::hf_export_native_test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kShakespeare = std::string(QKV_SOURCE_DIR) + "/data/tinyshakespeare/input.txt";

// A model qkv trained, as `qkv train` leaves it: random weights (every one drawn, biases and norms too,
// so that a weight put in the wrong place shows) and the tokenizer.
std::string native_file(const testing::TempDir& d, const std::string& name, const std::string& type, const json& config,
                        const json& tokenizer) {
  Generator gen(7);
  std::unique_ptr<Model> m = model_type(type).build(config, &gen);
  for (auto& [n, p] : m->module().named_parameters()) p.detach().copy_(Tensor::randn(p.shape(), gen, 0.f, 0.2f));
  const std::string path = (d.path / (name + ".safetensors")).string();
  save_model_file(path, m->module(), {{"model_type", type}, {"model", m->config_json()}, {"tokenizer", tokenizer}});
  return path;
}

// export → convert: the logits of random ids agree (the same products; a bias of 0 added is exact),
// and the tokenizers cut `text` alike. Returns the folder's config.json.
json round_trip(const testing::TempDir& d, const std::string& file, const std::string& arch, const std::string& text) {
  SCOPED_TRACE(file);
  const std::string folder = (d.path / (fs::path(file).stem().string() + "-hf")).string(),
                    back = (d.path / (fs::path(file).stem().string() + "-back.safetensors")).string();
  const HfExportReport report = export_hf(file, folder);
  EXPECT_EQ(report.architecture, arch);
  convert_hf(folder, back);
  const LoadedLanguageModel a = load_language_model(file), b = load_language_model(back);
  EXPECT_EQ(b.meta["converted_from"]["architecture"], arch);
  const int64_t T = std::min<int64_t>(a.model->block_size(), 24);
  std::vector<int32_t> values;
  for (int64_t i = 0; i < 2 * T; ++i) values.push_back(static_cast<int32_t>((i * 37 + 11) % a.model->vocab_size()));
  const Tensor ids = Tensor::from_ints(values, {2, T});
  const Tensor x = a.model->forward(ids).contiguous(), y = b.model->forward(ids).contiguous();
  EXPECT_EQ(x.shape(), y.shape());
  float worst = 0.f;
  for (int64_t i = 0; x.shape() == y.shape() && i < x.numel(); ++i)
    worst = std::max(worst, std::fabs(x.data<float>()[i] - y.data<float>()[i]));
  EXPECT_LE(worst, 1e-5f) << "logits differ";
  const std::vector<int32_t> mine = a.tokenizer.encode(text), theirs = b.tokenizer.encode(text);
  EXPECT_EQ(mine.size(), theirs.size());
  EXPECT_TRUE(mine == theirs) << "tokenizers cut the text differently";
  EXPECT_EQ(b.tokenizer.decode(theirs), text);
  return json::parse(io::read_file(folder + "/config.json"));
}

std::string shakespeare(size_t bytes) { return io::read_file(kShakespeare).substr(0, bytes); }

TEST(HfExportNative, TheShippedCharacterGptIsGpt2) {
  testing::TempDir d("hf-export-native");
  const std::string text = io::read_file(kShakespeare);
  const json c =
      round_trip(d, std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors", "GPT2LMHeadModel", text);
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["activation_function"], "gelu");  // (nanoGPT's exact GELU)
  EXPECT_EQ(c["layer_norm_epsilon"].dump(), "1e-05");
  const json tok = json::parse(io::read_file((d.path / "shakespeare-char-hf" / "tokenizer.json").string()));
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["vocab"].size(), 65u);
  EXPECT_TRUE(tok["model"]["merges"].empty());
}

TEST(HfExportNative, GptsWithBiasesAndTheirActivations) {
  testing::TempDir d("hf-export-native");
  const std::string text = shakespeare(20000);
  const json chars = text::LMTokenizer::chars(text).to_json();
  const json base = {{"vocab_size", 62}, {"block_size", 32}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 16}};
  json biased = base;
  biased["bias"] = true, biased["activation"] = "gelu_tanh", biased["n_inner"] = 24;
  biased["vocab_size"] = text::LMTokenizer::chars(text).vocab_size();
  json c = round_trip(d, native_file(d, "biased", "gpt", biased, chars), "GPT2LMHeadModel", text);
  EXPECT_EQ(c["activation_function"], "gelu_new");
  EXPECT_EQ(c["n_inner"], 24);
  json relu = biased;
  relu["bias"] = false, relu["activation"] = "relu", relu.erase("n_inner");
  c = round_trip(d, native_file(d, "relu", "gpt", relu, chars), "GPT2LMHeadModel", text);
  EXPECT_TRUE(c["n_inner"].is_null());
}

TEST(HfExportNative, EachLlamaTakesTheClassItsOptionsName) {
  testing::TempDir d("hf-export-native");
  const std::string text = shakespeare(20000);
  const json chars = text::LMTokenizer::chars(text).to_json();
  const json base = {{"vocab_size", text::LMTokenizer::chars(text).vocab_size()},
                     {"hidden_size", 32},
                     {"intermediate_size", 40},
                     {"num_hidden_layers", 2},
                     {"num_attention_heads", 4},
                     {"num_key_value_heads", 2},
                     {"max_position_embeddings", 64}};
  struct Case {
    const char* name;
    json options;
    const char* arch;
  };
  const Case cases[] = {
      {"llama", json::object(), "LlamaForCausalLM"},
      {"llama-tied-biased",
       {{"tie_word_embeddings", true},
        {"qkv_bias", true},
        {"o_bias", true},
        {"mlp_bias", true},
        {"head_dim", 16},
        {"rope_theta", 500000.0}},
       "LlamaForCausalLM"},
      {"llama3-rope",
       {{"rope_scaling", "llama3"}, {"rope_factor", 8.0}, {"rope_original_max_position_embeddings", 16}},
       "LlamaForCausalLM"},
      {"longrope",
       {{"rope_scaling", "longrope"},
        {"rope_original_max_position_embeddings", 16},
        {"rope_short_factor", {1.0, 1.5, 2.0, 3.0}},
        {"rope_long_factor", {2.0, 3.0, 5.0, 7.0}},
        {"rope_attention_factor", 1.2}},
       "LlamaForCausalLM"},
      {"qwen2-like", {{"qkv_bias", true}}, "LlamaForCausalLM"},  // (o_proj's bias 0)
      {"qwen3-o-bias", {{"qk_norm", true}, {"o_bias", true}}, "Qwen3ForCausalLM"},
      {"qwen3", {{"qk_norm", true}}, "Qwen3ForCausalLM"},
      {"mistral", {{"sliding_window", 8}}, "MistralForCausalLM"},
      {"qwen3-window", {{"qk_norm", true}, {"sliding_window", 8}}, "Qwen3ForCausalLM"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json config = base;
    config.update(c.options);
    round_trip(d, native_file(d, c.name, "llama", config, chars), c.arch, text);
  }
}

// The SentencePiece models qkv's lm task trains (data.tokenizer {"type": "sentencepiece"}): the export's
// tokenizer.json cuts all of Tiny Shakespeare into the ids qkv's tokenizer does.
TEST(HfExportNative, SentencePieceTokenizersCutShakespeareAlike) {
  testing::TempDir d("hf-export-native");
  const std::string all = io::read_file(kShakespeare), some = all.substr(0, 200000);
  for (const char* type : {"unigram", "bpe", "char"}) {
    SCOPED_TRACE(type);
    const text::LMTokenizer tok =
        text::LMTokenizer::train_sentencepiece(some, (d.path / (std::string("sp-") + type)).string(), 300, type);
    const text::LMTokenizer::HfForm hf = tok.to_hf(64);
    const text::HfTokenizer theirs =
        text::HfTokenizer::from_json(hf.tokenizer_json.dump(), hf.tokenizer_config.dump(), "the export");
    const std::string text = some.substr(0, 60000);  // (every character in the vocabulary)
    const std::vector<int32_t> a = tok.encode(text), b = theirs.encode(text, /*add_special_tokens=*/true);
    EXPECT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b) << "the cuts differ";
    EXPECT_EQ(theirs.decode(b, /*skip_special_tokens=*/false), text);
    EXPECT_EQ(hf.tokenizer_config["unk_token"], "<unk>");
    EXPECT_EQ(hf.bos_id, 2);
    EXPECT_EQ(hf.eos_id, 3);
    // and a model with it, through the file
    const json config = {
        {"vocab_size", tok.vocab_size()}, {"block_size", 32}, {"n_layer", 1}, {"n_head", 2}, {"n_embd", 16}};
    const json c = round_trip(d, native_file(d, std::string("gpt-") + type, "gpt", config, tok.to_json()),
                              "GPT2LMHeadModel", text.substr(0, 5000));
    EXPECT_EQ(c["bos_token_id"], 2);
    EXPECT_EQ(c["eos_token_id"], 3);
  }
}

TEST(HfExportNative, RefusesWhatNoClassHoldsWithNothingWritten) {
  testing::TempDir d("hf-export-native");
  const std::string text = shakespeare(5000);
  const json chars = text::LMTokenizer::chars(text).to_json();
  const int64_t V = text::LMTokenizer::chars(text).vocab_size();
  auto refused = [&](const std::string& file, const std::string& says) {
    SCOPED_TRACE(says);
    const std::string out = (d.path / "out").string();
    const std::string msg = testing::error_of([&] { export_hf(file, out); });
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(out));
  };
  const json gpt = {{"vocab_size", V}, {"block_size", 16}, {"n_layer", 1}, {"n_head", 2}, {"n_embd", 8}};
  const json llama = {{"vocab_size", V},        {"hidden_size", 16},        {"intermediate_size", 24},
                      {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"max_position_embeddings", 16}};
  json silu = gpt;
  silu["activation"] = "silu";
  refused(native_file(d, "silu", "gpt", silu, chars), "the activation silu");
  json offset = gpt;
  offset["position_offset"] = 2;
  refused(native_file(d, "offset", "gpt", offset, chars), "position_offset");
  const std::pair<const char*, json> llamas[] = {
      {"a tanh-GELU gate", {{"hidden_act", "gelu_tanh"}}},
      {"Gemma's options", {{"sandwich_norms", true}}},
      {"partial_rotary_factor", {{"partial_rotary_factor", 0.5}}},
      {"GPT-NeoX's or Phi's form", {{"norm", "layer"}, {"gated_mlp", false}, {"parallel_residual", true}}},
      {"GPT-NeoX's or Phi's form", {{"lm_head_bias", true}}},
      {"qk_norm and MLP biases", {{"qk_norm", true}, {"mlp_bias", true}}},
      {"a sliding window and biases", {{"sliding_window", 4}, {"qkv_bias", true}}},
  };
  int i = 0;
  for (const auto& [says, options] : llamas) {
    json config = llama;
    config.update(options);
    refused(native_file(d, "llama-" + std::to_string(i++), "llama", config, chars), says);
  }
  // a tokenizer trained otherwise than the lm task trains it (nmt_nfkc, a dummy prefix)
  text::SentencePiece::train({kShakespeare}, (d.path / "nfkc").string(), 200, "unigram", 1.0, 2000, false,
                             {{"user_defined_symbols", "\n"}});
  const text::LMTokenizer nfkc =
      text::LMTokenizer::sentencepiece(text::SentencePiece::load((d.path / "nfkc.model").string()));
  json sp_gpt = gpt;
  sp_gpt["vocab_size"] = nfkc.vocab_size();
  refused(native_file(d, "nfkc", "gpt", sp_gpt, nfkc.to_json()), "normalization \"nmt_nfkc\"");
  // a translator qkv trained (no Hugging Face class qkv writes holds one)
  refused(std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors", "no Hugging Face class qkv writes holds one");
}

}  // namespace
}  // namespace qkv::models::hf_export_native_test
