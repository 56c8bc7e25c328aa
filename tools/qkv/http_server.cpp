// The HTTP/1.1 layer under `qkv serve` on Boost.Beast + Asio: http_server.h says what it does and
// why; this file reads top-down as a connection lives: accepted (or refused past max_connections),
// a request read under the limits, routed, answered (on the I/O thread or a worker), the next one.
#include "http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <zlib.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "qkv/core/message.h"

namespace qkv::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// ---- the pieces a connection uses -----------------------------------------------------------------

std::string error_json(int status, const std::string& message) {
  // a message may quote a path or a body: invalid UTF-8 is replaced, never a throw from dump()
  return nlohmann::json{{"error", {{"code", status}, {"message", message}}}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse error_response(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = error_json(status, message);
  return r;
}

std::string decode_path(const std::string& target) {
  const std::string path = target.substr(0, target.find('?'));
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && hex(path[i + 1]) >= 0 && hex(path[i + 2]) >= 0) {
      out += static_cast<char>(hex(path[i + 1]) * 16 + hex(path[i + 2]));
      i += 2;
    } else {
      out += path[i];
    }
  }
  return out;
}

// "gzip" or "*" listed without q=0 (RFC 9110 §12.5.3); anything else, or no header: not compressed.
bool accepts_gzip(const std::string* accept_encoding) {
  if (!accept_encoding) return false;
  const std::string& s = *accept_encoding;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    std::string item = s.substr(at, end - at);
    at = end + 1;
    std::string name = item.substr(0, item.find(';'));
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name != "gzip" && name != "*") continue;
    const size_t q = item.find("q=");
    if (q != std::string::npos && std::strtod(item.c_str() + q + 2, nullptr) <= 0) continue;
    return true;
  }
  return false;
}

// Level 1: a 12 MB attention answer in ~0.1 s of a core (Brotli's default took 70 s: never offered).
std::string gzip(const std::string& bytes) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&z, bytes.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

namespace {

using Parser = http::request_parser<http::string_body>;

void limit(Parser& p, const HttpLimits& l) {
  p.header_limit(static_cast<std::uint32_t>(l.max_header_bytes));
  p.body_limit(l.max_body_bytes);
}

HttpRequest to_request(Parser& p) {
  auto msg = p.release();
  HttpRequest r;
  r.method = std::string(msg.method_string());
  r.target = std::string(msg.target());
  r.path = decode_path(r.target);
  const size_t q = r.target.find('?');
  if (q != std::string::npos) r.query = r.target.substr(q + 1);
  for (const auto& f : msg) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  r.body = std::move(msg.body());
  return r;
}

// The answer to a request the parser refused (the connection closes after it).
HttpResponse refusal(const beast::error_code& ec, const HttpLimits& l) {
  if (ec == http::error::header_limit)
    return error_response(431, "request header larger than " + std::to_string(l.max_header_bytes) + " bytes");
  if (ec == http::error::body_limit)
    return error_response(413, "request body larger than --max-request-bytes " + std::to_string(l.max_body_bytes));
  return error_response(400, "malformed HTTP request: " + ec.message());
}

std::string head(int status, const std::string& content_type, bool keep_alive,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
  std::string reason(http::obsolete_reason(static_cast<http::status>(status)));
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nServer: qkv\r\nContent-Type: " + content_type +
                  "\r\nConnection: " + (keep_alive ? "keep-alive" : "close") + "\r\n";
  for (auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  return h;
}

}  // namespace

// WorkerPool and Route are HttpServer::Impl's members, so they have its linkage (not the unnamed
// namespace's, which g++ warns of where this file is part of a unity build: CMakeLists.txt's qkv_cli).

// A FIFO of jobs on a fixed set of threads, shared by every connection: arrival order is service order.
class WorkerPool {
 public:
  explicit WorkerPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

struct Route {
  std::string method, path;
  HttpServer::Handler handler;
  bool work;
};

namespace {

// The handler for method + path; else nullptr, with 404 (no such path) or 405 (another method's).
const HttpServer::Handler* find_route(const std::vector<Route>& routes, const std::string& method,
                                      const std::string& path, bool* work, int* status) {
  *status = 404;
  for (const Route& r : routes)
    if (r.path == path) {
      if (r.method != method) {
        *status = 405;
        continue;
      }
      *work = r.work, *status = 200;
      return &r.handler;
    }
  return nullptr;
}

}  // namespace

std::optional<HttpRequest> parse_request(const std::string& bytes, const HttpLimits& limits, HttpResponse* refused) {
  Parser p;
  limit(p, limits);
  p.eager(true);
  beast::error_code ec;
  size_t at = 0;
  while (!p.is_done()) {
    const size_t n = p.put(asio::buffer(bytes.data() + at, bytes.size() - at), ec);
    at += n;
    // the bytes end before the request does (a request is never ended by the end of its bytes: one
    // without a length has no body, and is done at its header)
    if (ec == http::error::need_more) ec = {};
    if (ec) break;
    if (!p.is_done() && (n == 0 || at == bytes.size())) {
      ec = http::error::partial_message;
      break;
    }
  }
  if (ec) {
    if (refused) *refused = refusal(ec, limits);
    return std::nullopt;
  }
  return to_request(p);
}

// ---- the server ------------------------------------------------------------------------------------

class Session;

struct HttpServer::Impl {
  HttpLimits limits;
  HttpObserver observer;
  std::vector<Route> routes;
  // What a Session's destructor touches is declared before the io_context, so that it outlives it:
  // handlers still queued when the server stops (a worker's last write to a closed connection) are
  // destroyed with the io_context, and with them a session's last reference. (Declared after it, the
  // map and its mutex were destroyed first: qkv serve once died of SIGSEGV after SIGTERM, in CI's
  // sigterm_as_connections_close.)
  std::atomic<int64_t> connections{0};
  std::atomic<bool> draining{false};
  std::mutex sessions_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::unique_ptr<WorkerPool> pool;

