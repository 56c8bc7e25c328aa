// qkv serve -m MODEL… --port 8080 — translation and language models (and an image captioner's
// attention) over HTTP (http_server.h:
// Boost.Beast + Asio, event-driven, with the limits a hostile client meets), and a page to explore
// their attention:
//
//   GET  /               the attention viewer (tools/qkv/viewer/index.html, built into the binary)
//   POST /v1/translate   {"sentences": [...], "model"?, "beam_size"?, "length_penalty"?, "n_best"?,
//                        "max_decoding_length"?}
//                        → {"model", "translations": [{"text", "hypotheses", "scores"}], "warnings":
//                        [what the translator did to a sentence: truncated to the model's longest
//                        source, invalid UTF-8 replaced — the CLI's warnings, per sentence]}
//   POST /v1/generate    {"prompt", "model"?, "max_new_tokens"?, "temperature"?, "top_k"?, "top_p"?,
//                        "repetition_penalty"? (0, 10] (Hugging Face's; prompt and output tokens),
//                        "frequency_penalty"?, "presence_penalty"? [−2, 2] (OpenAI's; output tokens),
//                        "seed"?, "stream"?, "cache_salt"?} → {"model", "text", "tokens", "finish_reason"};
//                        ("cache_salt": prefix-cache pages shared only among requests of that salt); with
//                        "stream": true, server-sent events: data: {"token", "text"} per token, then
//                        data: {"done": true, "text", "tokens", "finish_reason"}
//   POST /v1/attention   {"text", "model"?, "beam_size"?, "length_penalty"?, "search"?: {"query", "key"},
//                         "detail"?: "rollout" (each self-attention kind gets "rollout": [query][key],
//                         Abnar & Zuidema's attention rollout across its layers), "flow" (each gets
//                         "flow": [query][key], their attention flow: per output token the max-flow
//                         to each input token through the layers, rows renormalised; at most 128
//                         tokens, more is a 413) or "neuron" (with
//                         "neuron": {"layer", "head", "query"}, from 0, and a translator's "kind"?:
//                         "encoder_self" (default), "decoder_self" or "cross"; BERT, a GPT, a Llama or
//                         a Transformer translator: the answer is
//                         {"model", "kind", "input", "neuron": {"kind", "layer", "head", "kv_head"
//                         (the key/value head it reads: grouped-query attention), "query",
//                         "head_dim", "scale", "tokens", "words", "word" (the queries' axis),
//                         "key_tokens", "key_words", "key_word" (the keys'), "queries": [query][d],
//                         "keys": [key][d], "products": [key][d] (q ⊙ k), "scores": [key] (q·k·scale;
//                         null: a key not seen, causal), "weights": [key] (their softmax)}}: the
//                         arithmetic of one row of the map, decode/inspect.h's NeuronView),
//                         "encoding"?: "json" (default) or "u8" (each "layers", "rollout" and "flow" is
//                         {"encoding": "u8", "shape", "data": base64 of a byte a weight, w ≈ b/255})}
//                        (a translator, a language model, or a masked language model: BERT's
//                        bidirectional self-attention, [CLS] and [SEP] included)
//                        → {"model", "kind", "input", "output", "kinds": [{"name", "queries", "keys",
//                        "layers": [layer][head][query][key]}], "search"?: [{"kind", "layer", "head",
//                        "query_word", "key_word", "weight"}, … best first]}   (decode/inspect.h)
//                        A recurrent translator (rnn-attention) has one kind, "cross": its alignment,
//                        1 layer × 1 head (its "rollout" and "neuron": 400, saying why by its type).
//                        An image captioner takes {"image": base64 of a PNG or JPEG (resized to its
//                        input), "model"?, "beam_size"?, "encoding"?} → {"model", "kind": "captioner",
//                        "output": the caption, "picture": {"png", "height", "width"} (as the model saw
//                        it), "kinds": [{"name": "image", "queries": each word then </s>, "keys": the
//                        grid's cells "r,c" row by row, "grid": [rows, cols], "layers": [1][1][word][cell]}]}
//   POST /v1/fill-mask   {"text", "model"?, "top_k"?, "text_pair"?} (a masked language model: BERT)
//                        → {"model", "masks": [[{"score", "token", "token_str", "sequence"}, … top_k]
//                        per [MASK] of the text]}   (decode/fill_mask.h: pipeline("fill-mask")'s)
//   POST /v1/classify    {"inputs": a text or texts, "model"?, "top_k"? (1; 0: every label), "text_pair"?,
//                        "function_to_apply"?, "aggregation_strategy"? ("none", "simple", "first", "average", "max"),
//                        "ignore_labels"?} (an encoder with a classifier) → {"model", "results": [per text: the
//                        pipeline's
//                        [{"label", "score"}, …] or [{"entity", "score", "index", "word", "start", "end"} |
//                        {"entity_group", "score", "word", "start", "end"}, …]]}   (decode/classify.h); with
//                        "candidate_labels" (texts, or one comma-separated string), "hypothesis_template"?,
//                        "multi_label"? (an NLI classifier: zero-shot) → per text {"sequence", "labels", "scores"} best
//                        first
//   POST /v1/embeddings  OpenAI's: {"input": a text or texts, "model"?, "encoding_format"? ("float")} →
//                        {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
//                        "model", "usage": {"prompt_tokens", "total_tokens"}}   (decode/classify.h's embed)
//   POST /v1/rerank, /rerank   Cohere's, Jina's and vLLM's: {"query", "documents": texts, "model"?,
//                        "top_n"? (0: every one), "return_documents"? (true)} (a cross-encoder) →
//                        {"model", "results": [{"index", "relevance_score", "document": {"text"}}, …]
//                        best first, "usage": {"total_tokens"}}   (decode/classify.h's rerank: each
//                        pair cut to the tokenizer's model_max_length as CrossEncoder cuts it)
//   POST /v1/answer      {"question": a text or texts, "context": as many, "model"?, "top_k"? (1),
//                        "max_answer_len"? (15), "max_seq_len"?, "doc_stride"? (at most half the window),
//                        "handle_impossible_answer"?, "align_to_words"? (true)} (a …ForQuestionAnswering)
//                        → {"model", "results": [per question: the pipeline's {"score", "start", "end",
//                        "answer"} (characters), or a list of them best first]}   (decode/question_answering.h;
//                        a context up to 64 × --max-sentence-bytes)
//   POST /v1/choose      {"context", "endings": 2 texts or more, "header"? (""), "model"?, "max_length"? (0:
//                        the tokenizer's)} (a …ForMultipleChoice) → {"model", "choices": [{"ending", "score",
//                        "logit"}, … in order], "best": index}   (decode/multiple_choice.h: run_swag.py's
//                        pairs; each text up to --max-sentence-bytes, endings up to --max-sentences)
//   POST /v1/completions, /v1/chat/completions   OpenAI's API for the language models: model,
//                        prompt (a string or strings: a choice each) or messages (rendered with
//                        the model's chat template, with tools, chat_template_kwargs and
//                        add_generation_prompt (vLLM's; true) and continue_final_message (vLLM's: the
//                        final assistant message left open; false), as
//                        transformers' apply_chat_template; without a template, joined as
//                        "role: content" lines then "assistant:"), max_tokens,
//                        temperature, top_p, frequency_penalty, presence_penalty, repetition_penalty
//                        (vLLM's extra), n (1), stop, stream (data: {chunk} … data: [DONE]), seed;
//                        other fields ignored; errors as {"error": {"message", "type", "param"}}
//   GET  /v1/models      the loaded models ("models", and OpenAI's "object": "list", "data")
//   GET  /health         {"status": "ok"}
//   GET  /metrics        Prometheus text: requests by route and status, latency, sentences and
//                        tokens produced (rate() of them is tokens/s), queue length, in flight
//
// Batching and the per-model lock: serve_services.h; bodies: serve_body.h. The HTTP limits (header
// bytes and time, body bytes and time whatever the transfer encoding, keep-alive, connections) are
// enforced while reading (http_server.h); the request's own limits (sentences, bytes, tokens, the
// model's longest input) are checked before any work; each is answered with a JSON error naming
// the limit (4xx), and counted in /metrics. Model work is queued first come, first served across
// connections. The server reads no file a request names. SIGINT/SIGTERM stop accepting, finish
// every accepted request and stream (its `done` event included), and exit 0; a second exits at once.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <functional>
#include <random>

#include "commands.h"
#include "encoder_json.h"
#include "http_server.h"
#include "options.h"
#include "qkv/decode/caption.h"
#include "qkv/decode/classify.h"
#include "qkv/decode/question_answering.h"
#include "qkv/decode/multiple_choice.h"
#include "qkv/text/unicode.h"
#include "qkv/decode/fill_mask.h"
#include "serve_services.h"
#include "qkv/core/error.h"
#include "qkv/core/message.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/inspect.h"
#include "qkv/io/base64.h"
#include "qkv/models/registry.h"
#include "qkv/vision/image.h"

