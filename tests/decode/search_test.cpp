// Greedy and beam search on hand-made next-token distributions: beam search finds the known best
// where greedy does not, agrees with exhaustive search, beam size 1 is exactly greedy, the length
// penalty ranks as the formula says, a batch of sentences decodes as each would alone, and the n-best
// lists hold the beam's finished hypotheses best first. An ensemble searches the mean of its members'
// distributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/decode/ensemble.h"
#include "qkv/decode/search.h"

namespace qkv::decode {
namespace {

constexpr int32_t kBos = 2, kEos = 3;

// A "model" whose next-token distribution is a function of (sentence, prefix). Rows track their
// sentence and prefix through reorder(), as the Transformer's caches do.
class TableModel : public StepModel {
 public:
  using Dist = std::function<std::vector<float>(int64_t sentence, const std::vector<int32_t>& prefix)>;
  TableModel(int64_t sentences, Dist dist) : dist_(std::move(dist)) {
    for (int64_t s = 0; s < sentences; ++s) rows_.push_back({s, {}});
  }
  Tensor step(const std::vector<int32_t>& tokens) override {
    EXPECT_EQ(tokens.size(), rows_.size());
    std::vector<float> lp;
    for (size_t r = 0; r < rows_.size(); ++r) {
      rows_[r].second.push_back(tokens[r]);
      std::vector<float> p = dist_(rows_[r].first, rows_[r].second);
      for (float v : p) lp.push_back(std::log(v));
      V = static_cast<int64_t>(p.size());
    }
    ++steps;
    rows_stepped += static_cast<int64_t>(rows_.size());
    return Tensor::from_vector(lp, {static_cast<int64_t>(rows_.size()), V});
  }
  void reorder(const std::vector<int64_t>& index, bool sources_changed) override {
    std::vector<std::pair<int64_t, std::vector<int32_t>>> n;
    for (int64_t i : index) n.push_back(rows_[static_cast<size_t>(i)]);
    bool changed = n.size() != rows_.size();
    for (size_t i = 0; i < n.size() && !changed; ++i) changed = n[i].first != rows_[i].first;
    EXPECT_EQ(changed, sources_changed) << "sources_changed must say whether a row changed sentence";
    rows_ = std::move(n);
  }
  int64_t V = 0, steps = 0, rows_stepped = 0;

