// Unigram (Kudo 2018; SentencePiece's default: XLM-RoBERTa, T5, ALBERT, mBART), as `tokenizers`
// runs it on one pre-tokenized piece: each vocabulary entry a piece with a log-probability score,
// and the piece's segmentation the one of highest total score (Viterbi over its byte positions):
//
//   best[0] = 0;  best[e] = max over entries w = piece[b, e) of best[b] + score(w)
//
// A character that begins no entry is a node of its own with the unknown score
// min(scores) − 10, as `tokenizers` and SentencePiece give it; runs of such characters are fused
// into one unknown token (or, with byte_fallback, their bytes' <0xXX> tokens where all exist).
// Ties keep the first path found: shorter entries are tried first, as a trie walk finds them.
//
// JSON: {"type": "Unigram", "unk_id": 3 | null, "vocab": [["<s>", 0.0], …], "byte_fallback": false};
// an entry's id is its place in the list (a piece listed twice: the later id, as `tokenizers`' map).
#include <algorithm>
#include <limits>

#include "hf_components.h"
#include "hf_unicode.h"
#include "qkv/core/error.h"

namespace qkv::text::hf {

namespace {

constexpr double kUnkPenalty = 10.0;  // tokenizers' K_UNK_PENALTY, SentencePiece's kUnkPenalty

class Unigram final : public Model {
 public:
  Unigram(const json& j, const Field& f) : where_(f.file + ": " + f.path) {
    const json& list = need(j, "vocab", f);
    const Field vf = f.at("vocab");
    if (!list.is_array()) vf.fail("expected an array of [piece, score]");
    if (list.size() >= (size_t{1} << 31)) vf.fail("more than 2^31 entries");
    scores_.reserve(list.size());
    vocab_.tokens.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& e = list[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        vf.at(i).fail("expected [piece, score]");
      std::string piece = e[0].get<std::string>();
      if (valid_utf8(piece) != piece) vf.at(i).fail("not valid UTF-8");
      const double score = e[1].get<double>();
      min_score_ = std::min(min_score_, score);
      vocab_.ids[piece] = static_cast<int32_t>(i);
      vocab_.tokens.push_back(std::move(piece));
      scores_.push_back(score);
    }
    if (const json* u = find(j, "unk_id")) {
      if (!u->is_number_integer()) f.at("unk_id").fail("expected an integer or null");
      if (list.empty()) f.at("unk_id").fail("given, and the vocabulary is empty");
      const int64_t id = u->get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(list.size()))
        f.at("unk_id").fail(std::to_string(id) + " is not an entry of model.vocab (" + std::to_string(list.size()) +
                            ")");
      unk_id_ = static_cast<int32_t>(id);
      unk_token = vocab_.tokens[static_cast<size_t>(id)];
    }
    byte_fallback_ = get_bool(j, "byte_fallback", false, f);
    if (byte_fallback_) {
      static const char* hex = "0123456789ABCDEF";
      for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_.find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    }
    build_trie();
  }

  void tokenize(std::string_view text, std::vector<int32_t>& out,
                std::vector<std::pair<size_t, size_t>>* token_spans) const override {
    if (text.empty()) return;
    // 1. Viterbi: node e's best score, where its last token starts, and which token it is
    struct Node {
      double score = 0;
      int64_t start = -1;  // -1: not reached yet
      int32_t id = -1;
    };
    std::vector<Node> best(text.size() + 1);
    best[0].start = 0;
    const double unk_score = min_score_ - kUnkPenalty;
    auto relax = [&](size_t from, size_t to, int32_t id, double score) {
      Node& n = best[to];
      const double s = best[from].score + score;
      if (n.start < 0 || s > n.score) n = {s, static_cast<int64_t>(from), id};
    };
    for (size_t at = 0, len = 0; at < text.size(); at += len) {
      decode_at(text, at, &len);
      bool single = false;  // an entry that is exactly this character
      // the entries that are prefixes of text[at…], shortest first: down the trie a byte at a time
      uint32_t node = 0;
      for (size_t d = 0; at + d < text.size(); ++d) {
        node = child(node, static_cast<unsigned char>(text[at + d]));
        if (node == kNone) break;
        const int32_t id = nodes_[node].id;
        if (id < 0) continue;
        relax(at, at + d + 1, id, scores_[static_cast<size_t>(id)]);
        if (d + 1 == len) single = true;
      }
      if (!single) {
        if (unk_id_ < 0)
          throw Error(where_ + ": no entry covers \"" + std::string(text.substr(at, len)) +
                      "\" and there is no unk_id for it");
        relax(at, at + len, unk_id_, unk_score);
      }
    }
    // 2. the best path, from its end; unknown tokens next to each other fused into one
    std::vector<std::pair<size_t, size_t>> spans;  // [start, end) of each token, last first
    size_t unk_start = 0, unk_end = 0;             // the unknown run being fused (unk_end > 0)
    for (size_t end = text.size(), start = 0; end > 0; end = start) {
      const Node& n = best[end];
      start = static_cast<size_t>(n.start);
      if (unk_id_ >= 0 && n.id == unk_id_) {
        if (unk_end == 0) unk_end = end;
        unk_start = start;
        continue;
      }
      if (unk_end > 0) spans.push_back({unk_start, unk_end}), unk_end = 0;
      spans.push_back({start, end});
    }
    if (unk_end > 0) spans.push_back({unk_start, unk_end});
    for (size_t k = spans.size(); k-- > 0;) {
      const size_t before = out.size();
      emit(text.substr(spans[k].first, spans[k].second - spans[k].first), out);
      if (token_spans)
        token_spans->insert(token_spans->end(), out.size() - before, spans[k]);  // (bytes: each the whole)
    }
  }