  void accept();
  void start(tcp::socket socket);
};

class Session : public std::enable_shared_from_this<Session>, public StreamSink {
 public:
  Session(HttpServer::Impl& server, tcp::socket socket) : s_(server), stream_(std::move(socket)) { ++s_.connections; }
  ~Session() override {
    --s_.connections;
    std::lock_guard lock(s_.sessions_mu);
    s_.sessions.erase(this);
  }

  void start(bool over_limit) {
    {
      std::lock_guard lock(s_.sessions_mu);
      s_.sessions[this] = weak_from_this();
    }
    if (over_limit) {
      t0_ = Clock::now();
      respond(error_response(503, "more than " + std::to_string(s_.limits.max_connections) +
                                      " connections open (the server's limit): try again later"),
              false);
      return;
    }
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->next(); });
  }

  auto executor() { return stream_.get_executor(); }
  // On the strand: a connection waiting for its next request is closed (the server is stopping).
  void drain() {
    if (idle_ || lingering_) close();
  }

  // StreamSink, called by a worker: queue the chunk, waiting while 8 are unsent (a slow reader
  // holds its producer, not the server's memory).
  bool write(std::string chunk) override {
    if (chunk.empty()) return !broken();
    char size[20];
    std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
    return queue(size + std::move(chunk) + "\r\n", false);
  }

 private:
  // ---- reading a request ----
  void next() {
    if (s_.draining && buffer_.size() == 0) return close();
    parser_.emplace();
    limit(*parser_, s_.limits);
    if (buffer_.size() > 0) return read_header();  // pipelined: already here
    // kept alive: wait idle_timeout for a first byte, then the header has header_timeout in all
    idle_ = true;
    stream_.expires_after(s_.limits.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->idle_ = false;
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    t0_ = Clock::now();
    stream_.expires_after(s_.limits.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->failed(ec);
      // curl sends Expect: 100-continue before a body over 1 KiB, and waits a second for this
      const auto& h = self->parser_->get();
      if (!self->parser_->is_done() && beast::iequals(h[http::field::expect], "100-continue")) {
        auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
        self->stream_.expires_after(self->s_.limits.write_timeout);
        asio::async_write(self->stream_, asio::buffer(*cont), [self, cont](beast::error_code ec2, size_t) {
          if (ec2) return self->close();
          self->read_body();
        });
        return;
      }
      self->read_body();
    });
  }

