// What libsentencepiece reads of a model without checking, checked before it sees the model: a
// crafted .model file (a Marian folder's source.spm, a model file's model_base64) must end in a
// qkv::Error, not in the library reading past its buffers (tests/text/sentencepiece_test.cpp,
// fuzz/sentencepiece_fuzz.cpp). Private to text/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qkv::text::spm {

// `model`: a serialized ModelProto. Its normalizer_spec's and denormalizer_spec's
// precompiled_charsmap — the character map that nmt_nfkc and the other normalization rules compile
// to, which the library walks for every character of every text — must be one the library can walk
// without leaving it (below), and its pieces ones the library's tries can hold (not empty, no '\0',
// under 8,000 bytes); else qkv::Error(what + ": …"). Bytes protobuf cannot parse end there too.
void check_model(std::string_view model, const std::string& what);

// What a model's trainer_spec and normalizer_spec say of how it cuts a text (protobuf's defaults where
// a field is absent; a message given twice merges, its last value winning), for writing the model as a
// Hugging Face tokenizer.json (LMTokenizer::to_hf). Malformed bytes: qkv::Error(what + ": …").
struct ModelSpec {
  int model_type = 1;  // TrainerSpec.model_type: 1 unigram, 2 bpe, 3 word, 4 char
  bool split_by_whitespace = true, treat_whitespace_as_suffix = false, split_digits = false, byte_fallback = false;
  std::string normalization = "nmt_nfkc";  // NormalizerSpec.name
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  // the pieces, by id: the text, the score, the type (SentencePiece.Type's numbers)
  enum PieceType : int { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  struct Piece {
    std::string piece;
    float score = 0;
    int type = 1;
  };
  std::vector<Piece> pieces;
};
ModelSpec read_spec(std::string_view model, const std::string& what);

}  // namespace qkv::text::spm
