// The HTTP server of `ember serve` (implementation): routes on HttpServer. Each completion request becomes one
// GenerationRequest per prompt and choice; their on_event callbacks, on the engine's thread, hand text to the
// request's Answer, which queues it on the connection (whose own thread formats and writes it), so neither a slow
// client nor the formatting of many streams slows the engine; once a write fails the next on_event tells the engine to
// cancel the request.
#include "infer/server.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "infer/openapi.h"

namespace ember {

namespace {

using Clock = std::chrono::steady_clock;

// Whether `given` equals `key`, in a time that depends on the key's length only, so the comparison tells a caller
// nothing about how much of a guess was right.
bool same_secret(std::string_view given, std::string_view key) {
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= unsigned((unsigned char)key[i] ^ (unsigned char)(i < given.size() ? given[i] : 0));
  return diff == 0;
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = error_json(e);
  return r;
}

HttpResponse json_response(std::string body, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

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
  bool stream = false;
  bool include_usage = false;
};

const ApiError kEngineStopped(500, "server_error", "the engine stopped before the completion finished");

// One completion request's answer as its choices produce it. The engine's thread delivers every event, in order, so
// the state needs no lock; the exchange writes on the connection's own thread.
class Answer {
 public:
  Answer(std::shared_ptr<HttpExchange> exchange, Reply reply)
      : exchange_(std::move(exchange)),
        reply_(std::make_shared<const Reply>(std::move(reply))),
        choices_(size_t(reply_->choices)) {
    usage_.prompt_tokens = reply_->prompt_tokens;
  }

  // False once the client has gone: the engine then cancels the request's sequences.
  bool on_event(int index, const GenerationEvent& e) {
    if (gone_) return false;
    if (reply_->stream) return stream_event(index, e);
    choices_[size_t(index)].text += e.text;
    if (!e.done) return true;
    ++done_;
    usage_.completion_tokens += e.completion_tokens;
    if (e.reason == FinishReason::shutdown || e.reason == FinishReason::cancelled) failed_ = true;
    choices_[size_t(index)].finish_reason = api_finish_reason(e.reason);
    if (done_ < reply_->choices) return true;
    exchange_->note_tokens(usage_.prompt_tokens, usage_.completion_tokens);
    if (failed_) {
      exchange_->reply(error_response(kEngineStopped));
    } else {
      HttpResponse r;
      r.body = completion_json(reply_->id, reply_->created, reply_->model, choices_, usage_);
      exchange_->reply(std::move(r));
    }
    return true;
  }

  // The stream's head, sent as soon as the request is accepted.
  void begin_stream() {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    exchange_->begin_stream(std::move(head));
  }

 private:
  // A token's chunk is formatted on the connection's thread (HttpExchange::write_from), not on the engine's.
  bool stream_event(int index, const GenerationEvent& e) {
    bool ok = true;
    auto send = [&](const std::string& data) { ok = ok && exchange_->write("data: " + data + "\n\n"); };
    auto send_chunk = [&](std::string text, const char* finish_reason) {
      ok = ok && exchange_->write_from([reply = reply_, index, text = std::move(text), finish_reason] {
        return "data: " + completion_chunk_json(reply->id, reply->created, reply->model, index, text, finish_reason) +
               "\n\n";
      });
    };
    if (e.done) {
      ++done_;
      usage_.completion_tokens += e.completion_tokens;
      exchange_->note_tokens(usage_.prompt_tokens, usage_.completion_tokens);
      if (e.reason == FinishReason::shutdown)
        send(error_json(kEngineStopped));
      else
        send_chunk(e.text, api_finish_reason(e.reason));
    } else if (!e.text.empty()) {
      send_chunk(e.text, "");
    }
    if (ok && done_ == reply_->choices) {
      if (reply_->include_usage) send(usage_chunk_json(reply_->id, reply_->created, reply_->model, usage_));
      send("[DONE]");
      exchange_->end_stream();
    }
    gone_ = !ok;
    return ok;
  }

