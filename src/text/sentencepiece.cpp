#include "qkv/text/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/base64.h"
#include "qkv/io/config.h"
#include "qkv/io/file.h"
#include "sentencepiece_model_check.h"

namespace qkv::text {
namespace {

namespace fs = std::filesystem;

std::string status_message(const sentencepiece::util::Status& st) {
  return st.ToString();
}

void check_id(const sentencepiece::SentencePieceProcessor& sp, int id, const char* op) {
  QKV_CHECK(id >= 0 && id < sp.GetPieceSize(), "SentencePiece::", op, ": id ", id,
            " out of range [0, ", sp.GetPieceSize(), ")");
}

}  // namespace

// The target model and vocab.json's numbering of the pieces.
struct SentencePiece::Marian {
  std::unique_ptr<sentencepiece::SentencePieceProcessor> target = std::make_unique<sentencepiece::SentencePieceProcessor>();
  std::string source_bytes, target_bytes;
  std::vector<std::string> pieces;                // id → piece
  std::unordered_map<std::string, int> ids;       // piece → id
  int eos = -1, unk = -1, pad = -1;
};

SentencePiece::SentencePiece() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePiece::~SentencePiece() = default;
SentencePiece::SentencePiece(SentencePiece&&) noexcept = default;
SentencePiece& SentencePiece::operator=(SentencePiece&&) noexcept = default;

// A copy re-parses the bytes the library serialized from a model that was checked when it was read:
// not checked again (spm::check_model costs about as much as the parse).
SentencePiece::SentencePiece(const SentencePiece& other)
    : SentencePiece(parse_checked(other.serialized(), "SentencePiece's copy")) {
  marian_ = other.marian_;
}

SentencePiece& SentencePiece::operator=(const SentencePiece& other) {
  if (this != &other) {
    *this = parse_checked(other.serialized(), "SentencePiece's copy");
    marian_ = other.marian_;
  }
  return *this;
}

SentencePiece SentencePiece::parse_checked(const std::string& bytes, const std::string& what) {
  SentencePiece out;
  const auto st = out.sp_->LoadFromSerializedProto(bytes);
  QKV_CHECK(st.ok(), what, ": not a SentencePiece model (", status_message(st), ")");
  return out;
}

SentencePiece SentencePiece::marian(std::string source_model, std::string target_model, std::string_view vocab_json,
                                    const std::string& what) {
  SentencePiece out;
  try {
    out = from_serialized(source_model);
  } catch (const Error& e) {
    throw Error(detail::concat(what, "/source.spm: ", e.what()));
  }
  auto m = std::make_shared<Marian>();
  spm::check_model(target_model, what + "/target.spm");
  auto st = m->target->LoadFromSerializedProto(target_model);
  QKV_CHECK(st.ok(), what, "/target.spm: not a SentencePiece model (", status_message(st), ")");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat(what, "/vocab.json is not valid JSON: ", e.what()));
  }
  QKV_CHECK(vocab.is_object() && !vocab.empty() && vocab.size() <= (1u << 24), what,
            "/vocab.json must be a non-empty object {piece: id}");
  m->pieces.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (auto& [piece, id] : vocab.items()) {
    QKV_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < static_cast<int64_t>(vocab.size()),
              what, "/vocab.json: the id of \"", piece.substr(0, 40), "\" must be an integer in 0 … ", vocab.size() - 1,
              ", got ", id.dump().substr(0, 40));
    const auto i = static_cast<size_t>(id.get<int64_t>());
    QKV_CHECK(!seen[i], what, "/vocab.json: the id ", i, " is given to two pieces");
    seen[i] = true;
    m->pieces[i] = piece;
    m->ids.emplace(piece, static_cast<int>(i));
  }
  auto special = [&](const char* piece) {
    auto it = m->ids.find(piece);
    QKV_CHECK(it != m->ids.end(), what, "/vocab.json has no \"", piece, "\"");
    return it->second;
  };
  m->eos = special("</s>"), m->unk = special("<unk>"), m->pad = special("<pad>");
  m->source_bytes = std::move(source_model), m->target_bytes = std::move(target_model);
  out.marian_ = std::move(m);
  return out;
}

