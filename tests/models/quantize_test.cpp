// qkv quantize (models/quantize.h): the int8 file decodes token for token as the f32 file with
// --dtype int8, holds no f32 values for its int8 matrices once loaded (a read of one says why),
// loads with f32 weights as s[n] · W8[n, k], and a crafted int8 file is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "qkv/decode/translator.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/load.h"
#include "qkv/models/model_file.h"
#include "qkv/models/quantize.h"
#include "qkv/ops/inference_weight.h"
#include "testing.h"

namespace qkv::models {
namespace {

const std::string kShipped = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";

LoadOptions int8() {
  LoadOptions o;
  o.weights = InferenceWeights::int8;
  return o;
}
LoadOptions f32() {
  LoadOptions o;
  o.weights = InferenceWeights::f32;
  return o;
}

// The parameter `name` of a loaded model.
Tensor param_of(const Model& m, const std::string& name) {
  for (auto& [n, p] : m.module().named_parameters())
    if (n == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}

struct Quantized {
  testing::TempDir dir{"quantize"};
  std::string path = (dir.path / "en-fr.int8.safetensors").string();
  QuantizeReport report = quantize_model_file(kShipped, path, io::StoreAs::kF16);
};

// The int8 file holds the encoder's matrices as int8 rows too, whatever the CPU that wrote it: read
// as written with 8-bit activations, widened to f32 (s[n] · W8[n, k]) with 7.
TEST(Quantize, TheInt8FileTranslatesAsTheF32FileWithInt8Weights) {
  Quantized q;
  // 3 + 3 layers: the decoder's 18 matrices (in/out projections of 2 attentions + 2 of the FFN),
  // the encoder's 12 (1 attention + the FFN) and the embedding
  EXPECT_EQ(q.report.int8_tensors.size(), 31u);
  EXPECT_EQ(q.report.type, "transformer");
  EXPECT_LT(std::filesystem::file_size(q.path), std::filesystem::file_size(kShipped) * 3 / 5);
  const std::vector<std::string> sentences = {"The cat didn't cross the street because it was too tired.",
                                              "The trophy didn't fit in the suitcase because it was too big.",
                                              "Alice wrote a note and gave it to Bob.", "I don't know.",
                                              "Where is the station? My train leaves in ten minutes."};
  for (const int bits : testing::int8_activation_bit_choices()) {
    SCOPED_TRACE(std::to_string(bits) + "-bit activations");
    testing::Int8ActivationBits scope(bits);
    LoadedSeq2Seq from_f32 = load_seq2seq(kShipped, int8());
    LoadedSeq2Seq from_int8 = load_seq2seq(q.path, int8());
    if (bits == 7)  // the f32 encoder reads the rows' values: so must the f32 file's, to compare
      for (auto& [name, p] : from_f32.model->module().named_parameters())
        if (name.starts_with("transformer.encoder.") && p.dim() == 2)
          p.detach().copy_(QuantizedRows::quantize(p).dequantize());
    for (int beam : {1, 4}) {
      decode::TranslateOptions o;
      o.beam_size = beam;
      EXPECT_EQ(decode::Translator(*from_int8.model, *from_int8.tokenizer).translate(sentences, o),
                decode::Translator(*from_f32.model, *from_f32.tokenizer).translate(sentences, o))
          << "beam " << beam;
    }
  }
}

TEST(Quantize, TheInt8MatricesHoldNoF32ValuesAndAReadSaysWhy) {
  Quantized q;
  for (const int bits : testing::int8_activation_bit_choices()) {
    SCOPED_TRACE(std::to_string(bits) + "-bit activations");
    testing::Int8ActivationBits scope(bits);
    const int64_t before = allocated_bytes();
    LoadedSeq2Seq m = load_seq2seq(q.path, int8());
    const int64_t int8_file_bytes = allocated_bytes() - before;
    LoadedSeq2Seq f = load_seq2seq(kShipped, int8());
    const int64_t f32_file_bytes = allocated_bytes() - before - int8_file_bytes;
    // the f32 values of every int8-only matrix are gone (their int8 rows live outside the tensor memory)
    int64_t int8_only = 0;
    for (const Tensor& w : m.model->int8_only_weights()) int8_only += w.numel();
    EXPECT_GT(int8_only, 0);
    EXPECT_LE(int8_file_bytes, f32_file_bytes - 4 * int8_only + (int64_t{1} << 20));
    const std::string msg = testing::error_of([&] { (void)param_of(*m.model, "embedding.weight").to_vector(); });
    EXPECT_NE(msg.find("'" + q.path + "' holds 'embedding.weight' as int8 rows"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32 model file"), std::string::npos) << msg;
    // the encoder: int8-only with 8-bit activations; with 7 its f32 weights are the rows' values
    const std::string enc = "transformer.encoder.layers.0.linear1.weight";
    if (bits == 8) {
      const std::string e = testing::error_of([&] { (void)param_of(*m.model, enc).to_vector(); });
      EXPECT_NE(e.find("holds '" + enc + "' as int8 rows"), std::string::npos) << e;
    } else {
      EXPECT_TENSOR_NEAR(param_of(*m.model, enc), QuantizedRows::quantize(param_of(*f.model, enc)).dequantize(), 0.0);
    }
    // the teacher-forced forward pass needs the decoder's f32 weights: an error, not a crash
    const std::string fwd = testing::error_of(
        [&] { (void)m.model->forward(Tensor::from_ints({5, 6, 3}, {1, 3}), Tensor::from_ints({2, 7}, {1, 2})); });
    EXPECT_NE(fwd.find("qkv quantize"), std::string::npos) << fwd;
  }
}

// Without a dtype asked for, a quantized file decodes with its int8 rows (on the CPU) and any other
// file with f32; a dtype asked for wins.
TEST(Quantize, TheFilesOwnWeightsByDefault) {
  Quantized q;
  EXPECT_EQ(decoding_weights(q.path, {}), InferenceWeights::int8);
  EXPECT_EQ(decoding_weights(kShipped, {}), InferenceWeights::f32);
  EXPECT_EQ(decoding_weights(q.path, f32()), InferenceWeights::f32);
  EXPECT_EQ(decoding_weights(kShipped, int8()), InferenceWeights::int8);
  EXPECT_EQ(decoding_weights(q.path, {std::nullopt, Device::cuda(0)}), InferenceWeights::f32);  // int8 is the CPU's
  LoadedSeq2Seq m = load_seq2seq(q.path);  // int8: the matrices hold no f32 values
  const std::string msg = testing::error_of([&] { (void)param_of(*m.model, "embedding.weight").to_vector(); });
  EXPECT_NE(msg.find("as int8 rows"), std::string::npos) << msg;
}

TEST(Quantize, LoadedWithF32WeightsTheMatricesAreTheRowsValues) {
  Quantized q;
  LoadedSeq2Seq m = load_seq2seq(q.path, f32());
  LoadedSeq2Seq f = load_seq2seq(kShipped, f32());
  for (const std::string& name : q.report.int8_tensors) {
    SCOPED_TRACE(name);
    const Tensor w = param_of(*f.model, name);
    EXPECT_TENSOR_NEAR(param_of(*m.model, name), QuantizedRows::quantize(w).dequantize(), 0.0);
  }
  decode::TranslateOptions o;
  EXPECT_EQ(decode::Translator(*m.model, *m.tokenizer).translate({"I don't know."}, o).size(), 1u);
}

TEST(Quantize, RefusesWhatItCannotWriteAndNamesTheFile) {
  Quantized q;
  testing::TempDir d("quantize-refuse");
  const std::string out = (d.path / "out.safetensors").string();
  const std::string gpt = std::string(QKV_SOURCE_DIR) + "/models/shakespeare-char.safetensors";
  std::string msg = testing::error_of([&] { quantize_model_file(gpt, out); });
  EXPECT_NE(msg.find("'" + gpt + "' holds a \"gpt\" model"), std::string::npos) << msg;
  msg = testing::error_of([&] { quantize_model_file(q.path, out); });
  EXPECT_NE(msg.find("holds int8 weights already"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(out));
  msg = testing::error_of([&] { (void)load_model_file(q.path); });  // averaging, resuming, exporting
  EXPECT_NE(msg.find("'" + q.path + "' holds int8 weights"), std::string::npos) << msg;
}

// The quantized file, its tensors and metadata edited, saved under `name`.
std::string crafted(const Quantized& q, const std::string& name,
                    const std::function<void(io::SafetensorsFile&, nlohmann::json& meta)>& edit) {
  io::SafetensorsFile f = io::load_safetensors(q.path);
  nlohmann::json meta = nlohmann::json::parse(f.metadata.at("qkv"));
  edit(f, meta);
  f.metadata["qkv"] = meta.dump();
  const std::string path = (q.dir.path / name).string();
  io::save_safetensors(path, f.tensors, f.metadata);
  return path;
}

TensorBase& tensor(io::SafetensorsFile& f, const std::string& name) {
  for (auto& [n, t] : f.tensors)
    if (n == name) return t;
  throw Error("no tensor " + name);
}

TEST(Quantize, CraftedInt8FilesAreRefusedByName) {
  Quantized q;
  const std::string w = "transformer.decoder.layers.1.linear1.weight";
  const std::pair<std::string, std::function<void(io::SafetensorsFile&, nlohmann::json&)>> lies[] = {
      {"is not a matrix of the model",
       [](io::SafetensorsFile&, nlohmann::json& m) { m["quantized"]["tensors"].push_back("transformer.decoder.norm.weight"); }},
      {"is not a matrix of the model",
       [](io::SafetensorsFile&, nlohmann::json& m) { m["quantized"]["tensors"].push_back("no.such.weight"); }},
      {"lists \"" + w + "\" twice", [&](io::SafetensorsFile&, nlohmann::json& m) { m["quantized"]["tensors"].push_back(w); }},
      {"is not {\"dtype\": \"int8\"", [](io::SafetensorsFile&, nlohmann::json& m) { m["quantized"]["dtype"] = "int4"; }},
      {"value -128 at [3, 5]", [&](io::SafetensorsFile& f, nlohmann::json&) { tensor(f, w).data<int8_t>()[3 * 256 + 5] = -128; }},
      {"row 7's scale is nan",
       [&](io::SafetensorsFile& f, nlohmann::json&) { tensor(f, w + "_scale").data()[7] = std::numeric_limits<float>::quiet_NaN(); }},
      {"row 0's scale is -1", [&](io::SafetensorsFile& f, nlohmann::json&) { tensor(f, w + "_scale").data()[0] = -1.f; }},
      {"missing parameter \"" + w + "_scale\"",
       [&](io::SafetensorsFile& f, nlohmann::json&) { std::erase_if(f.tensors, [&](auto& e) { return e.first == w + "_scale"; }); }},
      {"is listed as quantized but is not I8",
       [&](io::SafetensorsFile& f, nlohmann::json&) { tensor(f, w) = TensorBase::zeros({1024, 256}); }},
      {"unexpected parameter \"" + w + "_scale\"",  // int8 rows the metadata does not list
       [&](io::SafetensorsFile&, nlohmann::json& m) {
         auto& t = m["quantized"]["tensors"];
         t.erase(std::find(t.begin(), t.end(), w));
       }},
  };
  int i = 0;
  for (const auto& [what, lie] : lies) {
    SCOPED_TRACE(what);
    const std::string p = crafted(q, "lie-" + std::to_string(i++) + ".safetensors", lie);
    for (const LoadOptions& o : {int8(), f32(), LoadOptions{}}) {
      const std::string msg = testing::error_of([&] { (void)load_seq2seq(p, o); });
      EXPECT_NE(msg.find("'" + p + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace qkv::models
