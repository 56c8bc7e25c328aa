#include "qkv/text/lm_tokenizer.h"

#include <filesystem>
#include <unistd.h>

#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/io/file.h"
#include "qkv/io/config.h"

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
  t.chars_ = CharTokenizer::from_text(text);
  return t;
}

LMTokenizer LMTokenizer::sentencepiece(SentencePiece sp) {
  LMTokenizer t;
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

LMTokenizer::ChatTemplateFound LMTokenizer::find_chat_template(const nlohmann::json& j) {
  // chat_template.jinja's text (qkv convert stores it as "chat_template"), else the config's; one
  // that does not compile leaves the error, for the chat commands to name
  ChatTemplateFound found;
  if (!j.is_object() || j.value("type", "") != "hf") return found;
  const nlohmann::json cfg = j.value("tokenizer_config", nlohmann::json());
  const std::string file =
      j.contains("chat_template") && j["chat_template"].is_string() ? j["chat_template"].get<std::string>() : "";
  try {
    if (auto chat = ChatTemplate::from_config(cfg, file))
      found.chat_template = std::make_shared<const ChatTemplate>(std::move(*chat));
  } catch (const Error& e) {
    found.error = e.what();
  }
  return found;
}

LMTokenizer LMTokenizer::from_json(const nlohmann::json& j) {
  const std::string type = j.is_object() ? io::get_or(j, "type", "") : "";
  QKV_CHECK(type == "char" || type == "sentencepiece" || type == "hf",
            "LM tokenizer: expected {\"type\": \"char\", …}, {\"type\": \"sentencepiece\", \"model_base64\": …} or ",
            "{\"type\": \"hf\", \"tokenizer_json\": …}, got ", j.dump().substr(0, 200));
  if (type == "hf") {
    QKV_CHECK(j.contains("tokenizer_json") && j["tokenizer_json"].is_string(),
              "LM tokenizer: a Hugging Face tokenizer without its tokenizer_json text");
    const nlohmann::json cfg = j.value("tokenizer_config", nlohmann::json());
    LMTokenizer t;
    t.hf_ = std::make_shared<const HfTokenizer>(HfTokenizer::from_json(
        j["tokenizer_json"].get_ref<const std::string&>(), cfg.is_object() ? cfg.dump() : std::string(),
        "the model file's tokenizer.json"));
    t.hf_json_ = j;
    const ChatTemplateFound chat = find_chat_template(j);
    t.chat_ = chat.chat_template;
    t.chat_error_ = chat.error;
    return t;
  }
  if (type == "sentencepiece") return sentencepiece(SentencePiece::from_json(j, "the LM tokenizer"));
  LMTokenizer t;
  t.chars_ = CharTokenizer::from_json(j);
  return t;
}

nlohmann::json LMTokenizer::to_json() const {
  return hf_ ? hf_json_ : sp_ ? sp_->to_json() : chars_.to_json();
}

int64_t LMTokenizer::vocab_size() const {
  return hf_ ? hf_->vocab_size() : sp_ ? sp_->vocab_size() : chars_.vocab_size();
}

std::vector<int32_t> LMTokenizer::encode_prompt(std::string_view text) const {
  return hf_ ? hf_->encode(text, /*add_special_tokens=*/false) : encode(text);
}

std::vector<int32_t> LMTokenizer::encode(std::string_view text) const {
  if (hf_) return hf_->encode(text, /*add_special_tokens=*/true);
  if (!sp_) return chars_.encode(text);
  // Line by line, with the "\n" piece between lines (SentencePiece sees each line as a sentence).
  std::vector<int32_t> out;
  size_t line_start = 0, line_no = 1;
  while (true) {
    const size_t nl = text.find('\n', line_start);
    const std::string_view line = text.substr(line_start, nl == std::string_view::npos ? std::string_view::npos : nl - line_start);
    const std::vector<int> ids = line.empty() ? std::vector<int>{} : sp_->encode(line);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == sp_->unk_id()) {
        // Name the text the vocabulary lacks: the surface of the unknown piece.
        const std::vector<std::string> pieces = sp_->encode_pieces(line);
        throw Error(detail::concat("LM tokenizer: \"", i < pieces.size() ? excerpt(pieces[i]) : std::string("?"), "\" (line ",
                                   line_no, ") is not in the SentencePiece vocabulary of this model"));
      }
    }
    out.insert(out.end(), ids.begin(), ids.end());
    if (nl == std::string_view::npos) break;
    out.push_back(newline_id_);
    line_start = nl + 1;
    ++line_no;
  }
  return out;
}

std::string LMTokenizer::decode(const std::vector<int32_t>& ids) const {
  if (hf_) return hf_->decode(ids, /*skip_special_tokens=*/false);
  if (!sp_) return chars_.decode(ids);
  return sp_->decode(std::vector<int>(ids.begin(), ids.end()));  // "\n" is a piece of its own
}

std::string LMTokenizer::decode_one(int32_t id) const {
  if (hf_) return hf_->decode({id}, false);
  if (!sp_) return chars_.decode_one(id);
  return sp_->decode({id});
}

std::string TextStreamer::push(int32_t id) {
  if (!t_.hf()) return t_.decode_one(id);
  ids_.push_back(id);
  const std::string text = t_.decode(ids_);
  // U+FFFD last: a character whose bytes are not all here yet (hold it back); a decoder that
  // rewrote what was already returned (text no longer extends it): return nothing until it does.
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  if (text.ends_with(kReplacement) || text.size() < emitted_) return {};
  std::string out = text.substr(emitted_);
  emitted_ = text.size();
  return out;
}

std::string TextStreamer::flush() {
  if (!t_.hf()) return {};
  const std::string text = t_.decode(ids_);
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  emitted_ = text.size();
  return out;
}

}  // namespace qkv::text
