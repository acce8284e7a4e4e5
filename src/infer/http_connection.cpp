// One connection of HttpServer (implementation): the connection's steps and the exchange its handler answers through.
#include "infer/http_connection.h"

#include <algorithm>
#include <array>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>

namespace ember {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string seconds_text(double s) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

// What the access log line of one request reports.
struct LogLine {
  Clock::time_point start;
  std::string method = "-", path = "-";
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl* server)
      : stream_(std::move(socket)), server_(server), read_deadline_(stream_.get_executor()) {
    beast::error_code ec;
    const auto endpoint = stream_.socket().remote_endpoint(ec);
    remote_ = ec ? "-" : endpoint.address().to_string();
    ++server_->connections;
  }
  ~Connection() { --server_->connections; }

  void start(bool over_limit) {
    net::dispatch(stream_.get_executor(), [self = shared_from_this(), over_limit] {
      if (over_limit)
        self->refuse_at_once();
      else
        self->read_header();
    });
  }

  // Called by exchange `id`, on this connection's strand; calls of an exchange already answered are ignored.
  void reply(uint64_t id, HttpResponse response);
  void begin_stream(uint64_t id, HttpResponse head);
  void stream_write(uint64_t id, std::string data);
  void end_stream(uint64_t id);
  void abort(uint64_t id) {
    if (id == exchange_id_ && in_exchange_) close();
  }
  void note_tokens(uint64_t id, int64_t prompt, int64_t completion) {
    if (id != exchange_id_ || !in_exchange_) return;
    log_.prompt_tokens = prompt;
    log_.completion_tokens = completion;
  }
  bool broken() const { return broken_; }
  uint64_t exchange_id() const { return exchange_id_; }
  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  void refuse_at_once();
  void read_header();
  void on_header(beast::error_code ec);
  void on_body(beast::error_code ec);
  void dispatch_request();
  void refuse(int status, const std::string& message);
  void write_response(HttpResponse response, bool close);
  void begin_exchange();
  void finish(bool ok);
  void pump();
  void close();
  void linger();
  // A read's deadline cancels the read but leaves the socket open, so the client can still be told 408 (a
  // tcp_stream's own expiry, used for writes, closes it).
  void arm_read_deadline(double s);
  bool read_timed_out();

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;  // outlives every connection (its loop owns them)
  net::steady_timer read_deadline_;
  bool read_timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string remote_;
  HttpRequest head_;  // the request being read, without its body
  bool first_ = true;
  bool keep_alive_ = false;
  bool in_exchange_ = false;  // a request was handed on and is not yet answered to its end
  uint64_t exchange_id_ = 0;  // counts the requests of this connection
  bool closed_ = false;
  std::array<char, 4096> discard_;
  LogLine log_;
  int status_ = 0;

  // The response being written: a whole one, or a stream's head and queued chunks.
  std::shared_ptr<http::response<http::string_body>> whole_;
  std::shared_ptr<http::response<http::empty_body>> stream_head_;
  std::shared_ptr<http::response_serializer<http::empty_body>> stream_serializer_;
  std::deque<std::string> queued_;
  std::string writing_buffer_;
  bool head_written_ = false, writing_ = false, stream_ended_ = false;
  std::atomic<bool> broken_{false};
};