 private:
  Dist dist_;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> rows_;  // (sentence, tokens fed after BOS)
};

// V = 6: 0 pad, 1 unk, 2 BOS, 3 EOS, 4 "a", 5 "b". The prefix is what was fed (starting with BOS).
std::vector<float> trap(int64_t, const std::vector<int32_t>& prefix) {
  // first step: a 0.5, b 0.4, EOS 0.1; after "a": EOS 0.4, a 0.3, b 0.3; after "b": EOS 0.9, a/b 0.05
  if (prefix.size() == 1) return {1e-9f, 1e-9f, 1e-9f, 0.1f, 0.5f, 0.4f};
  if (prefix[1] == 4 && prefix.size() == 2) return {1e-9f, 1e-9f, 1e-9f, 0.4f, 0.3f, 0.3f};
  if (prefix[1] == 5 && prefix.size() == 2) return {1e-9f, 1e-9f, 1e-9f, 0.9f, 0.05f, 0.05f};
  return {1e-9f, 1e-9f, 1e-9f, 0.98f, 0.01f, 0.01f};
}

TEST(BeamSearch, FindsTheBestSequenceWhereGreedyDoesNot) {
  SearchOptions o;
  o.length_penalty = 0.f;
  TableModel g(1, trap);
  auto greedy = greedy_search(g, {10}, o);
  EXPECT_EQ(greedy[0].tokens, (std::vector<int32_t>{4}));  // "a" EOS: p = 0.2
  EXPECT_NEAR(greedy[0].log_prob, std::log(0.5 * 0.4), 1e-5);
  o.beam_size = 2;
  TableModel b(1, trap);
  auto beam = beam_search(b, {10}, o);
  EXPECT_EQ(beam[0].tokens, (std::vector<int32_t>{5}));  // "b" EOS: p = 0.36, the best
  EXPECT_NEAR(beam[0].log_prob, std::log(0.4 * 0.9), 1e-5);
  EXPECT_TRUE(beam[0].finished);
}

// A pseudo-random distribution over V = 7 per (sentence, prefix), EOS likelier as the prefix grows.
std::vector<float> random_dist(int64_t s, const std::vector<int32_t>& prefix) {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(s);
  for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  std::vector<float> p(7, 1e-6f);
  float sum = 0;
  for (int v = 3; v < 7; ++v) {
    p[v] = 0.05f + static_cast<float>(Generator::bits(h, v) % 1000) / 1000.f;
    if (v == kEos) p[v] *= 0.3f * static_cast<float>(prefix.size());
    sum += p[v];
  }
  for (float& v : p) v /= sum;
  return p;
}

// The best finished sequence of at most max_len tokens by exhaustive enumeration (α = 0).
double exhaustive_best(int64_t s, std::vector<int32_t> prefix, int64_t max_len, double lp_so_far,
                       std::vector<int32_t>& best_tokens, std::vector<int32_t> tokens = {}) {
  std::vector<float> p = random_dist(s, prefix);
  double best = -1e300;
  for (int v = 3; v < 7; ++v) {
    const double lp = lp_so_far + std::log(static_cast<double>(p[v]));
    if (v == kEos) {
      if (lp > best) best = lp, best_tokens = tokens;
      continue;
    }
    if (static_cast<int64_t>(tokens.size()) + 1 >= max_len) continue;
    auto pre = prefix, tok = tokens;
    pre.push_back(v), tok.push_back(v);
    std::vector<int32_t> bt;
    const double r = exhaustive_best(s, pre, max_len, lp, bt, tok);
    if (r > best) best = r, best_tokens = bt;
  }
  return best;
}

TEST(BeamSearch, WideBeamAgreesWithExhaustiveSearch) {
  SearchOptions o;
  o.length_penalty = 0.f;
  o.beam_size = 64;  // wider than the 4^3 sequences of length 3: the search is exhaustive
  for (int64_t s = 0; s < 5; ++s) {
    std::vector<int32_t> want;
    const double best = exhaustive_best(s, {kBos}, 4, 0.0, want);
    TableModel m(1, [s](int64_t, const std::vector<int32_t>& p) { return random_dist(s, p); });
    auto h = beam_search(m, {4}, o);
    EXPECT_EQ(h[0].tokens, want) << "sentence " << s;
    EXPECT_NEAR(h[0].log_prob, best, 1e-4);
  }
}

TEST(BeamSearch, BeamOneIsGreedyAndBatchesDecodeAsAlone) {
  const std::vector<int64_t> max_len{3, 9, 5, 12, 1, 7};
  SearchOptions o;
  TableModel g(6, random_dist);
  auto greedy = greedy_search(g, max_len, o);
  o.beam_size = 1;
  TableModel b(6, random_dist);
  auto beam1 = beam_search(b, max_len, o);
  for (size_t i = 0; i < max_len.size(); ++i) {
    EXPECT_EQ(greedy[i].tokens, beam1[i].tokens) << i;
    EXPECT_NEAR(greedy[i].log_prob, beam1[i].log_prob, 1e-9) << i;
    EXPECT_LE(static_cast<int64_t>(greedy[i].tokens.size()) + (greedy[i].finished ? 1 : 0), max_len[i]);
  }
  o.beam_size = 3;
  TableModel all(6, random_dist);
  auto together = beam_search(all, max_len, o);
  for (size_t i = 0; i < max_len.size(); ++i) {
    TableModel one(1, [i](int64_t, const std::vector<int32_t>& p) { return random_dist(static_cast<int64_t>(i), p); });
    auto alone = beam_search(one, {max_len[i]}, o);
    EXPECT_EQ(alone[0].tokens, together[i].tokens) << i;
    EXPECT_NEAR(alone[0].score, together[i].score, 1e-9) << i;
  }
}

TEST(BeamSearch, NBestListsTheFinishedHypothesesBestFirst) {
  // trap with beam 2: step 1 keeps "a" (0.5) and "b" (0.4); step 2's two best continuations both end:
  // "b" EOS (0.4 · 0.9 = 0.36) and "a" EOS (0.5 · 0.4 = 0.2).
  SearchOptions o;
  o.length_penalty = 0.f;
  o.beam_size = 2;
  TableModel m(1, trap);
  auto nb = beam_search_nbest(m, {10}, o);
  ASSERT_EQ(nb.size(), 1u);
  ASSERT_EQ(nb[0].size(), 2u);
  EXPECT_EQ(nb[0][0].tokens, (std::vector<int32_t>{5}));
  EXPECT_NEAR(nb[0][0].log_prob, std::log(0.4 * 0.9), 1e-5);
  EXPECT_EQ(nb[0][1].tokens, (std::vector<int32_t>{4}));
  EXPECT_NEAR(nb[0][1].log_prob, std::log(0.5 * 0.4), 1e-5);

  // Six sentences, beam 3, α 0.6: every list is the beam's K distinct hypotheses (fewer only when
  // they ran out of length), ranked by score = log p / lp(|Y|), and its first is beam_search's answer.
  const std::vector<int64_t> max_len{3, 9, 5, 12, 1, 7};
  o.beam_size = 3;
  o.length_penalty = 0.6f;
  TableModel a(6, random_dist), b(6, random_dist);
  auto lists = beam_search_nbest(a, max_len, o);
  auto best = beam_search(b, max_len, o);
  ASSERT_EQ(lists.size(), max_len.size());
  for (size_t i = 0; i < lists.size(); ++i) {
    const auto& l = lists[i];
    ASSERT_FALSE(l.empty()) << i;
    EXPECT_LE(l.size(), 3u) << i;
    EXPECT_EQ(l[0].tokens, best[i].tokens) << i;
    EXPECT_EQ(l[0].score, best[i].score) << i;
    for (size_t k = 0; k < l.size(); ++k) {
      const auto len = static_cast<int64_t>(l[k].tokens.size()) + (l[k].finished ? 1 : 0);
      EXPECT_LE(len, max_len[i]) << i;
      EXPECT_NEAR(l[k].score, l[k].log_prob / length_penalty(len, 0.6f), 1e-12) << i << " " << k;
      if (k > 0) {
        EXPECT_GE(l[k - 1].score, l[k].score) << i << " " << k;
      }
      for (size_t j = 0; j < k; ++j) EXPECT_NE(l[j].tokens, l[k].tokens) << i << " " << j << " " << k;
    }
  }
  EXPECT_EQ(lists[3].size(), 3u);  // a long limit: three hypotheses ended with EOS
}

// Wanting fewer hypotheses than the beam lets a sentence stop once its best finished ones can no
// longer be beaten (a live beam's score can only reach log p / lp(max_len)): the lists' heads are
// the full search's for every α, and with α = 0 the search takes fewer steps.
TEST(BeamSearch, StopsOnceTheWantedHypothesesAreSettled) {
  const std::vector<int64_t> max_len{3, 9, 5, 12, 1, 7, 20, 15, 11, 30};
  for (float alpha : {0.f, 0.6f, 2.f}) {
    SCOPED_TRACE(alpha);
    SearchOptions o;
    o.beam_size = 4;
    o.length_penalty = alpha;
    TableModel full(10, random_dist);
    auto all = beam_search_nbest(full, max_len, o);
    for (int64_t wanted : {1, 2}) {
      o.num_hypotheses = wanted;
      TableModel early(10, random_dist);
      auto some = beam_search_nbest(early, max_len, o);
      // α = 0 bounds tightly (a live beam can at best keep its log p); α > 0 divides by lp(max_len),
      // a bound loose enough that these short searches rarely settle sooner — but never wrongly
      if (alpha == 0.f) {
        EXPECT_LT(early.rows_stepped, full.rows_stepped) << "wanted " << wanted << ": never stopped early";
      }
      EXPECT_LE(early.rows_stepped, full.rows_stepped) << "wanted " << wanted;
      for (size_t i = 0; i < max_len.size(); ++i) {
        ASSERT_GE(some[i].size(), std::min<size_t>(static_cast<size_t>(wanted), all[i].size())) << i;
        for (size_t k = 0; k < static_cast<size_t>(wanted) && k < all[i].size(); ++k) {
          EXPECT_EQ(some[i][k].tokens, all[i][k].tokens) << i << " " << k;
          EXPECT_EQ(some[i][k].score, all[i][k].score) << i << " " << k;
        }
      }
    }
  }
  SearchOptions bad;
  bad.beam_size = 2, bad.num_hypotheses = 3;
  TableModel m(1, random_dist);
  EXPECT_THROW(beam_search_nbest(m, {4}, bad), Error);
}

// lp(n) = ((5 + n)/6)^α. Short "a" EOS has p = 0.3; long "b b b" EOS has p = 0.25·0.9·0.9·0.9 ≈ 0.18:
// α = 0 keeps the short one; α = 2 divides by lp and prefers the long one.
std::vector<float> short_or_long(int64_t, const std::vector<int32_t>& prefix) {
  if (prefix.size() == 1) return {1e-9f, 1e-9f, 1e-9f, 0.05f, 0.7f, 0.25f};
  if (prefix[1] == 4) return prefix.size() == 2 ? std::vector<float>{1e-9f, 1e-9f, 1e-9f, 0.43f, 0.3f, 0.27f}
                                                : std::vector<float>{1e-9f, 1e-9f, 1e-9f, 0.05f, 0.5f, 0.45f};
  if (prefix.size() < 5) return {1e-9f, 1e-9f, 1e-9f, 0.05f, 0.05f, 0.9f};
  return {1e-9f, 1e-9f, 1e-9f, 0.9f, 0.05f, 0.05f};
}

TEST(BeamSearch, LengthPenaltyFollowsTheFormula) {
  EXPECT_DOUBLE_EQ(length_penalty(1, 0.6f), 1.0);
  EXPECT_NEAR(length_penalty(7, 0.6f), std::pow(2.0, 0.6), 1e-6);
  SearchOptions o;
  o.beam_size = 4;
  o.length_penalty = 0.f;
  TableModel a(1, short_or_long);
  EXPECT_EQ(beam_search(a, {10}, o)[0].tokens, (std::vector<int32_t>{4}));
  o.length_penalty = 2.f;
  TableModel b(1, short_or_long);
  auto h = beam_search(b, {10}, o)[0];
  EXPECT_EQ(h.tokens, (std::vector<int32_t>{5, 5, 5, 5}));
  EXPECT_NEAR(h.score, h.log_prob / length_penalty(5, 2.f), 1e-9);
}

TEST(BeamSearch, StopsAtMaxLength) {
  // EOS never likely: every hypothesis runs to max_len and ends unfinished
  auto never = [](int64_t, const std::vector<int32_t>&) { return std::vector<float>{1e-9f, 1e-9f, 1e-9f, 1e-6f, 0.5f, 0.5f}; };
  SearchOptions o;
  TableModel m(2, never);
  auto h = beam_search(m, {4, 2}, o);
  EXPECT_EQ(h[0].tokens.size(), 4u);
  EXPECT_EQ(h[1].tokens.size(), 2u);
  EXPECT_FALSE(h[0].finished);
  TableModel g(2, never);
  auto gr = greedy_search(g, {4, 2}, o);
  EXPECT_EQ(gr[0].tokens.size(), 4u);
  EXPECT_EQ(gr[1].tokens.size(), 2u);
}

// A vocabulary of thousands with many exactly tied scores: the search skips blocks of candidates that
// cannot enter its heap, and must still keep exactly what a full sort would. Two steps (max_len 2,
// EOS impossible): the K beams after step 1 are the K best first tokens (ties: lower token), and
// the n-best list is the K best (beam's score + step-2 score) over all K·V continuations, ties
// broken by beam rank, then token.
TEST(BeamSearch, LargeVocabularyWithTiesKeepsWhatAFullSortKeeps) {
  constexpr int64_t V = 3000, K = 5;
  auto dist = [](int64_t s, const std::vector<int32_t>& prefix) {
    std::vector<float> p(static_cast<size_t>(V));
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(s);
    for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
    for (int64_t v = 0; v < V; ++v) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      p[static_cast<size_t>(v)] = 0.001f * static_cast<float>(1 + (h >> 33) % 7);  // 7 values: ties everywhere
    }
    p[kEos] = 0.f;  // log 0 = −∞: never chosen
    if (s == 1) p[2999] = 0.05f, p[17] = 0.05f;  // a tied pair far apart
    return p;
  };
  SearchOptions o;
  o.beam_size = K;
  o.length_penalty = 0.f;
  TableModel m(2, dist);
  auto nbest = beam_search_nbest(m, {2, 2}, o);
  for (int64_t s = 0; s < 2; ++s) {
    struct C {
      double score;
      int64_t beam;
      int32_t t1, t2;
    };
    auto order = [](const C& a, const C& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.beam != b.beam) return a.beam < b.beam;
      return a.t2 < b.t2;
    };
    std::vector<C> first;
    const std::vector<float> p1 = dist(s, {kBos});
    for (int32_t v = 0; v < V; ++v) first.push_back({static_cast<double>(std::log(p1[static_cast<size_t>(v)])), 0, v, 0});
    std::sort(first.begin(), first.end(), [](const C& a, const C& b) {
      return a.score != b.score ? a.score > b.score : a.t1 < b.t1;
    });
    std::vector<C> second;
    for (int64_t k = 0; k < K; ++k) {
      const C& b = first[static_cast<size_t>(k)];
      const std::vector<float> p2 = dist(s, {kBos, b.t1});
      for (int32_t v = 0; v < V; ++v)
        second.push_back({b.score + static_cast<double>(std::log(p2[static_cast<size_t>(v)])), k, b.t1, v});
    }
    std::sort(second.begin(), second.end(), order);
    ASSERT_EQ(nbest[static_cast<size_t>(s)].size(), static_cast<size_t>(K)) << s;
    for (int64_t i = 0; i < K; ++i) {
      const Hypothesis& h = nbest[static_cast<size_t>(s)][static_cast<size_t>(i)];
      const C& want = second[static_cast<size_t>(i)];
      EXPECT_EQ(h.tokens, (std::vector<int32_t>{want.t1, want.t2})) << "sentence " << s << ", hypothesis " << i;
      EXPECT_NEAR(h.log_prob, want.score, 1e-6) << "sentence " << s << ", hypothesis " << i;
    }
  }
}

