// SentencePiece models on arbitrary bytes (a .model file: what `qkv convert` reads as a Marian
// folder's source.spm and target.spm, and what a model file carries base64-encoded), through
// SentencePiece::from_serialized, then texts of several scripts encoded and their ids decoded, and the
// model written as a Hugging Face tokenizer.json (a language model's export). Each ends in ids and text
// or a qkv::Error — never a crash.
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/text/lm_tokenizer.h"
#include "qkv/text/sentencepiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using qkv::text::SentencePiece;
  const std::vector<std::string>& texts = qkv::fuzz::sample_texts();
  try {
    const SentencePiece sp = SentencePiece::from_serialized(std::string(reinterpret_cast<const char*>(data), size));
    for (const std::string& t : texts) {
      try {
        sp.decode(sp.encode(t));
        sp.encode_pieces(t);
      } catch (const qkv::Error&) {
      }
    }
    const int n = sp.vocab_size();
    for (int id : {0, 1, n - 1, n, -1}) {
      try {
        sp.piece_to_id(sp.id_to_piece(id));
      } catch (const qkv::Error&) {
      }
    }
    sp.serialized();
    try {
      qkv::text::LMTokenizer::sentencepiece(sp).to_hf(64);
    } catch (const qkv::Error&) {
    }
  } catch (const qkv::Error&) {
  }
  return 0;
}
