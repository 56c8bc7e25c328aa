// Training configs as `qkv train` and Python's qkv.train take them, on arbitrary JSON: read through
// io::parse_json (nesting bounded), then the LM task built from them over a small text — its train
// section, its model built under the memory plan (train/memory_plan.h) and its batch sizes checked
// (batch_size × block_size × vocab) — and one batch of windows drawn. The machine is planned as
// 64 MiB (QKV_MEMORY_BYTES), so any size a config asks for is refused or small, never allocated:
// n_layer 10⁵, n_embd 2^40 and batch_size 2^62 must each end in a qkv::Error. config_fuzz covers the
// field tables of every task and model type; this target, what the LM task derives from them.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/json.h"
#include "qkv/train/lm_task.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("QKV_MEMORY_BYTES", "67108864", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string text_path = [] {
    std::string text;
    for (int i = 0; i < 40; ++i) text += "First Citizen: before we proceed any further, hear me speak.\n";
    return qkv::fuzz::as_file(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "train-text");
  }();
  nlohmann::json j;
  try {
    j = qkv::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz config");
  } catch (const std::exception&) {
    return 0;  // not JSON, or nested too deep: refused, as intended
  }
  if (!j.is_object()) return 0;
  // an LM config over the small text (the fuzzer chooses the model and train sections)
  j["task"] = "lm";
  j["data"] = {{"path", text_path}, {"val_fraction", 0.1}, {"tokenizer", "char"}};
  if (!j.contains("model")) j["model"] = nlohmann::json::object();
  if (!j.contains("train")) j["train"] = nlohmann::json::object();
  try {
    qkv::train::LMTask task(j, "", "", false);
    const qkv::train::TrainConfig& c = task.train_config();
    const std::vector<int32_t>& ids = task.data().train;
    qkv::train::lm_batch(ids, c.batch_size, task.language_model().block_size(), c.seed, 0);
  } catch (const qkv::Error&) {
  }
  return 0;
}