// log p̄ = log((p1 + p2) / 2) elementwise, an impossible token under one member is half as likely
// under the ensemble, and under both stays impossible.
TEST(Ensemble, MeanProbabilityFollowsTheFormula) {
  const float ninf = -std::numeric_limits<float>::infinity();
  Tensor a = Tensor::from_vector({std::log(0.5f), std::log(0.3f), std::log(0.2f), ninf, ninf}, {1, 5});
  Tensor b = Tensor::from_vector({std::log(0.1f), std::log(0.1f), std::log(0.4f), std::log(0.4f), ninf}, {1, 5});
  Tensor m = mean_probability_log({a, b});
  const float want[] = {0.3f, 0.2f, 0.3f, 0.2f, 0.f};
  for (int v = 0; v < 4; ++v) EXPECT_NEAR(m.data<float>()[v], std::log(want[v]), 1e-6) << v;
  EXPECT_EQ(m.data<float>()[4], ninf);
  // the same distribution twice is itself, to the bit; one member is passed through
  Tensor aa = mean_probability_log({a, a});
  for (int v = 0; v < 5; ++v) EXPECT_EQ(aa.data<float>()[v], a.data<float>()[v]) << v;
  EXPECT_EQ(mean_probability_log({a}).data<float>(), a.data<float>());
  // rows long enough for the 16-lane kernel and its scalar tail, three members, −inf in some
  std::vector<float> x[3];
  for (int i = 0; i < 3; ++i)
    for (uint64_t j = 0; j < 2 * 37; ++j)
      x[i].push_back(j % 11 == 0 && i < 2   ? ninf
                     : j % 22 == 0          ? ninf
                                            : -8.f * Generator::uniform(static_cast<uint64_t>(i), j));
  Tensor big = mean_probability_log({Tensor::from_vector(x[0], {2, 37}), Tensor::from_vector(x[1], {2, 37}),
                                     Tensor::from_vector(x[2], {2, 37})});
  for (size_t j = 0; j < x[0].size(); ++j) {
    double sum = 0;
    for (auto& xi : x) sum += std::exp(static_cast<double>(xi[j]));
    if (sum == 0) EXPECT_EQ(big.data<float>()[j], ninf) << j;
    else EXPECT_NEAR(big.data<float>()[j], std::log(sum / 3), 1e-5) << j;
  }
  Tensor x0 = Tensor::from_vector(x[0], {2, 37}), same = mean_probability_log({x0, x0});
  for (size_t j = 0; j < x[0].size(); ++j) EXPECT_EQ(same.data<float>()[j], x[0][j]) << j;
  EXPECT_THROW(mean_probability_log({a, Tensor::from_vector({0.f, 0.f}, {1, 2})}), Error);
  EXPECT_THROW(mean_probability_log({}), Error);
}