namespace qkv::cli {

extern const char* const kViewerPage;  // tools/qkv/viewer/index.html (viewer_page.cpp.in)

namespace {

constexpr int64_t kMaxCacheSaltBytes = 1024;  // a request's "cache_salt" (decode::GenerateOptions::cache_salt)

struct ServeArgs {
  std::vector<std::string> models = {kDefaultTranslator, "models/shakespeare-char.safetensors"};
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t max_request_bytes = 1 << 20, max_sentences = 64, max_sentence_bytes = 2000, max_batch = 64;
  int64_t max_beam = 16, max_new_tokens = 2000;
  double max_wait_ms = 5, timeout_s = 60, kv_cache_mb = 0;
  int http_threads = 64, threads = 0;
  bool no_prefix_caching = false;
  std::string kv_cache_dtype = "f32";
  // the HTTP limits (http_server.h's HttpLimits), with nginx-like defaults
  int64_t max_header_bytes = 16 * 1024, max_connections = 1024, keep_alive_requests = 1000;
  double header_timeout_s = 10, body_timeout_s = 30, keep_alive_timeout_s = 75;
  std::optional<InferenceWeights> weights;  // --dtype; unset: each file's own (int8 for a quantized file)
  std::string device = "cpu";
};

// weights [H, Lq, Lk] per layer → [layer][head][query][key], to 5 decimals (a view, not a checkpoint)
json layers_json(const std::vector<Tensor>& layers) {
  json out = json::array();
  for (const Tensor& w : layers) {
    const int64_t H = w.size(0), Lq = w.size(1), Lk = w.size(2);
    json heads = json::array();
    for (int64_t h = 0; h < H; ++h) {
      json rows = json::array();
      for (int64_t i = 0; i < Lq; ++i) {
        json row = json::array();
        const float* p = w.data<float>() + (h * Lq + i) * Lk;
        for (int64_t k = 0; k < Lk; ++k) row.push_back(std::round(static_cast<double>(p[k]) * 1e5) / 1e5);
        rows.push_back(std::move(row));
      }
      heads.push_back(std::move(rows));
    }
    out.push_back(std::move(heads));
  }
  return out;
}

// f32 [rows, cols] → [[…], …], rounded as layers_json rounds
json rows_json(const Tensor& m) {
  json rows = json::array();
  for (int64_t i = 0; i < m.size(0); ++i) {
    json row = json::array();
    const float* p = m.data<float>() + i * m.size(1);
    for (int64_t k = 0; k < m.size(1); ++k) row.push_back(std::round(static_cast<double>(p[k]) * 1e5) / 1e5);
    rows.push_back(std::move(row));
  }
  return rows;
}

// "encoding": "u8" — the compact form of a map (issue 50: a 256-token, 12 × 12-head answer is
// 9.4 MB of bytes instead of ~70 MB of JSON numbers): every weight as one byte b = round(255·w),
// so w ≈ b / 255 within 1/510 — the viewer's own 256 colour levels (a weight's colour is
// round(255·w)) — row-major in the shape's order, base64. → {"encoding": "u8", "shape": […],
// "data": "…"}. One scale for every row rather than a row's maximum: the server's gzip then
// shrinks a near-uniform map (a random model's) ~11× where per-row scales leave ~8 bits of noise a
// weight (docs/BENCHMARKS.md, "/v1/attention on the wire").
json u8_json(const std::vector<Tensor>& maps, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string bytes(static_cast<size_t>(n), '\0');
  size_t at = 0;
  for (const Tensor& m : maps) {
    const float* p = m.data<float>();
    uint8_t* out = reinterpret_cast<uint8_t*>(bytes.data()) + at;
    const int64_t e = m.numel();
    for (int64_t i = 0; i < e; ++i)  // round half up (w ≥ 0), vectorised: lround's call was 9% of a request
      out[i] = static_cast<uint8_t>(std::clamp(p[i], 0.f, 1.f) * 255.f + 0.5f);
    at += static_cast<size_t>(e);
  }
  QKV_CHECK(at == bytes.size(), "u8_json: ", at, " weights for a shape of ", n);
  return {{"encoding", "u8"}, {"shape", shape}, {"data", io::base64_encode(bytes)}};
}

// The neuron view (decode/inspect.h's NeuronView) as JSON: −inf scores (a causal query's later keys) are null.
json neuron_json(const decode::NeuronView& v) {
  json scores = json::array();
  for (double x : v.scores) scores.push_back(std::isfinite(x) ? json(x) : json(nullptr));
  return {{"kind", v.kind}, {"layer", v.layer}, {"head", v.head}, {"query", v.query}, {"head_dim", v.head_dim},
          {"scale", 1.0 / std::sqrt(static_cast<double>(v.head_dim))}, {"tokens", v.axis.tokens},
          {"words", v.axis.words}, {"word", v.axis.word}, {"key_tokens", v.key_axis.tokens},
          {"key_words", v.key_axis.words}, {"key_word", v.key_axis.word}, {"kv_head", v.kv_head},
          {"queries", v.queries}, {"keys", v.keys},
          {"products", v.products}, {"scores", scores}, {"weights", v.weights}};
}

json axis_json(const decode::TokenAxis& a) { return {{"tokens", a.tokens}, {"word", a.word}, {"words", a.words}}; }

// One server-sent event: "data: <json>\n\n" (a token's text may end inside a character: replaced).
bool send_event(StreamSink& sink, const json& j) {
  return sink.write("data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
}

HttpResponse json_response(const json& j) {
  HttpResponse r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpLimits limits_of(const ServeArgs& a) {
  HttpLimits l;
  l.max_body_bytes = static_cast<uint64_t>(a.max_request_bytes);
  l.max_header_bytes = static_cast<size_t>(a.max_header_bytes);
  l.header_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.header_timeout_s * 1000));
  l.body_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.body_timeout_s * 1000));
  l.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.keep_alive_timeout_s * 1000));
  l.max_connections = a.max_connections;
  l.max_requests_per_connection = a.keep_alive_requests;
  l.workers = a.http_threads;
  return l;
}

