// A request body of `qkv serve` (cmd_serve.cpp): bytes that must be valid UTF-8 and a JSON object
// with known fields, read through typed getters that answer 400 naming the field. Its own header so
// that the fuzz target (fuzz/http_fuzz.cpp) checks bodies exactly as the server does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/io/json.h"
#include "qkv/core/utf8.h"

namespace qkv::cli {

// A request's error: its HTTP status and a message naming what was wrong.
struct HttpError {
  int status;
  std::string message;
};

using nlohmann::json;

// A request body: a JSON object with known fields, read with checks that answer 400 naming the field.
class Body {
 public:
  // lenient (the OpenAI-compatible routes): fields not in `fields` are ignored and a null counts as
  // absent, as OpenAI's API takes them (its clients send many optional fields)
  Body(const std::string& text, const std::vector<const char*>& fields, bool lenient = false) {
    // JSON is UTF-8 (RFC 8259 §8.1): a body that is not is refused naming the first bad byte, before
    // the parser (whose own message would quote the bad bytes)
    for (size_t i = 0; i < text.size();) {
      const utf8::CodePoint c = utf8::decode_one(text, i);
      if (!c.valid()) throw HttpError{400, "the body is not valid UTF-8 (byte " + std::to_string(i) + ")"};
      i += c.length;
    }
    // io::parse_json as for every JSON qkv reads: nesting bounded, a key given twice refused
    try {
      j_ = io::parse_json(text, "the body");
    } catch (const json::exception& e) {
      throw HttpError{400, "the body is not JSON: " + plain_message(e.what())};
    } catch (const Error& e) {
      throw HttpError{400, plain_message(e.what())};
    }
    if (!j_.is_object()) throw HttpError{400, "the body must be a JSON object"};
    if (lenient) {
      for (auto it = j_.begin(); it != j_.end();) it = it->is_null() ? j_.erase(it) : std::next(it);
      return;
    }
    std::string known;
    for (const char* f : fields) known += (known.empty() ? "" : ", ") + std::string(f);
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      const std::string& k = it.key();  // (not a structured binding: clang 14, the fuzz build, cannot capture one)
      if (std::find_if(fields.begin(), fields.end(), [&](const char* f) { return k == f; }) == fields.end())
        throw HttpError{400, "unknown field \"" + k + "\" (" + known + ")"};
    }
  }
  bool has(const char* key) const { return j_.contains(key); }
  const json& operator[](const char* key) const { return j_.at(key); }
  int64_t integer(const char* key, int64_t def, int64_t lo, int64_t hi) const {
    if (!has(key)) return def;
    if (!j_[key].is_number_integer() || j_[key].get<int64_t>() < lo || j_[key].get<int64_t>() > hi)
      throw HttpError{400, std::string("\"") + key + "\" must be an integer from " + std::to_string(lo) + " to " +
                               std::to_string(hi)};
    return j_[key].get<int64_t>();
  }
  double number(const char* key, double def, double lo, double hi) const {
    if (!has(key)) return def;
    if (!j_[key].is_number() || j_[key].get<double>() < lo || j_[key].get<double>() > hi)
      throw HttpError{400, std::string("\"") + key + "\" must be a number from " + trimmed(lo) + " to " + trimmed(hi)};
    return j_[key].get<double>();
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j_[key].is_boolean()) throw HttpError{400, std::string("\"") + key + "\" must be true or false"};
    return j_[key].get<bool>();
  }
  // A required string of at most max_bytes bytes (413 beyond), not empty.
  std::string text(const char* key, int64_t max_bytes, const char* limit) const {
    if (!has(key) || !j_[key].is_string()) throw HttpError{400, std::string("\"") + key + "\" must be a string"};
    std::string s = j_[key].get<std::string>();
    if (s.empty()) throw HttpError{400, std::string("\"") + key + "\" is empty"};
    if (static_cast<int64_t>(s.size()) > max_bytes)
      throw HttpError{413, std::string("\"") + key + "\" has " + std::to_string(s.size()) + " bytes, more than " + limit +
                               " " + std::to_string(max_bytes)};
    return s;
  }

  // A text or a non-empty list of texts (at most max_count: 413 beyond), each a non-empty string of at
  // most max_bytes bytes (413 beyond); the messages name --max-sentences and --max-sentence-bytes.
  std::vector<std::string> texts(const char* key, int64_t max_count, int64_t max_bytes) const {
    const std::string shape = std::string("\"") + key + "\" must be a string or a non-empty array of strings";
    if (!has(key)) throw HttpError{400, shape};
    const json& v = j_[key];
    std::vector<std::string> out;
    if (v.is_string()) {
      out.push_back(v.get<std::string>());
    } else if (v.is_array() && !v.empty()) {
      if (static_cast<int64_t>(v.size()) > max_count)
        throw HttpError{413, std::string("\"") + key + "\" has " + std::to_string(v.size()) +
                                 " texts, more than --max-sentences " + std::to_string(max_count)};
      for (const json& t : v) {
        if (!t.is_string()) throw HttpError{400, shape};
        out.push_back(t.get<std::string>());
      }
    } else {
      throw HttpError{400, shape};
    }
    for (const std::string& t : out) {
      if (t.empty()) throw HttpError{400, std::string("\"") + key + "\" holds an empty text"};
      if (static_cast<int64_t>(t.size()) > max_bytes)
        throw HttpError{413, std::string("\"") + key + "\" holds a text of " + std::to_string(t.size()) +
                                 " bytes, more than --max-sentence-bytes " + std::to_string(max_bytes)};
    }
    return out;
  }

 private:
  static std::string trimmed(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
  }
  json j_;
};


// The fields each route's body may hold (cmd_serve.cpp's routes; the fuzz target reads them too).
inline const std::vector<const char*> kTranslateFields = {"sentences",      "model", "beam_size", "length_penalty",
                                                          "n_best",         "max_decoding_length"};
inline const std::vector<const char*> kGenerateFields = {"prompt",     "model",  "max_new_tokens",     "temperature",
                                                         "top_k",      "top_p",  "repetition_penalty", "frequency_penalty",
                                                         "presence_penalty", "seed", "stream", "cache_salt"};
inline const std::vector<const char*> kAttentionFields = {"text", "model", "beam_size", "length_penalty", "search", "detail",
                                                          "encoding", "neuron", "image"};
inline const std::vector<const char*> kFillMaskFields = {"text", "model", "top_k", "text_pair"};
inline const std::vector<const char*> kEmbeddingsFields = {"input", "model", "encoding_format", "user", "dimensions"};
// Cohere's, Jina's and vLLM's rerank ("documents" as texts; "top_n" 0: every one)
inline const std::vector<const char*> kRerankFields = {"query", "documents", "model", "top_n", "return_documents"};
inline const std::vector<const char*> kClassifyFields = {
    "inputs", "model", "top_k", "text_pair", "function_to_apply", "aggregation_strategy", "ignore_labels",
    "candidate_labels", "hypothesis_template", "multi_label"};  // (the last three: zero-shot's)
inline const std::vector<const char*> kAnswerFields = {
    "question",       "context",     "model",      "top_k",
    "max_answer_len", "max_seq_len", "doc_stride", "handle_impossible_answer",
    "align_to_words"};
inline const std::vector<const char*> kChooseFields = {"context", "endings", "header", "model", "max_length"};

}  // namespace qkv::cli