TEST(Ensemble, SearchesTheMeanOfItsMembers) {
  const std::vector<int64_t> max_len{3, 9, 5, 12, 7};
  auto member = [](int64_t shift) {
    return [shift](int64_t s, const std::vector<int32_t>& p) { return random_dist(s + shift, p); };
  };
  auto mean = [&](int64_t s, const std::vector<int32_t>& p) {
    std::vector<float> x = random_dist(s, p), y = random_dist(s + 10, p);
    for (size_t v = 0; v < x.size(); ++v) x[v] = (x[v] + y[v]) / 2;
    return x;
  };
  for (int64_t beam : {1, 3}) {
    SearchOptions o;
    o.beam_size = beam;
    std::vector<std::unique_ptr<StepModel>> members;
    members.push_back(std::make_unique<TableModel>(5, member(0)));
    members.push_back(std::make_unique<TableModel>(5, member(10)));
    EnsembleStepModel ens(std::move(members));  // each member checks the rows it is handed
    TableModel direct(5, mean);
    auto h = beam == 1 ? greedy_search(ens, max_len, o) : beam_search(ens, max_len, o);
    auto want = beam == 1 ? greedy_search(direct, max_len, o) : beam_search(direct, max_len, o);
    for (size_t i = 0; i < max_len.size(); ++i) {
      EXPECT_EQ(h[i].tokens, want[i].tokens) << "beam " << beam << " sentence " << i;
      EXPECT_NEAR(h[i].score, want[i].score, 1e-4) << "beam " << beam << " sentence " << i;
    }
    // and it differs from either member alone somewhere (else the test could not fail)
    TableModel first(5, member(0));
    auto alone = beam == 1 ? greedy_search(first, max_len, o) : beam_search(first, max_len, o);
    bool differs = false;
    for (size_t i = 0; i < max_len.size(); ++i) differs |= alone[i].tokens != want[i].tokens;
    EXPECT_TRUE(differs) << "beam " << beam;
  }
}

