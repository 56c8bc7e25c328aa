// A SentencePiece model's character maps, checked as libsentencepiece (0.1.97, normalizer.cc) and
// its darts-clone trie will read them. The map is one blob:
//
//   blob = trie size T (uint32, little-endian) | the trie: T / 4 units (uint32) | normalized strings
//
// and for each character of a text the library walks the trie from unit 0 over the text's bytes
// (darts-clone's commonPrefixSearch; a unit u has
//   offset(u) = (u >> 10) << ((u & 512) >> 6),  label(u) = u & 0x800000FF,
//   has_leaf(u) = (u >> 8) & 1,                 value(u) = u & 0x7FFFFFFF):
//
//   p = offset(a[0]);  for each byte c:  p ^= c;  u = a[p];  stop unless label(u) = c;
//                                        p ^= offset(u);  if has_leaf(u): a match, value(a[p])
//
// takes the longest of the first 32 matches (a stack array of 32: it reads past it for a 33rd),
// and copies the string at normalized + value up to its '\0' (strlen). None of that is bounds-
// checked, so every unit a text can reach must lie inside the trie, every value must start a string
// whose '\0' lies inside the blob, no walk may meet more than 32 matches, and (so that walks end)
// the units reachable must form no cycle — all of which the tries the library builds satisfy: it
// lays units out in blocks of 256, so a node's 256 children always exist. And its pieces must be
// ones the library's own tries can hold (check_pieces).
#include "sentencepiece_model_check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::text::spm {
namespace {

// The protobuf wire format, as far as a ModelProto needs: each field a key (number << 3 | wire type)
// and a varint, 8 bytes, a length and its bytes, or 4 bytes. Groups (wire types 3 and 4) are
// refused: no SentencePiece model has one.
struct Wire {
  std::string_view s;
  size_t at = 0;
  uint64_t value = 0;  // the last varint field's value

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= s.size()) return false;
      const auto b = static_cast<uint8_t>(s[at++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // The next field; `bytes` is set for a length-delimited or fixed-size one, `value` for a varint.
  // False: malformed.
  bool next(uint64_t& number, int& type, std::string_view& bytes) {
    uint64_t key = 0;
    if (!varint(key)) return false;
    number = key >> 3, type = static_cast<int>(key & 7);
    if (number == 0) return false;
    uint64_t n = 0;
    switch (type) {
      case 0:
        return varint(value);
      case 1:
        n = 8;
        break;
      case 5:
        n = 4;
        break;
      case 2:
        if (!varint(n)) return false;
        break;
      default:
        return false;
    }
    if (n > s.size() - at) return false;
    bytes = s.substr(at, n);
    at += n;
    return true;
  }
};

[[noreturn]] void malformed(const std::string& what, size_t at) {
  throw Error(what + ": not a SentencePiece model (its protobuf is malformed at byte " + std::to_string(at) + ")");
}

// Calls fn(number, type, bytes, value) for each field of `message` (a piece of `model`, for the offsets
// of errors), in order: `bytes` a length-delimited or fixed-size field's, `value` a varint's.
template <class Fn>
void for_each_wire_field(std::string_view message, std::string_view model, const std::string& what, Fn&& fn) {
  Wire w{message};
  uint64_t n = 0;
  int type = 0;
  std::string_view bytes;
  while (w.at < message.size()) {
    if (!w.next(n, type, bytes)) malformed(what, static_cast<size_t>(message.data() - model.data()) + w.at);
    fn(n, type, bytes, w.value);
  }
}

// Calls fn(bytes) for each length-delimited occurrence of field `number` in `message`, in order.
template <class Fn>
void for_each_field(std::string_view message, uint64_t number, std::string_view model, const std::string& what,
                    Fn&& fn) {
  for_each_wire_field(message, model, what, [&](uint64_t n, int type, std::string_view bytes, uint64_t) {
    if (n == number && type == 2) fn(bytes);
  });
}

// What protobuf makes of a bytes or string field given more than once: the last.
std::string_view last_field(std::string_view message, uint64_t number, std::string_view model,
                            const std::string& what) {
  std::string_view last;
  for_each_field(message, number, model, what, [&](std::string_view b) { last = b; });
  return last;
}

// The precompiled_charsmap (NormalizerSpec field 2) protobuf gives ModelProto's field `spec`:
// occurrences of a message field merge, so the last charsmap of any of them.
std::string_view charsmap(std::string_view model, uint64_t spec, const std::string& what) {
  std::string_view last;
  for_each_field(model, spec, model, what, [&](std::string_view normalizer_spec) {
    if (const std::string_view c = last_field(normalizer_spec, 2, model, what); c.data() != nullptr) last = c;
  });
  return last;
}

uint32_t u32(const char* p) {  // little-endian, as the library writes it
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

void check_charsmap(std::string_view blob, const std::string& where) {
  auto fail = [&](const std::string& why) {
    throw Error(where + " is not a character map SentencePiece can read safely: " + why);
  };
  if (blob.size() <= 4) return;  // the library refuses it itself ("Blob for normalization rule is broken")
  const uint32_t trie_bytes = u32(blob.data());
  if (trie_bytes >= blob.size()) return;  // refused by the library too
  if (trie_bytes > blob.size() - 4)
    fail("its trie of " + std::to_string(trie_bytes) + " bytes runs past the map's " + std::to_string(blob.size() - 4));
  const size_t units = trie_bytes / 4;
  const std::string_view normalized = blob.substr(4 + trie_bytes);
  const size_t last_nul = normalized.rfind('\0');
  if (units == 0) fail("an empty trie");
  std::vector<uint32_t> a(units);
  for (size_t i = 0; i < units; ++i) a[i] = u32(blob.data() + 4 + 4 * i);
  auto offset = [](uint32_t u) { return size_t{u >> 10} << ((u & (1u << 9)) >> 6); };
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFFu); };
  auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1) == 1; };
  auto value = [](uint32_t u) { return u & ((1u << 31) - 1); };

  // Depth first over the nodes a text can reach, each node's 256 children in turn: state 0 unseen,
  // 1 on the walk (meeting it again is a cycle), 2 done. most[p]: the most matches a walk from p can
  // meet, known once p is done (the library's tries are DAGs: they share common suffixes).
  std::vector<uint8_t> state(units, 0), most(units, 0);
  struct Frame {
    size_t node;
    uint32_t next_byte;  // the child to look at next
    int most;            // the most matches below, over the children done
    int leaf;            // whether the edge to the child being walked is a match
  };
  std::vector<Frame> stack;
  auto enter = [&](size_t p) {
    if ((p | 0xFF) >= units)
      fail("unit " + std::to_string(p) + "'s children run past its " + std::to_string(units) + " units");
    state[p] = 1;
    stack.push_back({p, 0, 0, 0});
  };
  const size_t root = offset(a[0]);
  enter(root);
  while (true) {
    Frame& f = stack.back();
    if (f.next_byte == 256) {  // every child done
      most[f.node] = static_cast<uint8_t>(std::min(f.most, 255));
      state[f.node] = 2;
      const int below = most[f.node];
      stack.pop_back();
      if (stack.empty()) break;
      stack.back().most = std::max(stack.back().most, below + stack.back().leaf);
      continue;
    }
    const uint32_t c = f.next_byte++;
    const uint32_t u = a[f.node ^ c];
    if (label(u) != c) continue;
    const size_t q = (f.node ^ c) ^ offset(u);
    if (q >= units)
      fail("unit " + std::to_string(f.node ^ c) + " leads to unit " + std::to_string(q) + ", past the trie");
    f.leaf = has_leaf(u) ? 1 : 0;
    if (f.leaf && (last_nul == std::string_view::npos || value(a[q]) > last_nul))
      fail("a match's string starts at " + std::to_string(value(a[q])) + ", with no '\\0' after it in the map's " +
           std::to_string(normalized.size()) + " bytes of strings");
    if (state[q] == 1) fail("its units form a cycle (unit " + std::to_string(q) + ")");
    if (state[q] == 2)
      f.most = std::max(f.most, most[q] + f.leaf);
    else
      enter(q);  // (f is not used past here: enter may move the stack)
  }
  if (most[root] > 32)
    fail("a text can meet " + std::to_string(most[root]) + " matches in one walk, past the library's 32");
}

