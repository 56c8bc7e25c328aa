// What an encoder's other heads give, as transformers' pipelines and sentence-transformers give it:
//
//   text classification   scores = f(logits[text]),  f = softmax | sigmoid | none     per label
//                         (f by config.problem_type: regression none, multi-label or one label
//                         sigmoid, else softmax — pipeline("text-classification"))
//   token classification  p = softmax(logits[token]) per token; entity = argmax p, score = max p;
//                         special tokens and ignore_labels ("O") left out; "simple" aggregation
//                         joins neighbouring tokens of one tag (B-X starts a group, I-X or X goes
//                         on) with the mean score, or "first"/"average"/"max" words first
//                         (pipeline("token-classification"))
//   sentence embedding    e = pool(hidden states over the text's tokens), e / ‖e‖₂ if normalized
//                         (pool: the first token's, the mean or the max; padding never counts —
//                         SentenceTransformer.encode)
//   reranking             score(query, document) = f(logit[query, document]) of a cross-encoder
//                         (one label; f sigmoid, or identity where its config says), documents
//                         best first (CrossEncoder.rank)
//   zero-shot             an NLI classifier reads (text, template(label)) for each candidate label:
//                         p(label) = softmax over the labels of the entailment logits, or with
//                         multi_label softmax(contradiction, entailment)[entailment] for each alone
//                         (pipeline("zero-shot-classification"))
//
// Texts go through the model in batches, longest first, padded to the longest of the batch
// (attention_mask 0 on padding); the results come back in the texts' order.
#pragma once

#include <string>
#include <vector>

#include "qkv/models/model.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::decode {

// Whether the model is given the token types the tokenizer's post-processor writes (else zeros), as
// transformers gives them: a model with token types (type_vocab_size > 0) whose tokenizer's
// model_input_names hold token_type_ids (text::HfTokenizer::returns_token_type_ids; where its config
// does not say, the BERT family's classes, which do).
bool uses_token_types(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer);

struct LabelScore {
  std::string label;
  double score = 0;
};

enum class ClassificationFunction : uint8_t { auto_, softmax, sigmoid, none };
constexpr EnumTable<ClassificationFunction, 4> enum_table(ClassificationFunction) {
  return {"function_to_apply",
          {{{ClassificationFunction::auto_, "auto"},
            {ClassificationFunction::softmax, "softmax"},
            {ClassificationFunction::sigmoid, "sigmoid"},
            {ClassificationFunction::none, "none"}}}};
}

struct TextClassificationOptions {
  int64_t top_k = 1;  // the best k labels, best first; ≤ 0: every label, best first
  ClassificationFunction function = ClassificationFunction::auto_;
  std::vector<std::string> text_pairs;  // empty, or one second segment per text
  int64_t batch_size = 32;
};

// Each text's labels with their scores. A model without a sequence classifier, a text longer than
// the model's positions, a pair list of another length: qkv::Error naming it.
std::vector<std::vector<LabelScore>> text_classification(const models::MaskedLanguageModel& model,
                                                         const text::HfTokenizer& tokenizer,
                                                         const std::vector<std::string>& texts,
                                                         const TextClassificationOptions& options = {});

// pipeline("token-classification")'s aggregation_strategy: none (each token), simple (neighbouring
// tokens of one tag grouped), or first / average / max (the tokens of a word — a token and the
// subwords after it — given one label first, by the first token's scores, their mean, or the token
// of the highest score's, then grouped as simple groups tokens).
enum class Aggregation : uint8_t { none, simple, first, average, max };
constexpr EnumTable<Aggregation, 5> enum_table(Aggregation) {
  return {"aggregation_strategy",
          {{{Aggregation::none, "none"},
            {Aggregation::simple, "simple"},
            {Aggregation::first, "first"},
            {Aggregation::average, "average"},
            {Aggregation::max, "max"}}}};
}

