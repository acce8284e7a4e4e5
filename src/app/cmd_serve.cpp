// `ember serve`: an OpenAI-compatible completions server over one checkpoint. Loads the model into a KV-cache engine
// with --max-batch cache slots, serves HTTP on --host:--port (localhost by default) until SIGTERM or SIGINT, then
// finishes the requests in flight and exits 0.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "infer/engine.h"
#include "infer/kv_model.h"
#include "infer/server.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace ember {
namespace {

// SIGTERM and SIGINT write a byte to this pipe; a thread reading it starts the graceful shutdown. A second signal
// ends the process at once.
int g_signal_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};

void on_stop_signal(int sig) {
  if (g_signals.fetch_add(1) > 0) _exit(128 + sig);
  const char byte = char(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);
}

void install_signal_pipe() {
  if (pipe(g_signal_pipe) != 0) throw_error("ember serve: cannot create a pipe for signals", "check ulimit -n");
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not the end of the server
}

// The command line of `ember serve`.
struct ServeArgs {
  std::string checkpoint, host, device, precision, model_name, api_key;
  int port = 8000, max_batch = 16, max_queue = 256, max_tokens_limit = 4096, max_step_tokens = 512, threads = 4;
  int max_connections = 1024;
  double read_timeout = 30;
  int max_body_kib = 1024;
  double timeout = 600;
};

// False when only the help was asked for.
bool parse_serve_args(int argc, char** argv, ServeArgs& a) {
  po::options_description desc("ember serve options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&a.checkpoint), "checkpoint file (.h5)")(
      "host", po::value(&a.host)->default_value("127.0.0.1"),
      "address to listen on (0.0.0.0: every interface; give --api-key then)")(
      "api-key", po::value(&a.api_key),
      "require Authorization: Bearer KEY on every route but /health (default: $EMBER_API_KEY; none: no check)")(
      "model-name", po::value(&a.model_name), "the model's id in the API (default: the checkpoint's file name stem)");
  numbers.add(desc, "port", &a.port, {0, 65535}, "TCP port (0: any free port, printed at start)");
  numbers.add(desc, "max-batch", &a.max_batch, {1, 1024}, "sequences decoded together (KV-cache slots)");
  numbers.add(desc, "max-queue", &a.max_queue, {0, 1 << 16},
              "requests waiting for a slot; beyond it requests get 429 (one per prompt and choice)");
  numbers.add(desc, "max-tokens-limit", &a.max_tokens_limit, {0, 1 << 20}, "the largest max_tokens a request may ask");
  numbers.add(desc, "max-step-tokens", &a.max_step_tokens, {1, 1 << 16},
              "rows of one forward pass: decoded tokens plus prompt chunks (at least --max-batch)");
  numbers.add(desc, "timeout", &a.timeout, {0.0, 86400.0, true},
              "seconds a request may take from its arrival; then it ends with finish_reason timeout");
  numbers.add(desc, "threads-http", &a.threads, {1, 256},
              "threads of the HTTP event loop (each serves any number of connections)");
  numbers.add(desc, "max-connections", &a.max_connections, {1, 1 << 20},
              "open connections at once; beyond it a new connection is answered 503");
  numbers.add(desc, "read-timeout", &a.read_timeout, {0.1, 3600.0},
              "seconds a request's header, then its body, may take to arrive (else 408 and the connection closes)");
  numbers.add(desc, "max-body-kib", &a.max_body_kib, {1, 1 << 20}, "largest request body in KiB (larger: 413)");
  desc.add_options()("device", po::value(&a.device)->default_value("cpu"),
                     "cpu, cuda or auto (cuda when a GPU is visible)")(
      "precision", po::value(&a.precision)->default_value("fp32"),
      "fp32; bf16: weights and GEMM inputs in bf16; or int8: as bf16, with the dense layers' products in int8");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember serve --checkpoint F [--host 127.0.0.1] [--port 8000] [--max-batch 16]\n"
                     "Serves the OpenAI completions API (POST /v1/completions, GET /v1/models, GET /health) for the "
                     "checkpoint, batching concurrent requests on one engine. SIGTERM or SIGINT finishes the requests "
                     "in flight, then exits 0. See docs/serve.md.",
                     vm, &numbers))
    return false;
  require_option(vm, "checkpoint", "give a checkpoint, e.g. --checkpoint runs/demo/checkpoints/step_00000500.h5");
  if (a.max_step_tokens < a.max_batch)
    throw_error("ember serve: --max-step-tokens " + std::to_string(a.max_step_tokens) + " is less than --max-batch " +
                    std::to_string(a.max_batch),
                "a step runs one row for every slot: give --max-step-tokens of at least --max-batch");
  if (a.api_key.empty())
    if (const char* env = std::getenv("EMBER_API_KEY")) a.api_key = env;
  if (a.host != "127.0.0.1" && a.host != "localhost" && a.host != "::1" && a.api_key.empty())
    log_warn(
        "serve: listening on %s without --api-key: anyone who can reach the port can use the model "
        "(docs/security.md)",
        a.host.c_str());
  if (a.model_name.empty()) a.model_name = std::filesystem::path(a.checkpoint).stem().string();
  if (a.model_name.empty()) throw_error("ember serve: --model-name is empty", "give a name, e.g. --model-name ember");
  return true;
}

