// Loading a model onto the device it decodes on (models::LoadOptions::device): the parameters move
// there before the inference copies are made, so a bf16 copy lives beside them on a GPU and feeds
// cuBLAS's bf16 GEMM; int8 copies are the CPU's kernels' and are refused for a GPU, as is a device
// the build or machine lacks — before the file is read.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/core/cuda.h"
#include "qkv/decode/translator.h"
#include "qkv/models/load.h"
#include "testing.h"

namespace qkv::models {
namespace {

using testing::error_of;

const std::string kEnFr = std::string(QKV_SOURCE_DIR) + "/models/en-fr.safetensors";

TEST(LoadOntoADevice, AMissingDeviceOrInt8OnAGpuIsRefusedBeforeTheFileIsRead) {
  LoadOptions o;
  o.device = Device::cuda();
  const std::string missing = "/nonexistent/model.safetensors";
  if (!device_available(Device::cuda())) {
    const std::string e = error_of([&] { load_seq2seq(missing, o); });
    EXPECT_NE(e.find("'" + missing + "': cannot decode on cuda:0"), std::string::npos) << e;
    EXPECT_EQ(e.find("No such file"), std::string::npos) << e;
    return;
  }
  o.weights = nn::InferenceWeights::int8;
  const std::string e = error_of([&] { load_language_model(missing, o); });
  EXPECT_NE(e.find("int8 weights are read by the CPU's kernels only"), std::string::npos) << e;
  EXPECT_NE(e.find("decode with f32 or bf16 weights"), std::string::npos) << e;
}

// The shipped translator loaded onto a GPU with bf16 weights (their copies made there: the linears
// through cuBLAS's bf16 GEMM) translates the seeds' sentences as the CPU does in f32.
TEST(LoadOntoADevice, TheShippedTranslatorTranslatesInBf16OnAGpuAsInF32OnTheCpu) {
  if (!device_available(Device::cuda())) GTEST_SKIP() << "no CUDA GPU here (or no CUDA backend in this build)";
  LoadOptions o;
  o.device = Device::cuda();
  const int64_t before = cuda::memory_allocated();
  LoadedSeq2Seq gpu_f32 = load_seq2seq(kEnFr, o);
  const int64_t f32_bytes = cuda::memory_allocated() - before;
  o.weights = nn::InferenceWeights::bf16;
  LoadedSeq2Seq gpu = load_seq2seq(kEnFr, o);
  for (const auto& [name, p] : gpu.model->module().named_parameters())
    ASSERT_EQ(p.device(), Device::cuda()) << name;
  // the bf16 copies (half the bytes of the weight matrices, nearly all of the model) live on the GPU too
  EXPECT_GT(cuda::memory_allocated() - before - f32_bytes, f32_bytes + f32_bytes / 5);
  LoadedSeq2Seq cpu = load_seq2seq(kEnFr);
  const std::vector<std::string> seeds = {"The cat didn't cross the street because it was too tired.",
                                          "The trophy didn't fit in the suitcase because it was too big.",
                                          "Alice wrote a note and gave it to Bob.", "I like tea.",
                                          "Where is the station?", "She has been reading this book for two hours."};
  for (int64_t beam : {1, 4}) {
    decode::TranslateOptions t;
    t.beam_size = beam;
    const auto a = decode::Translator(*cpu.model, *cpu.tokenizer).translate(seeds, t);
    const auto b = decode::Translator(*gpu.model, *gpu.tokenizer).translate(seeds, t);
    ASSERT_EQ(b.size(), a.size());
    int same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    // (bf16 weights may tip a near tie between two words; nearly every line is the same)
    EXPECT_GE(same, static_cast<int>(a.size()) - 1) << "beam " << beam;
  }
}

}  // namespace
}  // namespace qkv::models