 private:
  const std::string& piece(int32_t id) const { return vocab_.tokens[static_cast<size_t>(id)]; }

  uint32_t child(uint32_t node, unsigned char c) const {
    const TrieNode& n = nodes_[node];
    const unsigned char* b = labels_.data() + n.first;
    const unsigned char* e = b + n.count;
    const unsigned char* it = std::lower_bound(b, e, c);
    return it != e && *it == c ? children_[static_cast<size_t>(it - labels_.data())] : kNone;
  }

  // The trie of the distinct non-empty pieces, breadth first from their byte order: the pieces
  // beginning with a node's prefix are one range of that order, and its children split the range by
  // the next byte (no recursion: a crafted piece may be megabytes long).
  void build_trie() {
    std::vector<int32_t> sorted;
    sorted.reserve(vocab_.ids.size());
    for (const auto& [p, id] : vocab_.ids)
      if (!p.empty()) sorted.push_back(id);
    std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return piece(a) < piece(b); });
    struct Pending {
      uint32_t node;
      size_t lo, hi, depth;  // sorted[lo, hi): the pieces under the node, sharing `depth` bytes
    };
    std::vector<Pending> queue = {{0, 0, sorted.size(), 0}};
    nodes_.emplace_back();
    for (size_t q = 0; q < queue.size(); ++q) {
      auto [node, lo, hi, depth] = queue[q];
      if (lo < hi && piece(sorted[lo]).size() == depth) nodes_[node].id = sorted[lo++];  // (the shortest sorts first)
      nodes_[node].first = static_cast<uint32_t>(labels_.size());
      for (size_t i = lo; i < hi;) {
        const unsigned char c = static_cast<unsigned char>(piece(sorted[i])[depth]);
        size_t j = i + 1;
        while (j < hi && static_cast<unsigned char>(piece(sorted[j])[depth]) == c) ++j;
        labels_.push_back(c);
        children_.push_back(static_cast<uint32_t>(nodes_.size()));
        queue.push_back({static_cast<uint32_t>(nodes_.size()), i, j, depth + 1});
        nodes_.emplace_back();
        i = j;
      }
      nodes_[node].count = static_cast<uint32_t>(labels_.size()) - nodes_[node].first;
    }
  }

  // One token of the path: its id; a string that is no entry (fused unknowns) as its bytes' <0xXX>
  // tokens (byte_fallback, all of them there) or the unknown token.
  void emit(std::string_view token, std::vector<int32_t>& out) const {
    const int32_t id = vocab_.find(token);
    if (id >= 0) return out.push_back(id);
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : token) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : token) out.push_back(byte_ids_[b]);
        return;
      }
    }
    out.push_back(unk_id_);
  }

  std::vector<double> scores_;
  // The pieces' trie: a node a prefix of some piece (the root: the empty one), its children's labels
  // sorted in labels_ (children_ their nodes), from first_ on; id ≥ 0 where the prefix is a piece.
  struct TrieNode {
    uint32_t first = 0;
    uint32_t count = 0;
    int32_t id = -1;
  };
  static constexpr uint32_t kNone = UINT32_MAX;
  std::vector<TrieNode> nodes_;
  std::vector<unsigned char> labels_;
  std::vector<uint32_t> children_;
  double min_score_ = std::numeric_limits<double>::infinity();
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  int32_t byte_ids_[256] = {};
  std::string where_;  // "tokenizer.json: model", for errors
};

}  // namespace

std::unique_ptr<Model> make_unigram(const json& j, const Field& f) { return std::make_unique<Unigram>(j, f); }

}  // namespace qkv::text::hf