  void read_body() {
    stream_.expires_after(s_.limits.body_timeout);
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->failed(ec);
      self->handle();
    });
  }

  void failed(const beast::error_code& ec) {
    // the client left, or took too long (the stream closed the socket): nothing to answer
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted || ec.category() == asio::error::get_system_category() ||
        ec.category() == asio::error::get_misc_category())
      return close();
    respond(refusal(ec, s_.limits), false);
  }

  // ---- answering it ----
  void handle() {
    HttpRequest req = to_request(*parser_);
    ++served_;
    keep_alive_ = parser_->keep_alive() && served_ < s_.limits.max_requests_per_connection && !s_.draining;
    gzip_ok_ = accepts_gzip(req.header("accept-encoding"));
    bool work = false;
    int status = 0;
    const HttpServer::Handler* h = find_route(s_.routes, req.method, req.path, &work, &status);
    route_ = h ? req.path : "";
    if (!h) {
      return respond(status == 405 ? error_response(405, "method " + req.method + " not allowed on " + req.path)
                                   : error_response(404, "no route " + req.method + " " + req.path),
                     keep_alive_);
    }
    if (!work) {
      HttpResponse res;
      try {
        res = (*h)(req);
      } catch (const std::exception& e) {
        res = error_response(500, plain_message(e.what()));
      } catch (...) {  // (nothing a handler throws may end the server)
        res = error_response(500, "internal error");
      }
      return respond(std::move(res), keep_alive_);
    }
    worker_ = true;
    if (s_.observer.begin) s_.observer.begin();
    // the work guard keeps the io_context running while the request is away on a worker
    s_.pool->post([self = shared_from_this(), h, req = std::move(req), guard = asio::make_work_guard(s_.ioc)]() mutable {
      HttpResponse res;
      try {
        res = (*h)(req);
      } catch (const std::exception& e) {
        res = error_response(500, plain_message(e.what()));
      } catch (...) {  // (nothing a handler throws may end the server)
        res = error_response(500, "internal error");
      }
      if (!res.stream) {
        asio::post(self->stream_.get_executor(),
                   [self, res = std::move(res)]() mutable { self->respond(std::move(res), self->keep_alive_); });
        return;
      }
      // streamed: the head now, each chunk as it is made, the end; timed to the last chunk
      self->status_ = res.status;
      auto extra = res.headers;
      extra.emplace_back("Transfer-Encoding", "chunked");
      self->queue(head(res.status, res.content_type, self->keep_alive_, extra) + "\r\n", false);
      try {
        res.stream(*self);
      } catch (...) {  // the producer's own errors are its events to send; nothing it throws ends the server
      }
      self->queue("0\r\n\r\n", true);
    });
  }

  void respond(HttpResponse res, bool keep_alive) {
    keep_alive_ = keep_alive;
    status_ = res.status;
    auto extra = res.headers;
    if (gzip_ok_ && res.body.size() >= s_.limits.gzip_min_bytes) {
      std::string z = gzip(res.body);
      if (!z.empty()) {
        res.body = std::move(z);
        extra.emplace_back("Content-Encoding", "gzip");
      }
    }
    if (res.body.size() >= s_.limits.gzip_min_bytes) extra.emplace_back("Vary", "Accept-Encoding");
    extra.emplace_back("Content-Length", std::to_string(res.body.size()));
    queue(head(res.status, res.content_type, keep_alive, extra) + "\r\n" + res.body, true);
  }

  // ---- writing: one queue of byte strings per connection, written in order on the strand ----
  bool broken() {
    std::lock_guard lock(mu_);
    return broken_;
  }
  bool queue(std::string bytes, bool last) {
    {
      std::unique_lock lock(mu_);
      if (!last && !cv_.wait_for(lock, s_.limits.write_timeout, [&] { return broken_ || unsent_ < 8; })) broken_ = true;
      if (broken_ && !last) return false;
      ++unsent_;
    }
    asio::dispatch(stream_.get_executor(), [self = shared_from_this(), bytes = std::move(bytes), last]() mutable {
      self->out_.push_back(std::move(bytes));
      if (last) self->finished_ = true;
      self->pump();
    });
    return true;
  }
  void pump() {
    if (writing_) return;
    if (out_.empty()) {
      if (finished_) done();
      return;
    }
    // counted as the answer's last bytes go out, before the client can read them (a client that
    // reads /metrics right after its answer sees it counted)
    if (finished_ && out_.size() == 1) record();
    writing_ = true;
    stream_.expires_after(s_.limits.write_timeout);
    asio::async_write(stream_, asio::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      self->out_.pop_front();
      {
        std::lock_guard lock(self->mu_);
        --self->unsent_;
        if (ec) self->broken_ = true;
      }
      self->cv_.notify_all();
      if (ec) {
        self->keep_alive_ = false;
        if (!self->finished_) return;  // a producer still runs: it sees broken_ and ends with `last`
      }
      self->pump();
    });
  }
  // the answer's last byte is written (or the client is gone)
  void record() {
    if (recorded_) return;
    recorded_ = true;
    if (s_.observer.end)
      s_.observer.end(route_, status_, std::chrono::duration<double>(Clock::now() - t0_).count(), worker_);
  }
  void done() {
    record();
    finished_ = recorded_ = worker_ = false;
    route_.clear();
    if (keep_alive_ && !broken()) return next();
    linger();
  }
  // Closing with unread bytes from the client (a refused body) would send a reset that can destroy
  // the answer before the client reads it: so, as nginx's lingering_close, shut our side, then read
  // and drop what still comes for at most 2 s and 8 MiB.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    lingering_ = true;
    if (s_.draining) return close();
    stream_.expires_after(std::chrono::seconds(2));
    auto sink = std::make_shared<std::array<char, 65536>>();
    drop(sink, 0);
  }
  void drop(std::shared_ptr<std::array<char, 65536>> sink, size_t dropped) {
    if (dropped > (8u << 20)) return close();
    stream_.async_read_some(asio::buffer(*sink), [self = shared_from_this(), sink, dropped](beast::error_code ec, size_t n) {
      if (ec) return self->close();
      self->drop(sink, dropped + n);
    });
  }
  void close() {
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  HttpServer::Impl& s_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  Clock::time_point t0_ = Clock::now();
  int64_t served_ = 0;
  bool idle_ = false, lingering_ = false, recorded_ = false, keep_alive_ = true, gzip_ok_ = false, worker_ = false, writing_ = false, finished_ = false;
  int status_ = 0;
  std::string route_;
  std::deque<std::string> out_;
  std::mutex mu_;  // unsent_ and broken_: shared with a streaming worker
  std::condition_variable cv_;
  int unsent_ = 0;
  bool broken_ = false;
};