class Server {
 public:
  Server(const ServeArgs& a, std::vector<std::unique_ptr<ModelService>> services)
      : a_(a),
        services_(std::move(services)),
        http_(limits_of(a), HttpObserver{[this] { metrics_.begin(); },
                                         [this](const std::string& route, int status, double seconds, bool worker) {
                                           // the server's own refusals count too; a path that matched no
                                           // route is "none" (any bytes a client sends must not become a label)
                                           metrics_.request(route.empty() ? "none" : route, status, seconds);
                                           if (worker) metrics_.end();
                                         }}) {
    // cheap routes answer on the I/O thread; model work goes to the workers' FIFO
    http_.route("GET", "/", [](const HttpRequest&) {
      HttpResponse res;
      // the page is self-contained: nothing may load from elsewhere
      res.headers.emplace_back("Content-Security-Policy",
                               "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                               "connect-src 'self'; img-src data:");
      res.content_type = "text/html; charset=utf-8";
      res.body = kViewerPage;
      return res;
    }, false);
    http_.route("GET", "/health", [](const HttpRequest&) {
      HttpResponse res;
      res.body = R"({"status": "ok"})";
      return res;
    }, false);
    http_.route("GET", "/metrics", [this](const HttpRequest&) {
      HttpResponse res;
      res.content_type = "text/plain; version=0.0.4";
      res.body = metrics_.text(services_);
      return res;
    }, false);
    http_.route("GET", "/v1/models", answer([this](const HttpRequest&) { return models(); }), false);
    http_.route("POST", "/v1/translate", answer([this](const HttpRequest& r) { return translate(r); }), true);
    http_.route("POST", "/v1/generate", answer([this](const HttpRequest& r) { return generate(r); }), true);
    http_.route("POST", "/v1/attention", answer([this](const HttpRequest& r) { return attention(r); }), true);
    http_.route("POST", "/v1/fill-mask", answer([this](const HttpRequest& r) { return fill_mask(r); }), true);
    http_.route("POST", "/v1/classify", answer([this](const HttpRequest& r) { return classify(r); }), true);
    http_.route("POST", "/v1/embeddings", openai_answer([this](const HttpRequest& r) { return embeddings(r); }), true);
    http_.route("POST", "/v1/answer", answer([this](const HttpRequest& r) { return answer_questions(r); }), true);
    http_.route("POST", "/v1/choose", answer([this](const HttpRequest& r) { return choose(r); }), true);
    for (const char* p : {"/v1/rerank", "/rerank"})  // (vLLM serves both)
      http_.route("POST", p, answer([this](const HttpRequest& r) { return rerank(r); }), true);
    http_.route("POST", "/v1/completions", openai_answer([this](const HttpRequest& r) { return openai(r, false); }), true);
    http_.route("POST", "/v1/chat/completions", openai_answer([this](const HttpRequest& r) { return openai(r, true); }), true);
  }

  // Binds (port 0: any free port) and returns the port; then run() serves until stop().
  int bind() {
    const int port = http_.bind(a_.host, a_.port);
    QKV_CHECK(port > 0, "serve: cannot listen on ", a_.host, ":", a_.port, " (in use, or not an address of this machine)");
    return port;
  }
  void run() { http_.run(); }     // returns after stop(), once every accepted request is answered
  void stop() { http_.drain(); }  // (thread-safe)

 private:
  // A route's errors as JSON: HttpError's status, anything else a 500.
  template <class F>
  static HttpServer::Handler answer(F f) {
    return [f](const HttpRequest& req) {
      try {
        return f(req);
      } catch (const HttpError& e) {
        return error_response(e.status, e.message);
      } catch (const std::exception& e) {
        return error_response(500, plain_message(e.what()));
      }
    };
  }
  // The OpenAI-compatible routes' errors in OpenAI's shape: {"error": {"message", "type", "param",
  // "code"}}, param the field a message starts by naming ("\"max_tokens\" must be …").
  template <class F>
  static HttpServer::Handler openai_answer(F f) {
    return [f](const HttpRequest& req) {
      auto shaped = [](int status, const std::string& message) {
        json param = nullptr;
        if (message.size() > 2 && message[0] == '"') {
          const size_t end = message.find('"', 1);
          if (end != std::string::npos) param = message.substr(1, end - 1);
        }
        HttpResponse r;
        r.status = status;
        r.body = json{{"error", {{"message", message},
                                 {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                                 {"param", param},
                                 {"code", status == 404 ? json("model_not_found") : json(nullptr)}}}}
                     .dump(-1, ' ', false, json::error_handler_t::replace);
        return r;
      };
      try {
        return f(req);
      } catch (const HttpError& e) {
        return shaped(e.status, e.message);
      } catch (const std::exception& e) {
        return shaped(500, plain_message(e.what()));
      }
    };
  }
  std::chrono::duration<double> timeout() const { return std::chrono::duration<double>(a_.timeout_s); }

  HttpResponse models() {
    json list = json::array();
    for (auto& s : services_) {
      json m = {{"id", s->name()}, {"kind", s->kind()}, {"type", s->meta().value("model_type", "")},
                {"path", s->path()}, {"model", s->meta().value("model", json::object())}};
      list.push_back(std::move(m));
    }
    // OpenAI's list ({"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]})
    // beside qkv's own "models"
    json data = json::array();
    for (auto& s : services_) data.push_back({{"id", s->name()}, {"object", "model"}, {"created", 0}, {"owned_by", "qkv"}});
    return json_response(json{{"object", "list"}, {"data", data}, {"models", list}});
  }

  // The model a request names (or the only one of the kinds it may use).
  ModelService& service(const Body& body, std::initializer_list<const char*> kinds, const char* route) {
    auto fits = [&](const ModelService& s) {
      return std::find_if(kinds.begin(), kinds.end(), [&](const char* k) { return s.kind() == k; }) != kinds.end();
    };
    if (!body.has("model")) {
      ModelService* only = nullptr;
      int n = 0;
      for (auto& s : services_)
        if (fits(*s)) only = s.get(), ++n;
      if (n == 1) return *only;
      throw HttpError{400, n == 0 ? std::string("this server has no model for ") + route
                                  : "\"model\" is required: this server has " + std::to_string(n) + " models for " + route};
    }
    if (!body["model"].is_string()) throw HttpError{400, "\"model\" must be a string"};
    const std::string name = body["model"].get<std::string>();
    for (auto& s : services_)
      if (s->name() == name) {
        if (!fits(*s))
          throw HttpError{400, "model \"" + name + "\" is a " +
                                   (s->kind() == "translation"             ? "translation"
                                    : s->kind() == "masked_language_model" ? "masked language"
                                    : s->kind() == "captioner"             ? "image captioning"
                                                                           : "language") +
                                   " model: " + route + " cannot use it"};
        return *s;
      }
    throw HttpError{404, "unknown model \"" + name + "\" (GET /v1/models lists them)"};
  }

  // The request's search options over decode::TranslateOptions' defaults (the CLI's and Python's),
  // in the ranges every front end takes (--max-beam narrows the beam's).
  decode::TranslateOptions decoding(const Body& body) const {
    decode::TranslateOptions o;
    o.beam_size = body.integer("beam_size", o.beam_size, 1, a_.max_beam);
    o.length_penalty = static_cast<float>(body.number("length_penalty", o.length_penalty, 0, decode::kMaxLengthPenalty));
    // CTranslate2's max_decoding_length (the CLI's --max-length, Python's): the most tokens an
    // output may have, its EOS included; absent, only the model's and max_extra's limits
    o.max_length = body.integer("max_decoding_length", 0, 1, decode::kMaxDecodingLength);
    o.on_warning = [](const std::string&) {};  // (said in the answer's "warnings" instead)
    return o;
  }

  HttpResponse translate(const HttpRequest& req) {
    const Body body(req.body, kTranslateFields);
    auto& s = static_cast<TranslationService&>(service(body, {"translation"}, "/v1/translate"));
    if (!body.has("sentences") || !body["sentences"].is_array())
      throw HttpError{400, "\"sentences\" must be an array of strings"};
    const json& in = body["sentences"];
    if (in.empty()) throw HttpError{400, "\"sentences\" is empty"};
    if (static_cast<int64_t>(in.size()) > a_.max_sentences)
      throw HttpError{413, std::to_string(in.size()) + " sentences, more than --max-sentences " +
                               std::to_string(a_.max_sentences)};
    std::vector<std::string> lines;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].is_string()) throw HttpError{400, "sentence " + std::to_string(i) + " is not a string"};
      lines.push_back(in[i].get<std::string>());
      if (static_cast<int64_t>(lines.back().size()) > a_.max_sentence_bytes)
        throw HttpError{413, "sentence " + std::to_string(i) + " has " + std::to_string(lines.back().size()) +
                                 " bytes, more than --max-sentence-bytes " + std::to_string(a_.max_sentence_bytes)};
    }
    // what the translator's policy will do to a sentence, said in the answer (the CLI says it on
    // stderr): invalid UTF-8 replaced by U+FFFD, a source over the model's longest truncated
    json warnings = json::array();
    const int64_t longest = s.loaded().model->max_len() - 1;  // (its EOS takes a position)
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string line = lines[i];
      if (const size_t bad = utf8::replace_invalid(line))
        warnings.push_back("sentence " + std::to_string(i) + ": " + std::to_string(bad) +
                           " bytes of invalid UTF-8 replaced by U+FFFD");
      const size_t n = s.translator().encode(line).size();
      if (static_cast<int64_t>(n) > longest)
        warnings.push_back("sentence " + std::to_string(i) + ": " + std::to_string(n) + " tokens, truncated to the first " +
                           std::to_string(longest) + " (the model's longest source)");
    }
    decode::TranslateOptions o = decoding(body);
    const int64_t n_best = body.integer("n_best", 1, 1, o.beam_size);
    o.num_hypotheses = n_best;
    auto f = s.submit(std::move(lines), o);
    if (f.wait_for(timeout()) != std::future_status::ready)
      throw HttpError{503, "not translated within --timeout " + std::to_string(a_.timeout_s) + " s (the server is overloaded)"};
    const TranslationService::Result r = f.get();
    json out = json::array();
    int64_t tokens = 0;
    for (const auto& nbest : r) {
      json hyps = json::array(), scores = json::array();
      for (size_t k = 0; k < nbest.size() && static_cast<int64_t>(k) < n_best; ++k) {
        hyps.push_back(s.translator().decode(nbest[k].tokens));
        scores.push_back(nbest[k].score);
      }
      if (!nbest.empty()) tokens += static_cast<int64_t>(nbest[0].tokens.size()) + 1;  // + EOS
      out.push_back({{"text", hyps.empty() ? "" : hyps[0].get<std::string>()}, {"hypotheses", hyps}, {"scores", scores}});
    }
    metrics_.translated(static_cast<int64_t>(r.size()), tokens);
    return json_response(json{{"model", s.name()}, {"translations", out}, {"warnings", warnings}});
  }

  // The history's penalties (decode/sampling.h): OpenAI's frequency and presence penalties in its
  // range, [−2, 2]; Hugging Face's (and vLLM's) repetition penalty in (0, 10]
  static void read_penalties(const Body& body, decode::SamplingOptions& o) {
    o.frequency_penalty = body.number("frequency_penalty", 0.0, -2.0, 2.0);
    o.presence_penalty = body.number("presence_penalty", 0.0, -2.0, 2.0);
    o.repetition_penalty = body.number("repetition_penalty", 1.0, 0.0, 10.0);
    if (!(o.repetition_penalty > 0)) throw HttpError{400, "\"repetition_penalty\" must be a number above 0, up to 10"};
  }

  HttpResponse generate(const HttpRequest& req) {
    const Body body(req.body, kGenerateFields);
    auto& s = static_cast<LanguageModelService&>(service(body, {"language_model"}, "/v1/generate"));
    const std::string prompt_text = body.text("prompt", a_.max_sentence_bytes, "--max-sentence-bytes");
    std::vector<int32_t> prompt;
    try {
      prompt = s.loaded().tokenizer.encode(prompt_text);
    } catch (const Error& e) {
      throw HttpError{400, std::string("\"prompt\": ") + e.what()};
    }
    decode::GenerateOptions o;
    o.max_new_tokens = body.integer("max_new_tokens", 200, 1, a_.max_new_tokens);
    o.stop_ids = s.loaded().stop_ids;  // a converted model's end of text
    o.sampling.temperature = body.number("temperature", 0.8, 0, 10);
    o.sampling.top_k = body.integer("top_k", 0, 0, s.loaded().tokenizer.vocab_size());
    o.sampling.top_p = body.number("top_p", 1.0, 1e-6, 1.0);
    read_penalties(body, o.sampling);
    o.sampling.seed = static_cast<uint64_t>(body.integer("seed", 1337, 0, std::numeric_limits<int64_t>::max()));
    if (body.has("cache_salt")) o.cache_salt = body.text("cache_salt", kMaxCacheSaltBytes, "the limit of");
    const bool stream = body.boolean("stream", false);
    // unbatched, the model is held from here until the last token is sent (503 if it stays busy too
    // long); batched, each step holds it
    auto held = s.reserve(timeout());
    if (!stream) {
      std::string text;
      text::TextStreamer streamer(s.loaded().tokenizer);
      const auto out = s.generate(prompt, o, [&](int32_t id) {
        text += streamer.push(id);
        return true;
      }, timeout());
      text += streamer.flush();
      metrics_.generated(static_cast<int64_t>(out.size()));
      return json_response(json{{"model", s.name()}, {"text", text}, {"tokens", out.size()}, {"finish_reason", "length"}});
    }
    // streamed by the worker that holds the model, chunk by chunk; the server times it to its end
    HttpResponse res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.stream = [this, &s, prompt, o, held](StreamSink& sink) {
      std::string text;
      bool open = true;
      int64_t n = 0;
      try {
        text::TextStreamer streamer(s.loaded().tokenizer);
        s.generate(prompt, o, [&](int32_t id) {
          const std::string piece = streamer.push(id);
          text += piece, ++n;
          return open = send_event(sink, {{"token", id}, {"text", piece}});
        }, timeout());
        text += streamer.flush();
        if (open) send_event(sink, {{"done", true}, {"text", text}, {"tokens", n}, {"finish_reason", "length"}});
      } catch (const HttpError& e) {  // (a batched generation not admitted within --timeout: 503)
        if (open) send_event(sink, {{"error", {{"code", e.status}, {"message", e.message}}}});
      } catch (const std::exception& e) {
        if (open) send_event(sink, {{"error", {{"code", 500}, {"message", e.what()}}}});
      }
      metrics_.generated(n);
      if (held->owns_lock()) held->unlock();
    };
    return res;
  }

  // ---- OpenAI-compatible /v1/completions and /v1/chat/completions -------------------------------
  struct Completion {
    std::string text, finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0;
  };
  // One choice's text as its tokens come, cut at the first of `stops` (not included); emit (streaming)
  // gets the text as it is settled: the last bytes that could begin a stop string are held back.
  class Choice {
   public:
    Choice(const text::LMTokenizer& tokenizer, const std::vector<std::string>& stops, int64_t prompt_tokens,
           std::function<bool(const std::string&)> emit)
        : stops_(stops), emit_(std::move(emit)), streamer_(tokenizer) {
      c_.prompt_tokens = prompt_tokens;
      for (const auto& st : stops) hold_ = std::max(hold_, st.size() - 1);
    }
    // false: the choice is done (a stop string, or the client gone)
    bool token(int32_t id) {
      ++c_.completion_tokens;
      return push(streamer_.push(id));
    }
    Completion finish(int64_t max_new_tokens) {
      if (!stopped_ && open_ && push(streamer_.flush())) settle(c_.text.size());
      if (!stopped_ && open_) settle(c_.text.size());
      // the model's own end of text (a converted model's eos) also stops before max_tokens
      c_.finish_reason = stopped_ || c_.completion_tokens < max_new_tokens ? "stop" : "length";
      return c_;
    }
    bool open() const { return open_; }

   private:
    void settle(size_t end) {
      if (end <= sent_) return;
      const std::string piece = c_.text.substr(sent_, end - sent_);
      sent_ = end;
      if (emit_ && !emit_(piece)) open_ = false;
    }
    bool push(const std::string& piece) {
      std::string& text = c_.text;
      text += piece;
      size_t best = std::string::npos;
      for (const auto& st : stops_) best = std::min(best, text.find(st, sent_));  // (a stop begins at or after `sent`)
      if (best != std::string::npos) {
        text.resize(best);
        settle(best);
        stopped_ = true;
        return false;
      }
      size_t end = text.size() > hold_ ? text.size() - hold_ : 0;
      while (end > sent_ && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // whole characters
      settle(end);
      return open_;
    }
    const std::vector<std::string>& stops_;
    std::function<bool(const std::string&)> emit_;
    text::TextStreamer streamer_;
    Completion c_;
    size_t hold_ = 0, sent_ = 0;
    bool stopped_ = false, open_ = true;
  };
  // Every choice made together (batched: their prompts run in the same steps, one prompt's n choices
  // computing it once — prefix caching), their texts given as the steps make them (OpenAI streams a
  // request's choices interleaved, each chunk naming its index): begin(i) for every choice before any
  // text, piece(i, text), end(i, its completion) as choice i ends; any returning false (the client
  // gone) ends them all.
  struct ChoiceEvents {
    std::function<bool(size_t)> begin;
    std::function<bool(size_t, const std::string&)> piece;
    std::function<bool(size_t, const Completion&)> end;
  };
  std::vector<Completion> complete(LanguageModelService& s, const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<decode::GenerateOptions>& opts, const std::vector<std::string>& stops,
                                   const ChoiceEvents* events) {
    std::vector<std::unique_ptr<Choice>> choices;
    for (size_t i = 0; i < prompts.size(); ++i)
      choices.push_back(std::make_unique<Choice>(
          s.loaded().tokenizer, stops, static_cast<int64_t>(prompts[i].size()),
          events ? std::function<bool(const std::string&)>([events, i](const std::string& piece) { return events->piece(i, piece); })
                 : nullptr));
    if (events)
      for (size_t i = 0; i < prompts.size(); ++i)
        if (!events->begin(i)) throw ClientGone{};
    std::vector<Completion> out(prompts.size());
    s.generate_interleaved(
        prompts, opts,
        [&](size_t i, int32_t id) {
          if (choices[i]->token(id)) return true;
          if (!choices[i]->open()) throw ClientGone{};  // (every generation ends)
          return false;  // a stop string: this choice ends
        },
        [&](size_t i) {  // choice i has ended
          out[i] = choices[i]->finish(opts[i].max_new_tokens);
          metrics_.generated(out[i].completion_tokens);
          if (!choices[i]->open() || (events && !events->end(i, out[i]))) throw ClientGone{};
        },
        timeout());
    return out;
  }
  struct ClientGone {};  // (a stream's reader left: nothing more to send)

  HttpResponse openai(const HttpRequest& req, bool chat) {
    static const std::vector<const char*> fields = {"model",
                                                    "prompt",
                                                    "messages",
                                                    "tools",
                                                    "chat_template_kwargs",
                                                    "max_tokens",
                                                    "max_completion_tokens",
                                                    "temperature",
                                                    "top_p",
                                                    "n",
                                                    "stop",
                                                    "stream",
                                                    "seed",
                                                    "cache_salt",
                                                    "frequency_penalty",
                                                    "presence_penalty",
                                                    "repetition_penalty"};
    const Body body(req.body, fields, /*lenient=*/true);
    const char* route = chat ? "/v1/chat/completions" : "/v1/completions";
    auto& s = static_cast<LanguageModelService&>(service(body, {"language_model"}, route));
    // the prompts: completions take a string or a list of strings (a choice each); chat renders its
    // messages with the model's chat template (as transformers' apply_chat_template; without one —
    // qkv's own models, base checkpoints — it joins them as "role: content" lines and asks for the
    // assistant's)
    std::vector<std::string> texts;
    bool templated = false;
    if (chat) {
      if (!body.has("messages") || !body["messages"].is_array() || body["messages"].empty())
        throw HttpError{400, "\"messages\" must be a non-empty array of {\"role\", \"content\"}"};
      const text::LMTokenizer& tok = s.loaded().tokenizer;
      if (!tok.chat_template_error().empty())
        throw HttpError{400,
                        "this model's chat template cannot be used here: " + plain_message(tok.chat_template_error())};
      std::string joined;
      // (key order matters to a template's tojson: the messages and tools as the client wrote them)
      const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(req.body);
      text::ChatInputs in;
      for (const auto& m : ordered["messages"]) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content"))
          throw HttpError{400, "\"messages\": each must be {\"role\": string, \"content\": string or [{\"type\": \"text\", \"text\"}]}"};
        std::string content;
        if (m["content"].is_string()) content = m["content"].get<std::string>();
        else if (m["content"].is_array()) {
          for (const auto& part : m["content"]) {
            if (!part.is_object() || !part.contains("text") || !part["text"].is_string())
              throw HttpError{400, "\"messages\": a content part must be {\"type\": \"text\", \"text\": string}"};
            content += part["text"].get<std::string>();
          }
        } else if (!m["content"].is_null())
          throw HttpError{400, "\"messages\": \"content\" must be a string or an array of text parts"};
        joined += m["role"].get<std::string>() + ": " + content + "\n";
        nlohmann::ordered_json message = m;  // (its other keys — tool_calls, name, … — as they are)
        if (!m["content"].is_null()) message["content"] = content;
        in.messages.push_back(std::move(message));
      }
      if (const text::ChatTemplate* t = tok.chat_template()) {
        if (ordered.contains("tools") && !ordered["tools"].is_null()) {
          if (!ordered["tools"].is_array()) throw HttpError{400, "\"tools\" must be an array"};
          in.tools = ordered["tools"];
        }
        // vLLM's extras: add_generation_prompt (true), continue_final_message (false: a prefill of the final
        // assistant message, which then turns add_generation_prompt's default off)
        const bool cont = body.boolean("continue_final_message", false);
        in.add_generation_prompt = body.boolean("add_generation_prompt", !cont);
        if (cont && in.add_generation_prompt)
          throw HttpError{400, "\"continue_final_message\" and \"add_generation_prompt\" cannot both be true"};
        if (cont) in.continue_final_message = "content";
        if (ordered.contains("chat_template_kwargs") && !ordered["chat_template_kwargs"].is_null()) {
          if (!ordered["chat_template_kwargs"].is_object())
            throw HttpError{400, "\"chat_template_kwargs\" must be an object"};
          in.extra = ordered["chat_template_kwargs"];
        }
        text::jinja::Limits limits;
        limits.max_output_bytes = a_.max_sentence_bytes;
        try {
          texts.push_back(t->apply(in, limits));
        } catch (const text::jinja::RaisedError& e) {
          throw HttpError{400, "the model's chat template refused the messages: " + plain_message(e.what())};
        } catch (const Error& e) {
          throw HttpError{400, "\"messages\": " + plain_message(e.what())};
        }
        templated = true;
      } else
        texts.push_back(joined + "assistant:");
    } else {
      const char* shape = "\"prompt\" must be a string or an array of strings";
      if (!body.has("prompt")) throw HttpError{400, shape};
      const json& p = body["prompt"];
      if (p.is_string()) texts.push_back(p.get<std::string>());
      else if (p.is_array() && !p.empty()) {
        for (const json& t : p) {
          if (!t.is_string()) throw HttpError{400, std::string(shape) + " (token arrays are not taken)"};
          texts.push_back(t.get<std::string>());
        }
      } else throw HttpError{400, shape};
      if (static_cast<int64_t>(texts.size()) > a_.max_sentences)
        throw HttpError{413, "\"prompt\" has " + std::to_string(texts.size()) + " prompts, more than --max-sentences " +
                                 std::to_string(a_.max_sentences)};
    }
    std::vector<std::vector<int32_t>> prompts;
    const char* field = chat ? "messages" : "prompt";
    for (const std::string& t : texts) {
      if (t.empty()) throw HttpError{400, std::string("\"") + field + "\" is empty"};
      if (static_cast<int64_t>(t.size()) > a_.max_sentence_bytes)
        throw HttpError{413, std::string("\"") + field + "\" has " + std::to_string(t.size()) +
                                 " bytes, more than --max-sentence-bytes " + std::to_string(a_.max_sentence_bytes)};
      try {
        // (a rendered template writes its special tokens itself: encoded without adding them)
        prompts.push_back(templated ? s.loaded().tokenizer.encode_prompt(t) : s.loaded().tokenizer.encode(t));
      } catch (const Error& e) {
        throw HttpError{400, std::string("\"") + field + "\": " + plain_message(e.what())};
      }
    }
    decode::GenerateOptions o;
    const char* max_field = body.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    o.max_new_tokens = body.integer(max_field, chat ? std::min<int64_t>(200, a_.max_new_tokens) : std::min<int64_t>(16, a_.max_new_tokens),
                                    1, a_.max_new_tokens);
    o.stop_ids = s.loaded().stop_ids;
    o.sampling.temperature = body.number("temperature", 1.0, 0, 2);
    o.sampling.top_p = std::max(body.number("top_p", 1.0, 0, 1.0), 1e-6);
    read_penalties(body, o.sampling);
    const int64_t n = body.integer("n", 1, 1, a_.max_sentences);
    if (n * static_cast<int64_t>(prompts.size()) > a_.max_sentences)
      throw HttpError{413, "\"n\" " + std::to_string(n) + " × " + std::to_string(prompts.size()) + " prompts make " +
                               std::to_string(n * static_cast<int64_t>(prompts.size())) + " choices, more than --max-sentences " +
                               std::to_string(a_.max_sentences)};
    if (body.has("cache_salt")) o.cache_salt = body.text("cache_salt", kMaxCacheSaltBytes, "the limit of");
    o.sampling.seed = body.has("seed") ? static_cast<uint64_t>(body.integer("seed", 0, std::numeric_limits<int64_t>::min(),
                                                                            std::numeric_limits<int64_t>::max()))
                                       : static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
    std::vector<std::string> stops;
    if (body.has("stop")) {
      const json& st = body["stop"];
      const char* shape = "\"stop\" must be a string or an array of at most 4 non-empty strings";
      if (st.is_string()) stops.push_back(st.get<std::string>());
      else if (st.is_array() && st.size() <= 4) {
        for (const json& x : st) {
          if (!x.is_string()) throw HttpError{400, shape};
          stops.push_back(x.get<std::string>());
        }
      } else throw HttpError{400, shape};
      for (const auto& x : stops)
        if (x.empty() || static_cast<int64_t>(x.size()) > a_.max_sentence_bytes) throw HttpError{400, shape};
    }
    const bool stream = body.boolean("stream", false);
    // the choices: each prompt n times (index prompt · n + j, OpenAI's order), the j-th with seed + j
    std::vector<std::vector<int32_t>> choice_prompts;
    std::vector<decode::GenerateOptions> choice_opts;
    for (const auto& p : prompts)
      for (int64_t j = 0; j < n; ++j) {
        choice_prompts.push_back(p);
        choice_opts.push_back(o);
        choice_opts.back().sampling.seed = o.sampling.seed + static_cast<uint64_t>(j);
      }
    static std::atomic<uint64_t> counter{0};
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++counter);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const std::string object = chat ? "chat.completion" : "text_completion";
    auto held = s.reserve(timeout());  // (unbatched: the model, for every choice)
    if (!stream) {
      json choices = json::array();
      int64_t prompt_tokens = 0, completion_tokens = 0;
      const std::vector<Completion> made = complete(s, choice_prompts, choice_opts, stops, nullptr);
      for (size_t i = 0; i < made.size(); ++i) {
        const Completion& c = made[i];
        prompt_tokens += i % static_cast<size_t>(n) == 0 ? c.prompt_tokens : 0;  // (a prompt counted once, as OpenAI counts)
        completion_tokens += c.completion_tokens;
        json choice = {{"index", i}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
        if (chat) choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        else choice["text"] = c.text;
        choices.push_back(std::move(choice));
      }
      return json_response(json{{"id", id}, {"object", object}, {"created", created}, {"model", s.name()},
                                {"choices", choices},
                                {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                                           {"total_tokens", prompt_tokens + completion_tokens}}}});
    }
    // server-sent events as OpenAI sends them: data: {chunk} per piece of text, a last chunk with the
    // finish_reason, then data: [DONE]
    HttpResponse res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.stream = [this, &s, choice_prompts, choice_opts, stops, held, chat, id, created, name = s.name()](StreamSink& sink) {
      const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
      auto chunk = [&](size_t i, const json& piece, const json& finish) {
        json choice = {{"index", i}, {"finish_reason", finish}, {"logprobs", nullptr}};
        if (chat) choice["delta"] = piece;
        else choice["text"] = piece;
        return json{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", name}, {"choices", {choice}}};
      };
      // the choices' chunks as they come, interleaved (a chat's first of each says the role), each
      // choice's last with its finish_reason
      ChoiceEvents events;
      events.begin = [&](size_t i) { return !chat || send_event(sink, chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr)); };
      events.piece = [&](size_t i, const std::string& piece) {
        return send_event(sink, chunk(i, chat ? json{{"content", piece}} : json(piece), nullptr));
      };
      events.end = [&](size_t i, const Completion& c) {
        return send_event(sink, chunk(i, chat ? json::object() : json(""), c.finish_reason));
      };
      try {
        complete(s, choice_prompts, choice_opts, stops, &events);
        sink.write("data: [DONE]\n\n");
      } catch (const ClientGone&) {  // (nothing more to send)
      } catch (const HttpError& e) {  // (a batched generation not admitted within --timeout: 503)
        send_event(sink, {{"error", {{"message", e.message}, {"type", "server_error"}, {"param", nullptr}, {"code", e.status}}}});
      } catch (const std::exception& e) {
        send_event(sink, {{"error", {{"message", plain_message(e.what())}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
      }
      if (held->owns_lock()) held->unlock();
    };
    return res;
  }

  HttpResponse fill_mask(const HttpRequest& req) {
    const Body body(req.body, kFillMaskFields);
    auto& s = static_cast<MaskedLanguageModelService&>(service(body, {"masked_language_model"}, "/v1/fill-mask"));
    decode::FillMaskOptions o;
    const std::string text = body.text("text", a_.max_sentence_bytes, "--max-sentence-bytes");
    o.top_k = body.integer("top_k", 5, 1, s.loaded().model->vocab_size());
    if (body.has("text_pair")) o.text_pair = body.text("text_pair", a_.max_sentence_bytes, "--max-sentence-bytes");
    const text::HfTokenizer& tok = *s.loaded().tokenizer.hf();
    const size_t n = o.text_pair.empty() ? tok.encode(text).size() : tok.encode_pair(text, o.text_pair).ids.size();
    if (static_cast<int64_t>(n) > s.loaded().model->max_positions())
      throw HttpError{413, "\"text\" has " + std::to_string(n) + " tokens, more than the model's " +
                               std::to_string(s.loaded().model->max_positions()) + " positions"};
    std::vector<std::vector<decode::FillMaskCandidate>> masks;
    {
      auto held = s.hold(timeout());
      try {
        masks = decode::fill_mask(*s.loaded().model, tok, text, o);
      } catch (const Error& e) {  // no mask in the text (the model's own faults were refused at load)
        throw HttpError{400, plain_message(e.what())};
      }
    }
    json out = json::array();
    for (const auto& cands : masks) {
      json list = json::array();
      for (const auto& c : cands)
        list.push_back({{"score", c.score}, {"token", c.token}, {"token_str", c.token_str}, {"sequence", c.sequence}});
      out.push_back(std::move(list));
    }
    return json_response(json{{"model", s.name()}, {"masks", std::move(out)}});
  }

  HttpResponse classify(const HttpRequest& req) {
    const Body body(req.body, kClassifyFields);
    auto& s = static_cast<MaskedLanguageModelService&>(service(body, {"masked_language_model"}, "/v1/classify"));
    const models::MaskedLanguageModel& m = *s.loaded().model;
    const text::HfTokenizer& tok = *s.loaded().tokenizer.hf();
    const models::EncoderTask task = m.task();
    if (task.classifier == nn::BertClassifier::none)
      throw HttpError{400, "model \"" + s.name() +
                               "\" has no classifier (a …ForSequenceClassification or "
                               "…ForTokenClassification checkpoint has one)"};
    const std::vector<std::string> texts = body.texts("inputs", a_.max_sentences, a_.max_sentence_bytes);
    const bool tokens = task.classifier == nn::BertClassifier::token;
    if (body.has("candidate_labels")) return zero_shot(body, s, texts);
    for (const char* key : {"hypothesis_template", "multi_label"})
      if (body.has(key)) throw HttpError{400, std::string("\"") + key + "\" is zero-shot's: give \"candidate_labels\""};
    for (const char* key : {"top_k", "text_pair", "function_to_apply"})
      if (tokens && body.has(key))
        throw HttpError{400, std::string("\"") + key + "\" is for a sequence classifier; model \"" + s.name() +
                                 "\" classifies tokens"};
    for (const char* key : {"aggregation_strategy", "ignore_labels"})
      if (!tokens && body.has(key))
        throw HttpError{
            400, std::string("\"") + key + "\" is for a token classifier; model \"" + s.name() + "\" classifies texts"};
    auto choice = [&](const char* key, const std::string& def, const std::vector<std::string>& allowed) {
      if (!body.has(key)) return def;
      std::string all;
      for (const auto& a : allowed) all += (all.empty() ? "" : ", ") + a;
      if (!body[key].is_string() ||
          std::find(allowed.begin(), allowed.end(), body[key].get<std::string>()) == allowed.end())
        throw HttpError{400, std::string("\"") + key + "\" must be one of " + all};
      return body[key].get<std::string>();
    };
    json results = json::array();
    // the texts' lengths: 413 past the model's positions, before the model is held
    for (const std::string& t : texts) {
      const size_t n =
          body.has("text_pair")
              ? tok.encode_pair(t, body["text_pair"].is_string() ? body["text_pair"].get<std::string>() : "").ids.size()
              : tok.encode(t).size();
      if (static_cast<int64_t>(n) > m.max_positions())
        throw HttpError{413, "a text of \"inputs\" has " + std::to_string(n) + " tokens, more than the model's " +
                                 std::to_string(m.max_positions()) + " positions"};
    }
    if (tokens) {
      decode::TokenClassificationOptions o;
      o.aggregation = parse_enum<decode::Aggregation>(
          choice("aggregation_strategy", "none", {"none", "simple", "first", "average", "max"}));
      if (body.has("ignore_labels")) {
        const json& v = body["ignore_labels"];
        if (!v.is_array() || v.size() > 1024 ||
            !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); }))
          throw HttpError{400, "\"ignore_labels\" must be an array of at most 1024 strings"};
        o.ignore_labels = v.get<std::vector<std::string>>();
      }
      std::vector<std::vector<decode::TokenEntity>> all;
      {
        auto held = s.hold(timeout());
        all = decode::token_classification(m, tok, texts, o);
      }
      for (size_t i = 0; i < all.size(); ++i) results.push_back(entities_json(all[i], text::valid_utf8(texts[i])));
    } else {
      decode::TextClassificationOptions o;
      o.top_k = body.integer("top_k", 1, 0, static_cast<int64_t>(task.labels.size()));
      o.function = parse_enum<decode::ClassificationFunction>(
          choice("function_to_apply", "auto", {"auto", "softmax", "sigmoid", "none"}));
      if (body.has("text_pair"))
        o.text_pairs.assign(texts.size(), body.text("text_pair", a_.max_sentence_bytes, "--max-sentence-bytes"));
      std::vector<std::vector<decode::LabelScore>> all;
      {
        auto held = s.hold(timeout());
        all = decode::text_classification(m, tok, texts, o);
      }
      for (const auto& scores : all) results.push_back(label_scores_json(scores));
    }
    return json_response(json{{"model", s.name()}, {"results", std::move(results)}});
  }

  // /v1/classify with candidate_labels: pipeline("zero-shot-classification") on an NLI classifier
  HttpResponse zero_shot(const Body& body, MaskedLanguageModelService& s, const std::vector<std::string>& texts) {
    const models::MaskedLanguageModel& m = *s.loaded().model;
    if (m.task().classifier != nn::BertClassifier::sequence)
      throw HttpError{400, "\"candidate_labels\" is for a sequence classifier (an NLI model); model \"" + s.name() +
                               "\" classifies tokens"};
    for (const char* key : {"top_k", "text_pair", "function_to_apply", "aggregation_strategy", "ignore_labels"})
      if (body.has(key)) throw HttpError{400, std::string("\"") + key + "\" is not zero-shot's (\"candidate_labels\")"};
    std::vector<std::string> labels;
    for (const std::string& l : body.texts("candidate_labels", a_.max_sentences, a_.max_sentence_bytes)) {
      if (!body["candidate_labels"].is_string()) {
        labels.push_back(l);
        continue;
      }
      for (std::string& part : decode::parse_candidate_labels(l)) labels.push_back(std::move(part));  // "a, b, c"
    }
    if (labels.empty()) throw HttpError{400, "\"candidate_labels\" names no label"};
    if (static_cast<int64_t>(texts.size() * labels.size()) > 4 * a_.max_sentences)
      throw HttpError{413, std::to_string(texts.size()) + " texts × " + std::to_string(labels.size()) +
                               " candidate labels is more than 4 × --max-sentences " +
                               std::to_string(a_.max_sentences) + " pairs"};
    decode::ZeroShotOptions o;
    if (body.has("hypothesis_template"))
      o.hypothesis_template = body.text("hypothesis_template", a_.max_sentence_bytes, "--max-sentence-bytes");
    o.multi_label = body.boolean("multi_label", false);
    std::vector<std::vector<decode::LabelScore>> all;
    try {  // (what it refuses — a template without {}, a model naming no entailment — is the request's)
      auto held = s.hold(timeout());
      all = decode::zero_shot_classification(m, *s.loaded().tokenizer.hf(), texts, labels, o);
    } catch (const Error& e) {
      throw HttpError{400, plain_message(e.what())};
    }
    json results = json::array();
    for (size_t i = 0; i < all.size(); ++i) {
      json r = {{"sequence", texts[i]}, {"labels", json::array()}, {"scores", json::array()}};
      for (const auto& ls : all[i]) r["labels"].push_back(ls.label), r["scores"].push_back(ls.score);
      results.push_back(std::move(r));
    }
    return json_response(json{{"model", s.name()}, {"results", std::move(results)}});
  }

  HttpResponse embeddings(const HttpRequest& req) {
    const Body body(req.body, kEmbeddingsFields, /*lenient=*/true);
    auto& s = static_cast<MaskedLanguageModelService&>(service(body, {"masked_language_model"}, "/v1/embeddings"));
    if (body.has("encoding_format") && body["encoding_format"] != "float")
      throw HttpError{400, "\"encoding_format\" must be \"float\" (base64 is not served)"};
    if (body.has("dimensions"))
      throw HttpError{400, "\"dimensions\" is not served: model \"" + s.name() + "\" gives its whole embedding"};
    const std::vector<std::string> texts = body.texts("input", a_.max_sentences, a_.max_sentence_bytes);
    const text::HfTokenizer& tok = *s.loaded().tokenizer.hf();
    std::vector<std::vector<float>> e;
    std::vector<int64_t> lengths;  // usage: the tokens each text was cut to
    {
      auto held = s.hold(timeout());
      e = decode::embed(*s.loaded().model, tok, texts, {}, &lengths);
    }
    int64_t tokens = 0;
    json data = json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      tokens += lengths[i];
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", std::move(e[i])}});
    }
    return json_response(json{{"object", "list"},
                              {"data", std::move(data)},
                              {"model", s.name()},
                              {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
  }

  // Extractive question answering: a context may be 64 sentences long (64 × --max-sentence-bytes), read
  // in windows reaching at most half a window back (the pipeline's default), so that a request's work
  // stays within about two passes over what it sent.
  HttpResponse answer_questions(const HttpRequest& req) {
    const Body body(req.body, kAnswerFields);
    auto& s = static_cast<MaskedLanguageModelService&>(service(body, {"masked_language_model"}, "/v1/answer"));
    const models::MaskedLanguageModel& m = *s.loaded().model;
    const text::HfTokenizer& tok = *s.loaded().tokenizer.hf();
    if (m.task().classifier != nn::BertClassifier::span)
      throw HttpError{400, "model \"" + s.name() +
                               "\" has no question-answering head (a …ForQuestionAnswering checkpoint has one)"};
    const int64_t max_context = 64 * a_.max_sentence_bytes;
    const std::vector<std::string> questions = body.texts("question", a_.max_sentences, a_.max_sentence_bytes);
    const std::vector<std::string> contexts = body.texts("context", a_.max_sentences, INT64_MAX);
    if (body["question"].is_array() != body["context"].is_array() || questions.size() != contexts.size())
      throw HttpError{400, "\"question\" and \"context\" must both be strings, or arrays of one length"};
    int64_t total = 0;
    for (const std::string& c : contexts) {
      if (static_cast<int64_t>(c.size()) > max_context)
        throw HttpError{413, "\"context\" holds a text of " + std::to_string(c.size()) + " bytes, more than 64 × " +
                                 "--max-sentence-bytes " + std::to_string(max_context)};
      total += static_cast<int64_t>(c.size());
    }
    if (total > max_context)
      throw HttpError{413, "the contexts hold " + std::to_string(total) +
                               " bytes, more than 64 × --max-sentence-bytes " + std::to_string(max_context)};
    decode::QuestionAnsweringOptions o;
    o.top_k = body.integer("top_k", 1, 1, 100);
    o.max_answer_len = body.integer("max_answer_len", 15, 1, m.max_positions());
    o.max_seq_len = body.integer("max_seq_len", 0, 0, m.max_positions());
    const int64_t window = o.max_seq_len > 0 ? o.max_seq_len : decode::default_window(m, tok);
    o.doc_stride = body.integer("doc_stride", -1, -1, window / 2);
    o.handle_impossible_answer = body.boolean("handle_impossible_answer", false);
    o.align_to_words = body.boolean("align_to_words", true);
    std::vector<std::vector<decode::Answer>> all;
    try {  // (what it refuses — a question that leaves the context no room — is the request's)
      auto held = s.hold(timeout());
      all = decode::question_answering(m, tok, questions, contexts, o);
    } catch (const Error& e) {
      throw HttpError{400, plain_message(e.what())};
    }
    json results = json::array();
    for (size_t i = 0; i < all.size(); ++i) results.push_back(answers_json(all[i], text::valid_utf8(contexts[i])));
    return json_response(json{{"model", s.name()}, {"results", std::move(results)}});
  }

  // Multiple choice: each ending beside the context, scored and softmax'd; every text within
  // --max-sentence-bytes and at most --max-sentences endings, each pair cut to max_length tokens.
  HttpResponse choose(const HttpRequest& req) {
    const Body body(req.body, kChooseFields);
    auto& s = static_cast<MaskedLanguageModelService&>(service(body, {"masked_language_model"}, "/v1/choose"));
    const models::MaskedLanguageModel& m = *s.loaded().model;
    if (m.task().classifier != nn::BertClassifier::choice)
      throw HttpError{
          400, "model \"" + s.name() + "\" has no multiple-choice head (a …ForMultipleChoice checkpoint has one)"};
    const std::string context = body.text("context", a_.max_sentence_bytes, "--max-sentence-bytes");
    const std::vector<std::string> endings = body.texts("endings", a_.max_sentences, a_.max_sentence_bytes);
    if (!body["endings"].is_array() || endings.size() < 2)
      throw HttpError{400, "\"endings\" must be an array of two texts or more"};
    std::string header;
    if (body.has("header")) {
      if (!body["header"].is_string()) throw HttpError{400, "\"header\" must be a string"};
      header = body["header"].get<std::string>();
      if (static_cast<int64_t>(header.size()) > a_.max_sentence_bytes)
        throw HttpError{413, "\"header\" has " + std::to_string(header.size()) +
                                 " bytes, more than --max-sentence-bytes " + std::to_string(a_.max_sentence_bytes)};
    }
    const int64_t max_length = body.integer("max_length", 0, 0, m.max_positions());
    std::vector<decode::ChoiceScore> scores;
    try {
      auto held = s.hold(timeout());
      scores = decode::multiple_choice(m, *s.loaded().tokenizer.hf(), context, endings, header, max_length);
    } catch (const Error& e) {
      throw HttpError{400, plain_message(e.what())};
    }
    json choices = json::array();
    size_t best = 0;
    for (size_t i = 0; i < scores.size(); ++i) {
      choices.push_back({{"ending", scores[i].ending}, {"score", scores[i].score}, {"logit", scores[i].logit}});
      if (scores[i].score > scores[best].score) best = i;
    }
    return json_response(json{{"model", s.name()}, {"choices", std::move(choices)}, {"best", best}});
  }

  HttpResponse rerank(const HttpRequest& req) {
    const Body body(req.body, kRerankFields);
    auto& s = static_cast<MaskedLanguageModelService&>(service(body, {"masked_language_model"}, "/v1/rerank"));
    const models::MaskedLanguageModel& m = *s.loaded().model;
    const models::EncoderTask task = m.task();
    if (task.classifier != nn::BertClassifier::sequence || task.labels.size() != 1)
      throw HttpError{400, "model \"" + s.name() +
                               "\" is not a cross-encoder (a …ForSequenceClassification checkpoint of one label)"};
    const std::string query = body.text("query", a_.max_sentence_bytes, "--max-sentence-bytes");
    const std::vector<std::string> documents = body.texts("documents", a_.max_sentences, a_.max_sentence_bytes);
    decode::RerankOptions o;
    o.top_k = body.integer("top_n", 0, 0, static_cast<int64_t>(documents.size()));
    const bool with_text = body.boolean("return_documents", true);
    std::vector<decode::RankedDocument> ranked;
    std::vector<int64_t> lengths;  // usage: the tokens each pair was cut to
    {
      auto held = s.hold(timeout());
      ranked = decode::rerank(m, *s.loaded().tokenizer.hf(), query, documents, o, &lengths);
    }
    int64_t tokens = 0;
    for (int64_t n : lengths) tokens += n;
    json results = json::array();
    for (const auto& r : ranked) {
      json one = {{"index", r.index}, {"relevance_score", r.score}};
      if (with_text) one["document"] = {{"text", documents[static_cast<size_t>(r.index)]}};
      results.push_back(std::move(one));
    }
    return json_response(
        json{{"model", s.name()}, {"results", std::move(results)}, {"usage", {{"total_tokens", tokens}}}});
  }

  HttpResponse attention(const HttpRequest& req) {
    const Body body(req.body, kAttentionFields);
    ModelService& s =
        service(body, {"translation", "language_model", "masked_language_model", "captioner"}, "/v1/attention");
    if (s.kind() == "captioner") return caption_attention(static_cast<CaptionerService&>(s), body);
    if (body.has("image"))
      throw HttpError{400, "\"image\" is an image captioner's input; model \"" + s.name() + "\" reads \"text\""};
    const std::string text = body.text("text", a_.max_sentence_bytes, "--max-sentence-bytes");
    std::string query, key;
    if (body.has("search")) {
      const json& q = body["search"];
      if (!q.is_object() || !q.contains("query") || !q.contains("key") || !q["query"].is_string() ||
          !q["key"].is_string() || q.size() != 2)
        throw HttpError{400, "\"search\" must be {\"query\": word, \"key\": word}"};
      query = q["query"].get<std::string>(), key = q["key"].get<std::string>();
    }
    // "rollout": each self-attention kind's attention rollout as well; "neuron": the neuron view of
    // "neuron": {"layer", "head", "query"} instead of the maps
    std::string detail;
    if (body.has("detail")) {
      if (!body["detail"].is_string() || (body["detail"].get<std::string>() != "rollout" &&
                                          body["detail"].get<std::string>() != "flow" &&
                                          body["detail"].get<std::string>() != "neuron"))
        throw HttpError{400, "\"detail\" must be \"rollout\", \"flow\" or \"neuron\""};
      detail = body["detail"].get<std::string>();
    }
    // attention flow's limit, checked before the model runs: `tokens` on the self-attention's axis
    auto flow_fits = [&](int64_t tokens, const char* kind) {
      if (detail == "flow" && tokens > decode::kMaxFlowTokens)
        throw HttpError{413, "\"detail\": \"flow\": the " + std::string(kind) + " attention has " +
                                 std::to_string(tokens) + " tokens, more than the " +
                                 std::to_string(decode::kMaxFlowTokens) +
                                 " attention flow is computed for (T² exact max-flows); \"rollout\" has no limit"};
    };
    int64_t n_layer = 0, n_head = 0, n_query = 0;
    std::string n_kind = "encoder_self";  // a translator's kind of attention ("kind" is for translators)
    if (detail == "neuron") {
      const char* shape = "\"neuron\" must be {\"layer\": int, \"head\": int, \"query\": int} (from 0, and for a "
                          "translator \"kind\": \"encoder_self\", \"decoder_self\" or \"cross\") with \"detail\": \"neuron\"";
      if (!body.has("neuron") || !body["neuron"].is_object()) throw HttpError{400, shape};
      const json& nj = body["neuron"];
      if (nj.size() != (nj.contains("kind") ? 4u : 3u)) throw HttpError{400, shape};
      for (const char* f : {"layer", "head", "query"})
        if (!nj.contains(f) || !nj[f].is_number_integer()) throw HttpError{400, shape};
      n_layer = nj["layer"].get<int64_t>(), n_head = nj["head"].get<int64_t>(), n_query = nj["query"].get<int64_t>();
      if (nj.contains("kind")) {
        if (!nj["kind"].is_string() || s.kind() != "translation")
          throw HttpError{400, "\"neuron\": \"kind\" is a translator's (a string: encoder_self, decoder_self or cross)"};
        n_kind = nj["kind"].get<std::string>();
      }
      if (body.has("search")) throw HttpError{400, "\"search\" is not asked with \"detail\": \"neuron\""};
    } else if (body.has("neuron")) {
      throw HttpError{400, "\"neuron\" goes with \"detail\": \"neuron\""};
    }
    const bool u8 = u8_encoding(body);  // the maps, the rollout and the flow as bytes (u8_json)
    decode::AttentionView view;
    if (s.kind() == "translation") {
      auto& t = static_cast<TranslationService&>(s);
      const decode::TranslateOptions to = decoding(body);
      const size_t n = t.translator().encode(text).size();
      if (n == 0) throw HttpError{400, "\"text\" has no tokens"};
      const int64_t longest = t.loaded().model->max_len() - 1;  // (its EOS takes a position)
      if (static_cast<int64_t>(n) > longest)
        throw HttpError{413, "\"text\" has " + std::to_string(n) + " tokens, more than the model's longest source of " +
                                 std::to_string(longest)};
      flow_fits(static_cast<int64_t>(n) + 1, "encoder_self");  // (the source and EOS)
      auto held = s.hold(timeout());
      if (detail == "neuron") return neuron_response(s, text, [&] {
          return decode::translation_neuron(*t.loaded().model, *t.loaded().tokenizer, text, n_layer, n_head, n_query,
                                            n_kind, to);
        });
      try {  // a model with no attention over the source (rnn-encdec) is refused by its type
        view = decode::translation_attention(*t.loaded().model, *t.loaded().tokenizer, text, to,
                                             "model \"" + s.name() + "\"");
      } catch (const Error& e) {
        throw HttpError{400, plain_message(e.what())};
      }
    } else if (s.kind() == "masked_language_model") {
      auto& b = static_cast<MaskedLanguageModelService&>(s);
      if (body.has("beam_size") || body.has("length_penalty"))
        throw HttpError{400, "\"beam_size\" and \"length_penalty\" are for translation models"};
      size_t n = 0;
      try {
        n = b.loaded().tokenizer.hf()->encode(text).size();
      } catch (const Error& e) {
        throw HttpError{400, std::string("\"text\": ") + e.what()};
      }
      if (static_cast<int64_t>(n) > b.loaded().model->max_positions())
        throw HttpError{413, "\"text\" has " + std::to_string(n) + " tokens, more than the model's " +
                                 std::to_string(b.loaded().model->max_positions()) + " positions"};
      flow_fits(static_cast<int64_t>(n), "encoder_self");
      auto held = s.hold(timeout());
      if (detail == "neuron") return neuron_response(s, text, [&] {
          return decode::masked_language_model_neuron(*b.loaded().model, b.loaded().tokenizer, text, n_layer, n_head, n_query);
        });
      view = decode::masked_language_model_attention(*b.loaded().model, b.loaded().tokenizer, text);
    } else {
      auto& g = static_cast<LanguageModelService&>(s);
      if (body.has("beam_size") || body.has("length_penalty"))
        throw HttpError{400, "\"beam_size\" and \"length_penalty\" are for translation models"};
      std::vector<int32_t> ids;
      try {
        ids = g.loaded().tokenizer.encode(text);
      } catch (const Error& e) {
        throw HttpError{400, std::string("\"text\": ") + e.what()};
      }
      if (static_cast<int64_t>(ids.size()) > g.loaded().model->block_size())
        throw HttpError{413, "\"text\" has " + std::to_string(ids.size()) + " tokens, more than the model's context of " +
                                 std::to_string(g.loaded().model->block_size())};
      flow_fits(static_cast<int64_t>(ids.size()), "decoder_self");
      auto held = s.hold(timeout());
      if (detail == "neuron") return neuron_response(s, text, [&] {
          return decode::language_model_neuron(*g.loaded().model, g.loaded().tokenizer, text, n_layer, n_head, n_query);
        });
      view = decode::language_model_attention(*g.loaded().model, g.loaded().tokenizer, text);
    }
    // rollout and flow run through layers of self-attention: a recurrent translator has one attention, the
    // decoder's over the source (its "cross" kind), and nothing to roll out
    if ((detail == "rollout" || detail == "flow") && std::none_of(view.kinds.begin(), view.kinds.end(),
                                            [](const decode::AttentionKind& k) { return k.name != "cross"; }))
      throw HttpError{400, "\"detail\": \"" + detail + "\": model \"" + s.name() + "\", of type " + type_of(s) +
                               ", has no self-attention to roll out across layers; its one attention is the "
                               "decoder's over the source (the \"cross\" kind, 1 layer × 1 head)"};
    for (const decode::AttentionKind& k : view.kinds)  // (a translation's decoder: its length known only now)
      if (k.name != "cross") flow_fits(static_cast<int64_t>(k.queries.tokens.size()), k.name.c_str());
    json kinds = json::array();
    for (const decode::AttentionKind& k : view.kinds) {
      json kj = {{"name", k.name}, {"queries", axis_json(k.queries)}, {"keys", axis_json(k.keys)}};
      const int64_t Lq = static_cast<int64_t>(k.queries.tokens.size()), Lk = static_cast<int64_t>(k.keys.tokens.size());
      kj["layers"] = u8 ? u8_json(k.layers, {static_cast<int64_t>(k.layers.size()), k.layers.front().size(0), Lq, Lk})
                        : layers_json(k.layers);
      // attention rollout (decode/inspect.h) of a self-attention kind: [queries][keys], as one head
      if (detail == "rollout" && k.name != "cross") {
        const Tensor r = decode::attention_rollout(k.layers);
        kj["rollout"] = u8 ? u8_json({r}, {Lq, Lk}) : rows_json(r);
      }
      // attention flow (decode/inspect.h: exact max-flows through the layers), the same way
      if (detail == "flow" && k.name != "cross") {
        const Tensor f = decode::attention_flow(k.layers);
        kj["flow"] = u8 ? u8_json({f}, {Lq, Lk}) : rows_json(f);
      }
      kinds.push_back(std::move(kj));
    }
    json out = {{"model", s.name()}, {"kind", s.kind()}, {"input", view.input}, {"output", view.output}, {"kinds", kinds}};
    if (body.has("search")) {
      json ranked = json::array();
      for (const decode::HeadScore& h : decode::rank_heads(view, query, key))
        ranked.push_back({{"kind", h.kind}, {"layer", h.layer}, {"head", h.head}, {"query_word", h.query_word},
                          {"key_word", h.key_word}, {"weight", h.weight}});
      out["search"] = std::move(ranked);
    }
    return json_response(out);
  }

  // /v1/attention's "encoding": "u8" (true) or "json" (the default, false); anything else a 400.
  static bool u8_encoding(const Body& body) {
    if (!body.has("encoding")) return false;
    if (!body["encoding"].is_string() || (body["encoding"].get<std::string>() != "u8" &&
                                          body["encoding"].get<std::string>() != "json"))
      throw HttpError{400, "\"encoding\" must be \"json\" (numbers, the default) or \"u8\" (a byte a weight, base64)"};
    return body["encoding"].get<std::string>() == "u8";
  }

  // A model's type and what it is ("rnn-attention (a GRU encoder–decoder with …)"), for a refusal.
  static std::string type_of(const ModelService& s) {
    const std::string t = s.meta().value("model_type", std::string());
    try {
      return t + " (" + models::model_type(t).description + ")";
    } catch (const Error&) {
      return t;
    }
  }

  // /v1/attention of an image captioner: {"image": base64 of a PNG or JPEG, "model"?, "beam_size"?,
  // "encoding"?} → the caption and, for each step (each word, then the end), its attention over
  // the ConvNet grid: one kind "image", 1 layer × 1 head, queries the words, keys the grid's cells
  // row by row ("r,c"), "grid": [rows, cols]; "picture": the picture as the model saw it (its size,
  // grey levels; base64 PNG, "height", "width"). A picture of another size is resized (bilinear).
  HttpResponse caption_attention(CaptionerService& s, const Body& body) {
    const std::string why = "model \"" + s.name() + "\", an image captioner of type " + type_of(s);
    for (const char* f : {"text", "search", "neuron", "length_penalty"})
      if (body.has(f))
        throw HttpError{400, std::string("\"") + f + "\" is not asked of " + why + ": it reads \"image\" (base64 of a PNG or JPEG)"};
    if (body.has("detail"))
      throw HttpError{400, "\"detail\" is not asked of " + why +
                               ": its one attention, a GRU decoder's additive attention over the ConvNet grid, has no "
                               "layers of self-attention (rollout, flow) and no query and key vectors (neuron)"};
    if (!body.has("image") || !body["image"].is_string())
      throw HttpError{400, "\"image\" (base64 of a PNG or JPEG) is required: " + why};
    const bool u8 = u8_encoding(body);
    const int64_t beam = body.integer("beam_size", decode::CaptionOptions{}.beam_size, 1, a_.max_beam);
    const models::Seq2SeqModel& model = *s.loaded().model;
    const models::ImageShape shape = model.source_image();
    vision::Image img;
    try {
      vision::ReadImageOptions o;
      o.channels = shape.channels, o.height = shape.height, o.width = shape.width;
      img = vision::decode_image(io::base64_decode(body["image"].get<std::string>(), "\"image\""), "\"image\"", o);
    } catch (const Error& e) {
      throw HttpError{400, plain_message(e.what())};
    }
    Tensor x = Tensor::empty({1, shape.channels, shape.height, shape.width});
    std::copy(img.pixels.begin(), img.pixels.end(), x.data<float>());
    decode::Caption c;
    {
      auto held = s.hold(timeout());
      decode::CaptionOptions o;
      o.beam_size = beam, o.attention = true;
      c = decode::ImageCaptioner(model, *s.loaded().tokenizer).caption(x, o)[0];
    }
    if (c.attention.empty())
      throw HttpError{400, why + " without attention (a mean-feature captioner): there is no map to show"};
    // the axes: each word, then the end (when the caption reached it); each grid cell "r,c"
    decode::TokenAxis words, cells;
    for (size_t t = 0; t < c.attention.size(); ++t) {
      words.tokens.push_back(t < c.words.size() ? c.words[t] : "</s>");
      words.word.push_back(static_cast<int>(t)), words.words.push_back(words.tokens.back());
    }
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t col = 0; col < c.cols; ++col) {
        cells.tokens.push_back(std::to_string(r) + "," + std::to_string(col));
        cells.word.push_back(static_cast<int>(cells.words.size())), cells.words.push_back(cells.tokens.back());
      }
    // α_t over the grid, [1 head, words, cells]
    const int64_t Lq = static_cast<int64_t>(c.attention.size()), Lk = c.rows * c.cols;
    Tensor w = Tensor::empty({1, Lq, Lk});
    for (int64_t t = 0; t < Lq; ++t) std::copy(c.attention[t].begin(), c.attention[t].end(), w.data<float>() + t * Lk);
    json kind = {{"name", "image"}, {"queries", axis_json(words)}, {"keys", axis_json(cells)}, {"grid", {c.rows, c.cols}}};
    kind["layers"] = u8 ? u8_json({w}, {1, 1, Lq, Lk}) : layers_json({w});
    json picture = {{"png", io::base64_encode(vision::encode_png(img))}, {"height", img.height}, {"width", img.width}};
    return json_response(json{{"model", s.name()}, {"kind", s.kind()}, {"input", ""}, {"output", c.text},
                              {"picture", std::move(picture)}, {"kinds", json::array({std::move(kind)})}});
  }

  // /v1/attention with "detail": "neuron": {"model", "kind", "input", "neuron": neuron_json}; the
  // model's refusals (not a BERT or a GPT, a layer, head or query out of range) are 400s.
  template <class F>
  HttpResponse neuron_response(ModelService& s, const std::string& text, F&& make) {
    decode::NeuronView v;
    try {
      v = make();
    } catch (const Error& e) {
      throw HttpError{400, std::string("\"neuron\": ") + e.what()};
    }
    return json_response(json{{"model", s.name()}, {"kind", s.kind()}, {"input", text}, {"neuron", neuron_json(v)}});
  }

  const ServeArgs& a_;
  std::vector<std::unique_ptr<ModelService>> services_;
  Metrics metrics_;  // (before http_: its observer counts into it)
  HttpServer http_;
};

