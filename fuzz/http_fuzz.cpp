// qkv serve's request handling on arbitrary bytes, up to (not including) model work: the server's
// own parser and limits (http_server.h: parse_request), the route table (404/405), then the route's
// body through Body (UTF-8, JSON, known fields, the typed getters' ranges), and every error answer
// rendered as JSON. Each ends in a request or an HttpError/refusal whose JSON renders; never a throw.
#include <cstdint>
#include <limits>
#include <string>

#include "http_server.h"
#include "qkv/decode/classify.h"
#include "serve_body.h"

namespace {

using namespace qkv::cli;

// The routes as cmd_serve.cpp registers them (handlers unused: no model work here).
HttpServer& server() {
  static HttpServer* s = [] {
    auto* h = new HttpServer(HttpLimits{}, HttpObserver{});
    auto none = [](const HttpRequest&) { return HttpResponse{}; };
    for (const char* p : {"/", "/health", "/metrics", "/v1/models"}) h->route("GET", p, none, false);
    for (const char* p : {"/v1/translate", "/v1/generate", "/v1/attention", "/v1/fill-mask", "/v1/classify",
                          "/v1/embeddings", "/v1/rerank", "/rerank", "/v1/answer", "/v1/choose"})
      h->route("POST", p, none, true);
    return h;
  }();
  return *s;
}

// What each route checks before it takes a model.
void validate(const std::string& path, const std::string& body) {
  if (path == "/v1/translate") {
    const Body b(body, kTranslateFields);
    b.integer("beam_size", 4, 1, 16);
    b.number("length_penalty", 0.6, 0, 10);
    b.integer("n_best", 1, 1, 16);
    b.integer("max_decoding_length", 0, 1, 1000000);
    if (b.has("sentences") && b["sentences"].is_array())
      for (const auto& s : b["sentences"])
        if (s.is_string()) {
          std::string line = s.get<std::string>();
          qkv::utf8::replace_invalid(line);
        }
  } else if (path == "/v1/generate") {
    const Body b(body, kGenerateFields);
    b.text("prompt", 2000, "--max-sentence-bytes");
    b.integer("max_new_tokens", 200, 1, 2000);
    b.number("temperature", 0.8, 0, 10);
    b.number("top_p", 1.0, 1e-6, 1.0);
    b.boolean("stream", false);
  } else if (path == "/v1/attention") {
    const Body b(body, kAttentionFields);
    b.text("text", 2000, "--max-sentence-bytes");
    b.integer("beam_size", 4, 1, 16);
  } else if (path == "/v1/fill-mask") {
    const Body b(body, kFillMaskFields);
    b.text("text", 2000, "--max-sentence-bytes");
    b.integer("top_k", 5, 1, 30522);
    if (b.has("text_pair")) b.text("text_pair", 2000, "--max-sentence-bytes");
  } else if (path == "/v1/classify") {
    const Body b(body, kClassifyFields);
    b.texts("inputs", 64, 2000);
    b.integer("top_k", 1, 0, 1000);
    if (b.has("text_pair")) b.text("text_pair", 2000, "--max-sentence-bytes");
    if (b.has("candidate_labels"))  // zero-shot's labels: texts, or one text split at its commas
      for (const std::string& l : b.texts("candidate_labels", 64, 2000)) qkv::decode::parse_candidate_labels(l);
    if (b.has("hypothesis_template")) b.text("hypothesis_template", 2000, "--max-sentence-bytes");
    b.boolean("multi_label", false);
  } else if (path == "/v1/embeddings") {
    const Body b(body, kEmbeddingsFields, /*lenient=*/true);
    b.texts("input", 64, 2000);
  } else if (path == "/v1/rerank" || path == "/rerank") {
    const Body b(body, kRerankFields);
    b.text("query", 2000, "--max-sentence-bytes");
    const auto documents = b.texts("documents", 64, 2000);
    b.integer("top_n", 0, 0, static_cast<int64_t>(documents.size()));
    b.boolean("return_documents", true);
  } else if (path == "/v1/answer") {
    const Body b(body, kAnswerFields);
    b.texts("question", 64, 2000);
    b.texts("context", 64, std::numeric_limits<int64_t>::max());
    b.integer("top_k", 1, 1, 100);
    b.integer("max_answer_len", 15, 1, 512);
    b.integer("max_seq_len", 0, 0, 512);
    b.integer("doc_stride", -1, -1, 256);
    b.boolean("handle_impossible_answer", false);
    b.boolean("align_to_words", true);
  } else if (path == "/v1/choose") {
    const Body b(body, kChooseFields);
    b.text("context", 2000, "--max-sentence-bytes");
    b.texts("endings", 64, 2000);
    if (b.has("header") && !b["header"].is_string()) return;
    b.integer("max_length", 0, 0, 512);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  HttpLimits limits;
  limits.max_body_bytes = 64 * 1024;
  HttpResponse refused;
  const auto req = parse_request(std::string(reinterpret_cast<const char*>(data), size), limits, &refused);
  if (!req) return refused.body.empty() ? __builtin_trap(), 0 : 0;
  bool work = false;
  int status = 0;
  if (!server().find(req->method, req->path, &work, &status)) {
    error_json(status, "no route " + req->method + " " + req->path);  // the path's bytes, whatever they are
    return 0;
  }
  try {
    validate(req->path, req->body);
  } catch (const HttpError& e) {
    error_json(e.status, e.message);
  }
  accepts_gzip(req->header("accept-encoding"));
  return 0;
}
