// SentencePiece wrapper: trains a tiny model on a few dozen lines (well under a second) once per
// test binary and checks round trips, the special ids, nmt_nfkc's no-break spaces, serialization
// and the errors.
#include "qkv/text/sentencepiece.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
  const SentencePiece copy2 = sp;  // copy constructor
  EXPECT_EQ(copy.vocab_size(), sp.vocab_size());
  for (const char* l : kLines) {
    EXPECT_EQ(copy.encode(l), sp.encode(l));
    EXPECT_EQ(copy2.encode(l), sp.encode(l));
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

}  // namespace
