#include "qkv/text/lm_tokenizer.h"

#include <filesystem>
#include <unistd.h>

#include "qkv/core/error.h"
#include "qkv/io/base64.h"
#include "qkv/io/file.h"

namespace qkv::text {

namespace fs = std::filesystem;

namespace {

int32_t find_newline_piece(const SentencePiece& sp) {
  const int id = sp.piece_to_id("\n");
  QKV_CHECK(id != sp.unk_id(), "LM tokenizer: the SentencePiece model has no \"\\n\" piece (train it with qkv, ",
            "which adds one)");
  return id;
}

}  // namespace

LMTokenizer LMTokenizer::chars(std::string_view text) {
  LMTokenizer t;
  t.type_ = "char";
  t.chars_ = CharTokenizer::from_text(text);
  return t;
}

LMTokenizer LMTokenizer::sentencepiece(SentencePiece sp) {
  LMTokenizer t;
  t.type_ = "sentencepiece";
  t.newline_id_ = find_newline_piece(sp);
  t.sp_ = std::make_shared<const SentencePiece>(std::move(sp));
  return t;
}

LMTokenizer LMTokenizer::train_sentencepiece(std::string_view text, const std::string& model_prefix, int vocab_size,
                                             const std::string& model_type) {
  QKV_CHECK(!text.empty(), "LM tokenizer: cannot train SentencePiece on an empty text");
  const std::string corpus = model_prefix + ".train" + std::to_string(::getpid()) + ".txt";
  io::write_file_atomic(corpus, std::string(text));
  try {
    SentencePiece::train({corpus}, model_prefix, vocab_size, model_type, 1.0, 0, false,
                         {{"normalization_rule_name", "identity"},
                          {"add_dummy_prefix", "false"},
                          {"remove_extra_whitespaces", "false"},
                          {"user_defined_symbols", "\n"},
                          {"max_sentence_length", "1000000"}});
  } catch (...) {
    std::error_code ec;
    fs::remove(corpus, ec);
    throw;
  }
  std::error_code ec;
  fs::remove(corpus, ec);
  return sentencepiece(SentencePiece::load(model_prefix + ".model"));
}

LMTokenizer LMTokenizer::from_json(const nlohmann::json& j) {
  const std::string type = j.is_object() ? j.value("type", "") : "";
  if (type == "char") {
    LMTokenizer t;
    t.type_ = "char";
    t.chars_ = CharTokenizer::from_json(j);
    return t;
  }
  QKV_CHECK(type == "sentencepiece" && j.contains("model_base64") && j.at("model_base64").is_string(),
            "LM tokenizer: expected {\"type\": \"char\", …} or {\"type\": \"sentencepiece\", \"model_base64\": …}, got ",
            j.dump().substr(0, 200));
  return sentencepiece(SentencePiece::from_serialized(
      io::base64_decode(j.at("model_base64").get<std::string>(), "the LM tokenizer's SentencePiece model")));
}

nlohmann::json LMTokenizer::to_json() const {
  if (type_ == "char") return chars_.to_json();
  QKV_CHECK(sp_, "LM tokenizer: empty tokenizer");
  return {{"type", "sentencepiece"}, {"model_base64", io::base64_encode(sp_->serialized())}};
}

int64_t LMTokenizer::vocab_size() const {
  if (type_ == "char") return chars_.vocab_size();
  QKV_CHECK(sp_, "LM tokenizer: empty tokenizer");
  return sp_->vocab_size();
}

std::vector<int32_t> LMTokenizer::encode(std::string_view text) const {
  if (type_ == "char") return chars_.encode(text);
  QKV_CHECK(sp_, "LM tokenizer: empty tokenizer");
  std::vector<int32_t> out;
  size_t line_start = 0, line_no = 1;
  while (line_start <= text.size()) {
    const size_t nl = text.find('\n', line_start);
    const std::string_view line = text.substr(line_start, nl == std::string_view::npos ? std::string_view::npos : nl - line_start);
    if (!line.empty()) {
      const std::vector<int> ids = sp_->encode(line);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] == sp_->unk_id()) {
          // Name the text the vocabulary lacks: the surface of the unknown piece.
          const std::vector<std::string> pieces = sp_->encode_pieces(line);
          std::string what = i < pieces.size() ? pieces[i] : std::string("?");
          throw Error(detail::concat("LM tokenizer: \"", what, "\" (line ", line_no,
                                     ") is not in the SentencePiece vocabulary of this model"));
        }
        out.push_back(ids[i]);
      }
    }
    if (nl == std::string_view::npos) break;
    out.push_back(newline_id_);
    line_start = nl + 1;
    ++line_no;
  }
  return out;
}

std::string LMTokenizer::decode(const std::vector<int32_t>& ids) const {
  if (type_ == "char") return chars_.decode(ids);
  QKV_CHECK(sp_, "LM tokenizer: empty tokenizer");
  // Decode line by line, as encode() split it: "\n" pieces are the line breaks.
  std::string out;
  std::vector<int> line;
  for (int32_t id : ids) {
    if (id == newline_id_) {
      out += sp_->decode(line);
      out += '\n';
      line.clear();
    } else {
      line.push_back(id);
    }
  }
  return out + sp_->decode(line);
}

LMTokenizer::Stream::Stream(const LMTokenizer& tok, const std::vector<int32_t>& context) : tok_(&tok) {
  // Only the line after the context's last "\n" can still change as pieces are appended.
  for (int32_t id : context) {
    if (tok.type() != "char" && id == tok.newline_id_) line_.clear();
    else line_.push_back(id);
  }
  if (tok.type() != "char") line_emitted_ = tok.sp_->decode(std::vector<int>(line_.begin(), line_.end())).size();
}

std::string LMTokenizer::Stream::next(int32_t id) {
  if (tok_->type() == "char") return tok_->chars_.decode_one(id);
  if (id == tok_->newline_id_) {
    line_.clear();
    line_emitted_ = 0;
    return "\n";
  }
  line_.push_back(id);
  // Pieces decode to whole characters (no byte fallback), "▁" to a space: the line's text only grows.
  const std::string text = tok_->sp_->decode(std::vector<int>(line_.begin(), line_.end()));
  std::string added = text.size() > line_emitted_ ? text.substr(line_emitted_) : std::string();
  line_emitted_ = text.size();
  return added;
}

}  // namespace qkv::text
