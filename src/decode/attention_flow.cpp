// Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", beside
// attention rollout in inspect.cpp): the attention graph as a flow network and, for each output
// token, the maximum flow it can push down to each input token.
//
// The graph: nodes (l, t) for layers l = 0 … L (l = 0: the input tokens; l: after layer l) and
// tokens t < T; an edge (l, i) → (l−1, j) of capacity Â_l[i][j], the residual-counted head mean
// rollout uses (residual_attention). For an output token i and an input token j,
//   flow(i, j) = max-flow from (L, i) to (0, j)        (= the minimum cut between them)
// computed exactly (Dinic: BFS levels, then blocking flows along them), and each row renormalised
// as their code does:  F[i][j] = flow(i, j) / Σ_j' flow(i, j').
//
// Rollout multiplies the layers' matrices (every path's weight summed); flow instead caps each
// path by its narrowest edges, and a token's flow is shared among the paths through one edge.
// T² max-flows on an L·T²-edge graph: at most kMaxFlowTokens tokens (longer is a qkv::Error).
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/decode/inspect.h"

namespace qkv::decode {

namespace {

// A flow network in adjacency arrays; edge e's reverse is e ^ 1 (added in pairs).
class FlowNetwork {
 public:
  explicit FlowNetwork(int64_t nodes) : first_(static_cast<size_t>(nodes), -1) {}

  // An edge from → to of `capacity` (and its reverse, of 0); its index.
  int64_t add_edge(int64_t from, int64_t to, double capacity) {
    for (auto [a, b, c] : {std::tuple{from, to, capacity}, std::tuple{to, from, 0.0}}) {
      to_.push_back(b), cap_.push_back(c), next_.push_back(first_[static_cast<size_t>(a)]);
      first_[static_cast<size_t>(a)] = static_cast<int64_t>(to_.size()) - 1;
    }
    return static_cast<int64_t>(to_.size()) - 2;
  }
  // Edge e's capacity from now on (between max_flow calls).
  void set_capacity(int64_t e, double capacity) {
    if (original_.size() == cap_.size()) original_[static_cast<size_t>(e)] = capacity;
    cap_[static_cast<size_t>(e)] = capacity;
  }

  // The maximum flow from s to t; the capacities are restored afterwards (the network is asked
  // again for the next pair: only the edges a path used are put back). `depth`: each node's
  // distance from s before any flow (a layered graph's, known without a search), or empty.
  double max_flow(int64_t s, int64_t t, const std::vector<int64_t>& depth = {}) {
    if (original_.size() != cap_.size()) original_ = cap_, used_.assign(cap_.size() / 2, 0);
    double total = 0;
    level_.assign(first_.size(), -1);
    bool phase = depth.empty() ? levels(s, t) : (level_ = depth, true);
    while (phase) {  // a blocking flow along the levels, then the levels of what capacity is left
      current_ = first_;
      for (double f; (f = push(s, t, kInfinity)) > kEps;) total += f;
      phase = levels(s, t);
    }
    for (int64_t p : touched_) {
      cap_[static_cast<size_t>(2 * p)] = original_[static_cast<size_t>(2 * p)];
      cap_[static_cast<size_t>(2 * p + 1)] = original_[static_cast<size_t>(2 * p + 1)];
      used_[static_cast<size_t>(p)] = 0;
    }
    touched_.clear();
    return total;
  }

 private:
  static constexpr double kInfinity = 1e300, kEps = 1e-12;

  // BFS from s over edges with capacity left: each node's distance; whether t is reached.
  bool levels(int64_t s, int64_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    queue_.assign(1, s);
    level_[static_cast<size_t>(s)] = 0;
    for (size_t q = 0; q < queue_.size(); ++q) {
      const int64_t u = queue_[q];
      for (int64_t e = first_[static_cast<size_t>(u)]; e >= 0; e = next_[static_cast<size_t>(e)]) {
        const int64_t v = to_[static_cast<size_t>(e)];
        if (cap_[static_cast<size_t>(e)] > kEps && level_[static_cast<size_t>(v)] < 0) {
          level_[static_cast<size_t>(v)] = level_[static_cast<size_t>(u)] + 1;
          queue_.push_back(v);
        }
      }
    }
    return level_[static_cast<size_t>(t)] >= 0;
  }

