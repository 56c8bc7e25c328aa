// The config parsers on arbitrary JSON: the train section, every task's config tables, every
// registered model type's hyper-parameters (built under an allocation budget, as a loader does), and
// every Hugging Face architecture's config.json converter (qkv convert) with the model it describes.
// Each ends in a value or a qkv::Error; bytes that are not JSON are skipped.
#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/tensor.h"
#include "qkv/models/hf_convert.h"
#include "qkv/models/registry.h"
#include "qkv/train/image_task.h"
#include "qkv/train/lm_task.h"
#include "qkv/train/translation_task.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto quietly = [](auto&& f) {
    try {
      f();
    } catch (const qkv::Error&) {
    }
  };
  quietly([&] { qkv::train::TrainConfig::from_json(j); });
  quietly([&] { qkv::train::LMTaskConfig::fields().from_json(j); });
  quietly([&] { qkv::train::TranslationTaskConfig::fields().from_json(j); });
  quietly([&] { qkv::train::ImageTaskConfig::fields().from_json(j); });
  quietly([&] { qkv::train::LMTokenizerSpec::from_json(j); });
  // A Hugging Face config.json through each architecture's converter (qkv convert), and the qkv
  // model its config describes built as below.
  for (const qkv::models::HfArchitecture& a : qkv::models::hf_architectures())
    quietly([&] {
      const nlohmann::json config = a.config(j);
      qkv::AllocationBudget budget(size_t{2} << 20, "fuzz: a model of more than 2 MiB");
      qkv::models::model_type(a.model_type).build(config, nullptr);
    });
  for (const qkv::models::ModelType& t : qkv::models::model_types())
    quietly([&] {
      // A small cap: what is under test is that every builder checks its config and stays inside the
      // budget, not the cap's size; at 64 MiB the fuzzer spent its time initialising large models
      // (~1 s each under ASan) and fell from ~10,000 to ~100 executions/s.
      qkv::AllocationBudget budget(size_t{2} << 20, "fuzz: a model of more than 2 MiB");
      t.build(j, nullptr);
    });
  return 0;
}
