// The HTTP server of `ember serve` (implementation). Each completion request becomes one GenerationRequest per
// prompt and choice; their on_event callbacks, on the engine's thread, only append to the request's queue under its
// mutex and wake the HTTP worker waiting on it, so a slow client never slows the engine. A stream's worker writes
// what the queue holds as server-sent events; a failed write marks the request cancelled, which the next on_event
// returns to the engine.
#include "infer/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/log.h"

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

// Connections that may wait to be accepted (the kernel caps it at net.core.somaxconn, 4096 on Debian 12).
constexpr int kListenBacklog = 1024;

// What the access log line of the request on this worker thread reports; the handlers fill it in.
struct AccessLog {
  Clock::time_point start;
  bool started = false;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};
thread_local AccessLog t_log;

// Whether `given` equals `key`, in a time that depends on the key's length only, so the comparison tells a caller
// nothing about how much of a guess was right.
bool same_secret(std::string_view given, std::string_view key) {
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= unsigned((unsigned char)key[i] ^ (unsigned char)(i < given.size() ? given[i] : 0));
  return diff == 0;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

// One event of one choice, as the engine delivered it.
struct Piece {
  int index = 0;
  std::string text;
  bool done = false;
  FinishReason reason = FinishReason::stop;
  int prompt_tokens = 0, completion_tokens = 0;
};

// The state a completion request shares with its choices' on_event callbacks.
struct Pending {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Piece> pieces;  // guarded by mutex
  std::atomic<bool> cancelled{false};

  // Waits for pieces and takes them all.
  std::deque<Piece> take() {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait(lock, [&] { return !pieces.empty(); });
    std::deque<Piece> out;
    out.swap(pieces);
    return out;
  }
};

const char* api_finish_reason(FinishReason reason) {
  // The API has no name for a deadline: "timeout" says what happened (docs/serve.md).
  return reason == FinishReason::timeout ? "timeout" : finish_reason_name(reason);
}

std::string random_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[32];
  snprintf(buf, sizeof(buf), "cmpl-%016llx%08llx", (unsigned long long)rng(), (unsigned long long)(rng() >> 32));
  return buf;
}

// What every response to one completion request names.
struct Reply {
  std::string id;
  int64_t created = 0;
  std::string model;
  int choices = 0;
  int64_t prompt_tokens = 0;
};

// One generation per prompt and choice; each hands its events to `pending`.
std::vector<GenerationRequest> generation_requests(const CompletionRequest& r, const std::shared_ptr<Pending>& pending,
                                                   Clock::time_point deadline) {
  const int choices = int(r.prompts.size()) * r.n;
  const uint64_t seed = r.seed ? *r.seed : std::random_device{}() * 0x100000001ull;
  std::vector<GenerationRequest> requests;
  for (int c = 0; c < choices; ++c) {
    GenerationRequest g;
    g.prompt = r.prompts[size_t(c / r.n)];
    g.max_tokens = r.max_tokens;
    g.sampling = SamplingParams{r.temperature, r.top_k, r.top_p, seed + uint64_t(c % r.n)};
    g.stop = r.stop;
    g.deadline = deadline;
    g.cancelled = std::shared_ptr<const std::atomic<bool>>(pending, &pending->cancelled);
    g.on_event = [pending, c](const GenerationEvent& e) {
      {
        std::lock_guard<std::mutex> lock(pending->mutex);
        pending->pieces.push_back(Piece{c, e.text, e.done, e.reason, e.prompt_tokens, e.completion_tokens});
      }
      pending->ready.notify_one();
      return !pending->cancelled.load();
    };
    requests.push_back(std::move(g));
  }
  return requests;
}

// The whole completion in one JSON body, once every choice is done.
void answer_whole(httplib::Response& res, Pending& pending, const Reply& reply) {
  std::vector<CompletionChoice> out(static_cast<size_t>(reply.choices));
  CompletionUsage usage{reply.prompt_tokens, 0};
  bool failed = false;
  for (int done = 0; done < reply.choices;) {
    for (Piece& p : pending.take()) {
      out[size_t(p.index)].text += p.text;
      if (!p.done) continue;
      ++done;
      usage.completion_tokens += p.completion_tokens;
      if (p.reason == FinishReason::shutdown || p.reason == FinishReason::cancelled) failed = true;
      out[size_t(p.index)].finish_reason = api_finish_reason(p.reason);
    }
  }
  t_log.completion_tokens = usage.completion_tokens;
  if (failed)
    return send_error(res, ApiError(500, "server_error", "the engine stopped before the completion finished"));
  res.set_content(completion_json(reply.id, reply.created, reply.model, out, usage), "application/json");
}

