// Fine-tuning an encoder's classifier on labelled texts: the "text_classification" task of `qkv train`
// (transformers' run_glue.py: a Trainer over AutoModelForSequenceClassification) and its token-level
// sibling, the "token_classification" task (run_ner.py: AutoModelForTokenClassification).
//
//   model:  "init_from": a model file with a sequence (token) classifier — one `qkv convert --head
//           sequence|token --labels …` made from a BERT-family checkpoint (its encoder pretrained, its
//           classifier new), or a converted or fine-tuned classifier; its labels, tokenizer and
//           problem_type
//   data:   text_classification: a TSV file (a header line naming the columns, a tab between
//           fields, no quoting: GLUE's) or a JSONL file (an object a line) of examples — a text,
//           optionally a second text (the pair: an NLI hypothesis, a paraphrase's other sentence)
//           and a label: an id or a label name of the model (a list of them, multi-label; a number,
//           regression). Each example is cut to data.max_length tokens as tokenizer(text, pair,
//           truncation=True) cuts it.
//           token_classification: JSONL of sentences split into words with a tag each
//           ({"tokens": [...], "ner_tags": [...]}, as Hugging Face datasets' conll2003 writes it), or
//           CoNLL text (.conll, .txt: a word a line, its tag the last column, a blank line between
//           sentences, -DOCSTART- lines skipped). The words are encoded as tokenizer(words,
//           is_split_into_words=True, truncation=True) encodes them; each word's first token takes its
//           tag, the others none (−100) — or, with data.label_all_tokens, the word's tag with B-X read
//           as I-X (run_ner.py's).
//   batch:  batch_size examples, drawn in epochs (a seeded order each epoch: io::EpochOrder),
//           padded to the longest (attention_mask 0 on padding)
//   loss:   by the model's problem_type, as …ForSequenceClassification computes it (logits z [B, L]):
//             single_label  (1/B) Σ_n −log softmax(z_n)[y_n]                       cross-entropy
//             multi_label   (1/BL) Σ_{n,l} softplus(z_nl) − y_nl z_nl               BCE with logits
//             regression    (1/B) Σ_n (z_n − y_n)²   (one label)                    MSE
//           (auto: regression for one label, single_label otherwise); tokens: the cross-entropy's
//           mean over the tokens with a tag (z [B, T, L])
//   eval:   every validation example (data.val, or a seeded data.val_fraction of data.train held
//           out): val_loss, and val_accuracy (argmax z = y; multi-label: every label's
//           [σ(z) ≥ ½] right) and val_f1 (the labels' mean F1, macro) — or val_pearson (regression);
//           tokens: val_accuracy over the tagged tokens, and the entities' val_precision, val_recall
//           and val_f1 (seqeval's, over IOB chunks: run_ner.py's figures; eval/label_scores.h)
//
// The model file it writes is a classifier like the one it started from: `qkv classify-text` reads it.
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
struct TextClassificationDataConfig {
  std::string train, val;     // the files (.tsv, .jsonl); no val: val_fraction of train is held out
  double val_fraction = 0.1;  // drawn with train.seed
  std::string text;           // the text's column ("": "text", else "sentence")
  std::string text_pair;      // the second text's column ("": none)
  std::string label = "label";
  std::string tokens = "tokens", tags = "ner_tags";  // token_classification's JSONL columns
  bool label_all_tokens = false;                     // token_classification: every token of a word tagged
  // tokens an example is cut to (0: the tokenizer's model_max_length, at most the model's positions)
  int64_t max_length = 0;
  static const io::Fields<TextClassificationDataConfig>& fields();
};

// The whole config: {"task": "text_classification", "description", "init_from", "data", "model"
// (only its dropout rates may differ from the file's), "train"}.
struct TextClassificationTaskConfig {
  std::string task, description, init_from;
  TextClassificationDataConfig data;
  nlohmann::json model;
  TrainConfig train;
  static const io::Fields<TextClassificationTaskConfig>& fields();
};

// Labelled texts, encoded: the ids and token types of each example, and its target — a label id
// (single-label), the set of its label ids (multi-label: held as ids, so that memory is what the
// file holds, whatever the label count), or a number (regression).
struct LabelledTexts {
  std::vector<text::HfEncoding> encodings;
  std::vector<int32_t> labels;                   // single-label: [n]
  std::vector<std::vector<int32_t>> label_sets;  // multi-label: [n], each increasing
  std::vector<float> values;                     // regression: [n]
  std::vector<std::vector<int32_t>> token_tags;  // tokens: [n][tokens], a tag id or −100 (none)
  int64_t size() const { return static_cast<int64_t>(encodings.size()); }
};

class TextClassificationTask : public EncoderFineTuningTask {
 public:
  // config as above ("task": "text_classification" or "token_classification"); relative paths start
  // at base_dir. A file that cannot be read or parsed, a missing column, a label the model does not
  // have: a qkv::Error naming the file and line.
  TextClassificationTask(const nlohmann::json& config, const std::string& base_dir, bool verbose = false);

  StepStats train_micro_step(int64_t step, int64_t micro, int64_t accum) override;
  std::vector<std::pair<std::string, double>> evaluate(int64_t step) override;
  const char* unit() const override { return "ex"; }

  const LabelledTexts& train_set() const { return train_; }
  const LabelledTexts& val_set() const { return val_; }
  nn::BertProblem problem() const { return problem_; }  // resolved: never auto_
  const std::vector<std::string>& labels() const { return labels_; }
  bool tokens() const { return tokens_; }  // a token classifier's task

 private:
  // The mean loss of logits [B, L] against rows `rows` of `set` (their targets).
  Tensor loss(const Tensor& logits, const LabelledTexts& set, const std::vector<size_t>& rows) const;

  // Token classification: the mean over the tagged tokens of the cross-entropy of logits
  // [B, T, L], and the batch's tags [B·T] (−100: none) for the metrics.
  Tensor token_loss(const Tensor& logits, const LabelledTexts& set, const std::vector<size_t>& rows, int64_t T,
                    std::vector<int32_t>* tags = nullptr) const;

  bool tokens_ = false;
  std::vector<std::string> labels_;
  nn::BertProblem problem_ = nn::BertProblem::single_label;
  LabelledTexts train_, val_;
};

}  // namespace qkv::train
