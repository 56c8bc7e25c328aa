// SentencePiece wrapper: trains a tiny model on a few dozen lines (well under a second) once per
// test binary and checks round trips, the special ids, nmt_nfkc's no-break spaces, serialization
// and the errors.
#include "qkv/text/sentencepiece.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace {

namespace fs = std::filesystem;
using qkv::text::SentencePiece;

const char* const kLines[] = {
    "The cat sat on the mat.",
    "A dog is running in the park.",
    "Two men are playing football on the grass.",
    "The woman reads a book under a tree.",
    "Children are swimming in the lake.",
    "A man rides a bicycle down the street.",
    "The little girl is eating an apple.",
    "Le chat est assis sur le tapis.",
    "Un chien court dans le parc.",
    "Deux hommes jouent au football sur l'herbe.",
    "La femme lit un livre sous un arbre.",
    "Les enfants nagent dans le lac.",
    "Un homme descend la rue à vélo.",
    "La petite fille mange une pomme.",
    "Où est la gare ? C'est déjà l'été !",
    "« Bonjour », dit-il, très content.",
    "It's 3.5 km to the U.S. border.",
    "She doesn't like the rain, but he does.",
    "The weather is nice today, isn't it?",
    "We went to the market and bought bread.",
    "Nous sommes allés au marché acheter du pain.",
    "Il fait beau aujourd'hui, n'est-ce pas ?",
    "Elle n'aime pas la pluie, mais lui oui.",
    "A group of people stand in front of a building.",
    "Un groupe de personnes se tient devant un bâtiment.",
    "The boy jumps into the water.",
    "Le garçon saute dans l'eau.",
    "A black dog and a white dog play in the snow.",
    "Un chien noir et un chien blanc jouent dans la neige.",
    "The musician plays the guitar on stage.",
    "Le musicien joue de la guitare sur scène.",
    "Thank you very much for your help.",
    "Merci beaucoup pour votre aide.",
    "I think that this is a good idea.",
    "Je pense que c'est une bonne idée.",
    "Tom and Mary are watching a movie.",
    "Tom et Marie regardent un film.",
    "Zebras, yaks and quails: exquisite jumbled vowels.",
};

fs::path sp_temp_path() { return fs::temp_directory_path() / ("qkv_sp_test_" + std::to_string(::getpid())); }

std::string temp_dir() {
  static const std::string dir = [] {
    fs::create_directories(sp_temp_path());
    return sp_temp_path().string();
  }();
  return dir;
}

// Removes the temporary directory when the test binary exits.
struct RemoveSpTempDir {
  ~RemoveSpTempDir() {
    std::error_code ec;
    fs::remove_all(sp_temp_path(), ec);
  }
} remove_sp_temp_dir;

// Trains the shared test model once; returns its prefix.
const std::string& model_prefix() {
  static const std::string prefix = [] {
    const std::string input = temp_dir() + "/corpus.txt";
    {
      std::ofstream out(input);
      for (const char* l : kLines) out << l << "\n";
    }
    const std::string p = temp_dir() + "/tiny";
    SentencePiece::train({input}, p, 80);
    return p;
  }();
  return prefix;
}

const SentencePiece& model() {
  static const SentencePiece sp = SentencePiece::load(model_prefix() + ".model");
  return sp;
}

TEST(SentencePiece, TrainWritesModelAndVocabOnly) {
  const std::string& p = model_prefix();
  EXPECT_TRUE(fs::exists(p + ".model"));
  EXPECT_TRUE(fs::exists(p + ".vocab"));
  for (const auto& e : fs::directory_iterator(temp_dir()))  // no temporary files left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(SentencePiece, SpecialIds) {
  const SentencePiece& sp = model();
  EXPECT_EQ(sp.vocab_size(), 80);
  EXPECT_EQ(sp.pad_id(), 0);
  EXPECT_EQ(sp.unk_id(), 1);
  EXPECT_EQ(sp.bos_id(), 2);
  EXPECT_EQ(sp.eos_id(), 3);
  EXPECT_EQ(sp.id_to_piece(0), "<pad>");
  EXPECT_EQ(sp.id_to_piece(1), "<unk>");
  EXPECT_EQ(sp.id_to_piece(2), "<s>");
  EXPECT_EQ(sp.id_to_piece(3), "</s>");
  EXPECT_EQ(sp.piece_to_id("<pad>"), 0);
  EXPECT_EQ(sp.piece_to_id("</s>"), 3);
  EXPECT_EQ(sp.piece_to_id("no-such-piece-xyz"), sp.unk_id());
  EXPECT_THROW(sp.id_to_piece(80), qkv::Error);
  EXPECT_THROW(sp.id_to_piece(-1), qkv::Error);
}

