// qkv.evaluate_translations: `qkv eval`'s scores from Python (eval/translation_scores.h, the evaluation floor the CLI and training share) — corpus
// BLEU and chrF2 as sacreBLEU computes them, grouped by source and by source length on request.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "qkv/core/error.h"
#include "qkv/eval/translation_scores.h"

namespace qkv::python {

namespace {

nb::dict scores_dict(const text::BleuScore& bleu, const text::ChrfScore& chrf, size_t sentences) {
  nb::dict d;
  d["bleu"] = bleu.score;
  d["chrf"] = chrf.score;
  d["sentences"] = sentences;
  d["bp"] = bleu.bp;
  d["hyp_len"] = bleu.hyp_len;
  d["ref_len"] = bleu.ref_len;
  return d;
}

}  // namespace

void bind_metrics(nb::module_& m) {
  m.def(
      "evaluate_translations",
      [](const std::vector<std::string>& hypotheses, const std::vector<std::vector<std::string>>& references,
         const std::optional<std::vector<std::string>>& sources, bool group, int64_t bucket_width) {
        const std::vector<std::string> src = sources.value_or(std::vector<std::string>{});
        QKV_CHECK(!(group || bucket_width > 0) || sources.has_value(),
                  "evaluate_translations: group and bucket_width need the sources");
        QKV_CHECK(!sources.has_value() || src.size() == hypotheses.size(), "evaluate_translations: ",
                  hypotheses.size(), " hypotheses but ", src.size(), " sources");
        const eval::SentenceGroups g = eval::group_by_source(src, hypotheses.size(), group);
        std::vector<std::string> hyps;  // grouped: the first line's translation of each source
        for (size_t line : g.first_line) hyps.push_back(hypotheses[line]);
        const eval::TranslationScores s = eval::score_translations(g, hyps, references, src, bucket_width);
        nb::dict out = scores_dict(s.bleu, s.chrf, s.sentences);
        if (bucket_width > 0) {
          nb::list buckets;
          for (const eval::LengthBucket& b : s.by_length) {
            nb::dict d = scores_dict(b.bleu, b.chrf, b.sentences);
            d["from"] = b.from;
            d["to"] = b.to;
            buckets.append(d);
          }
          out["by_length"] = buckets;
        }
        return out;
      },
      "hypotheses"_a, "references"_a, "sources"_a = nb::none(), "group"_a = false, "bucket_width"_a = 0,
      "Scores translations as `qkv eval` does: corpus BLEU and chrF2 (sacreBLEU's defaults). hypotheses: one "
      "per line; references: reference streams (sacreBLEU's layout: a list per reference set, each a line per "
      "hypothesis). group=True scores each distinct source once (its first line's translation) against the "
      "references of all its lines; bucket_width=w adds 'by_length': the scores per bucket of w source tokens. "
      "Returns {'bleu', 'chrf', 'sentences', 'bp', 'hyp_len', 'ref_len'[, 'by_length']}.");
}

}  // namespace qkv::python