// Server-sent events as the choices produce text; `hold` keeps the request counted as active until the stream ends.
void answer_stream(httplib::Response& res, std::shared_ptr<Pending> pending, std::shared_ptr<void> hold,
                   const Reply& reply, bool include_usage) {
  struct StreamState {
    int done = 0;
    CompletionUsage usage;
    bool finished = false;
  };
  auto state = std::make_shared<StreamState>();
  state->usage.prompt_tokens = reply.prompt_tokens;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [pending, state, hold, reply, include_usage](size_t, httplib::DataSink& sink) {
        const std::string &id = reply.id, &model = reply.model;
        const int64_t created = reply.created;
        auto send = [&](const std::string& data) {
          const std::string event = "data: " + data + "\n\n";
          return sink.write(event.data(), event.size());
        };
        bool ok = true;
        for (Piece& p : pending->take()) {
          if (!ok) break;
          if (p.done) {
            ++state->done;
            state->usage.completion_tokens += p.completion_tokens;
            t_log.completion_tokens = state->usage.completion_tokens;
            if (p.reason == FinishReason::shutdown)
              ok = send(error_json(ApiError(500, "server_error", "the engine stopped before the completion finished")));
            else
              ok = send(completion_chunk_json(id, created, model, p.index, p.text, api_finish_reason(p.reason)));
          } else if (!p.text.empty()) {
            ok = send(completion_chunk_json(id, created, model, p.index, p.text, ""));
          }
        }
        if (!ok) {
          pending->cancelled = true;  // the client has gone: the engine frees its slots at its next step
          return false;
        }
        if (state->done == reply.choices) {
          if (include_usage) ok = send(usage_chunk_json(id, created, model, state->usage));
          if (ok) ok = send("[DONE]");
          if (ok) sink.done();
          state->finished = true;
          return ok;
        }
        return true;
      },
      [pending, state](bool success) {
        if (!success || !state->finished) pending->cancelled = true;
      });
}

}  // namespace

struct Server::Impl {
  Impl(Engine& e, const Tokenizer& t, std::vector<int32_t> empty, ServerOptions o)
      : engine(e), tokenizer(t), empty_prompt(std::move(empty)), options(std::move(o)) {}

  Engine& engine;
  const Tokenizer& tokenizer;
  std::vector<int32_t> empty_prompt;
  ServerOptions options;
  httplib::Server http;
  int listen_fd = -1;  // the listening socket, once bind() made it
  int64_t started_at = int64_t(time(nullptr));

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;  // guarded by mutex
  int active = 0;         // completion requests not yet answered to their end; guarded by mutex
  std::exception_ptr engine_error;

  bool is_stopping() {
    std::lock_guard<std::mutex> lock(mutex);
    return stopping;
  }
  // Counts a completion request as active until the returned token is destroyed.
  std::shared_ptr<void> hold() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++active;
    }
    return std::shared_ptr<void>(nullptr, [this](void*) {
      std::lock_guard<std::mutex> lock(mutex);
      --active;
      changed.notify_all();
    });
  }

  // routes(): the limits and timeouts, the checks before any handler, the error bodies and the access log, then the
  // endpoints.
  void routes();
  void install_guards();
  void install_error_handlers();
  void install_endpoints();
  void completions(const httplib::Request& req, httplib::Response& res);
  void health(httplib::Response& res);
};