  // One augmenting path along the levels (DFS, each node's next edge remembered): its flow.
  double push(int64_t u, int64_t t, double limit) {
    if (u == t) return limit;
    for (int64_t& e = current_[static_cast<size_t>(u)]; e >= 0; e = next_[static_cast<size_t>(e)]) {
      const int64_t v = to_[static_cast<size_t>(e)];
      double& c = cap_[static_cast<size_t>(e)];
      if (c <= kEps || level_[static_cast<size_t>(v)] != level_[static_cast<size_t>(u)] + 1) continue;
      const double f = push(v, t, std::min(limit, c));
      if (f > kEps) {
        c -= f, cap_[static_cast<size_t>(e ^ 1)] += f;
        if (!used_[static_cast<size_t>(e / 2)]) used_[static_cast<size_t>(e / 2)] = 1, touched_.push_back(e / 2);
        return f;
      }
    }
    return 0;
  }

  std::vector<int64_t> first_, to_, next_, level_, current_, queue_, touched_;
  std::vector<double> cap_, original_;  // residual capacities now, and as built
  std::vector<char> used_;              // per edge pair: changed by this max_flow (in touched_)
};

}  // namespace

Tensor attention_flow(const std::vector<Tensor>& layers) {
  QKV_CHECK(!layers.empty(), "attention_flow: no layers");
  const int64_t T = layers.front().size(1), L = static_cast<int64_t>(layers.size());
  QKV_CHECK(T <= kMaxFlowTokens, "attention_flow: ", T, " tokens, more than the ", kMaxFlowTokens,
            " attention flow is computed for (", T, "² exact max-flows on a graph of ", L, "·", T,
            "² edges); attention rollout has no limit");
  // The graph for the input token j: nodes (l, t) for l ≥ 1 at (l−1)·T + t, edges (l, i) → (l−1, k)
  // of capacity Â_l[i][k]; the input layer is j alone (the others are dead ends: no path through
  // them reaches j), one sink node L·T with edges (1, k) → sink of capacity Â_1[k][j], set per j.
  std::vector<std::vector<double>> hat;
  for (const Tensor& w : layers) hat.push_back(residual_attention(w, T, "attention_flow"));
  const int64_t sink = L * T;
  FlowNetwork net(L * T + 1);
  for (int64_t l = 2; l <= L; ++l)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t k = 0; k < T; ++k)
        if (const double c = hat[static_cast<size_t>(l - 1)][static_cast<size_t>(i * T + k)]; c > 0)
          net.add_edge((l - 1) * T + i, (l - 2) * T + k, c);
  std::vector<int64_t> into_sink(static_cast<size_t>(T));
  for (int64_t k = 0; k < T; ++k) into_sink[static_cast<size_t>(k)] = net.add_edge(k, sink, 0.0);
  // every node's distance from the last layer before any flow: its layer's (the first Dinic phase's
  // levels, for every source there)
  std::vector<int64_t> depth(static_cast<size_t>(L * T + 1), L);
  for (int64_t n = 0; n < L * T; ++n) depth[static_cast<size_t>(n)] = L - 1 - n / T;
  // F[i][j] = flow((L, i) → (0, j)), rows renormalised; the input tokens split among the threads,
  // each with a copy of the network
  std::vector<double> flow(static_cast<size_t>(T * T), 0.0);
  parallel_for(T, 2, [&](int64_t begin, int64_t end) {
    FlowNetwork mine = net;
    for (int64_t j = begin; j < end; ++j) {
      for (int64_t k = 0; k < T; ++k) mine.set_capacity(into_sink[static_cast<size_t>(k)], hat[0][static_cast<size_t>(k * T + j)]);
      for (int64_t i = 0; i < T; ++i) flow[static_cast<size_t>(i * T + j)] = mine.max_flow((L - 1) * T + i, sink, depth);
    }
  });
  for (int64_t i = 0; i < T; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < T; ++j) sum += flow[static_cast<size_t>(i * T + j)];
    for (int64_t j = 0; j < T && sum > 0; ++j) flow[static_cast<size_t>(i * T + j)] /= sum;
  }
  Tensor out = Tensor::zeros({T, T});
  for (size_t i = 0; i < flow.size(); ++i) out.data<float>()[i] = static_cast<float>(flow[i]);
  return out;
}

}  // namespace qkv::decode