  std::shared_ptr<HttpExchange> exchange_;
  std::shared_ptr<const Reply> reply_;  // shared with the chunks formatted on the connection's thread
  std::vector<CompletionChoice> choices_;
  CompletionUsage usage_;
  int done_ = 0;
  bool failed_ = false, gone_ = false;
};

// One generation per prompt and choice; each hands its events to `answer`.
std::vector<GenerationRequest> generation_requests(const CompletionRequest& r, const std::shared_ptr<Answer>& answer,
                                                   Clock::time_point deadline) {
  const int choices = int(r.prompts.size()) * r.n;
  const uint64_t seed = r.seed ? *r.seed : std::random_device{}() * 0x100000001ull;
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  std::vector<GenerationRequest> requests;
  for (int c = 0; c < choices; ++c) {
    GenerationRequest g;
    g.prompt = r.prompts[size_t(c / r.n)];
    g.max_tokens = r.max_tokens;
    g.sampling = SamplingParams{r.temperature, r.top_k, r.top_p, seed + uint64_t(c % r.n)};
    g.stop = r.stop;
    g.deadline = deadline;
    g.cancelled = cancelled;
    g.on_event = [answer, cancelled, c](const GenerationEvent& e) {
      if (!answer->on_event(c, e)) *cancelled = true;
      return !cancelled->load();
    };
    requests.push_back(std::move(g));
  }
  return requests;
}

}  // namespace

struct Server::Impl {
  Impl(Engine& e, const Tokenizer& t, std::vector<int32_t> empty, ServerOptions o)
      : engine(e),
        tokenizer(t),
        empty_prompt(std::move(empty)),
        options(std::move(o)),
        http(options.http,
             HttpHandlers{[this](const HttpRequest& h) { return check_head(h); },
                          [this](const HttpRequest& r, std::shared_ptr<HttpExchange> x) { handle(r, std::move(x)); },
                          [](int status, const std::string& message) {
                            return error_response(ApiError(status, status_error_type(status), message));
                          }}) {}

  Engine& engine;
  const Tokenizer& tokenizer;
  std::vector<int32_t> empty_prompt;
  ServerOptions options;
  HttpServer http;
  int64_t started_at = int64_t(time(nullptr));

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;  // guarded by mutex
  std::exception_ptr engine_error;

  bool is_stopping() {
    std::lock_guard<std::mutex> lock(mutex);
    return stopping;
  }

