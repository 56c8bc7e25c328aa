// SentencePiece: a thin wrapper over the system libsentencepiece (Debian's 0.1.97; pkg-config
// "sentencepiece") that reports failures as qkv::Error and hides the library's headers.
//
// Models trained by SentencePiece::train use the ids qkv's decoders expect:
//   pad = 0 ("<pad>"), unk = 1 ("<unk>"), bos = 2 ("<s>"), eos = 3 ("</s>"),
// and the "nmt_nfkc" normalization (NFKC plus NMT clean-ups), which among other things maps the
// no-break spaces U+00A0 and U+202F to a plain space, so "a\u00a0b" and "a b" encode the same.
// encode() adds no bos/eos: callers add bos_id()/eos_id() themselves.
//
// A Marian vocabulary (OPUS-MT: source.spm, target.spm and vocab.json) is one of these too: the
// source model cuts the text into pieces, vocab.json numbers them (a piece it lacks is <unk>), and
// decoding spells the numbered pieces with the target model — as Hugging Face's MarianTokenizer
// does, language codes (">>fra<<" at the start of a source) included. Model files carry it as
// {"type": "marian", "source_base64", "target_base64", "vocab": [piece of id 0, 1, …]}.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace qkv::text {

class SentencePiece {
 public:
  // Loads PREFIX.model; qkv::Error naming the path when it is missing or not a model.
  static SentencePiece load(const std::string& model_path);
  // Loads a model from its serialized bytes (the content of a .model file, or serialized()).
  static SentencePiece from_serialized(std::string bytes);
  // The model's bytes (a .model file's content); from_serialized(serialized()) is the same model.
  std::string serialized() const;
  // How model files carry it: {"type": "sentencepiece", "model_base64": "…"}. from_json's error
  // starts with `what` (e.g. "'model.safetensors': the model file").
  nlohmann::json to_json() const;
  static SentencePiece from_json(const nlohmann::json& j, const std::string& what);
  // A Marian vocabulary from the two models' bytes and vocab.json's text (`what` names the folder
  // in errors: a vocab.json that is not a {piece: id} object of ids 0 … n−1, each once, or that lacks
  // </s>, <unk> or <pad>).
  static SentencePiece marian(std::string source_model, std::string target_model, std::string_view vocab_json,
                              const std::string& what);
  bool is_marian() const { return marian_ != nullptr; }

  // Trains a model on the lines of `input_files` (plain text, one sentence per line) and writes
  // model_prefix + ".model" and ".vocab". Training writes to a temporary prefix next to them and
  // renames the two files at the end, so a reader never sees a half-written model. model_type:
  // "unigram" | "bpe" | "char" | "word". input_sentence_size = 0 uses every line; otherwise a
  // random sample of that many lines. The library's log output is suppressed unless `verbose`.
  // `extra` adds or overrides trainer flags by their SentencePiece names (the LM tokenizer uses it
  // for identity normalization and a "\n" piece).
  static void train(const std::vector<std::string>& input_files, const std::string& model_prefix,
                    int vocab_size, const std::string& model_type = "unigram",
                    double character_coverage = 1.0, int64_t input_sentence_size = 0,
                    bool verbose = false,
                    const std::unordered_map<std::string, std::string>& extra = {});

  std::vector<int> encode(std::string_view text) const;
  // A target sentence (what a translator is trained to write): a Marian vocabulary cuts it with the
  // target model (MarianTokenizer's text_target); any other is encode().
  std::vector<int> encode_target(std::string_view text) const;
  std::vector<std::string> encode_pieces(std::string_view text) const;
  // Ids out of range → qkv::Error. pad/bos/eos (control symbols) decode to nothing.
  std::string decode(const std::vector<int>& ids) const;

  std::string id_to_piece(int id) const;  // out of range → qkv::Error
  int piece_to_id(std::string_view piece) const;  // unknown piece → unk_id()
  int vocab_size() const;
  int pad_id() const;
  int unk_id() const;
  int bos_id() const;
  int eos_id() const;

  // Copies go through serialized() (a model is a few hundred KB at most), not checked again.
  SentencePiece(const SentencePiece& other);
  SentencePiece& operator=(const SentencePiece& other);
  SentencePiece(SentencePiece&&) noexcept;
  SentencePiece& operator=(SentencePiece&&) noexcept;
  ~SentencePiece();

 private:
  SentencePiece();
  // The library's parse of bytes spm::check_model has passed (text/sentencepiece_model_check.h), or
  // that the library itself serialized from such a model; `what` begins its error.
  static SentencePiece parse_checked(const std::string& bytes, const std::string& what);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // (Marian: the source model)
  struct Marian;
  std::shared_ptr<const Marian> marian_;  // set: a Marian vocabulary (immutable, shared by copies)
};

}  // namespace qkv::text
