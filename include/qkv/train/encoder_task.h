// What the tasks that fine-tune an encoder (text and token classification, question answering, multiple
// choice, masked-LM pre-training continued) share: the model file they start from (init_from: its
// masked language model, its tokenizer, and the metadata carried into every file they write), the
// train config, the task's own dropout stream and its epoch order.
#pragma once

#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "qkv/core/rng.h"
#include "qkv/io/sample.h"
#include "qkv/models/model.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/train/init_from.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

class EncoderFineTuningTask : public TrainingTask {
 public:
  models::Model& model() override { return *model_; }
  Generator* dropout_generator() override { return &gen_; }
  // the model's type, config and tokenizer, with the started-from file's "converted_from" and "init_from"
  nlohmann::json model_metadata() const override { return fine_tuned_metadata(*model_, tokenizer_meta_, carried_); }
  uint64_t rng_state() const override { return gen_.counter(); }
  void set_rng_state(uint64_t c) override { gen_.set_counter(c); }

  const TrainConfig& train_config() const { return cfg_; }

 protected:
  TrainConfig cfg_;
  text::LMTokenizer tok_;
  std::unique_ptr<models::MaskedLanguageModel> model_;
  int32_t pad_id_ = 0;
  Generator gen_;
  io::EpochOrder order_{1, 0};
  nlohmann::json tokenizer_meta_, carried_;  // (load_pretrained_encoder's file.tokenizer and file.carried)
};

}  // namespace qkv::train
