#include "qkv/decode/search.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <queue>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/ops/topk.h"

namespace qkv::decode {

// lp(n) = ((5 + n) / 6)^α
double length_penalty(int64_t n, float alpha) {
  return alpha == 0.f ? 1.0 : std::pow((5.0 + static_cast<double>(n)) / 6.0, static_cast<double>(alpha));
}

void check_length_penalty(float alpha, const char* what) {
  QKV_CHECK(alpha >= 0.f && alpha <= kMaxLengthPenalty, what, ": length_penalty (α) must be between 0 and ",
            kMaxLengthPenalty, ", got ", alpha);
}

namespace {

struct Beam {  // a live hypothesis of beam search
  std::vector<int32_t> tokens;
  double log_prob = 0;
};

void check_rows(const Tensor& lp, int64_t rows) {
  QKV_CHECK(lp.dim() == 2 && lp.size(0) == rows && lp.dtype() == DType::f32, "search: the model returned ",
            shape_str(lp.shape()), " log-probabilities for ", rows, " rows");
}

// Whether a sentence's `wanted` best finished hypotheses are final. A live beam's log-probability
// only falls as it grows (each step adds a log p ≤ 0) and lp(n) grows with n, so whatever it
// becomes scores at most log p / lp(max_len) (≤ 0 over the largest penalty); the best live beam,
// nb[0] (candidates come best first), bounds them all. A tie loses to the hypothesis already
// finished (ties keep the order found), so ≥ settles.
bool settled(const std::vector<Hypothesis>& fin, const std::vector<Beam>& nb, int64_t wanted, double lp_max) {
  if (static_cast<int64_t>(fin.size()) < wanted || nb.empty()) return false;
  std::vector<double> scores;
  for (const Hypothesis& h : fin) scores.push_back(h.score);
  std::nth_element(scores.begin(), scores.begin() + (wanted - 1), scores.end(), std::greater<double>());
  return scores[static_cast<size_t>(wanted - 1)] >= std::min(nb[0].log_prob, 0.0) / lp_max;
}

// Whether any of x[0 … n) is not below `floor` (a NaN counts as reaching it). A full block of 16
// is folded to its maximum, its halves in one vector max (the element-by-element compare stayed a
// scalar loop: 80 % of the search's own time), and only then compared; a NaN the fold drops is one
// that the heap would refuse anyway.
bool may_reach(const float* x, int64_t n, float floor) {
  if (n != 16) {
    bool any = false;
    for (int64_t i = 0; i < n; ++i) any |= !(x[i] < floor);
    return any;
  }
  using f8 = float __attribute__((vector_size(32)));  // GCC's and Clang's portable vectors
  f8 a, b;
  std::memcpy(&a, x, sizeof a), std::memcpy(&b, x + 8, sizeof b);
  const f8 m = a < b ? b : a;
  float top = m[0];
  for (int i = 1; i < 8; ++i) top = top < m[i] ? m[i] : top;
  return !(top < floor);
}

// std::max_element(x, x + n) − x, the first maximum (greedy search's argmax), eight lanes at a time:
// the maximum first, then the first index holding it. A row with a NaN takes std::max_element
// itself (its comparisons place a NaN as they do).
int64_t first_maximum(const float* x, int64_t n) {
  using f8 = float __attribute__((vector_size(32)));
  using i8 = int32_t __attribute__((vector_size(32)));
  const float lowest = -std::numeric_limits<float>::infinity();
  f8 m = {lowest, lowest, lowest, lowest, lowest, lowest, lowest, lowest};
  i8 nan = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f8 v;
    std::memcpy(&v, x + i, sizeof v);
    m = m < v ? v : m;
    nan |= v != v;
  }
  float top = lowest;
  bool any_nan = false;
  for (int l = 0; l < 8; ++l) top = top < m[l] ? m[l] : top, any_nan |= nan[l] != 0;
  for (; i < n; ++i) top = top < x[i] ? x[i] : top, any_nan |= x[i] != x[i];
  if (any_nan || n == 0) return std::max_element(x, x + n) - x;
  int64_t at = 0;
  while (x[at] != top) ++at;
  return at;
}

// log p(banned) = −∞ in every row of lp [rows, V] (the step's own output), on the device that made it.
void ban(Tensor& lp, int32_t banned) {
  if (banned >= 0 && banned < lp.size(1)) lp.select(1, banned).fill_(-std::numeric_limits<float>::infinity());
}

// ---- a step's candidates reduced where they were made -------------------------------------------
//
// The search reads a step's log-probabilities [rows, V] on the host. From a GPU only each row's
// `want` best come back (ops/topk.h on the device: V·4 bytes a row become want·8): a sentence's 2K
// best continuations are among its rows' 2K best, because a row's candidates rank by their
// log-probability x alone — base + x, in double, is strictly increasing in a float x — and of equal
// ones by the lower token, as topk orders them. So the search picks exactly what the full scan picks.
// QKV_SEARCH_ROW_TOPK=1 takes this path on the CPU too (the tests compare the two).
bool reduce_rows(const Tensor& lp) {
  const char* forced = std::getenv("QKV_SEARCH_ROW_TOPK");
  return !lp.device().is_cpu() || (forced && std::string_view(forced) == "1");
}

struct RowBest {
  int64_t width = 0;           // entries a row
  std::vector<float> value;    // [rows, width]: the row's best log-probabilities
  std::vector<int32_t> token;  // [rows, width]: their tokens
};

// Each row's `want` best (lp's device does the selecting; only they come to the host).
RowBest row_best(const Tensor& lp, int64_t want) {
  RowBest r;
  r.width = std::min(lp.size(1), want);
  const TopK best = topk(lp, r.width);
  r.value = best.values.to_vector();
  const Tensor tokens = best.indices.to(Device::cpu());
  r.token.assign(tokens.data<int32_t>(), tokens.data<int32_t>() + tokens.numel());
  return r;
}

}  // namespace