TEST(SentencePiece, RoundTrip) {
  const SentencePiece& sp = model();
  for (const char* l : kLines) {
    const std::vector<int> ids = sp.encode(l);
    ASSERT_FALSE(ids.empty());
    for (int id : ids) {
      EXPECT_GE(id, 4) << l;  // no specials from plain text (unk excluded: all chars are covered)
      EXPECT_LT(id, sp.vocab_size());
    }
    EXPECT_EQ(sp.decode(ids), l);
    const std::vector<std::string> pieces = sp.encode_pieces(l);
    ASSERT_EQ(pieces.size(), ids.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(sp.piece_to_id(pieces[i]), ids[i]);
  }
  // Specials decode to nothing; an unseen character becomes unk.
  std::vector<int> ids = sp.encode("the cat");
  std::vector<int> with_specials = {sp.bos_id()};
  with_specials.insert(with_specials.end(), ids.begin(), ids.end());
  with_specials.push_back(sp.eos_id());
  with_specials.push_back(sp.pad_id());
  EXPECT_EQ(sp.decode(with_specials), "the cat");
  const std::vector<int> unseen = sp.encode("\xE4\xB8\xAD");  // U+4E2D, not in the corpus
  EXPECT_NE(std::find(unseen.begin(), unseen.end(), sp.unk_id()), unseen.end());
  EXPECT_THROW(sp.decode({4, 999}), qkv::Error);
}

TEST(SentencePiece, NoBreakSpacesEncodeAsSpaces) {
  const SentencePiece& sp = model();
  EXPECT_EQ(sp.encode("a\u00a0b"), sp.encode("a b"));
  EXPECT_EQ(sp.encode("Où est la gare\u00a0?"), sp.encode("Où est la gare ?"));
  EXPECT_EQ(sp.encode("« Bonjour\u202f»"), sp.encode("« Bonjour »"));
  EXPECT_EQ(sp.decode(sp.encode("la gare\u00a0?")), "la gare ?");
}

TEST(SentencePiece, SerializedRoundTrip) {
  const SentencePiece& sp = model();
  const std::string bytes = sp.serialized();
  ASSERT_FALSE(bytes.empty());
  std::ifstream in(model_prefix() + ".model", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, file);
  const SentencePiece copy = SentencePiece::from_serialized(bytes);
  const SentencePiece copy2 = sp;  // copy constructor (the library's parse, not checked again)
  SentencePiece copy3 = SentencePiece::from_serialized(bytes);
  copy3 = copy2;  // copy assignment
  EXPECT_EQ(copy.vocab_size(), sp.vocab_size());
  EXPECT_EQ(copy3.vocab_size(), sp.vocab_size());
  EXPECT_EQ(copy3.serialized(), bytes);
  for (const char* l : kLines) {
    EXPECT_EQ(copy.encode(l), sp.encode(l));
    EXPECT_EQ(copy2.encode(l), sp.encode(l));
    EXPECT_EQ(copy3.encode(l), sp.encode(l));
  }
}

TEST(SentencePiece, BpeModel) {
  const std::string input = temp_dir() + "/corpus_bpe.txt";
  {
    std::ofstream out(input);
    for (const char* l : kLines) out << l << "\n";
  }
  const std::string p = temp_dir() + "/tiny_bpe";
  SentencePiece::train({input}, p, 100, "bpe");
  const SentencePiece sp = SentencePiece::load(p + ".model");
  EXPECT_EQ(sp.vocab_size(), 100);
  EXPECT_EQ(sp.pad_id(), 0);
  EXPECT_EQ(sp.eos_id(), 3);
  for (const char* l : kLines) EXPECT_EQ(sp.decode(sp.encode(l)), l);
}

TEST(SentencePiece, Errors) {
  const std::string missing = temp_dir() + "/does_not_exist.model";
  try {
    SentencePiece::load(missing);
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  // A corrupt model file.
  const std::string corrupt = temp_dir() + "/corrupt.model";
  {
    std::ofstream out(corrupt, std::ios::binary);
    out << "this is not a protobuf \xff\xff\xff\xff model";
  }
  try {
    SentencePiece::load(corrupt);
    FAIL() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(corrupt), std::string::npos) << e.what();
  }
  EXPECT_THROW(SentencePiece::from_serialized("garbage\xff\xff"), qkv::Error);
  // A truncated model.
  std::string bytes = model().serialized();
  bytes.resize(bytes.size() / 2);
  EXPECT_THROW(SentencePiece::from_serialized(bytes), qkv::Error);
  // Training: a missing input, an impossible vocabulary size.
  EXPECT_THROW(SentencePiece::train({temp_dir() + "/nope.txt"}, temp_dir() + "/x", 50),
               qkv::Error);
  const std::string input = temp_dir() + "/small.txt";
  {
    std::ofstream out(input);
    out << "ab ab ab\n";
  }
  EXPECT_THROW(SentencePiece::train({input}, temp_dir() + "/too_big", 5000), qkv::Error);
  EXPECT_FALSE(fs::exists(temp_dir() + "/too_big.model"));
}

// ---- crafted character maps ---------------------------------------------------------------------
// libsentencepiece walks a model's character map (normalizer.cc: trie size | darts-clone trie |
// '\0'-ended strings) without a bounds check; text/sentencepiece_model_check.cpp checks it first.

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  out += static_cast<char>(v);
}