class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Connection> c, HttpResponse unanswered)
      : connection_(std::move(c)), id_(connection_->exchange_id()), unanswered_(std::move(unanswered)) {}
  ~Exchange() override {
    if (!answered_)
      net::post(connection_->executor(),
                [c = connection_, id = id_, r = std::move(unanswered_)]() mutable { c->reply(id, std::move(r)); });
    else if (streaming_ && !ended_)  // a stream its handler left unfinished: cut, so the client sees it end
      net::post(connection_->executor(), [c = connection_, id = id_] { c->abort(id); });
  }
  void reply(HttpResponse response) override {
    answered_ = true;
    net::post(connection_->executor(),
              [c = connection_, id = id_, r = std::move(response)]() mutable { c->reply(id, std::move(r)); });
  }
  void begin_stream(HttpResponse head) override {
    answered_ = true;
    streaming_ = true;
    net::post(connection_->executor(),
              [c = connection_, id = id_, h = std::move(head)]() mutable { c->begin_stream(id, std::move(h)); });
  }
  bool write(std::string data) override {
    if (connection_->broken()) return false;
    net::post(connection_->executor(),
              [c = connection_, id = id_, d = std::move(data)]() mutable { c->stream_write(id, std::move(d)); });
    return true;
  }
  bool write_from(std::function<std::string()> make) override {
    if (connection_->broken()) return false;
    net::post(connection_->executor(), [c = connection_, id = id_, m = std::move(make)] { c->stream_write(id, m()); });
    return true;
  }
  void end_stream() override {
    ended_ = true;
    net::post(connection_->executor(), [c = connection_, id = id_] { c->end_stream(id); });
  }
  void note_tokens(int64_t prompt_tokens, int64_t completion_tokens) override {
    net::post(connection_->executor(), [c = connection_, id = id_, prompt_tokens, completion_tokens] {
      c->note_tokens(id, prompt_tokens, completion_tokens);
    });
  }

 private:
  std::shared_ptr<Connection> connection_;
  uint64_t id_;
  HttpResponse unanswered_;  // sent if the handler drops the exchange without an answer
  std::atomic<bool> answered_{false}, streaming_{false}, ended_{false};
};

// A connection past --max-connections: one 503 with Connection: close, whatever it sends.
void Connection::refuse_at_once() {
  keep_alive_ = false;
  log_.start = Clock::now();
  begin_exchange();
  write_response(server_->handlers.error(503, "the server has too many open connections; retry later"), true);
}

