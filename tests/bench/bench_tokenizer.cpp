// Tokenizer benchmark, Ember's side: encode one text with a BPE tokenizer on one thread (encode) and on all threads
// (encode_parallel), check both give the same ids, write them for the reference check, and print tokens/s and MB/s.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

const char* USAGE =
    "usage: bench_tokenizer --tokenizer SPEC --text FILE [--threads N] [--rounds N] [--ids-out FILE]\n"
    "  prints one line per variant: 'ember_1 ...' (encode) and 'ember_N ...' (encode_parallel on N threads)\n";

struct Options {
  std::string tokenizer, text, ids_out;
  int threads = int(std::thread::hardware_concurrency());
  int rounds = 3;  // timed rounds per variant after one warm-up; the fastest is kept, as the machine may be shared
};

[[noreturn]] void usage_error(const std::string& message) {
  fprintf(stderr, "error: %s\nhint: %s", message.c_str(), USAGE);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fputs(USAGE, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--tokenizer") {
      o.tokenizer = v;
    } else if (a == "--text") {
      o.text = v;
    } else if (a == "--ids-out") {
      o.ids_out = v;
    } else if (a == "--threads" || a == "--rounds") {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 1024) usage_error(a + " = " + v + " must be an integer in [1, 1024]");
      (a == "--threads" ? o.threads : o.rounds) = int(n);
    } else {
      usage_error("unknown option " + a);
    }
  }
  if (o.tokenizer.empty() || o.text.empty()) usage_error("--tokenizer and --text are required");
  return o;
}

// The fastest of `rounds` timed calls after one warm-up call (which also yields the ids).
template <class F>
double best_seconds(int rounds, F&& run, std::vector<int32_t>& ids) {
  ids = run();
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> again = run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (again != ids) {
      fprintf(stderr, "error: encoding the same text twice gave different ids\nhint: this is a bug in ember\n");
      std::exit(1);
    }
  }
  return best;
}

void report(const char* name, double seconds, size_t tokens, size_t bytes) {
  printf("%s tokens=%zu bytes=%zu seconds=%.6f tokens_per_s=%.0f mb_per_s=%.2f\n", name, tokens, bytes, seconds,
         double(tokens) / seconds, double(bytes) / seconds / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    std::ifstream in(o.text, std::ios::binary);
    if (!in) ember::throw_error("bench_tokenizer: cannot read " + o.text, "check the --text path");
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    const std::unique_ptr<ember::Tokenizer> tok = ember::load_tokenizer(o.tokenizer);

    std::vector<int32_t> ids1, idsn;
    const double t1 = best_seconds(
        o.rounds, [&] { return tok->encode(text); }, ids1);
    const double tn = best_seconds(
        o.rounds, [&] { return ember::encode_parallel(*tok, text, o.threads); }, idsn);
    if (ids1 != idsn) {
      fprintf(stderr, "error: encode_parallel on %d threads differs from encode\nhint: this is a bug in ember\n",
              o.threads);
      return 1;
    }
    if (!o.ids_out.empty()) {
      std::ofstream out(o.ids_out, std::ios::binary);
      out.write(reinterpret_cast<const char*>(ids1.data()), std::streamsize(ids1.size() * sizeof(int32_t)));
      if (!out) ember::throw_error("bench_tokenizer: cannot write " + o.ids_out, "check the --ids-out path");
    }
    report("ember_1", t1, ids1.size(), text.size());
    const std::string name = "ember_" + std::to_string(o.threads);
    report(name.c_str(), tn, idsn.size(), text.size());
  } catch (const ember::Error& e) {
    fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
  return 0;
}
