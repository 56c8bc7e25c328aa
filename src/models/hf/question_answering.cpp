// …ForQuestionAnswering (BERT, DistilBERT, RoBERTa, XLM-RoBERTa, MPNet, ELECTRA, DeBERTa-v2/v3:
// distilbert-base-cased-distilled-squad, deepset/roberta-base-squad2, deberta-v3-base-squad2, …) →
// qkv's "bert" with a span head (nn/encoder_heads.h): the token classifier's network, its classifier
// the checkpoint's qa_outputs, Linear(E, 2) — per token the logits of an answer starting and ending
// there. decode/question_answering.h reads answers from them.
//
//   qa_outputs.weight [2, E], qa_outputs.bias [2]   classifier.weight, classifier.bias
//   everything else                                  as the architecture's token classifier
#include "architectures.h"

namespace qkv::models::hf {

HfArchitecture question_answering(const HfArchitecture& token_classifier) {
  const std::string name = token_classifier.name;
  auto config = [name, c = token_classifier.config](const nlohmann::json& hf) {
    nlohmann::json out = c(hf);  // (id2label / num_labels read as a token classifier's)
    QKV_CHECK(out.value("num_labels", int64_t{0}) == 2, name,
              ": a question-answering head has 2 outputs (start, end); ", "the config gives ",
              out.value("num_labels", int64_t{0}), " labels");
    out["classifier"] = "span";
    out["labels"] = {"start", "end"};
    out["problem_type"] = "auto";
    return out;
  };
  auto map = [m = token_classifier.map](const std::string& t) -> std::optional<HfTensorTarget> {
    if (t == "qa_outputs.weight" || t == "qa_outputs.bias") return HfTensorTarget{"classifier." + t.substr(11)};
    if (t.starts_with("classifier.")) return std::nullopt;  // (not a question-answering checkpoint's)
    return m(t);
  };
  return {name, token_classifier.model_type, config, map};
}

}  // namespace qkv::models::hf
