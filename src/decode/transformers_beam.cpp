// Beam search as Hugging Face transformers' generate(num_beams=K) ranks and stops (its
// _beam_search, early_stopping=False), for converted models whose translations should equal it:
//
//   each step: the 2K best continuations by Σ log p over the K live beams × V tokens;
//     the first K of them that end (EOS, or the length limit) become finished with
//       score = Σ log p / n^length_penalty     (n: tokens generated, EOS included)
//     and the best K of them that do not end are the next live beams;
//   the finished keep their best K; the search stops once all K are taken and the best live
//   beam's Σ log p / n^length_penalty (its length now) cannot beat the worst of them;
//   at the last position EOS is forced (forced_eos_token_id, as Marian's generation config asks),
//   with log p(EOS) := 0 as transformers' ForcedEOSTokenLogitsProcessor sets it.
//
// qkv's own rule (search.cpp: GNMT's ((5 + n)/6)^α, a bound on what live beams can still reach)
// gives the same translations where both are settled; this one reproduces transformers' choices
// where they differ. Ties are broken by the lower (beam, token) index, as torch.topk on the CPU.
#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/decode/search.h"

namespace qkv::decode {

namespace {

constexpr double kNone = -1.0e9;  // transformers' "no score" (a finite −∞)

struct Cand {
  double score;  // Σ log p
  int64_t beam;
  int32_t token;
};

struct Sentence {
  std::vector<std::vector<int32_t>> seqs;  // the K live beams' tokens
  std::vector<double> scores;              // their Σ log p
  std::vector<Hypothesis> finished;        // at most K, best first
  bool improvable = true;
};

}  // namespace

std::vector<std::vector<Hypothesis>> transformers_beam_search_nbest(StepModel& model, const std::vector<int64_t>& max_len,
                                                                    const SearchOptions& opt) {
  const int64_t K = opt.beam_size;
  QKV_CHECK(K >= 1 && K <= kMaxBeamSize, "beam search: beam_size must be between 1 and ", kMaxBeamSize, ", got ", K);
  QKV_CHECK(std::isfinite(opt.length_penalty) && std::fabs(opt.length_penalty) <= kMaxLengthPenalty,
            "beam search: length_penalty must be a number in [−", kMaxLengthPenalty, ", ", kMaxLengthPenalty, "], got ",
            opt.length_penalty);
  const auto n = static_cast<int64_t>(max_len.size());
  std::vector<Sentence> sent(static_cast<size_t>(n));
  std::vector<int64_t> active(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    active[static_cast<size_t>(i)] = i;
    auto& s = sent[static_cast<size_t>(i)];
    s.seqs.assign(static_cast<size_t>(K), {});
    s.scores.assign(static_cast<size_t>(K), kNone);
    s.scores[0] = 0;  // only beam 0 is real at first
  }
  expand_to_beams(model, n, K);
  std::vector<int32_t> tokens(static_cast<size_t>(n * K), opt.bos_id);
  for (int64_t t = 0; !active.empty(); ++t) {
    Tensor lp = model.step(tokens).contiguous().to(Device::cpu());
    QKV_CHECK(lp.dim() == 2 && lp.size(0) == static_cast<int64_t>(active.size()) * K,
              "beam search: the model returned ", shape_str(lp.shape()), " for ", active.size() * K, " rows");
    const int64_t V = lp.size(1);
    const float* p = lp.data<float>();
    std::vector<int64_t> rows, still;
    std::vector<int32_t> next;
    for (size_t a = 0; a < active.size(); ++a) {
      const int64_t si = active[a];
      Sentence& s = sent[static_cast<size_t>(si)];
      const int64_t limit = max_len[static_cast<size_t>(si)];  // tokens it may generate, EOS included
      const bool last = t + 1 >= limit;
      // the 2K best (beam, token) by Σ log p; at the last position only EOS may follow
      std::vector<Cand> c;
      c.reserve(static_cast<size_t>(K * (last ? 1 : V)));
      for (int64_t k = 0; k < K; ++k) {
        const float* row = p + (static_cast<int64_t>(a) * K + k) * V;
        const double base = s.scores[static_cast<size_t>(k)];
        if (last) {  // ForcedEOSTokenLogitsProcessor: log p(EOS) := 0, every other token −∞
          c.push_back({base, k, opt.eos_id});
          continue;
        }
        for (int64_t v = 0; v < V; ++v)
          if (v != opt.banned_id) c.push_back({base + static_cast<double>(row[v]), k, static_cast<int32_t>(v)});
      }
      const size_t keep = std::min(c.size(), static_cast<size_t>(2 * K));
      std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep), c.end(), [](const Cand& x, const Cand& y) {
        if (x.score != y.score) return x.score > y.score;
        return x.beam != y.beam ? x.beam < y.beam : x.token < y.token;
      });
      c.resize(keep);
      // finished: the first K candidates that end; scored by length (generated tokens, EOS included)
      const auto gen_len = static_cast<double>(t + 1);
      std::vector<Hypothesis> merged = s.finished;
      if (s.improvable)
        for (size_t i = 0; i < c.size() && static_cast<int64_t>(i) < K; ++i)
          if (c[i].token == opt.eos_id || last) {
            std::vector<int32_t> toks = s.seqs[static_cast<size_t>(c[i].beam)];
            const bool eos = c[i].token == opt.eos_id;
            if (!eos) toks.push_back(c[i].token);
            merged.push_back({std::move(toks), c[i].score, c[i].score / std::pow(gen_len, opt.length_penalty), eos});
          }
      std::stable_sort(merged.begin(), merged.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
      if (static_cast<int64_t>(merged.size()) > K) merged.resize(static_cast<size_t>(K));
      s.finished = std::move(merged);
      // live: the best K candidates that do not end
      std::vector<std::vector<int32_t>> seqs;
      std::vector<double> scores;
      std::vector<int64_t> from;
      for (const Cand& x : c) {
        if (x.token == opt.eos_id || last || static_cast<int64_t>(seqs.size()) == K) continue;
        seqs.push_back(s.seqs[static_cast<size_t>(x.beam)]);
        seqs.back().push_back(x.token);
        scores.push_back(x.score);
        from.push_back(x.beam);
      }
      // stop once K are finished and the best live beam, at its length now, cannot beat the worst
      if (!seqs.empty() && static_cast<int64_t>(s.finished.size()) == K) {
        const double best_possible = scores[0] / std::pow(gen_len, opt.length_penalty);
        s.improvable = s.improvable && best_possible > s.finished.back().score;
      }
      if (last || seqs.empty() || !s.improvable) continue;
      while (static_cast<int64_t>(seqs.size()) < K) {  // (tiny vocabularies) pad with dead beams
        seqs.push_back(seqs[0]);
        scores.push_back(kNone);
        from.push_back(from[0]);
      }
      s.seqs = std::move(seqs), s.scores = std::move(scores);
      still.push_back(si);
      for (int64_t k = 0; k < K; ++k) {
        rows.push_back(static_cast<int64_t>(a) * K + from[static_cast<size_t>(k)]);
        next.push_back(s.seqs[static_cast<size_t>(k)].back());
      }
    }
    if (still.empty()) break;
    model.reorder(rows, still.size() != active.size());
    active = std::move(still);
    tokens = std::move(next);
  }
  std::vector<std::vector<Hypothesis>> out;
  for (auto& s : sent) {
    QKV_CHECK(!s.finished.empty(), "beam search: a sentence ended without a hypothesis");
    out.push_back(std::move(s.finished));
  }
  return out;
}

}  // namespace qkv::decode