void Connection::read_header() {
  parser_.emplace();
  parser_->header_limit(uint32_t(server_->limits.max_header_bytes));
  // The declared length is checked after check_head (a refusal without the key comes first), the bytes read by the
  // limit set then.
  parser_->body_limit(std::numeric_limits<uint64_t>::max());
  // The first request of a connection, or one already partly buffered, has the read timeout; an idle kept-alive
  // connection waits only keep_alive_s for its next request.
  const bool idle = !first_ && buffer_.size() == 0;
  arm_read_deadline(idle ? server_->limits.keep_alive_s : server_->limits.read_timeout_s);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(beast::error_code ec) {
  if (read_timed_out()) ec = beast::error::timeout;
  log_ = LogLine{Clock::now()};
  if (parser_->got_some()) {
    // Method and target are known once the request line is parsed, even if a later field fails.
    const auto& m = parser_->get();
    if (!m.method_string().empty()) log_.method = std::string(m.method_string());
    if (!m.target().empty()) log_.path = std::string(m.target().substr(0, m.target().find('?')));
  } else if (buffer_.size() > 0) {
    // An unfinished header is not parsed at all: the log line takes its first two words as they are.
    const std::string_view text(static_cast<const char*>(buffer_.data().data()), std::min<size_t>(buffer_.size(), 256));
    const size_t a = text.find(' '), b = a == text.npos ? a : text.find_first_of(" ?\r\n", a + 1);
    if (b != text.npos) {
      log_.method = std::string(text.substr(0, a));
      log_.path = std::string(text.substr(a + 1, b - a - 1));
    }
  }
  if (ec == http::error::end_of_stream || ec == net::error::connection_reset || ec == net::error::eof)
    return close();  // the client closed between requests
  if (ec == beast::error::timeout) {
    if (buffer_.size() == 0 && !parser_->got_some()) return close();  // idle
    return refuse(408, "the request header did not arrive within " + seconds_text(server_->limits.read_timeout_s));
  }
  if (ec == http::error::header_limit)
    return refuse(431,
                  "the request header is larger than " + std::to_string(server_->limits.max_header_bytes) + " bytes");
  if (ec) return refuse(400, "malformed request: " + ec.message());

  first_ = false;
  const auto& m = parser_->get();
  head_ = HttpRequest{log_.method, log_.path, remote_, {}, {}};
  for (const auto& f : m) head_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  keep_alive_ = m.keep_alive();
  try {
    if (auto refusal = server_->handlers.check_head(head_)) {
      begin_exchange();
      return write_response(std::move(*refusal), true);
    }
  } catch (const std::exception& e) {
    return refuse(500, std::string("internal error: ") + e.what());
  }
  const auto length = parser_->content_length();
  if (length && *length > server_->limits.max_body_bytes)
    return refuse(413, "the request body of " + std::to_string(*length) + " bytes is larger than the limit of " +
                           std::to_string(server_->limits.max_body_bytes) + " bytes");
  parser_->body_limit(server_->limits.max_body_bytes);
  if (parser_->is_done()) return dispatch_request();
  auto read_body = [self = shared_from_this()] {
    self->arm_read_deadline(self->server_->limits.read_timeout_s);
    http::async_read(self->stream_, self->buffer_, *self->parser_,
                     [self](beast::error_code e, size_t) { self->on_body(e); });
  };
  if (beast::iequals(m[http::field::expect], "100-continue")) {
    // The client waits for this before it sends the body (curl does for bodies over 1 KiB).
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(seconds(server_->limits.write_timeout_s));
    net::async_write(stream_, net::buffer(kContinue),
                     [self = shared_from_this(), read_body](beast::error_code e, size_t) {
                       if (e) return self->close();
                       read_body();
                     });
    return;
  }
  read_body();
}

void Connection::on_body(beast::error_code ec) {
  if (read_timed_out()) ec = beast::error::timeout;
  if (ec == beast::error::timeout)
    return refuse(408, "the request body did not arrive within " + seconds_text(server_->limits.read_timeout_s));
  if (ec == http::error::body_limit)
    return refuse(413, "the request body is larger than the limit of " +
                           std::to_string(server_->limits.max_body_bytes) + " bytes");
  if (ec == http::error::end_of_stream || ec == net::error::connection_reset || ec == net::error::eof)
    return close();  // the client left before its body was complete
  if (ec) return refuse(400, "malformed request body: " + ec.message());
  dispatch_request();
}

void Connection::dispatch_request() {
  stream_.expires_never();  // a completion may take minutes; the writes of its answer have their own deadlines
  auto message = parser_->release();
  keep_alive_ = message.keep_alive();
  HttpRequest request = std::move(head_);  // the header check_head saw; the body is all that is new
  request.body = std::move(message.body());
  begin_exchange();
  auto exchange = std::make_shared<Exchange>(shared_from_this(),
                                             server_->handlers.error(500, "the request was dropped unanswered"));
  try {
    server_->handlers.handle(request, exchange);
  } catch (const std::exception& e) {
    exchange->reply(server_->handlers.error(500, std::string("internal error: ") + e.what()));
  }
}

// A request the HTTP layer answers itself; the connection closes after it (its rest cannot be trusted).
void Connection::refuse(int status, const std::string& message) {
  begin_exchange();
  write_response(server_->handlers.error(status, message), true);
}

void Connection::write_response(HttpResponse r, bool close) {
  if (close || server_->closing) keep_alive_ = false;
  status_ = r.status;
  auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
  res->set(http::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) res->insert(k, v);
  res->body() = std::move(r.body);
  res->keep_alive(keep_alive_);
  res->prepare_payload();
  whole_ = res;
  stream_.expires_after(seconds(server_->limits.write_timeout_s));
  http::async_write(stream_, *res, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->whole_.reset();
    self->finish(!ec);
  });
}

void Connection::begin_exchange() {
  in_exchange_ = true;
  ++exchange_id_;
  ++server_->unanswered;
}

void Connection::reply(uint64_t id, HttpResponse response) {
  if (id != exchange_id_ || !in_exchange_ || whole_ || stream_head_) return;  // answered already
  write_response(std::move(response), false);
}