// Its pieces (ModelProto field 1, repeated: each a SentencePiece message whose field 1 is the piece,
// the last occurrence winning): none empty, none holding a '\0', none of 8,000 bytes or more — the
// checks later libsentencepiece releases make and 0.1.97 lacks: the unigram model's trie (darts-clone)
// throws on an empty key, and its exception passes every handler to std::terminate.
void check_pieces(std::string_view model, const std::string& what) {
  size_t index = 0;
  for_each_field(model, 1, model, what, [&](std::string_view sentence_piece) {
    const std::string_view piece = last_field(sentence_piece, 1, model, what);
    auto fail = [&](const std::string& why) {
      throw Error(what + ": its piece " + std::to_string(index) + " " + why +
                  ", which SentencePiece cannot hold (a piece is 1 to 7,999 bytes, none of them '\\0')");
    };
    if (piece.empty()) fail("is empty");
    if (piece.find('\0') != std::string_view::npos) fail("holds a '\\0'");
    if (piece.size() >= 8000) fail("is " + std::to_string(piece.size()) + " bytes long");
    ++index;
  });
}

// Calls fn(number, value) for each varint field of `message`, in order.
template <class Fn>
void for_each_varint(std::string_view message, std::string_view model, const std::string& what, Fn&& fn) {
  for_each_wire_field(message, model, what, [&](uint64_t n, int type, std::string_view, uint64_t value) {
    if (type == 0) fn(n, value);
  });
}

}  // namespace

