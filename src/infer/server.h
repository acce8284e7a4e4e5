// The API side of `ember serve`: the routes of the OpenAI completions API (and /health, /openapi.json) over one
// Engine, which a thread of its own runs while the HTTP layer (http_server.h) submits requests and writes their
// events as they come; server-sent events for streams, and a graceful shutdown that finishes what is in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infer/engine.h"
#include "infer/http_server.h"
#include "infer/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace ember {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() says which)
  CompletionLimits limits;
  double timeout_s = 600;  // each request's deadline, from its arrival
  std::string api_key;     // non-empty: every route but /health needs "Authorization: Bearer <api_key>"
  HttpLimits http;         // connections: body size, read and idle times, how many, threads
};

class Server {
 public:
  // `tokenizer` encodes prompts; `empty_prompt` stands for an empty one (the start of a document).
  Server(Engine& engine, const Tokenizer& tokenizer, std::vector<int32_t> empty_prompt, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws ember::Error when the address cannot be bound.
  int bind();
  // Runs the engine's thread and serves until shutdown() (after bind()). Then every request already accepted has been
  // answered to its end. Throws when the engine failed.
  void serve();
  // Thread-safe and idempotent: new completions and /health are answered 503 from now on; serve() returns once the
  // engine has drained the requests in flight and their responses are written.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