  std::optional<HttpResponse> check_head(const HttpRequest& head);
  void handle(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange);
  HttpResponse health();
  void completions(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange);
};

namespace {

// The routes and the one method each takes.
struct Route {
  std::string_view path;  // a trailing '/' matches any non-empty rest (/v1/models/<id>)
  std::string_view method;
};
constexpr Route kRoutes[] = {{"/v1/completions", "POST"},
                             {"/v1/models", "GET"},
                             {"/v1/models/", "GET"},
                             {"/health", "GET"},
                             {"/openapi.json", "GET"}};

const Route* find_route(std::string_view path) {
  for (const Route& r : kRoutes)
    if (path == r.path || (r.path.ends_with('/') && path.size() > r.path.size() && path.starts_with(r.path))) return &r;
  return nullptr;
}

}  // namespace

// Requests refused before their body is read: without the API key, to no route, with a method the route does not
// take, or with a body of no declared length.
std::optional<HttpResponse> Server::Impl::check_head(const HttpRequest& head) {
  if (!options.api_key.empty() && head.path != "/health") {
    const std::string auth = head.header("Authorization");
    if (!auth.starts_with("Bearer ") || !same_secret(std::string_view(auth).substr(7), options.api_key)) {
      HttpResponse r = error_response(
          auth.empty()
              ? ApiError(401, "invalid_request_error", "no API key given: send the header Authorization: Bearer <key>",
                         "", "missing_api_key")
              : ApiError(401, "invalid_request_error", "the API key is not this server's", "", "invalid_api_key"));
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
  }
  const Route* route = find_route(head.path);
  if (!route)
    return error_response(
        ApiError(404, "invalid_request_error", "unknown route: " + head.method + " " + head.path, "", "unknown_route"));
  if (head.method != route->method) {
    HttpResponse r = error_response(
        ApiError(405, "invalid_request_error",
                 "method " + head.method + " is not allowed on " + head.path + "; use " + std::string(route->method)));
    r.headers.emplace_back("Allow", std::string(route->method));
    return r;
  }
  if (head.method == "POST" && !head.has_header("Content-Length") && !head.has_header("Transfer-Encoding"))
    return error_response(ApiError(411, "invalid_request_error", "a POST request needs a Content-Length header"));
  return std::nullopt;
}

void Server::Impl::handle(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange) {
  const std::string& path = request.path;
  if (path == "/v1/completions") return completions(request, std::move(exchange));
  if (path == "/health") return exchange->reply(health());
  if (path == "/openapi.json")
    return exchange->reply(
        json_response(openapi_json(options.limits, tokenizer.vocab_size(), !options.api_key.empty())));
  if (path == "/v1/models") return exchange->reply(json_response(models_json(options.limits.model_name, started_at)));
  const std::string id = path.substr(std::string_view("/v1/models/").size());
  if (id != options.limits.model_name)
    return exchange->reply(error_response(
        ApiError(404, "invalid_request_error", "The model '" + id + "' does not exist", "model", "model_not_found")));
  exchange->reply(json_response(model_json(options.limits.model_name, started_at)));
}

HttpResponse Server::Impl::health() {
  const Engine::Stats s = engine.stats();
  const bool down = is_stopping();
  char buf[512];
  snprintf(buf, sizeof(buf),
           "{\"status\":\"%s\",\"max_batch\":%d,\"queued\":%d,\"running\":%d,\"steps\":%llu,\"prompt_tokens\":%llu,"
           "\"generated_tokens\":%llu,\"requests_finished\":%llu}",
           down ? "shutting_down" : "ok", engine.max_slots(), s.queued, s.running, (unsigned long long)s.steps,
           (unsigned long long)s.prompt_tokens, (unsigned long long)s.generated_tokens,
           (unsigned long long)s.requests_finished);
  return json_response(buf, down ? 503 : 200);
}

void Server::Impl::completions(const HttpRequest& request, std::shared_ptr<HttpExchange> exchange) {
  const auto arrival = Clock::now();
  if (is_stopping())
    return exchange->reply(error_response(ApiError(503, "service_unavailable_error", "the server is shutting down")));
  CompletionRequest r;
  try {
    r = parse_completion_request(request.body, tokenizer, empty_prompt, options.limits);
  } catch (const ApiError& e) {
    return exchange->reply(error_response(e));
  }

  Reply reply{random_id(), int64_t(time(nullptr)), options.limits.model_name, int(r.prompts.size()) * r.n, 0,
              r.stream,    r.include_usage};
  for (size_t p = 0; p < r.prompts.size(); ++p) reply.prompt_tokens += int64_t(r.prompts[p].size());
  exchange->note_tokens(reply.prompt_tokens, 0);
  auto answer = std::make_shared<Answer>(exchange, reply);
  const auto deadline =
      arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s));
  Engine::Submit result;
  try {
    result = engine.submit_all(generation_requests(r, answer, deadline));  // every choice or none
  } catch (const Error& e) {
    return exchange->reply(error_response(invalid_request("prompt", e.what())));
  }
  if (result == Engine::Submit::accepted) {
    if (r.stream) answer->begin_stream();  // text the engine produced meanwhile is queued behind the head
    return;
  }
  if (result == Engine::Submit::queue_full)
    return exchange->reply(
        error_response(ApiError(429, "rate_limit_error", "the server's queue is full; retry later", "", "queue_full")));
  if (result == Engine::Submit::stopping)
    return exchange->reply(error_response(ApiError(503, "service_unavailable_error", "the server is shutting down")));
}

Server::Server(Engine& engine, const Tokenizer& tokenizer, std::vector<int32_t> empty_prompt, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(empty_prompt), std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
  impl_->options.port = impl_->http.bind(impl_->options.host, impl_->options.port);
  return impl_->options.port;
}

void Server::shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  impl_->http.set_closing();
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
  // Once shutdown() is called the server goes on answering (new completions and /health with 503) while the engine
  // drains what it has; then the listener closes, the last answers are written, and run() returns.
  std::thread closer([&] {
    std::unique_lock<std::mutex> lock(s.mutex);
    s.changed.wait(lock, [&] { return s.stopping; });
    lock.unlock();
    engine_thread.join();
    // A failed engine still holds requests, and they their connections: dropped here, each is answered 500 (or its
    // stream cut), so the loop can end and nothing outlives it.
    if (s.engine_error) s.engine.abandon();
    s.http.stop_when_answered();
  });
  s.http.run();
  closer.join();
  if (s.engine_error) std::rethrow_exception(s.engine_error);
}

}  // namespace ember
