// The HTTP/1.1 layer under `qkv serve` (cmd_serve.cpp holds the routes), on Boost.Beast + Asio:
// event-driven, so an idle, slow or hostile connection costs a socket and a few KiB, never a thread.
//
//   I/O threads (1–2)   run the io_context: accept, read and parse requests under the limits
//                       below, write answers; cheap routes (/health, /metrics, the page) answer here
//   workers (a pool)    run the routes that do model work, one FIFO queue across all connections
//                       (so 64 keep-alive clients are served in arrival order, none starved), and
//                       post the answer back to the connection; a streamed answer (server-sent
//                       events) is written chunk by chunk as the worker produces it, the worker
//                       waiting while more than a few chunks are unsent (a slow reader is bounded)
//
// Every limit is said once, in HttpLimits, and enforced while reading, before the bytes are held:
// a header too large is a 431, a body over the limit a 413 whatever its transfer encoding
// (Content-Length or chunked, refused before the rest is read), a header or body that takes too
// long closes the connection (one deadline for the whole header, not one per byte: slowloris), and
// connections beyond the limit get a 503. Pipelined requests are answered in order (a connection
// reads its next request only after answering the last). Every error is JSON, with any bytes the
// client sent (a path, a body) made valid UTF-8 first.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qkv::cli {

// nginx/envoy-like defaults (nginx: large_client_header_buffers 4×8k, client_header_timeout 60 s,
// keepalive_requests 1000, keepalive_timeout 75 s; envoy: max_request_headers_kb 60).
struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;         // request line + fields (431 beyond)
  uint64_t max_body_bytes = 1 << 20;           // whatever the transfer encoding (413 beyond)
  std::chrono::milliseconds header_timeout{10'000};  // the whole header, from its first byte (then closed)
  std::chrono::milliseconds body_timeout{30'000};    // the whole body (then closed)
  std::chrono::milliseconds idle_timeout{75'000};    // a kept-alive connection waiting for a request
  std::chrono::milliseconds write_timeout{30'000};   // each answer (or streamed chunk) to be taken
  int64_t max_requests_per_connection = 1000;  // then Connection: close
  int64_t max_connections = 1024;              // open at once (503 and close beyond)
  size_t gzip_min_bytes = 1024;                // answers compressed (gzip level 1) when asked for and this large
  int io_threads = 2;
  int workers = 64;                            // routes doing model work at once (they mostly wait on a batch)
};

struct HttpRequest {
  std::string method, target, path, query, body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  const std::string* header(const std::string& lower_name) const {
    for (auto& [k, v] : headers)
      if (k == lower_name) return &v;
    return nullptr;
  }
};

// A streamed answer's writer: write() blocks while the connection has too much unsent, and returns
// false once the client is gone (the producer should stop).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual bool write(std::string chunk) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json", body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set: the answer is streamed (chunked) by this function on a worker; body is unused.
  std::function<void(StreamSink&)> stream;
};

// {"error": {"code", "message"}}, the message's invalid UTF-8 replaced by U+FFFD (it may quote a
// client's bytes).
std::string error_json(int status, const std::string& message);
HttpResponse error_response(int status, const std::string& message);
// The path of a request target, percent-decoded ("/v1/%74ranslate" is /v1/translate); the bytes it
// decodes to may be anything.
std::string decode_path(const std::string& target);
// gzip (level 1: fast) of bytes, when Accept-Encoding allows gzip; empty when it does not.
bool accepts_gzip(const std::string* accept_encoding);
std::string gzip(const std::string& bytes);

// What the server tells its owner (metrics): begin() when a request is handed to a worker (in
// flight from then), end() for every answer, the server's own refusals included: the route (""
// when none matched: refused before routing, or an unknown path), the status, the seconds from the
// request's first byte to its answer's last (a stream's end), and whether begin() was called.
struct HttpObserver {
  std::function<void()> begin;
  std::function<void(const std::string& route, int status, double seconds, bool worker)> end;
};

// One request parsed from raw bytes with the server's parser and limits (no socket): the fuzz
// target's entry. Returns the request, or an error answer (400/413/431) in `refused`.
std::optional<HttpRequest> parse_request(const std::string& bytes, const HttpLimits& limits, HttpResponse* refused);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  HttpServer(HttpLimits limits, HttpObserver observer);
  ~HttpServer();
  // `work`: run on the worker pool (model work); otherwise on the I/O thread (must be cheap).
  void route(const std::string& method, const std::string& path, Handler h, bool work);
  // The route's handler for method + path: nullptr with a 404 (no such path) or 405 (another method).
  const Handler* find(const std::string& method, const std::string& path, bool* work, int* status) const;
  // Binds and listens (backlog SOMAXCONN); port 0: any free port. Returns the port.
  int bind(const std::string& host, int port);
  // Serves until drain() has finished every accepted request (blocks the calling thread).
  void run();
  // Thread-safe: stop accepting (after taking the connections already waiting in the backlog),
  // close idle connections, finish every request and stream in progress, then run() returns.
  void drain();

  struct Impl;  // (http_server.cpp: the io_context, acceptor, workers and connections)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv::cli