void HttpServer::Impl::start(tcp::socket socket) {
  // past the limit a connection is answered 503 and closed; far past it (a flood), just closed
  const int64_t open = connections.load();
  if (open >= 2 * limits.max_connections) return;
  std::make_shared<Session>(*this, std::move(socket))->start(open >= limits.max_connections);
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) return start(std::move(socket)), accept();
    // out of file descriptors (or another passing error): accepting again at once would spin; the
    // connections waiting stay in the backlog until one closes
    auto timer = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(50));
    timer->async_wait([this, timer](beast::error_code) {
      if (acceptor.is_open()) accept();
    });
  });
}

HttpServer::HttpServer(HttpLimits limits, HttpObserver observer) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->observer = std::move(observer);
}
HttpServer::~HttpServer() = default;

void HttpServer::route(const std::string& method, const std::string& path, Handler h, bool work) {
  impl_->routes.push_back({method, path, std::move(h), work});
}

const HttpServer::Handler* HttpServer::find(const std::string& method, const std::string& path, bool* work,
                                            int* status) const {
  return find_route(impl_->routes, method, path, work, status);
}

int HttpServer::bind(const std::string& host, int port) {
  // a connection is a file descriptor: allow as many as the hard limit lets (often 1024 soft)
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return -1;
  const tcp::endpoint at(address, static_cast<unsigned short>(port));
  impl_->acceptor.open(at.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(at, ec);
  if (!ec) impl_->acceptor.listen(SOMAXCONN, ec);  // the kernel's most, not httplib's 5
  if (ec) return -1;
  return impl_->acceptor.local_endpoint().port();
}

void HttpServer::run() {
  impl_->pool = std::make_unique<WorkerPool>(impl_->limits.workers);
  impl_->accept();
  std::vector<std::thread> io;
  for (int i = 1; i < impl_->limits.io_threads; ++i) io.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : io) t.join();
  impl_->pool.reset();
}

void HttpServer::drain() {
  asio::post(impl_->ioc, [this] {
    Impl& s = *impl_;
    if (s.draining.exchange(true)) return;
    // the connections the kernel has accepted already are served too, then no more
    beast::error_code ec;
    s.acceptor.non_blocking(true, ec);
    for (;;) {
      tcp::socket socket(asio::make_strand(s.ioc));
      s.acceptor.accept(socket, ec);
      if (ec) break;
      s.start(std::move(socket));
    }
    s.acceptor.close(ec);
    // The sessions are taken out under the lock and told outside it: the last reference to one may
    // be ours (its final handler ran meanwhile on another thread), and its destructor takes the lock
    // to leave the map — under the lock that was a deadlock (qkv serve up forever after SIGTERM).
    std::vector<std::shared_ptr<Session>> open;
    {
      std::lock_guard lock(s.sessions_mu);
      for (auto& [p, weak] : s.sessions)
        if (auto session = weak.lock()) open.push_back(std::move(session));
    }
    for (auto& session : open) asio::post(session->executor(), [session] { session->drain(); });
  });
}

}  // namespace qkv::cli