void Server::Impl::routes() {
  http.new_task_queue = [n = options.http_threads] { return new httplib::ThreadPool(size_t(n)); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_keep_alive_timeout(options.keep_alive_s);
  http.set_read_timeout(10, 0);
  http.set_write_timeout(10, 0);
  install_guards();
  install_error_handlers();
  install_endpoints();
}

// Requests refused before any handler runs: without the API key, bodies without a length or over the limit, and
// methods a route does not take.
void Server::Impl::install_guards() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_log = AccessLog{Clock::now(), true, 0, 0};
    auto refuse = [&](const ApiError& e) {
      res.set_header("Connection", "close");  // the body, if any, is left unread
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    };
    if (!options.api_key.empty() && req.path != "/health") {
      const std::string auth = req.get_header_value("Authorization");
      if (!auth.starts_with("Bearer ") || !same_secret(auth.substr(7), options.api_key)) {
        res.set_header("WWW-Authenticate", "Bearer");
        return refuse(
            auth.empty()
                ? ApiError(401, "invalid_request_error",
                           "no API key given: send the header Authorization: Bearer <key>", "", "missing_api_key")
                : ApiError(401, "invalid_request_error", "the API key is not this server's", "", "invalid_api_key"));
      }
    }
    // httplib reads a body whole before any handler runs: only a declared length within the limit is read at all.
    if (req.has_header("Transfer-Encoding"))
      return refuse(ApiError(411, "invalid_request_error",
                             "a request body needs a Content-Length header (chunked bodies are not accepted)"));
    if (req.has_header("Content-Length")) {
      const std::string length = req.get_header_value("Content-Length");
      if (length.size() > 18 || std::stoull("0" + length) > options.max_body_bytes)
        return refuse(ApiError(413, "invalid_request_error",
                               "the request body of " + length + " bytes is larger than the limit of " +
                                   std::to_string(options.max_body_bytes) + " bytes"));
    } else if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
      // These methods have a body, which httplib would otherwise read until the connection closes.
      return refuse(
          ApiError(411, "invalid_request_error", "a " + req.method + " request needs a Content-Length header"));
    }
    if (req.method == "POST" && (req.path == "/v1/models" || req.path == "/health")) {
      res.set_header("Allow", "GET");
      return refuse(ApiError(405, "invalid_request_error", "method POST is not allowed on " + req.path + "; use GET"));
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

void Server::Impl::install_error_handlers() {
  // Errors httplib itself answers (unknown route, malformed request, body too large) get the API's error body too.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_length_ > 0) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    std::string code;
    if (res.status == 404) {
      message = "unknown route: " + req.method + " " + req.path;
      code = "unknown_route";
    } else if (res.status == 413) {
      message = "the request body is larger than the limit";
    } else {
      message = "the request could not be handled (HTTP " + std::to_string(res.status) + ")";
    }
    send_error(res, ApiError(res.status, status_error_type(res.status), message, "", code));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "server_error", "internal error: " + what));
  });
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    const double ms =
        t_log.started ? std::chrono::duration<double, std::milli>(Clock::now() - t_log.start).count() : 0.0;
    fprintf(stderr, "serve: %s %s %s %d %.1f ms prompt_tokens=%lld completion_tokens=%lld\n", req.remote_addr.c_str(),
            req.method.c_str(), req.path.c_str(), res.status, ms, (long long)t_log.prompt_tokens,
            (long long)t_log.completion_tokens);
    t_log = AccessLog{};
  });
}

void Server::Impl::install_endpoints() {
  auto method_not_allowed = [](const char* allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      send_error(res, ApiError(405, "invalid_request_error",
                               "method " + req.method + " is not allowed on " + req.path + "; use " + allowed));
    };
  };
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(options.limits.model_name, started_at), "application/json");
  });
  http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != options.limits.model_name) {
      send_error(
          res, ApiError(404, "invalid_request_error", "The model '" + std::string(req.matches[1]) + "' does not exist",
                        "model", "model_not_found"));
      return;
    }
    res.set_content(model_json(options.limits.model_name, started_at), "application/json");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
  for (const char* path : {"/v1/completions", "/v1/models", "/health"}) {
    const char* allowed = std::string(path) == "/v1/completions" ? "POST" : "GET";
    if (std::string(allowed) == "POST") http.Get(path, method_not_allowed(allowed));
    http.Put(path, method_not_allowed(allowed));
    http.Patch(path, method_not_allowed(allowed));
    http.Delete(path, method_not_allowed(allowed));
  }
}