// The checkpoint's model with a KV cache of --max-batch slots and the host buffers of one step.
std::unique_ptr<KvModel> load_model(const ServeArgs& a, const DecodingSetup& setup) {
  KvModelShape shape;
  shape.max_slots = a.max_batch;
  shape.max_rows = a.max_step_tokens;
  shape.max_logit_rows = a.max_batch;
  // Host buffers of a step: its rows' tokens, slots and positions, and the logits of one row per slot.
  const size_t buffers = size_t(a.max_step_tokens) * 3 * sizeof(int32_t) + size_t(a.max_batch) *
                                                                               size_t(setup.meta.model.vocab_size) *
                                                                               (sizeof(float) + 2 * sizeof(double));
  return load_kv_model(a.checkpoint, setup.meta, *setup.backend, shape, buffers);
}

ServerOptions server_options(const ServeArgs& a, const Engine& engine) {
  ServerOptions options;
  options.host = a.host;
  options.port = a.port;
  options.limits.model_name = a.model_name;
  options.limits.max_T = engine.max_T();
  options.limits.max_tokens_limit = a.max_tokens_limit;
  options.limits.max_choices = std::max(1, std::min(64, a.max_queue + a.max_batch));
  options.timeout_s = a.timeout;
  options.api_key = a.api_key;
  options.http.max_body_bytes = size_t(a.max_body_kib) * 1024;
  options.http.threads = a.threads;
  options.http.max_connections = a.max_connections;
  options.http.read_timeout_s = options.http.write_timeout_s = a.read_timeout;
  return options;
}

// Serves until the first SIGTERM or SIGINT, which a thread reading the signal pipe turns into a graceful shutdown.
void serve_until_signal(Server& server) {
  std::thread watcher([&] {
    char byte = 0;
    while (read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    if (byte != 0) fprintf(stderr, "serve: signal %d: finishing the requests in flight, then exiting\n", int(byte));
    server.shutdown();
  });
  try {
    server.serve();
  } catch (...) {
    const char byte = 0;
    [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);
    watcher.join();
    throw;
  }
  const char byte = 0;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);  // wakes the watcher when no signal came
  watcher.join();
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  ServeArgs a;
  if (!parse_serve_args(argc, argv, a)) return EXIT_CODE_OK;
  install_signal_pipe();
  DecodingSetup setup = open_for_decoding(a.checkpoint, a.device, a.precision);
  const Tokenizer& tokenizer = *setup.tokenizer;
  std::unique_ptr<KvModel> model = load_model(a, setup);
  EngineOptions engine_options;
  engine_options.max_queue = a.max_queue;
  engine_options.max_step_tokens = a.max_step_tokens;
  Engine engine(*model, tokenizer, engine_options);
  Server server(engine, tokenizer, document_start_tokens(tokenizer), server_options(a, engine));
  const int bound = server.bind();
  fprintf(stderr, "serve: model %s (block_size %d, %d slots) listening on http://%s:%d\n", a.model_name.c_str(),
          engine.max_T(), engine.max_slots(), a.host.c_str(), bound);
  fflush(stderr);
  serve_until_signal(server);
  fprintf(stderr, "serve: stopped\n");
  return EXIT_CODE_OK;
}

}  // namespace ember