// The model's bytes with `spec` (3: normalizer_spec, 5: denormalizer_spec) given `blob` as its
// precompiled_charsmap: a second occurrence appended, which protobuf merges in, its bytes field last.
std::string with_charsmap(const std::string& model, const std::string& blob, int spec = 3) {
  std::string inner;
  put_varint(inner, 2 << 3 | 2);  // precompiled_charsmap, length-delimited
  put_varint(inner, blob.size());
  inner += blob;
  std::string out = model;
  put_varint(out, static_cast<uint64_t>(spec) << 3 | 2);
  put_varint(out, inner.size());
  return out + inner;
}

// A map as the library lays one out, made by hand: n 'a's in a row, each a match, every match read
// as "b" — so that "a" × n normalizes to "b", and a walk over it meets n matches. Node k owns the
// block of units 256 (k + 1) …; a unit is offset << 10 | has_leaf << 8 | label, a leaf's value unit
// 1 << 31 | value; every other unit's label differs from the byte that reaches it. `cycle`: the last
// node's 'a' leads back to the first; `strings`: the strings' bytes.
std::string chain_charsmap(int n, bool cycle = false, const std::string& strings = std::string("b\0", 2)) {
  const uint32_t units = 256 * (n + 2);
  std::vector<uint32_t> a(units);
  for (uint32_t i = 0; i < units; ++i) a[i] = (i & 0xFF) ^ 1;
  auto node = [](int k) { return uint32_t(256 * (k + 1)); };
  a[0] = node(0) << 10;
  for (int k = 0; k < n; ++k) {
    const uint32_t edge = node(k) ^ 'a', to = cycle && k == n - 1 ? node(0) : node(k + 1);
    a[edge] = (edge ^ to) << 10 | 1u << 8 | 'a';
    a[to] = 1u << 31;  // value 0: the string "b"
  }
  std::string blob(4 + 4 * units, '\0');
  const uint32_t bytes = 4 * units;
  std::memcpy(blob.data(), &bytes, 4);  // (little-endian, as the library writes it on x86 and ARM)
  std::memcpy(blob.data() + 4, a.data(), 4 * units);
  return blob + strings;
}

