// Byte-pair encoding (Sennrich et al.; GPT-2's byte-level form, Llama 2's with byte fallback), as
// `tokenizers`' BPE model runs it on one pre-tokenized piece:
//   1. the piece's characters, each a symbol (its vocabulary id); a character outside the vocabulary
//      becomes its bytes' <0xXX> tokens (byte_fallback), else the unknown token (runs of unknowns
//      fused into one with fuse_unk), else it is dropped;
//   2. while two neighbouring symbols form a pair in the merges, the pair of lowest rank (the
//      leftmost among equals) becomes one symbol: the token a+b.
// ignore_merges (Llama 3): a piece that is itself a token is that token, unmerged.
#include <queue>

#include "hf_components.h"
#include "hf_unicode.h"

namespace qkv::text::hf {

namespace {

class Bpe final : public Model {
 public:
  Bpe(const json& j, const Field& f) {
    vocab_ = read_vocab(need(j, "vocab", f), f.at("vocab"));
    if (const json* d = find(j, "dropout")) {
      if (!d->is_number() || d->get<double>() != 0.0) f.at("dropout").fail("BPE dropout is not supported (null or 0 is)");
    }
    if (const json* u = find(j, "unk_token")) {
      unk_token = as_string(*u, f.at("unk_token"));
      unk_id_ = vocab_.find(unk_token);
      if (unk_id_ < 0) f.at("unk_token").fail("\"" + unk_token + "\" is not in model.vocab");
    }
    if (const json* p = find(j, "continuing_subword_prefix")) prefix_ = as_string(*p, f.at("continuing_subword_prefix"));
    if (const json* s = find(j, "end_of_word_suffix")) suffix_ = as_string(*s, f.at("end_of_word_suffix"));
    fuse_unk_ = get_bool(j, "fuse_unk", false, f);
    byte_fallback_ = get_bool(j, "byte_fallback", false, f);
    ignore_merges_ = get_bool(j, "ignore_merges", false, f);
    if (byte_fallback_) {
      static const char* hex = "0123456789ABCDEF";
      for (int b = 0; b < 256; ++b) byte_ids_[b] = vocab_.find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    }
    // merges: ["a b", …] (before tokenizers 0.20) or [["a", "b"], …]; rank = position, the last
    // of a pair given twice counting (as a map built in order does)
    const json& merges = need(j, "merges", f);
    if (!merges.is_array()) f.at("merges").fail("expected an array");
    merges_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const Field mf = f.at("merges").at(i);
      std::string a, b;
      if (merges[i].is_string()) {
        const std::string s = merges[i].get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) mf.fail("expected \"a b\", got \"" + s + "\"");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (merges[i].is_array() && merges[i].size() == 2 && merges[i][0].is_string() && merges[i][1].is_string()) {
        a = merges[i][0].get<std::string>(), b = merges[i][1].get<std::string>();
      } else {
        mf.fail("expected \"a b\" or [\"a\", \"b\"]");
      }
      const int32_t ia = vocab_.find(a), ib = vocab_.find(b);
      if (ia < 0) mf.fail("\"" + a + "\" is not in model.vocab");
      if (ib < 0) mf.fail("\"" + b + "\" is not in model.vocab");
      const std::string joined = a + b.substr(std::min(prefix_.size(), b.size()));
      const int32_t ij = vocab_.find(joined);
      if (ij < 0) mf.fail("the merged token \"" + joined + "\" is not in model.vocab");
      merges_[key(ia, ib)] = {static_cast<int32_t>(i), ij};
    }
  }

  // (spans: each symbol's byte length in order, as tokenizers' Word keeps it: a byte-fallback token
  // 1, an unknown what it stands for, a merge the sum)
  void tokenize(std::string_view piece, std::vector<int32_t>& out,
                std::vector<std::pair<size_t, size_t>>* spans) const override {
    if (piece.empty()) return;
    if (ignore_merges_) {
      const int32_t id = vocab_.find(piece);
      if (id >= 0) {
        if (spans) spans->push_back({0, piece.size()});
        return out.push_back(id);
      }
    }
    // 1. the symbols
    std::vector<Symbol> sym;
    sym.reserve(piece.size());
    int32_t unk = -1;  // a pending unknown (fuse_unk)
    size_t unk_len = 0;
    for (size_t i = 0, n = 0; i < piece.size(); i += n) {
      decode_at(piece, i, &n);
      std::string s(piece.substr(i, n));
      if (i > 0 && !prefix_.empty()) s = prefix_ + s;
      if (i + n == piece.size() && !suffix_.empty()) s += suffix_;
      const int32_t id = vocab_.find(s);
      if (id >= 0) {
        if (unk >= 0) add(sym, unk, unk_len), unk = -1;
        add(sym, id, n);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
        if (all) {  // (a pending unknown stays pending, after the bytes: as tokenizers does)
          for (unsigned char b : s) add(sym, byte_ids_[b], 1);
          continue;
        }
      }
      if (unk_id_ >= 0) {
        if (unk >= 0 && fuse_unk_) {
          unk_len += n;
          continue;
        }
        if (unk >= 0) add(sym, unk, unk_len);
        unk = unk_id_, unk_len = n;
      }
    }
    if (unk >= 0) add(sym, unk, unk_len);
    // 2. the merges, lowest rank first, then leftmost
    std::priority_queue<Merge> queue;
    for (size_t i = 0; i + 1 < sym.size(); ++i) push(queue, sym, i);
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = sym[top.pos];
      if (cur.removed || cur.next < 0) continue;
      Symbol& right = sym[static_cast<size_t>(cur.next)];
      auto it = merges_.find(key(cur.id, right.id));
      if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // an expired entry
      cur.id = top.new_id;
      cur.len += right.len;
      right.removed = true;
      cur.next = right.next;
      if (cur.next >= 0) sym[static_cast<size_t>(cur.next)].prev = static_cast<int32_t>(top.pos);
      if (cur.prev >= 0) push(queue, sym, static_cast<size_t>(cur.prev));
      push(queue, sym, top.pos);
    }
    size_t at = 0;
    for (const Symbol& s : sym) {
      if (s.removed) continue;
      out.push_back(s.id);
      if (spans) spans->push_back({std::min(at, piece.size()), std::min(at + s.len, piece.size())});
      at += s.len;
    }
  }

  std::string continuing_subword_prefix() const override { return prefix_; }

 private:
  struct Symbol {
    int32_t id, prev, next;
    bool removed;
    size_t len;  // bytes of the piece
  };
  struct Merge {
    size_t pos;
    int32_t rank, new_id;
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }  // min-heap
  };
  struct Rule {
    int32_t rank, new_id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  static void add(std::vector<Symbol>& sym, int32_t id, size_t len) {
    const auto n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, false, len});
  }
  void push(std::priority_queue<Merge>& q, const std::vector<Symbol>& sym, size_t pos) const {
    const Symbol& s = sym[pos];
    if (s.next < 0) return;
    auto it = merges_.find(key(s.id, sym[static_cast<size_t>(s.next)].id));
    if (it != merges_.end()) q.push({pos, it->second.rank, it->second.new_id});
  }

  std::unordered_map<uint64_t, Rule> merges_;
  std::string prefix_, suffix_;
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256] = {};
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

}  // namespace

std::unique_ptr<Model> make_bpe(const json& j, const Field& f) { return std::make_unique<Bpe>(j, f); }

}  // namespace qkv::text::hf