void Server::Impl::health(httplib::Response& res) {
  const Engine::Stats s = engine.stats();
  const bool down = is_stopping();
  char buf[512];
  snprintf(buf, sizeof(buf),
           "{\"status\":\"%s\",\"max_batch\":%d,\"queued\":%d,\"running\":%d,\"steps\":%llu,\"prompt_tokens\":%llu,"
           "\"generated_tokens\":%llu,\"requests_finished\":%llu}",
           down ? "shutting_down" : "ok", engine.max_slots(), s.queued, s.running, (unsigned long long)s.steps,
           (unsigned long long)s.prompt_tokens, (unsigned long long)s.generated_tokens,
           (unsigned long long)s.requests_finished);
  res.status = down ? 503 : 200;
  res.set_content(buf, "application/json");
}

void Server::Impl::completions(const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  if (is_stopping()) return send_error(res, ApiError(503, "service_unavailable_error", "the server is shutting down"));
  CompletionRequest r;
  try {
    r = parse_completion_request(req.body, tokenizer, empty_prompt, options.limits);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }

  auto hold = this->hold();
  auto pending = std::make_shared<Pending>();
  const auto deadline =
      arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s));
  Engine::Submit result;
  try {
    result = engine.submit_all(generation_requests(r, pending, deadline));  // every choice or none
  } catch (const Error& e) {
    return send_error(res, invalid_request("prompt", e.what()));
  }
  if (result == Engine::Submit::queue_full)
    return send_error(res,
                      ApiError(429, "rate_limit_error", "the server's queue is full; retry later", "", "queue_full"));
  if (result == Engine::Submit::stopping)
    return send_error(res, ApiError(503, "service_unavailable_error", "the server is shutting down"));

  Reply reply{random_id(), int64_t(time(nullptr)), options.limits.model_name, int(r.prompts.size()) * r.n, 0};
  for (size_t p = 0; p < r.prompts.size(); ++p) reply.prompt_tokens += int64_t(r.prompts[p].size());
  t_log.prompt_tokens = reply.prompt_tokens;
  if (r.stream)
    answer_stream(res, pending, hold, reply, r.include_usage);
  else
    answer_whole(res, *pending, reply);
}

Server::Server(Engine& engine, const Tokenizer& tokenizer, std::vector<int32_t> empty_prompt, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(empty_prompt), std::move(options))) {
  impl_->routes();
}

Server::~Server() = default;

int Server::bind() {
  Impl& s = *impl_;
  // Debian's compiled cpp-httplib listens with a backlog of 5, so a burst of clients met connection resets: the
  // listening socket is noted as it is made, and listen() again (Linux takes a new backlog so) lets hundreds wait.
  s.http.set_socket_options([&s](socket_t sock) {
    httplib::default_socket_options(sock);
    s.listen_fd = sock;
  });
  if (s.options.port == 0) {
    const int port = s.http.bind_to_any_port(s.options.host);
    if (port < 0)
      throw_error("ember serve: cannot listen on " + s.options.host, "check --host: an address of this machine");
    s.options.port = port;
  } else if (!s.http.bind_to_port(s.options.host, s.options.port)) {
    throw_error("ember serve: cannot listen on " + s.options.host + ":" + std::to_string(s.options.port),
                "the port may be in use: give another with --port (0: any free port), and check --host");
  }
  if (s.listen_fd >= 0 && ::listen(s.listen_fd, kListenBacklog) != 0)
    log_warn("serve: cannot raise the listen backlog to %d (%s); bursts of connections may be refused", kListenBacklog,
             std::strerror(errno));
  return s.options.port;
}

void Server::shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  impl_->engine.stop(true);
}

void Server::serve() {
  Impl& s = *impl_;
  std::thread engine_thread([&] {
    try {
      s.engine.run();
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        s.engine_error = std::current_exception();
      }
      shutdown();
    }
  });
  // Once shutdown() is called: the engine drains what it has, the workers write the last events, then the listener
  // closes and serve() returns.
  std::thread closer([&] {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.changed.wait(lock, [&] { return s.stopping; });
    lock.unlock();
    engine_thread.join();
    lock.lock();
    s.changed.wait(lock, [&] { return s.active == 0; });
    lock.unlock();
    s.http.stop();
  });
  const bool listened = s.http.listen_after_bind();
  const bool asked_to_stop = s.is_stopping();
  shutdown();
  closer.join();
  if (s.engine_error) std::rethrow_exception(s.engine_error);
  if (!listened && !asked_to_stop)
    throw_error("ember serve: the HTTP server stopped unexpectedly", "see the lines above");
}

}  // namespace ember