// Greedy search's argmax is the first maximum, as std::max_element (and torch.argmax): ties go to
// the lower token, in the eight-lane part of a row and in its tail (V = 37 is not a multiple of 8);
// a row holding a NaN keeps std::max_element's answer (a log 0 row, all −∞, picks token 0).
TEST(GreedySearch, ArgmaxIsTheFirstMaximumOfTheRow) {
  constexpr int64_t V = 37;
  auto one_step = [](std::vector<float> p) {
    TableModel m(1, [p](int64_t, const std::vector<int32_t>&) { return p; });
    SearchOptions o;
    auto h = greedy_search(m, {1}, o);
    return h[0].tokens.empty() ? kEos : h[0].tokens[0];
  };
  std::vector<float> p(V, 0.01f);
  p[kEos] = 0.f;
  p[30] = p[5] = p[17] = 0.2f;  // tied: the first wins
  EXPECT_EQ(one_step(p), 5);
  p[5] = p[17] = 0.01f;
  p[36] = 0.2f;  // tied in the tail and the vector part
  EXPECT_EQ(one_step(p), 30);
  p[30] = 0.01f;
  EXPECT_EQ(one_step(p), 36);  // the maximum alone in the tail
  std::vector<float> nan_row = p;
  nan_row[8] = std::nanf("");  // log(NaN) = NaN: std::max_element skips past it
  EXPECT_EQ(one_step(nan_row), 36);
  std::vector<float> zeros(V, 0.f);  // every log-probability −∞
  EXPECT_EQ(one_step(zeros), 0);
}