ModelSpec read_spec(std::string_view model, const std::string& what) {
  ModelSpec spec;
  // the pieces (ModelProto field 1): piece 1, score 2 (a float), type 3
  for_each_field(model, 1, model, what, [&](std::string_view message) {
    ModelSpec::Piece p;
    p.piece = std::string(last_field(message, 1, model, what));
    for_each_wire_field(message, model, what, [&](uint64_t n, int type, std::string_view bytes, uint64_t value) {
      if (n == 2 && type == 5) std::memcpy(&p.score, bytes.data(), 4);  // (little-endian, as protobuf)
      if (n == 3 && type == 0) p.type = static_cast<int>(value);
    });
    spec.pieces.push_back(std::move(p));
  });
  // TrainerSpec (ModelProto field 2): model_type 3, split_by_whitespace 22, treat_whitespace_as_suffix 24,
  // split_digits 25, byte_fallback 35
  for_each_field(model, 2, model, what, [&](std::string_view trainer) {
    for_each_varint(trainer, model, what, [&](uint64_t field, uint64_t v) {
      if (field == 3) spec.model_type = static_cast<int>(v);
      if (field == 22) spec.split_by_whitespace = v != 0;
      if (field == 24) spec.treat_whitespace_as_suffix = v != 0;
      if (field == 25) spec.split_digits = v != 0;
      if (field == 35) spec.byte_fallback = v != 0;
    });
  });
  // NormalizerSpec (ModelProto field 3): name 1, add_dummy_prefix 3, remove_extra_whitespaces 4,
  // escape_whitespaces 5
  for_each_field(model, 3, model, what, [&](std::string_view normalizer) {
    if (const std::string_view name = last_field(normalizer, 1, model, what); name.data() != nullptr)
      spec.normalization = std::string(name);
    for_each_varint(normalizer, model, what, [&](uint64_t field, uint64_t v) {
      if (field == 3) spec.add_dummy_prefix = v != 0;
      if (field == 4) spec.remove_extra_whitespaces = v != 0;
      if (field == 5) spec.escape_whitespaces = v != 0;
    });
  });
  return spec;
}

void check_model(std::string_view model, const std::string& what) {
  check_pieces(model, what);
  check_charsmap(charsmap(model, 3, what), what + ": its normalizer_spec.precompiled_charsmap");
  check_charsmap(charsmap(model, 5, what), what + ": its denormalizer_spec.precompiled_charsmap");
}

}  // namespace qkv::text::spm
