// The Precompiled normalizer: SentencePiece's normalization rules (nmt_nfkc and the like, compiled
// into the model file's precompiled_charsmap), which XLM-RoBERTa's, T5's, ALBERT's and mBART's
// tokenizer.json carry base64-encoded. The blob is
//
//   [u32 trie_bytes, little-endian] [trie: trie_bytes / 4 darts-clone units] [pool: UTF-8 strings, each ended by \0]
//
// where the trie maps a key (the bytes of a character, or of a few) to the offset of its replacement
// in the pool. `tokenizers` applies it grapheme by grapheme (UAX #29 clusters):
//
//   a cluster of fewer than 6 bytes whose bytes begin with a key → the replacement of the shortest
//     such key, for the whole cluster;
//   else each character: the replacement of the shortest key its bytes begin with, or itself.
//
// (So "ﬁ\u0301" becomes "fi", the accent gone with the ligature: as `tokenizers` and SentencePiece
// do, which is what the models were trained on.)
//
// A crafted blob fails where it is read (too short, a pool that is not UTF-8), or where a text first
// leads into what it does not hold (a unit or pool offset past its end, a replacement starting inside
// a character): a qkv::Error naming the field, never a read past the blob; replacements stay within
// the text's Budget.
#include "hf_components.h"
#include "hf_unicode.h"
#include "qkv/core/error.h"
#include "qkv/io/base64.h"

namespace qkv::text::hf {

namespace normalizers {
namespace {

class Precompiled final : public Normalizer {
 public:
  Precompiled(const json& j, const Field& f) : where_(f.file + ": " + f.at("precompiled_charsmap").path) {
    const Field cf = f.at("precompiled_charsmap");
    const std::string blob = io::base64_decode(as_string(need(j, "precompiled_charsmap", f), cf), where_);
    if (blob.size() < 4) cf.fail("shorter than its 4-byte header");
    const uint32_t trie_bytes = static_cast<uint32_t>(static_cast<unsigned char>(blob[0])) |
                                static_cast<uint32_t>(static_cast<unsigned char>(blob[1])) << 8 |
                                static_cast<uint32_t>(static_cast<unsigned char>(blob[2])) << 16 |
                                static_cast<uint32_t>(static_cast<unsigned char>(blob[3])) << 24;
    const size_t units = trie_bytes / 4;
    if (units == 0 || units > (blob.size() - 4) / 4)
      cf.fail("its header gives a trie of " + std::to_string(trie_bytes) + " bytes, and " +
              std::to_string(blob.size() - 4) + " follow it");
    trie_.resize(units);
    for (size_t u = 0; u < units; ++u) {
      const auto* b = reinterpret_cast<const unsigned char*>(blob.data() + 4 + 4 * u);
      trie_[u] = uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
    }
    pool_ = blob.substr(4 + 4 * units);
    if (valid_utf8(pool_) != pool_) cf.fail("its replacement strings are not valid UTF-8");
  }

  // (tracked: each replacement is replace_chars of what it replaces, as tokenizers' Precompiled)
  void normalize(Piece& p, const Budget& budget) const override {
    const std::string& s = p.text;
    Transform t(p);
    for (size_t i = 0, end = 0; i < s.size(); i = end) {
      end = grapheme_end(s, i);
      const std::string_view cluster(s.data() + i, end - i);
      std::string_view r;
      if (cluster.size() < 6 && transform(cluster, &r)) {
        replace_chars(t, cluster, r);
      } else {
        for (size_t k = 0, n = 0; k < cluster.size(); k += n) {
          const char32_t c = decode_at(cluster, k, &n);
          if (transform(cluster.substr(k, n), &r))
            replace_chars(t, cluster.substr(k, n), r);
          else
            t.put(c);
        }
      }
      budget.check_bytes(t.text.size(), where_);
    }
    p = std::move(t).done();
  }

 private:
  // darts-clone's unit: a label (the byte it is reached by), an offset to its children, a leaf flag;
  // a leaf unit holds the value.
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
  static size_t offset(uint32_t u) { return size_t{u >> 10} << ((u & (1u << 9)) >> 6); }
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }

  uint32_t unit(size_t pos) const {
    if (pos >= trie_.size())
      throw Error(where_ + ": its trie leads to unit " + std::to_string(pos) + " of " + std::to_string(trie_.size()));
    return trie_[pos];
  }

  // The replacement of the shortest key `key` begins with (a \0 in `key` ends the search), as
  // `tokenizers`' Precompiled::transform; false where no key is a prefix of it.
  bool transform(std::string_view key, std::string_view* replacement) const {
    size_t pos = offset(unit(0));
    for (unsigned char c : key) {
      if (c == 0) return false;
      pos ^= c;
      const uint32_t u = unit(pos);
      if (label(u) != c) return false;
      pos ^= offset(u);
      if (!has_leaf(u)) continue;
      const size_t at = value(unit(pos));
      if (at > pool_.size() || (at < pool_.size() && (static_cast<unsigned char>(pool_[at]) & 0xC0) == 0x80))
        throw Error(where_ + ": a replacement at byte " + std::to_string(at) + " of its " +
                    std::to_string(pool_.size()) + "-byte pool " +
                    (at > pool_.size() ? "is past its end" : "begins inside a character"));
      const size_t nul = pool_.find('\0', at);
      *replacement = std::string_view(pool_).substr(at, nul == std::string::npos ? std::string::npos : nul - at);
      return true;
    }
    return false;
  }

  std::vector<uint32_t> trie_;
  std::string pool_;
  std::string where_;  // "tokenizer.json: normalizer.precompiled_charsmap", for errors
};

}  // namespace
}  // namespace normalizers

std::unique_ptr<Normalizer> make_precompiled(const json& j, const Field& f) {
  return std::make_unique<normalizers::Precompiled>(j, f);
}

}  // namespace qkv::text::hf
