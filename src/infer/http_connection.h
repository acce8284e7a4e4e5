// One connection of HttpServer (http_server.h), and the state every connection shares with the server. Each
// connection is a chain of asynchronous steps on its own strand: read a header (deadline), ask check_head, read the
// body (deadline), hand the request to the handler, write its answer (a deadline per write), then read the next
// request from what is already buffered (pipelining) or close. Nothing waits on a thread, so idle or slow
// connections hold only their sockets.
#pragma once

#include <atomic>
#include <utility>  // first: Boost.Asio 1.81's awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>

#include "infer/http_server.h"

namespace ember {

struct HttpServer::Impl {
  Impl(HttpLimits l, HttpHandlers h)
      : limits(l), handlers(std::move(h)), io(limits.threads), acceptor(boost::asio::make_strand(io)) {}

  // Declared before io: connections still queued in the loop when it is destroyed count themselves out here.
  HttpLimits limits;
  HttpHandlers handlers;
  std::atomic<int> connections{0};
  std::atomic<int> unanswered{0};  // requests read and not yet answered to their end
  std::atomic<bool> closing{false};
  std::atomic<bool> stopping{false};
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor;

  // Accepts the next connection, and so on until the acceptor closes.
  void accept_next();
  // Called when a request has been answered (or its connection lost): ends the loop once stopping and none is left.
  void answered() {
    if (unanswered.fetch_sub(1) == 1 && stopping) io.stop();
  }
};

// Serves the accepted connection `socket` until it closes; over_limit: past HttpLimits::max_connections, so it gets
// one 503 and is closed.
void serve_connection(boost::asio::ip::tcp::socket socket, HttpServer::Impl* server, bool over_limit);

}  // namespace ember
