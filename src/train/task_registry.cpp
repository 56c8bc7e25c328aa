// The registry of training tasks. Adding one is its TrainingTask (train/<name>_task.h) and one
// entry below.
#include "qkv/train/task_registry.h"

#include <string>

#include "qkv/core/error.h"
#include "qkv/io/progress.h"
#include "qkv/train/caption_task.h"
#include "qkv/train/image_task.h"
#include "qkv/train/lm_task.h"
#include "qkv/train/masked_lm_task.h"
#include "qkv/train/multiple_choice_task.h"
#include "qkv/train/question_answering_task.h"
#include "qkv/train/text_classification_task.h"
#include "qkv/train/translation_task.h"

namespace qkv::train {

namespace {

// A task type whose builder makes a Task and describes its data with `data(task)`.
template <class Task, class Make, class Data>
TaskType task(const char* name, const char* description, const char* rate_unit, Make make, Data data) {
  return {name, description, rate_unit, [make, data](const TaskArgs& a) {
            // The data preparation's progress (tokenizer training, encoding) is shown where the
            // task is verbose: not under --quiet nor on a data-parallel rank other than the first.
            std::unique_ptr<Task> t;
            {
              const io::ProgressBar::MutedScope muted(!a.verbose);
              t = make(a);
            }
            const TrainConfig* cfg = &t->train_config();
            std::string about = data(*t);
            return BuiltTask{std::move(t), cfg, std::move(about)};
          }};
}

std::string nothing(const TrainingTask&) { return ""; }

}  // namespace

const std::vector<TaskType>& task_types() {
  static const std::vector<TaskType> types = {
      task<LMTask>(
          "lm", "a language model (a GPT or Llama) on a text file", "tokens",
          [](const TaskArgs& a) { return std::make_unique<LMTask>(a.config, a.base_dir, a.out_dir, a.resume); },
          [](const LMTask& t) {
            return detail::concat(t.data().train.size(), " train / ", t.data().val.size(), " val tokens");
          }),
      task<TranslationTask>(
          "translation", "a sequence-to-sequence translator on parallel text", "tokens",
          [](const TaskArgs& a) {
            return std::make_unique<TranslationTask>(a.config, a.base_dir, a.out_dir, a.resume, a.verbose);
          },
          nothing),
      task<ImageTask>(
          "image_classification", "an image classifier on an image set", "images",
          [](const TaskArgs& a) { return std::make_unique<ImageTask>(a.config, a.base_dir); },
          [](const ImageTask& t) {
            return detail::concat(t.train_set().size(), " train / ", t.eval_set().size(), " ",
                                  t.eval_sampled_from() ? detail::concat("(of ", t.eval_sampled_from(), ") ") : "",
                                  t.evaluates_on_test() ? "test" : "held-out", " images");
          }),
      task<CaptionTask>(
          "captioning", "an image captioner on scenes made on the fly", "images",
          [](const TaskArgs& a) {
            return std::make_unique<CaptionTask>(a.config, a.base_dir, a.out_dir, a.resume, a.verbose);
          },
          nothing),
      task<TextClassificationTask>(
          "text_classification",
          "an encoder's sequence classifier (BERT, RoBERTa, DeBERTa, ModernBERT, …) fine-tuned on labelled texts",
          "examples",
          [](const TaskArgs& a) { return std::make_unique<TextClassificationTask>(a.config, a.base_dir, a.verbose); },
          [](const TextClassificationTask& t) {
            return detail::concat(t.train_set().size(), " train / ", t.val_set().size(), " val examples, ",
                                  t.labels().size(), " labels (", enum_name(t.problem()), ")");
          }),
      task<TextClassificationTask>(
          "token_classification",
          "an encoder's token classifier (NER: BERT, RoBERTa, DeBERTa, ModernBERT, …) fine-tuned on tagged words",
          "examples",
          [](const TaskArgs& a) { return std::make_unique<TextClassificationTask>(a.config, a.base_dir, a.verbose); },
          [](const TextClassificationTask& t) {
            return detail::concat(t.train_set().size(), " train / ", t.val_set().size(), " val sentences, ",
                                  t.labels().size(), " tags");
          }),
      task<QuestionAnsweringTask>(
          "question_answering",
          "an encoder's extractive question answering (SQuAD: BERT, RoBERTa, DeBERTa, ModernBERT, …) fine-tuned on "
          "questions with their contexts and answers",
          "windows",
          [](const TaskArgs& a) { return std::make_unique<QuestionAnsweringTask>(a.config, a.base_dir, a.verbose); },
          [](const QuestionAnsweringTask& t) {
            return detail::concat(t.train_windows().size(), " train / ", t.val_windows().size(), " val windows (",
                                  t.val_examples().size(), " val questions)");
          }),
      task<MaskedLMTask>(
          "masked_lm",
          "an encoder's masked-language-model pre-training (BERT, RoBERTa, DeBERTa, ModernBERT, …) continued on a "
          "text",
          "tokens", [](const TaskArgs& a) { return std::make_unique<MaskedLMTask>(a.config, a.base_dir, a.verbose); },
          [](const MaskedLMTask& t) {
            return detail::concat(t.train_blocks().size(), " train / ", t.val_blocks().size(), " val blocks (",
                                  t.train_blocks().tokens(), " / ", t.val_blocks().tokens(), " tokens)");
          }),
      task<MultipleChoiceTask>(
          "multiple_choice",
          "an encoder's multiple-choice head (SWAG: BERT, RoBERTa, DeBERTa, ModernBERT, …) fine-tuned on contexts "
          "with their endings",
          "examples",
          [](const TaskArgs& a) { return std::make_unique<MultipleChoiceTask>(a.config, a.base_dir, a.verbose); },
          [](const MultipleChoiceTask& t) {
            return detail::concat(t.train_set().size(), " train / ", t.val_set().size(), " val examples, ",
                                  t.train_set().choices, " choices each");
          }),
  };
  return types;
}

const TaskType& task_type(const std::string& name, const std::string& config_name) {
  std::string known;
  const auto& types = task_types();
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i].name == name) return types[i];
    known += (i == 0 ? "" : i + 1 == types.size() ? " or " : ", ") + ("\"" + types[i].name + "\"");
  }
  throw Error(detail::concat("config '", config_name, "': unknown \"task\" \"", name, "\" (expected ", known, ")"));
}

}  // namespace qkv::train