std::vector<Hypothesis> greedy_search(StepModel& model, const std::vector<int64_t>& max_len, const SearchOptions& opt) {
  const auto n = static_cast<int64_t>(max_len.size());
  std::vector<Hypothesis> out(static_cast<size_t>(n));
  std::vector<int64_t> active(static_cast<size_t>(n));  // sentence of each row
  for (int64_t i = 0; i < n; ++i) active[static_cast<size_t>(i)] = i;
  std::vector<int32_t> tokens(static_cast<size_t>(n), opt.bos_id);
  for (int64_t t = 0;; ++t) {
    Tensor lp = model.step(tokens);
    check_rows(lp, static_cast<int64_t>(active.size()));
    ban(lp, opt.banned_id);
    // each row's first maximum: the whole row scanned on the host, or topk's best from the device
    RowBest reduced;
    if (reduce_rows(lp)) reduced = row_best(lp, 1);
    else lp = lp.contiguous().to(Device::cpu());
    const int64_t V = lp.size(1);
    const float* p = reduced.width ? nullptr : lp.data<float>();
    std::vector<int64_t> keep;
    std::vector<int32_t> next;
    for (size_t r = 0; r < active.size(); ++r) {
      int32_t v;
      float x;
      if (p) {
        const float* row = p + static_cast<int64_t>(r) * V;
        v = static_cast<int32_t>(first_maximum(row, V));  // first maximum, as argmax
        x = row[v];
      } else {
        const size_t pick = r * static_cast<size_t>(reduced.width);
        v = reduced.token[pick], x = reduced.value[pick];
      }
      Hypothesis& h = out[static_cast<size_t>(active[r])];
      h.log_prob += x;
      if (v == opt.eos_id) {
        h.finished = true;
      } else {
        h.tokens.push_back(v);
        if (t + 1 < max_len[static_cast<size_t>(active[r])]) {
          keep.push_back(static_cast<int64_t>(r));
          next.push_back(v);
        }
      }
    }
    if (keep.empty()) break;
    if (keep.size() != active.size()) {  // drop the rows of finished sentences
      std::vector<int64_t> still;
      for (int64_t r : keep) still.push_back(active[static_cast<size_t>(r)]);
      model.reorder(keep, true);
      active = std::move(still);
    }
    tokens = std::move(next);
  }
  for (auto& h : out) h.score = h.log_prob;
  return out;
}


void expand_to_beams(StepModel& model, int64_t n, int64_t K) {
  std::vector<int64_t> expand;  // one row per beam: sentence s occupies rows s·K … s·K + K − 1
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < K; ++k) expand.push_back(i);
  if (K > 1) model.reorder(expand, true);
}