SentencePiece SentencePiece::load(const std::string& model_path) {
  std::error_code ec;
  const fs::file_status kind = fs::status(model_path, ec);
  QKV_CHECK(fs::exists(kind), "SentencePiece::load: ", model_path, ": no such file");
  QKV_CHECK(fs::is_regular_file(kind), "SentencePiece::load: ", model_path, ": ",
            fs::is_directory(kind) ? "a directory" : "not a regular file", ", not a SentencePiece model");
  // Read here, not by the library's Load: checked before it parses them (from_serialized).
  const std::string bytes = io::read_file(model_path, int64_t{1} << 31, "the SentencePiece model");
  spm::check_model(bytes, "SentencePiece::load: " + model_path);
  return parse_checked(bytes, "SentencePiece::load: " + model_path);
}

SentencePiece SentencePiece::from_serialized(std::string bytes) {
  // What the library reads unchecked, checked first: a crafted model must not make it read past
  // its buffers (text/sentencepiece_model_check.h). Loading runs the model's self-test samples.
  const std::string what = "SentencePiece::from_serialized: " + std::to_string(bytes.size()) + " bytes";
  spm::check_model(bytes, what);
  return parse_checked(bytes, what);
}

std::string SentencePiece::serialized() const { return sp_->serialized_model_proto(); }

nlohmann::json SentencePiece::to_json() const {
  if (marian_)
    return {{"type", "marian"},
            {"source_base64", io::base64_encode(marian_->source_bytes)},
            {"target_base64", io::base64_encode(marian_->target_bytes)},
            {"vocab", marian_->pieces}};
  return {{"type", "sentencepiece"}, {"model_base64", io::base64_encode(serialized())}};
}

SentencePiece SentencePiece::from_json(const nlohmann::json& j, const std::string& what) {
  if (j.is_object() && io::get_or(j, "type", "") == "marian") {
    QKV_CHECK(j.contains("source_base64") && j["source_base64"].is_string() && j.contains("target_base64") &&
                  j["target_base64"].is_string() && j.contains("vocab") && j["vocab"].is_array(),
              what, " carries a Marian vocabulary without source_base64, target_base64 and vocab");
    nlohmann::json ids = nlohmann::json::object();
    for (size_t i = 0; i < j["vocab"].size(); ++i) {
      QKV_CHECK(j["vocab"][i].is_string(), what, ": the Marian vocabulary's piece ", i, " is not a string");
      ids[j["vocab"][i].get<std::string>()] = i;
    }
    QKV_CHECK(ids.size() == j["vocab"].size(), what, ": the Marian vocabulary lists a piece twice");
    return marian(io::base64_decode(j["source_base64"].get<std::string>(), what + "'s source model"),
                  io::base64_decode(j["target_base64"].get<std::string>(), what + "'s target model"), ids.dump(), what);
  }
  QKV_CHECK(j.is_object() && io::get_or(j, "type", "") == "sentencepiece" && j.contains("model_base64") &&
                j.at("model_base64").is_string(),
            what, " carries no SentencePiece model (expected {\"type\": \"sentencepiece\", \"model_base64\": …})");
  // SentencePiece's own errors name no file: `what` (the model file) is said before them.
  std::string bytes = io::base64_decode(j.at("model_base64").get<std::string>(), what + "'s SentencePiece model");
  try {
    return from_serialized(std::move(bytes));
  } catch (const Error& e) {
    throw Error(detail::concat(what, ": ", e.what()));
  }
}

