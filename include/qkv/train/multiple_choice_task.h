// Fine-tuning multiple choice: the "multiple_choice" task of `qkv train` (transformers' run_swag.py: a
// Trainer over AutoModelForMultipleChoice on SWAG).
//
//   model:   "init_from": a model file with a multiple-choice head — one `qkv convert --head choice` made
//            from an encoder's checkpoint (its encoder pretrained, its pooler and classifier new), or a
//            converted …ForMultipleChoice to train on
//   data:    JSONL (Hugging Face datasets' swag rows): each line's context (data.context, "sent1"), the
//            start of the ending its choices share (data.header, "sent2"; "" for none), its endings
//            (data.endings: a list of columns, SWAG's ending0 … ending3, or one column holding a list)
//            and the right one's index (data.label, "label"); every example with as many endings
//   pairs    each ending beside its context as run_swag.py encodes them: tokenizer(context,
//            f"{header} {ending}", truncation=True, max_length) (decode/multiple_choice.h)
//   batch:   batch_size examples, drawn in epochs (io::EpochOrder), their C pairs each padded to the
//            longest of the batch (DataCollatorForMultipleChoice), B·C rows
//   loss:    the pairs' scores s [B, C] (the head's one output), (1/B) Σ_n −log softmax(s_n)[label_n]
//            (…ForMultipleChoice's)
//   eval:    every validation example: val_loss, and val_accuracy (argmax s = label: run_swag.py's)
//
// The model file it writes is a multiple-choice model like the one it started from: `qkv choose` and
// Python's multiple_choice read it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/io/config.h"
#include "qkv/io/sample.h"
#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/train/encoder_task.h"
#include "qkv/train/trainer.h"

namespace qkv::train {

// The "data" section.
struct MultipleChoiceDataConfig {
  std::string train, val;  // .jsonl or .csv; no val: val_fraction of train held out (drawn with train.seed)
  double val_fraction = 0.1;
  std::string context = "sent1", header = "sent2", label = "label";
  // the endings' columns (SWAG's ending0 … ending3), or one column's name (a string) holding a list
  nlohmann::json endings = nlohmann::json::array({"ending0", "ending1", "ending2", "ending3"});
  // a pair's tokens (run_swag.py's max_seq_length; 0: the tokenizer's model_max_length, at most 1,024
  // and the model's positions)
  int64_t max_length = 0;
  static const io::Fields<MultipleChoiceDataConfig>& fields();
};

// The whole config: {"task": "multiple_choice", "description", "init_from", "data", "model" (only its
// dropout rates may differ from the file's), "train"}.
struct MultipleChoiceTaskConfig {
  std::string task, description, init_from;
  MultipleChoiceDataConfig data;
  nlohmann::json model;
  TrainConfig train;
  static const io::Fields<MultipleChoiceTaskConfig>& fields();
};

// Examples encoded: example n's C pairs are pairs[n·C … n·C + C), its answer labels[n].
struct ChoiceSet {
  int64_t choices = 0;  // C
  std::vector<text::HfEncoding> pairs;
  std::vector<int32_t> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

class MultipleChoiceTask : public EncoderFineTuningTask {
 public:
  // config as above; relative paths start at base_dir.
  MultipleChoiceTask(const nlohmann::json& config, const std::string& base_dir, bool verbose = false);

  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  const char* unit() const override { return "ex"; }

  const ChoiceSet& train_set() const { return train_; }
  const ChoiceSet& val_set() const { return val_; }

 private:
  // The examples `rows` of `set`: their scores [B, C] and mean cross-entropy; `right` (where given)
  // counts the argmax hits.
  Tensor loss(const ChoiceSet& set, const std::vector<size_t>& rows, int64_t* right = nullptr) const;

  MultipleChoiceDataConfig data_;
  ChoiceSet train_, val_;
};

}  // namespace qkv::train