std::vector<std::vector<Hypothesis>> beam_search_nbest(StepModel& model, const std::vector<int64_t>& max_len,
                                                       const SearchOptions& opt) {
  if (opt.transformers_rule) return transformers_beam_search_nbest(model, max_len, opt);
  const int64_t K = opt.beam_size;
  QKV_CHECK(K >= 1 && K <= kMaxBeamSize, "beam search: beam_size must be between 1 and ", kMaxBeamSize, ", got ", K);
  check_length_penalty(opt.length_penalty, "beam search");
  const int64_t wanted = opt.num_hypotheses == 0 ? K : opt.num_hypotheses;
  QKV_CHECK(wanted >= 1 && wanted <= K, "beam search: num_hypotheses must be between 1 and the beam size ", K, ", got ",
            opt.num_hypotheses);
  const auto n = static_cast<int64_t>(max_len.size());
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(n));
  std::vector<int64_t> active(static_cast<size_t>(n));  // sentences still searching, in row order
  std::vector<std::vector<Beam>> beams(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    active[static_cast<size_t>(i)] = i;
    // At t = 0 only beam 0 is real: the others start at −∞, so the first step's K candidates all
    // come from one row.
    beams[static_cast<size_t>(i)].assign(static_cast<size_t>(K), Beam{});
    for (int64_t k = 1; k < K; ++k) beams[static_cast<size_t>(i)][static_cast<size_t>(k)].log_prob = kNegInf;
  }
  expand_to_beams(model, n, K);
  std::vector<int32_t> tokens(static_cast<size_t>(n * K), opt.bos_id);

  struct Cand {
    double score;
    int64_t beam;
    int32_t token;
  };
  auto better = [](const Cand& a, const Cand& b) {  // higher score first; ties: lower beam, lower token
    if (a.score != b.score) return a.score > b.score;
    if (a.beam != b.beam) return a.beam < b.beam;
    return a.token < b.token;
  };

  // (V, p: this step's log-probabilities, or `reduced`: their rows' 2K best; set in the loop below)
  const float* p = nullptr;
  int64_t V = 0;
  RowBest reduced;
  auto top_candidates = [&](int64_t a) {
    const auto& bs = beams[static_cast<size_t>(active[static_cast<size_t>(a)])];
    std::priority_queue<Cand, std::vector<Cand>, decltype(better)> heap(better);
    const size_t want = static_cast<size_t>(2 * K);
    for (int64_t k = 0; k < K; ++k) {
      const double base = bs[static_cast<size_t>(k)].log_prob;
      if (base == kNegInf) continue;
      if (!p) {  // the row's best from the device: each a candidate
        const size_t row = static_cast<size_t>((a * K + k) * reduced.width);
        for (size_t j = row; j < row + static_cast<size_t>(reduced.width); ++j) {
          const Cand c{base + static_cast<double>(reduced.value[j]), k, reduced.token[j]};
          if (heap.size() < want) heap.push(c);
          else if (better(c, heap.top())) heap.pop(), heap.push(c);
        }
        continue;
      }
      const float* row = p + (static_cast<int64_t>(a) * K + k) * V;
      // Most of the V candidates cannot enter a full heap: a block of 16 is skipped when all its
      // log-probabilities are below `floor`, a float under (worst kept score − base) by more
      // than the rounding of base + x, so a skipped x is one `better` would have refused too.
      float floor = -std::numeric_limits<float>::infinity();
      auto set_floor = [&] {
        if (heap.size() < want) return;
        const double top = heap.top().score, margin = 1e-9 * (1.0 + std::fabs(top) + std::fabs(base));
        floor = std::nextafter(static_cast<float>(top - base - margin), -std::numeric_limits<float>::infinity());
      };
      set_floor();
      for (int64_t v0 = 0; v0 < V; v0 += 16) {
        const int64_t v1 = std::min<int64_t>(V, v0 + 16);
        if (heap.size() >= want && !may_reach(row + v0, v1 - v0, floor)) continue;
        for (int64_t v = v0; v < v1; ++v) {
          const Cand c{base + static_cast<double>(row[v]), k, static_cast<int32_t>(v)};
          if (heap.size() < want) heap.push(c), set_floor();
          else if (better(c, heap.top())) {
            heap.pop();
            heap.push(c);
            set_floor();
          }
        }
      }
    }
    std::vector<Cand> cands;
    while (!heap.empty()) cands.push_back(heap.top()), heap.pop();
    std::reverse(cands.begin(), cands.end());  // best first
    return cands;
  };

  for (int64_t t = 0; !active.empty(); ++t) {
    Tensor lp = model.step(tokens);
    check_rows(lp, static_cast<int64_t>(active.size()) * K);
    ban(lp, opt.banned_id);
    if (reduce_rows(lp)) {  // each row's 2K best, from the device (the search picks the same: see row_best)
      reduced = row_best(lp, 2 * K);
      p = nullptr;
    } else {  // the whole rows, scanned on the host
      lp = lp.contiguous().to(Device::cpu());
      p = lp.data<float>();
    }
    V = lp.size(1);
    // Each sentence's 2K best (beam, token) continuations, the sentences in parallel (they read only
    // their own beams and rows): a min-heap of size 2K over the K·V candidates.
    std::vector<std::vector<Cand>> best(active.size());
    parallel_for(static_cast<int64_t>(active.size()), 2, [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) best[static_cast<size_t>(a)] = top_candidates(a);
    });
    std::vector<int64_t> rows, still;
    std::vector<int32_t> next;
    for (size_t a = 0; a < active.size(); ++a) {
      const int64_t s = active[a];
      auto& bs = beams[static_cast<size_t>(s)];
      std::vector<Cand>& cands = best[a];

      auto& fin = finished[static_cast<size_t>(s)];
      std::vector<Beam> nb;
      std::vector<int64_t> nb_rows;
      const bool at_limit = t + 1 >= max_len[static_cast<size_t>(s)];
      for (size_t i = 0; i < cands.size(); ++i) {
        const Cand& c = cands[i];
        const Beam& from = bs[static_cast<size_t>(c.beam)];
        if (c.token == opt.eos_id) {
          if (static_cast<int64_t>(i) < K && static_cast<int64_t>(fin.size()) < K) {
            const auto len = static_cast<int64_t>(from.tokens.size()) + 1;
            fin.push_back({from.tokens, c.score, c.score / length_penalty(len, opt.length_penalty), true});
          }
        } else if (static_cast<int64_t>(nb.size()) < K) {
          Beam b{from.tokens, c.score};
          b.tokens.push_back(c.token);
          nb.push_back(std::move(b));
          nb_rows.push_back(static_cast<int64_t>(a) * K + c.beam);
        }
      }
      if (static_cast<int64_t>(fin.size()) >= K) continue;  // done
      if (settled(fin, nb, wanted, length_penalty(max_len[static_cast<size_t>(s)], opt.length_penalty))) continue;
      // Out of length: the beams end here. No continuation at all: every beam's log-probability
      // became −∞ (a model that gives every token probability 0), so no row was scanned — the best
      // beam ends as it stands, unfinished, rather than the sentence with no hypothesis.
      const bool stuck = nb.empty() && fin.empty();
      if (stuck) nb.push_back(bs[0]);
      if (at_limit || nb.empty() || stuck) {
        for (auto& b : nb)
          fin.push_back({b.tokens, b.log_prob,
                         b.log_prob / length_penalty(static_cast<int64_t>(b.tokens.size()), opt.length_penalty), false});
        continue;
      }
      while (static_cast<int64_t>(nb.size()) < K) {  // fewer than K live continuations (tiny vocabularies)
        nb.push_back(Beam{nb[0].tokens, kNegInf});
        nb_rows.push_back(nb_rows[0]);
      }
      bs = std::move(nb);
      still.push_back(s);
      for (int64_t k = 0; k < K; ++k) {
        rows.push_back(nb_rows[static_cast<size_t>(k)]);
        next.push_back(bs[static_cast<size_t>(k)].tokens.back());
      }
    }
    if (still.empty()) break;
    model.reorder(rows, still.size() != active.size());
    active = std::move(still);
    tokens = std::move(next);
  }

  for (int64_t i = 0; i < n; ++i) {
    auto& fin = finished[static_cast<size_t>(i)];
    QKV_CHECK(!fin.empty(), "beam search: sentence ", i, " ended without a hypothesis");
    std::stable_sort(fin.begin(), fin.end(), [](const Hypothesis& a, const Hypothesis& b) {
      return a.score > b.score;  // ties keep the order found: the first best wins
    });
    if (static_cast<int64_t>(fin.size()) > K) fin.resize(static_cast<size_t>(K));  // out of length: beams joined
  }
  return finished;
}

std::vector<Hypothesis> beam_search(StepModel& model, const std::vector<int64_t>& max_len, const SearchOptions& opt) {
  std::vector<Hypothesis> out;
  SearchOptions one = opt;
  one.num_hypotheses = 1;
  for (auto& fin : beam_search_nbest(model, max_len, one)) out.push_back(std::move(fin.front()));
  return out;
}

}  // namespace qkv::decode