void SentencePiece::train(const std::vector<std::string>& input_files,
                          const std::string& model_prefix, int vocab_size,
                          const std::string& model_type, double character_coverage,
                          int64_t input_sentence_size, bool verbose,
                          const std::unordered_map<std::string, std::string>& extra) {
  QKV_CHECK(!input_files.empty(), "SentencePiece::train: no input files");
  QKV_CHECK(!model_prefix.empty(), "SentencePiece::train: empty model prefix");
  QKV_CHECK(vocab_size > 4, "SentencePiece::train: vocab_size ", vocab_size,
            " must exceed the 4 special pieces");
  QKV_CHECK(input_sentence_size >= 0, "SentencePiece::train: input_sentence_size ",
            input_sentence_size, " < 0");
  std::string inputs;
  for (const std::string& f : input_files) {
    std::error_code ec;
    QKV_CHECK(fs::is_regular_file(f, ec), "SentencePiece::train: input ", f, ": no such file");
    // The library takes the inputs as one comma-separated flag.
    QKV_CHECK(f.find(',') == std::string::npos, "SentencePiece::train: input ", f,
              ": a path with a comma cannot be passed to SentencePiece");
    if (!inputs.empty()) inputs += ',';
    inputs += f;
  }

  // SentencePiece writes "<prefix>.model" and ".vocab" itself, with a plain open: it writes into a
  // private folder (mkdtemp: 0700, a fresh name) and qkv's one writer (io::write_file_atomic) puts
  // the two files in place, so a link planted at a predictable name is never written through.
  const char* tmp_root = std::getenv("TMPDIR");
  std::string tmp_template = std::string(tmp_root && *tmp_root ? tmp_root : "/tmp") + "/qkv-spm-XXXXXX";
  QKV_CHECK(::mkdtemp(tmp_template.data()) != nullptr, "SentencePiece::train: ", model_prefix,
            ": cannot create a temporary folder: ", std::strerror(errno));
  const std::string tmp_dir = tmp_template;
  const std::string tmp_prefix = tmp_dir + "/spm";
  std::ostringstream coverage;
  coverage.precision(17);
  coverage << character_coverage;
  std::unordered_map<std::string, std::string> kwargs = {
      {"input", inputs},
      {"model_prefix", tmp_prefix},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", model_type},
      {"character_coverage", coverage.str()},
      {"input_sentence_size", std::to_string(input_sentence_size)},
      {"normalization_rule_name", "nmt_nfkc"},
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"bos_id", "2"},
      {"eos_id", "3"},
      {"pad_piece", "<pad>"},
      {"unk_piece", "<unk>"},
      {"bos_piece", "<s>"},
      {"eos_piece", "</s>"},
      // 0 = INFO; 2 keeps only errors (which come back in the status anyway).
      {"minloglevel", verbose ? "0" : "2"},
  };
  for (const auto& [k, v] : extra) {
    QKV_CHECK(k != "input" && k != "model_prefix", "SentencePiece::train: flag ", k, " cannot be overridden");
    kwargs[k] = v;
  }
  const auto st = sentencepiece::SentencePieceTrainer::Train(kwargs);
  auto cleanup = [&] {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
  };
  if (!st.ok()) {
    cleanup();
    throw Error(detail::concat("SentencePiece::train: ", model_prefix, ": ", status_message(st)));
  }
  try {
    io::write_file_atomic(model_prefix + ".vocab", io::read_file(tmp_prefix + ".vocab"));
    io::write_file_atomic(model_prefix + ".model", io::read_file(tmp_prefix + ".model"));
  } catch (const Error& e) {
    cleanup();
    throw Error(detail::concat("SentencePiece::train: ", e.what()));
  }
  cleanup();
}