std::string error_loading(const std::string& bytes) {
  try {
    SentencePiece::from_serialized(bytes);
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

// The model's bytes with one more piece (ModelProto's repeated field 1: {piece, type NORMAL}).
std::string with_piece(const std::string& model, const std::string& piece) {
  std::string inner;
  put_varint(inner, 1 << 3 | 2);
  put_varint(inner, piece.size());
  inner += piece;
  put_varint(inner, 3 << 3 | 0);  // type: NORMAL
  put_varint(inner, 1);
  std::string out = model;
  put_varint(out, 1 << 3 | 2);
  put_varint(out, inner.size());
  return out + inner;
}

// Pieces the library's own trie cannot hold: libsentencepiece 0.1.97's darts-clone throws on an empty
// one, past every handler (std::terminate: sentencepiece_fuzz's second find); later releases refuse
// them, as qkv now does first.
TEST(SentencePiece, APieceTheLibraryCannotHoldIsAnError) {
  const std::string m = model().serialized();
  const int n = model().vocab_size();
  auto expect = [&](const std::string& piece, const std::string& part) {
    const std::string err = error_loading(with_piece(m, piece));
    EXPECT_NE(err.find("its piece " + std::to_string(n) + " " + part + ", which SentencePiece cannot hold"),
              std::string::npos)
        << err;
  };
  expect("", "is empty");
  expect(std::string("a\0b", 3), "holds a '\\0'");
  expect(std::string(8000, 'a'), "is 8000 bytes long");
  EXPECT_EQ(SentencePiece::from_serialized(with_piece(m, "zzzq")).vocab_size(), n + 1);  // a piece it can
}

TEST(SentencePiece, AHandMadeCharacterMapReadsAsTheLibraryReadsIt) {
  // 32 matches in one walk: the most the library keeps (a stack array of 32)
  const SentencePiece sp = SentencePiece::from_serialized(with_charsmap(model().serialized(), chain_charsmap(32)));
  EXPECT_EQ(sp.encode(std::string(32, 'a')), sp.encode("b"));
  EXPECT_EQ(sp.encode(std::string(32, 'a') + " x " + std::string(3, 'a')), sp.encode("b x b"));
  EXPECT_EQ(sp.encode("dog"), model().encode("dog"));  // not in this map: copied as they are
}

TEST(SentencePiece, ACraftedCharacterMapIsAnErrorNotAReadPastIt) {
  const std::string m = model().serialized();
  auto expect = [&](const std::string& bytes, const std::string& part) {
    const std::string err = error_loading(bytes);
    EXPECT_NE(err.find("SentencePiece::from_serialized: " + std::to_string(bytes.size()) + " bytes: its "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(part), std::string::npos) << "expected \"" << part << "\" in: " << err;
  };
  // a 33rd match: the library would write past its array of 32
  expect(with_charsmap(m, chain_charsmap(33)),
         "normalizer_spec.precompiled_charsmap is not a character map SentencePiece can read safely: a text can meet "
         "33 matches in one walk, past the library's 32");
  // a cycle: "aaa…" would meet matches without end
  expect(with_charsmap(m, chain_charsmap(3, true)), "its units form a cycle");
  // a match's string with no '\0' (strlen would run on), or past the strings
  expect(with_charsmap(m, chain_charsmap(3, false, "b")), "a match's string starts at 0, with no '\\0' after it");
  expect(with_charsmap(m, chain_charsmap(3, false, "")), "with no '\\0' after it in the map's 0 bytes of strings");
  // the trie's size past the map (the library would take bytes past its end as the strings)
  std::string past = chain_charsmap(2);
  const uint32_t size = static_cast<uint32_t>(past.size() - 2);
  std::memcpy(past.data(), &size, 4);
  expect(with_charsmap(m, past), "runs past the map's");
  // unit 0 leads outside the trie
  std::string outside = chain_charsmap(2);
  const uint32_t root = 1000000u << 10;
  std::memcpy(outside.data() + 4, &root, 4);
  expect(with_charsmap(m, outside), "unit 1000000's children run past its 1024 units");
  // the denormalizer's map (Decode walks it) likewise
  expect(with_charsmap(m, chain_charsmap(3, true), 5), "denormalizer_spec.precompiled_charsmap is not a character map");
  // a model file's bytes, through load: the file named
  const std::string path = temp_dir() + "/crafted.model";
  {
    std::ofstream out(path, std::ios::binary);
    out << with_charsmap(m, chain_charsmap(3, true));
  }
  try {
    SentencePiece::load(path);
    ADD_FAILURE() << "no error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SentencePiece::load: " + path + ": its normalizer_spec"), std::string::npos)
        << e.what();
  }
}

}  // namespace