void Connection::begin_stream(uint64_t id, HttpResponse head) {
  if (id != exchange_id_ || !in_exchange_ || whole_ || stream_head_) return;
  if (server_->closing) keep_alive_ = false;
  status_ = head.status;
  stream_head_ = std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(head.status), 11);
  stream_head_->set(http::field::content_type, head.content_type);
  for (auto& [k, v] : head.headers) stream_head_->insert(k, v);
  stream_head_->keep_alive(keep_alive_);
  stream_head_->chunked(true);
  stream_serializer_ = std::make_shared<http::response_serializer<http::empty_body>>(*stream_head_);
  pump();
}

void Connection::stream_write(uint64_t id, std::string data) {
  // Text may come before begin_stream(): it waits in the queue behind the head.
  if (id != exchange_id_ || !in_exchange_ || whole_ || broken_ || stream_ended_ || data.empty()) return;
  queued_.push_back(std::move(data));
  pump();
}

void Connection::end_stream(uint64_t id) {
  if (id != exchange_id_ || !in_exchange_ || whole_ || stream_ended_) return;
  stream_ended_ = true;
  pump();
}

// Writes what a stream has queued: the head first, then everything queued as one chunk, then the last chunk.
void Connection::pump() {
  if (writing_ || !stream_head_) return;
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
    self->writing_ = false;
    if (ec) {
      self->broken_ = true;
      self->queued_.clear();
      self->stream_head_.reset();
      self->stream_serializer_.reset();
      return self->finish(false);
    }
    self->pump();
  };
  stream_.expires_after(seconds(server_->limits.write_timeout_s));
  if (!head_written_) {
    writing_ = head_written_ = true;
    return http::async_write_header(stream_, *stream_serializer_, done);
  }
  if (!queued_.empty()) {
    writing_buffer_.clear();
    for (const std::string& s : queued_) writing_buffer_ += s;
    queued_.clear();
    writing_ = true;
    return net::async_write(stream_, http::make_chunk(net::buffer(writing_buffer_)), done);
  }
  if (stream_ended_) {
    writing_ = true;
    stream_ended_ = false;  // written once
    return net::async_write(stream_, http::make_chunk_last(),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->writing_ = false;
                              self->stream_head_.reset();
                              self->stream_serializer_.reset();
                              self->head_written_ = false;
                              self->finish(!ec);
                            });
  }
  stream_.expires_never();  // waiting for the handler, not the client
}

// The answer to a request is written (ok) or cannot be: log it, then read the next request or close.
void Connection::finish(bool ok) {
  if (!in_exchange_) return;
  in_exchange_ = false;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - log_.start).count();
  fprintf(stderr, "serve: %s %s %s %d %.1f ms prompt_tokens=%lld completion_tokens=%lld\n", remote_.c_str(),
          log_.method.c_str(), log_.path.c_str(), status_, ms, (long long)log_.prompt_tokens,
          (long long)log_.completion_tokens);
  server_->answered();
  if (!ok || !keep_alive_ || server_->stopping) return close();
  read_header();
}

void Connection::arm_read_deadline(double s) {
  stream_.expires_never();
  read_timed_out_ = false;
  read_deadline_.expires_after(seconds(s));
  read_deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;  // cancelled: the read finished first
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
}

// Whether the read that just completed was ended by its deadline; either way the deadline is over.
bool Connection::read_timed_out() {
  read_deadline_.cancel();
  return read_timed_out_;
}

// Ends the sending side, then reads and discards until the client closes too (at most 2 s): closing with unread
// bytes (the body of a refused request) would reset the connection and could destroy the response before the client
// read it.
void Connection::close() {
  if (closed_) return;
  closed_ = true;
  if (in_exchange_) finish(false);
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(2));
  linger();
}

void Connection::linger() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->stream_.close();
    self->linger();
  });
}

}  // namespace

void serve_connection(tcp::socket socket, HttpServer::Impl* server, bool over_limit) {
  std::make_shared<Connection>(std::move(socket), server)->start(over_limit);
}

}  // namespace ember
