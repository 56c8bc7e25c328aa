// …ForMultipleChoice (BERT, DistilBERT, RoBERTa, XLM-RoBERTa, MPNet, ELECTRA, ALBERT, DeBERTa-v2/v3,
// ModernBERT: SWAG models) → qkv's "bert" / "modernbert" with a multiple-choice head
// (nn/encoder_heads.h): the sequence classifier's network with one output, the score of a (context,
// choice) pair — the first token's hidden state through the pooler (tanh; DistilBERT's pre_classifier
// and ReLU; DeBERTa's ContextPooler and ELECTRA's SequenceSummary with GELU) and classifier [1, E].
// The checkpoint's names are the sequence classifier's, except where the families pool differently:
//
//   roberta.pooler.dense.*, mpnet.pooler.dense.*   pooler.*      (their sequence classifiers' classifier.dense)
//   sequence_summary.summary.*                     pooler.*      (ELECTRA's: summary_type "first", a
//                                                                 projection, summary_activation "gelu")
//   classifier.weight [1, E], classifier.bias [1]  classifier.*  (their classifier.out_proj)
//   everything else                                as the architecture's sequence classifier
#include <regex>

#include "architectures.h"
#include "qkv/core/message.h"

namespace qkv::models::hf {

HfArchitecture multiple_choice(const HfArchitecture& sequence_classifier) {
  const std::string name = sequence_classifier.name;
  auto config = [name, c = sequence_classifier.config](const nlohmann::json& hf) {
    if (name.starts_with("Electra")) {
      // SequenceSummary as ElectraForMultipleChoice builds it by default; its other forms are not qkv's pooler
      const auto type = field<std::string>(hf, "summary_type", "first");
      const auto act = field<std::string>(hf, "summary_activation", "gelu");
      QKV_CHECK(type == "first" && field(hf, "summary_use_proj", true) && act == "gelu", name, ": summary_type \"",
                excerpt(type), "\", summary_use_proj and summary_activation \"", excerpt(act),
                "\" are not supported (\"first\", true and \"gelu\", ELECTRA's, are)");
    }
    nlohmann::json out = c(hf);  // (id2label / num_labels, problem_type read as a sequence classifier's)
    out["classifier"] = "choice";
    out["num_labels"] = 1;
    out["labels"] = {"score"};
    out["problem_type"] = "auto";
    return out;
  };
  auto map = [m = sequence_classifier.map](const std::string& t) -> std::optional<HfTensorTarget> {
    static const std::regex pooler(R"(^(?:roberta|mpnet)\.pooler\.dense\.(weight|bias)$)");
    std::smatch p;
    if (std::regex_match(t, p, pooler)) return HfTensorTarget{"pooler." + p[1].str()};
    if (t == "sequence_summary.summary.weight" || t == "sequence_summary.summary.bias")
      return HfTensorTarget{"pooler." + t.substr(25)};
    if (t == "classifier.weight" || t == "classifier.bias") return HfTensorTarget{t};
    if (t.starts_with("classifier.")) return std::nullopt;  // (a sequence classifier's, not a choice head's)
    return m(t);
  };
  return {name, sequence_classifier.model_type, config, map};
}

}  // namespace qkv::models::hf
