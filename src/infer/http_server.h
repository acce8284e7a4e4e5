// The HTTP/1.1 side of `ember serve`, on Boost.Beast: an event loop on a few threads holds any number of connections
// (an idle one costs a socket, not a thread), bounds how long a request's header and body may take to arrive and a
// response to be taken, keeps pipelined requests in order, answers a half-closed connection, and hands each request
// to a handler that may answer it later from any thread: whole, or as a chunked stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember {

struct HttpLimits {
  size_t max_body_bytes = 1 << 20;     // a larger body is refused with 413 before it is read
  size_t max_header_bytes = 16 << 10;  // a larger header: 431
  double read_timeout_s = 30;          // a request's header, then its body, each within this (else 408)
  double write_timeout_s = 30;         // each write of a response (a client that reads nothing is dropped)
  double keep_alive_s = 5;             // an idle connection between requests closes after this
  int max_connections = 1024;          // beyond it a new connection gets 503 and is closed
  int threads = 4;                     // threads running the event loop
  int backlog = 1024;                  // connections the kernel holds until accepted (capped by net.core.somaxconn)
};

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string path;    // the target without its query
  std::string remote;  // the client's address
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // empty until the whole body has arrived (never in HttpHandlers::check_head)
  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// The answer to one request. Every method may be called from any thread; the writes happen on the connection's
// own strand, in order. Exactly one of reply() or begin_stream() ... end_stream() is used; an exchange dropped
// without either answers 500.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void reply(HttpResponse response) = 0;
  // Sends the head of a chunked response (its body is ignored); write() then adds to the body, end_stream() ends it.
  virtual void begin_stream(HttpResponse head) = 0;
  // Queues bytes of the streamed body. False once the client has gone (a write failed or timed out): stop then.
  virtual bool write(std::string data) = 0;
  // As write(), with the bytes made by `make` on the connection's thread, in order with the other writes: formatting
  // stays off the caller's thread (the engine's, which would otherwise format every token of every stream).
  virtual bool write_from(std::function<std::string()> make) = 0;
  virtual void end_stream() = 0;
  // Token counts the access log line reports for this request.
  virtual void note_tokens(int64_t prompt_tokens, int64_t completion_tokens) = 0;
};

struct HttpHandlers {
  // Called with the header only (body empty), before a byte of the body is read: a response refuses the request and
  // the connection closes after it, its body unread. nullopt: read the body, then call `handle`.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> check_head;
  std::function<void(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange)> handle;
  // The response to a request the HTTP layer refuses itself (malformed: 400, too slow: 408, body too large: 413,
  // header too large: 431, too many connections or a handler's exception: 500/503), from its status and a message.
  std::function<HttpResponse(int status, const std::string& message)> error;
};

class HttpServer {
 public:
  HttpServer(HttpLimits limits, HttpHandlers handlers);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port (port 0: any free port) and returns the port. Throws ember::Error when it cannot.
  int bind(const std::string& host, int port);
  // Runs the event loop on HttpLimits::threads threads (this one among them) until stop_when_answered() is done.
  void run();
  // Thread-safe: from now on each response closes its connection once written (a client reconnects and is told
  // the server is going away).
  void set_closing();
  // Thread-safe: stops accepting, waits until every request received has been answered to its end, then ends run().
  void stop_when_answered();

  struct Impl;  // the event loop, the listener and the counters (http_server.cpp); its connections point to it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
