// The HTTP/1.1 server (implementation): the listener and the event loop; each accepted connection is served by
// http_connection.cpp.
#include "infer/http_server.h"

#include <strings.h>

#include <boost/beast/core.hpp>
#include <chrono>
#include <memory>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "infer/http_connection.h"

namespace ember {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

const std::string* find_header(const HttpRequest& r, std::string_view name) {
  for (const auto& [k, v] : r.headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), name.size()) == 0) return &v;
  return nullptr;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  const std::string* v = find_header(*this, name);
  return v ? *v : std::string();
}

bool HttpRequest::has_header(std::string_view name) const { return find_header(*this, name) != nullptr; }

void HttpServer::Impl::accept_next() {
  acceptor.async_accept(net::make_strand(io), [self = this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors or the like: say so, wait a little, go on accepting.
      log_warn("serve: accept failed: %s", ec.message().c_str());
      auto timer = std::make_shared<net::steady_timer>(self->io, std::chrono::milliseconds(100));
      timer->async_wait([self, timer](beast::error_code) { self->accept_next(); });
      return;
    }
    const bool over_limit = self->connections.load() >= self->limits.max_connections;
    serve_connection(std::move(socket), self, over_limit);
    self->accept_next();
  });
}

HttpServer::HttpServer(HttpLimits limits, HttpHandlers handlers)
    : impl_(std::make_unique<Impl>(limits, std::move(handlers))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  beast::error_code ec;
  tcp::resolver resolver(s.io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    throw_error("ember serve: cannot listen on " + host + ": " + ec.message(),
                "check --host: an address of this machine (127.0.0.1, 0.0.0.0, ::1)");
  const tcp::endpoint endpoint = *endpoints.begin();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(s.limits.backlog, ec);
  if (ec)
    throw_error("ember serve: cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message(),
                "the port may be in use: give another with --port (0: any free port), and check --host");
  return s.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  Impl* self = impl_.get();
  self->accept_next();
  auto work = net::make_work_guard(self->io);  // the loop runs until stop_when_answered(), even with nothing to do
  std::vector<std::thread> threads;
  for (int i = 1; i < self->limits.threads; ++i) threads.emplace_back([self] { self->io.run(); });
  self->io.run();
  for (std::thread& t : threads) t.join();
}

void HttpServer::set_closing() { impl_->closing = true; }

void HttpServer::stop_when_answered() {
  Impl* self = impl_.get();
  net::post(self->acceptor.get_executor(), [self] {
    beast::error_code ec;
    self->acceptor.close(ec);
    self->stopping = true;
    if (self->unanswered.load() == 0) self->io.stop();
  });
}

}  // namespace ember