int run_serve(const ServeArgs& a) {
  // SIGINT and SIGTERM are taken by a thread of their own (sigwait), never by a handler that could
  // interrupt a request: blocked here, before any thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  use_threads_for_decoding(a.threads);

  const Device device = device_from(a.device, "serve");  // (refused before any file is read)
  std::vector<std::unique_ptr<ModelService>> services;
  for (const std::string& m : a.models) {
    const std::string path = find_model(m);
    const models::Kind kind = models::model_file_kind(path);
    QKV_CHECK(kind == models::Kind::seq2seq || kind == models::Kind::image_to_text ||
                  kind == models::Kind::language_model || kind == models::Kind::masked_language_model,
              "serve: '", path, "' is neither a translation model nor a language model (what qkv serve serves)");
    std::string name = std::filesystem::path(path).stem().string();
    for (auto& s : services)
      QKV_CHECK(s->name() != name, "serve: two models named \"", name, "\" (", s->path(), " and ", path, ")");
    models::LoadOptions lo;
    lo.weights = a.weights;
    lo.device = device;
    // On a GPU the model's weights, KV caches and beams live there; requests still batch as on the CPU.
    if (kind == models::Kind::image_to_text) {  // /v1/attention only
      models::LoadedSeq2Seq c = models::load_image_to_text(path, lo);
      services.push_back(std::make_unique<CaptionerService>(name, std::move(c), a.threads));
    } else if (kind == models::Kind::seq2seq) {
      models::LoadedSeq2Seq t = models::load_seq2seq(path, lo);
      services.push_back(std::make_unique<TranslationService>(name, std::move(t), a.threads, a.max_batch, a.max_wait_ms));
    } else if (kind == models::Kind::masked_language_model) {  // /v1/fill-mask, /v1/attention
      models::LoadedMaskedLanguageModel b = models::load_masked_language_model(path, lo);
      services.push_back(std::make_unique<MaskedLanguageModelService>(name, std::move(b), a.threads));
    } else {
      models::LoadedLanguageModel g = models::load_language_model(path, lo);
      decode::BatchingGeneratorOptions b;
      b.max_batch = a.max_batch;
      if (a.kv_cache_mb > 0) b.max_cache_bytes = static_cast<int64_t>(a.kv_cache_mb * 1024 * 1024);
      b.prefix_caching = !a.no_prefix_caching;
      b.kv_cache_dtype = nn::kv_cache_dtype(a.kv_cache_dtype);
      services.push_back(std::make_unique<LanguageModelService>(name, std::move(g), a.threads, b));
    }
  }
  Server server(a, std::move(services));
  const int port = server.bind();
  std::fprintf(stderr, "qkv serve: listening on http://%s:%d (%zu model%s; the attention viewer at /; Ctrl-C stops)\n",
               a.host.c_str(), port, a.models.size(), a.models.size() > 1 ? "s" : "");
  std::fflush(stderr);
  std::atomic<bool> stopped{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (stopped) return;
    std::fprintf(stderr, "qkv serve: %s — finishing every accepted request and stream (a second signal: exit now)\n",
                 sig == SIGINT ? "interrupted" : "terminated");
    server.stop();
    sigwait(&stop_signals, &sig);
    if (stopped) return;
    std::fprintf(stderr, "qkv serve: second signal — exiting at once\n");
    std::_Exit(128 + sig);
  });
  server.run();
  stopped = true;
  // run() returned: either a signal stopped it (the watcher is done) or it failed; wake the
  // watcher in the second case so it can be joined
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  std::fprintf(stderr, "qkv serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "serve", "Serve translation and language models over HTTP (JSON API, batching, streaming, attention viewer at /)");
  auto a = std::make_shared<ServeArgs>();
  sub->add_option("-m,--model", a->models,
                  "translation or language model file(s), encoders (BERT, DistilBERT, RoBERTa, XLM-RoBERTa, MPNet: "
                  "/v1/fill-mask, "
                  "/v1/classify, /v1/embeddings), or an image captioner (its /v1/attention only); each is served "
                  "under its file name's stem")
      ->capture_default_str()
      ->allow_extra_args(false);
  add_device_option(sub, a->device, "decode (a GPU: the weights --dtype names, f32 or bf16)");
  sub->add_option("--host", a->host, "address to listen on (default 127.0.0.1: this machine only)")->capture_default_str();
  sub->add_option("-p,--port", a->port, "port (0: any free port, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--max-request-bytes", a->max_request_bytes, "largest request body")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--max-sentences", a->max_sentences, "most sentences in one request")->capture_default_str()->check(greater_than_zero());
  sub->add_option("--max-sentence-bytes", a->max_sentence_bytes, "longest sentence, prompt or attention text, in bytes")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--max-new-tokens", a->max_new_tokens, "most tokens one /v1/generate request may ask for")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--max-batch", a->max_batch,
                  "most sentences translated together, and most generations run together (a GPT's or a Llama's: "
                  "continuous batching), across requests")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--kv-cache-mb", a->kv_cache_mb,
                  "a language model's KV cache for its batched generations, MiB (default: --max-batch full contexts, "
                  "at most 1024); a generation waits for room in it")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1048576.0));
  sub->add_option("--kv-cache-dtype", a->kv_cache_dtype,
                  "what a language model's KV cache keeps: f32; bf16 — half the memory a token, so twice the "
                  "tokens in --kv-cache-mb; or fp8 (e4m3, as vLLM's; also fp8_e4m3) — a quarter, four times the "
                  "tokens (each key and value rounded as it is written, fp8 saturating at ±448; the attention "
                  "computes in f32)")
      ->capture_default_str()
      ->check(CLI::IsMember(nn::kv_cache_dtype_names()));
  sub->add_flag("--no-prefix-caching", a->no_prefix_caching,
               "compute every prompt whole: by default a generation takes the KV cache's pages of a prompt prefix "
               "an earlier one computed (a shared system prompt, a chat's earlier turns)");
  sub->add_option("--max-wait-ms", a->max_wait_ms, "how long a request waits for others to share its batch")->capture_default_str()->check(CLI::Range(0.0, 10000.0));
  sub->add_option("--timeout", a->timeout_s, "seconds a request may wait for its model (503 after)")->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--http-threads", a->http_threads,
                  "requests doing model work at once (workers; more connections wait in one FIFO queue)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--max-connections", a->max_connections, "connections open at once (503 beyond)")
      ->capture_default_str()
      ->check(greater_than_zero());
  sub->add_option("--max-header-bytes", a->max_header_bytes, "largest request header (431 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 20));
  sub->add_option("--header-timeout", a->header_timeout_s, "seconds a request's whole header may take (then closed)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--body-timeout", a->body_timeout_s, "seconds a request's whole body may take (then closed)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--keep-alive-timeout", a->keep_alive_timeout_s, "seconds an idle kept-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--keep-alive-requests", a->keep_alive_requests, "requests on one connection before it is closed")
      ->capture_default_str()
      ->check(greater_than_zero());
  add_threads_option(sub, a->threads);
  auto dtype = std::make_shared<InferenceWeights>(InferenceWeights::f32);
  CLI::Option* dtype_option =
      add_choice(sub, "--dtype", *dtype,
                 "weights decoding reads: f32, bf16 copies or int8 rows (a quarter of the bytes; activations quantized "
                 "per row). Default: int8 for a file qkv quantize wrote, f32 otherwise");
  dtype_option->default_str("");
  sub->footer(
      "Examples: qkv serve                       (the shipped en-fr translator and Shakespeare GPT; open "
      "http://127.0.0.1:8080/)\n"
      "          curl -s localhost:8080/v1/translate -d '{\"sentences\": [\"The cat sleeps.\"]}'\n"
      "          curl -sN localhost:8080/v1/generate -d '{\"prompt\": \"ROMEO:\", \"stream\": true}'\n"
      "With --device cuda, decoding steps replay from CUDA graphs (the translator's beam steps; the language "
      "models' steps of decoding tokens, in buckets: docs/CUDA.md, \"CUDA graphs\"); QKV_CUDA_GRAPHS=0 "
      "launches them kernel by kernel.");
  register_runner(sub, [a, dtype, dtype_option] {
    if (dtype_option->count() > 0) a->weights = *dtype;
    return run_serve(*a);
  });
}

}  // namespace qkv::cli