// A GPU's search reads each row's 2K best (topk on the device) instead of the whole row; the
// search must pick exactly what the full scan picks. QKV_SEARCH_ROW_TOPK=1 takes that path on the
// CPU: both paths on distributions full of ties (7 values over 3,000 tokens, a tied pair far apart),
// the trap where beam and greedy part, a vocabulary smaller than 2K + 1, rows of −∞, a banned token
// that would otherwise win, batches of sentences finishing at different steps; beam 1, 2, 4 and 5,
// n-best lists, and greedy.
TEST(Search, RowsReducedOnTheDeviceFindWhatTheFullScanFinds) {
  auto ties = [](int64_t s, const std::vector<int32_t>& prefix) {
    std::vector<float> p(3000);
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(s);
    for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
    for (float& x : p) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      x = 0.001f * static_cast<float>(1 + (h >> 33) % 7);
    }
    p[kEos] = prefix.size() > 2 + static_cast<size_t>(s) ? 0.5f : 0.f;  // sentences end at different steps
    if (s == 1) p[2999] = 0.05f, p[17] = 0.05f;
    return p;
  };
  auto dead = [](int64_t, const std::vector<int32_t>&) { return std::vector<float>(40, 0.f); };  // every log p −∞
  struct Case {
    const char* what;
    TableModel::Dist dist;
    int64_t sentences, max_len;
  };
  const std::vector<Case> cases = {{"ties", ties, 3, 6}, {"trap", trap, 2, 4}, {"dead", dead, 2, 3}};
  auto run = [](const Case& c, int64_t beam, int32_t banned, bool reduced) {
    if (reduced) setenv("QKV_SEARCH_ROW_TOPK", "1", 1);
    SearchOptions o;
    o.beam_size = beam;
    o.banned_id = banned;
    o.num_hypotheses = beam;
    TableModel m(c.sentences, c.dist);
    std::vector<std::vector<Hypothesis>> out;
    if (beam == 0) {
      for (Hypothesis& h : greedy_search(m, std::vector<int64_t>(static_cast<size_t>(c.sentences), c.max_len), o))
        out.push_back({h});
    } else {
      o.length_penalty = 0.6f;
      out = beam_search_nbest(m, std::vector<int64_t>(static_cast<size_t>(c.sentences), c.max_len), o);
    }
    unsetenv("QKV_SEARCH_ROW_TOPK");
    return out;
  };
  int compared = 0;
  for (const Case& c : cases)
    for (int64_t beam : {0, 1, 2, 4, 5})
      for (int32_t banned : {-1, 4, 17}) {
        const auto full = run(c, beam, banned, false), reduced = run(c, beam, banned, true);
        ASSERT_EQ(full.size(), reduced.size());
        for (size_t s = 0; s < full.size(); ++s) {
          ASSERT_EQ(full[s].size(), reduced[s].size()) << c.what << " beam " << beam << " banned " << banned;
          for (size_t i = 0; i < full[s].size(); ++i) {
            const Hypothesis &a = full[s][i], &b = reduced[s][i];
            EXPECT_EQ(a.tokens, b.tokens) << c.what << " beam " << beam << " banned " << banned << " sentence " << s;
            EXPECT_TRUE(a.log_prob == b.log_prob || (std::isnan(a.log_prob) && std::isnan(b.log_prob)))
                << c.what << " beam " << beam << ": " << a.log_prob << " vs " << b.log_prob;
            EXPECT_TRUE(a.score == b.score || (std::isnan(a.score) && std::isnan(b.score))) << c.what;
            EXPECT_EQ(a.finished, b.finished) << c.what;
            ++compared;
          }
        }
      }
  EXPECT_GT(compared, 150);
  // a model that gives every token probability 0: each sentence still ends with hypotheses (it
  // stopped with "ended without a hypothesis" when EOS was not among a step's K best)
  for (int32_t banned : {-1, kEos})
    for (const auto& nbest : run(cases[2], 2, banned, false)) {
      ASSERT_FALSE(nbest.empty());
      EXPECT_EQ(nbest[0].log_prob, -std::numeric_limits<double>::infinity());
    }
  // the ban reached a row's best: the banned token would win the trap's first step
  EXPECT_NE(run(cases[1], 0, 4, true)[0][0].tokens, run(cases[1], 0, -1, true)[0][0].tokens);
}

}  // namespace
}  // namespace qkv::decode