std::vector<int> SentencePiece::encode(std::string_view text) const {
  if (marian_) {
    // A language code (">>fra<<") first is a piece of its own; the rest goes through the source model.
    std::vector<int> ids;
    if (text.starts_with(">>")) {
      const size_t end = text.find("<<");
      if (end != std::string_view::npos) {
        const auto it = marian_->ids.find(std::string(text.substr(0, end + 2)));
        if (it != marian_->ids.end()) {
          ids.push_back(it->second);
          text.remove_prefix(end + 2);
          while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
        }
      }
    }
    for (const std::string& piece : encode_pieces(text)) {
      const auto it = marian_->ids.find(piece);
      ids.push_back(it == marian_->ids.end() ? marian_->unk : it->second);
    }
    return ids;
  }
  std::vector<int> ids;
  const auto st = sp_->Encode(text, &ids);
  QKV_CHECK(st.ok(), "SentencePiece::encode: ", status_message(st));
  return ids;
}

std::vector<int> SentencePiece::encode_target(std::string_view text) const {
  if (!marian_) return encode(text);
  std::vector<std::string> pieces;
  const auto st = marian_->target->Encode(text, &pieces);
  QKV_CHECK(st.ok(), "SentencePiece::encode_target: ", status_message(st));
  std::vector<int> ids;
  for (const std::string& piece : pieces) {
    const auto it = marian_->ids.find(piece);
    ids.push_back(it == marian_->ids.end() ? marian_->unk : it->second);
  }
  return ids;
}

std::vector<std::string> SentencePiece::encode_pieces(std::string_view text) const {
  std::vector<std::string> pieces;
  const auto st = sp_->Encode(text, &pieces);
  QKV_CHECK(st.ok(), "SentencePiece::encode_pieces: ", status_message(st));
  return pieces;
}

std::string SentencePiece::decode(const std::vector<int>& ids) const {
  if (marian_) {  // the pieces spelled by the target model; </s>, <pad> and <unk> skipped (skip_special_tokens)
    std::vector<std::string> pieces;
    for (int id : ids) {
      QKV_CHECK(id >= 0 && id < static_cast<int>(marian_->pieces.size()), "SentencePiece::decode: id ", id,
                " out of range [0, ", marian_->pieces.size(), ")");
      if (id != marian_->eos && id != marian_->pad && id != marian_->unk) pieces.push_back(marian_->pieces[static_cast<size_t>(id)]);
    }
    std::string text;
    const auto st = marian_->target->Decode(pieces, &text);
    QKV_CHECK(st.ok(), "SentencePiece::decode: ", status_message(st));
    return text;
  }
  for (int id : ids) check_id(*sp_, id, "decode");
  std::string text;
  const auto st = sp_->Decode(ids, &text);
  QKV_CHECK(st.ok(), "SentencePiece::decode: ", status_message(st));
  return text;
}

std::string SentencePiece::id_to_piece(int id) const {
  if (marian_) {
    QKV_CHECK(id >= 0 && id < static_cast<int>(marian_->pieces.size()), "SentencePiece::id_to_piece: id ", id,
              " out of range [0, ", marian_->pieces.size(), ")");
    return marian_->pieces[static_cast<size_t>(id)];
  }
  check_id(*sp_, id, "id_to_piece");
  return sp_->IdToPiece(id);
}

int SentencePiece::piece_to_id(std::string_view piece) const {
  if (marian_) {
    const auto it = marian_->ids.find(std::string(piece));
    return it == marian_->ids.end() ? marian_->unk : it->second;
  }
  return sp_->PieceToId(piece);
}
int SentencePiece::vocab_size() const { return marian_ ? static_cast<int>(marian_->pieces.size()) : sp_->GetPieceSize(); }
int SentencePiece::pad_id() const { return marian_ ? marian_->pad : sp_->pad_id(); }
int SentencePiece::unk_id() const { return marian_ ? marian_->unk : sp_->unk_id(); }
// Marian decoding starts from <pad> (decoder_start_token_id); there is no <s>.
int SentencePiece::bos_id() const { return marian_ ? marian_->pad : sp_->bos_id(); }
int SentencePiece::eos_id() const { return marian_ ? marian_->eos : sp_->eos_id(); }

}  // namespace qkv::text
