// Fine-tuning extractive question answering: the "question_answering" task of `qkv train` (transformers'
// run_qa.py: a Trainer over AutoModelForQuestionAnswering on SQuAD).
//
//   model:   "init_from": a model file with a question-answering head — one `qkv convert --head span`
//            made from an encoder's checkpoint (its encoder pretrained, its qa_outputs new), or a
//            converted …ForQuestionAnswering to train on
//   data:    SQuAD's JSON ({"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers":
//            [{"text", "answer_start"}]}]}]}]}, v1.1 and v2.0) or JSONL of Hugging Face datasets' squad
//            rows ({"id", "question", "context", "answers": {"text": [...], "answer_start": [...]}});
//            answer_start counts characters (code points), as Python indexes the context. An example
//            with no answer needs data.version_2_with_negative (SQuAD 2.0)
//   windows  each example as tokenizer(question.lstrip(), context, truncation="only_second",
//            max_length, stride=doc_stride, return_overflowing_tokens=True) cuts it: the context in
//            windows, each doc_stride tokens into the one before
//   targets  a window's start and end: its first and last context token holding the first answer's
//            characters (a token holds a character where its offsets cover it), or the [CLS] token's
//            place where the answer is not wholly inside the window, or the example has none
//            (run_qa.py's prepare_train_features'; its walk past the context's last token is stopped there)
//   batch:   batch_size windows, drawn in epochs (io::EpochOrder), padded to the longest
//   loss:    logits s, e [B, T] (the head's start and end columns), the padding left out of the softmax
//              ½ ( (1/B) Σ_n −log softmax(s_n)[start_n] + (1/B) Σ_n −log softmax(e_n)[end_n] )
//            (…ForQuestionAnswering's, without the padded places its loss counts: run_qa.py pads every
//            window to max_length, so its figure moves with that padding)
//   eval:    val_loss over the validation windows; then each validation example answered as run_qa.py's
//            postprocess_qa_predictions answers it — over its windows, the n_best_size highest start and
//            end logits, the pairs inside the context with start ≤ end and at most max_answer_length
//            tokens, scored s + e; the best one's characters; SQuAD 2.0: "" where the least
//            s[0] + e[0] of its windows beats the best by more than null_score_diff_threshold — and
//            scored by SQuAD's val_exact_match and val_f1 (eval/squad.h; 0–100, as run_qa.py prints them)
//
// The model file it writes is a question-answering model like the one it started from: `qkv answer`
// reads it.
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
struct QuestionAnsweringDataConfig {
  std::string train, val;     // the files (.json: SQuAD's; .jsonl: an example a line); no val: val_fraction held out
  double val_fraction = 0.1;  // of the examples, drawn with train.seed
  int64_t max_length = 384;   // a window's tokens (run_qa.py's max_seq_length), at most the model's positions
  int64_t doc_stride = 128;   // tokens a window reaches into the one before
  bool version_2_with_negative = false;  // SQuAD 2.0: examples may have no answer
  int64_t n_best_size = 20;              // start and end logits a window offers the answers
  int64_t max_answer_length = 30;        // tokens
  double null_score_diff_threshold = 0;  // SQuAD 2.0: "" where null − best exceeds it
  static const io::Fields<QuestionAnsweringDataConfig>& fields();
};

// The whole config: {"task": "question_answering", "description", "init_from", "data", "model" (only its
// dropout rates may differ from the file's), "train"}.
struct QuestionAnsweringTaskConfig {
  std::string task, description, init_from;
  QuestionAnsweringDataConfig data;
  nlohmann::json model;
  TrainConfig train;
  static const io::Fields<QuestionAnsweringTaskConfig>& fields();
};

// One question on its context (both valid UTF-8), and its true answers: their texts, and the first
// one's bytes of the context (answer_begin = answer_end = 0 where there is none).
struct QaExample {
  std::string id, question, context;
  std::vector<std::string> answers;
  size_t answer_begin = 0, answer_end = 0;
  size_t line = 0;  // where the file gives it (a JSONL line; SQuAD JSON: the question's number from 1)
};

// Examples cut into windows: each window's encoding, example and target positions.
struct QaWindows {
  std::vector<text::HfEncoding> encodings;
  std::vector<int32_t> example, start, end;
  int64_t size() const { return static_cast<int64_t>(encodings.size()); }
};

// The examples of a .json (SQuAD's) or .jsonl file. A file that cannot be read or parsed, a missing
// field, an answer_start outside the context or where the context does not read the answer's text, an
// example without an answer unless `allow_no_answer`: a qkv::Error naming the file and the example.
std::vector<QaExample> read_qa_examples(const std::string& path, bool allow_no_answer);

// The examples' windows (max_length tokens, doc_stride into the one before) and targets, as above; each
// encoding's offsets, word and sequence ids kept where `keep_offsets` (the answers are read from them),
// else dropped once the targets are known (training reads the ids and token types alone).
QaWindows qa_windows(const std::vector<QaExample>& examples, const text::HfTokenizer& tokenizer,
                     const models::MaskedLanguageModel& model, int64_t max_length, int64_t doc_stride,
                     bool keep_offsets = true);

class QuestionAnsweringTask : public EncoderFineTuningTask {
 public:
  // config as above; relative paths start at base_dir.
  QuestionAnsweringTask(const nlohmann::json& config, const std::string& base_dir, bool verbose = false);

  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  const char* unit() const override { return "win"; }

  const QaWindows& train_windows() const { return train_; }
  const QaWindows& val_windows() const { return val_; }
  const std::vector<QaExample>& val_examples() const { return val_examples_; }
  // The answers evaluate() last gave the validation examples, in their order.
  const std::vector<std::string>& last_answers() const { return answers_; }

 private:
  // ½ (CE(s) + CE(e)) of logits [B, T, 2] against the windows `rows` of `set`, the padding (mask [B, T]
  // 0) left out.
  Tensor loss(const Tensor& logits, const Tensor& mask, const QaWindows& set, const std::vector<size_t>& rows) const;

  QuestionAnsweringDataConfig data_;
  std::vector<QaExample> val_examples_;
  QaWindows train_, val_;
  std::vector<std::string> answers_;
};

}  // namespace qkv::train