// One entity: a token (aggregation none: `index` its position in the ids, `word` the token as the
// vocabulary spells it — an unknown token the text it covers, as the pipeline gives it) or a group of
// tokens (simple: `index` -1, `word` their decoded text); [start, end) its bytes in the text (made
// valid UTF-8; a group's from its first token's start to its last token's end: the pipeline's start
// and end, in bytes — text::code_points gives its characters).
struct TokenEntity {
  std::string entity;  // the label (none), or the tag without its B-/I- (simple: the entity_group)
  double score = 0;
  int64_t index = -1;
  std::string word;
  size_t start = 0, end = 0;
};

struct TokenClassificationOptions {
  Aggregation aggregation = Aggregation::none;
  std::vector<std::string> ignore_labels = {"O"};
  int64_t batch_size = 32;
};

std::vector<std::vector<TokenEntity>> token_classification(const models::MaskedLanguageModel& model,
                                                           const text::HfTokenizer& tokenizer,
                                                           const std::vector<std::string>& texts,
                                                           const TokenClassificationOptions& options = {});

struct EmbedOptions {
  nn::BertPooling pooling = nn::BertPooling::unset;  // unset: the model's (sentence-transformers'), else mean
  int normalize = -1;                                // -1: the model's; 0 / 1
  int64_t max_length = 0;  // texts cut to this many tokens; 0: the model's max_seq_length, else its positions
  int64_t batch_size = 32;
};

struct RerankOptions {
  int64_t top_k = 0;  // the best k documents; ≤ 0: every one
  // auto: the model's (sentence-transformers' activation_fn: sigmoid unless its config says identity);
  // sigmoid or none. (softmax: an error — one label.)
  ClassificationFunction function = ClassificationFunction::auto_;
  // Each (query, document) pair cut to this many tokens as truncation=True cuts it (the longer of
  // the two first); 0: the tokenizer's model_max_length where tokenizer_config.json gives one, at
  // most the model's positions.
  int64_t max_length = 0;
  int64_t batch_size = 32;
};
struct RankedDocument {
  int64_t index = 0;  // in the documents given
  double score = 0;
};
// The documents ranked for the query, best first (equal scores in the documents' order). A model
// without a one-label sequence classifier: qkv::Error naming it. `tokens`, when given, receives each
// pair's token count after the cut (special tokens included), in the documents' order.
std::vector<RankedDocument> rerank(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                   const std::string& query, const std::vector<std::string>& documents,
                                   const RerankOptions& options = {}, std::vector<int64_t>* tokens = nullptr);

struct ZeroShotOptions {
  // the hypothesis each candidate label becomes: "{}" (or "{0}") the label, "{{" and "}}" braces (str.format's)
  std::string hypothesis_template = "This example is {}.";
  bool multi_label = false;  // each label scored alone (entailment against contradiction)
  int64_t batch_size = 32;
};
// Candidate labels given as one text, as the pipeline parses them: split at commas, each stripped of
// spaces, the empty ones left out ("sports, politics ," → {"sports", "politics"}).
std::vector<std::string> parse_candidate_labels(const std::string& labels);
// Each text's candidate labels with their scores, best first (equal scores in the labels' order).
// The (text, hypothesis) pairs are cut as the pipeline cuts them (truncation="only_first", to the
// tokenizer's model_max_length, at most the model's positions). A model whose labels name no
// entailment ("entailment", "ENTAILMENT", …), no labels, a template without its "{}": qkv::Error.
std::vector<std::vector<LabelScore>> zero_shot_classification(const models::MaskedLanguageModel& model,
                                                              const text::HfTokenizer& tokenizer,
                                                              const std::vector<std::string>& texts,
                                                              const std::vector<std::string>& candidate_labels,
                                                              const ZeroShotOptions& options = {});

// One embedding [hidden_size] per text. Unlike the classifiers, a long text is cut (as
// sentence-transformers cuts it), not refused. `tokens`, when given, receives each text's token
// count after the cut (special tokens included).
std::vector<std::vector<float>> embed(const models::MaskedLanguageModel& model, const text::HfTokenizer& tokenizer,
                                      const std::vector<std::string>& texts, const EmbedOptions& options = {},
                                      std::vector<int64_t>* tokens = nullptr);

}  // namespace qkv::decode
