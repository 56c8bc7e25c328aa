// Every model-file loader, through the registry: whatever kind of model the bytes claim to hold,
// loading it ends in a loaded model or a qkv::Error — never a crash, never an allocation the file
// does not justify (models/load.cpp builds under an AllocationBudget). A sequence-to-sequence model
// loads twice: with f32 weights and with int8 (an int8 file's rows taken as written).
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/models/load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qkv::models;
  const std::string path = qkv::fuzz::as_file(data, size, "model.safetensors");
  try {
    switch (model_file_kind(path)) {
      case Kind::seq2seq: {
        load_seq2seq(path);
        LoadOptions int8;  // an int8 file's rows go to the int8 weights as written (qkv quantize)
        int8.weights = qkv::nn::InferenceWeights::int8;
        load_seq2seq(path, int8);
        break;
      }
      case Kind::image_to_text: load_image_to_text(path); break;
      case Kind::language_model: load_language_model(path); break;
      case Kind::image_classifier: load_image_classifier(path); break;
      case Kind::masked_language_model: load_masked_language_model(path); break;
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
