// Option definitions (implementation): a single table of bindings drives parsing, validation and rendering, so a
// key cannot be parsed under one name and rendered under another.
#include "app/options.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>

#include "app/option_enums.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace po = boost::program_options;

namespace ember {
namespace {

std::string format_value(int v) { return format_number(v); }
std::string format_value(bool v) { return v ? "true" : "false"; }
std::string format_value(uint64_t v) { return format_number(v); }
std::string format_value(float v) { return format_number(v); }
std::string format_value(const std::string& v) { return v; }

template <EnumOptionType E>
std::string format_value(E v) {
  return EnumOption<E>::name(v);
}

// What a value of an enum option must be: "must be one of: cpu, cuda, auto".
template <EnumOptionType E>
std::string must_be_one_of() {
  return "must be one of: " + join_names(EnumOption<E>::values, EnumOption<E>::name);
}

// A name that is no value of an enum option. parse_train_args reports it as it reports a value out of range, naming
// the key (Boost adds it to the exception on the way out).
class BadEnumValue : public po::validation_error {
 public:
  BadEnumValue(std::string value, std::string problem)
      : po::validation_error(po::validation_error::invalid_option_value),
        value_(std::move(value)),
        problem_(std::move(problem)) {}
  const std::string& value() const { return value_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string value_, problem_;
};

}  // namespace

// Boost.Program_options' hook for reading an option of type E (found by argument-dependent lookup): the single
// point where the name of an enum option's value is parsed.
template <EnumOptionType E>
void validate(boost::any& out, const std::vector<std::string>& values, E*, int) {
  po::validators::check_first_occurrence(out);
  const std::string& text = po::validators::get_single_string(values);
  const std::optional<E> v = EnumOption<E>::parse(text);
  if (!v) throw BadEnumValue(text, must_be_one_of<E>());
  out = boost::any(*v);
}

namespace {

// One bound key: how to declare it to Boost, read its text (numbers), render it, and check its range.
struct Binding {
  std::string key;  // "section.key"
  std::string help;
  std::function<std::string()> shortest;  // the value as the reference shows it: 0.4, not 0.400000006
  std::string values;                     // what it may be, for the reference: "an integer in [1, 1024]"
  std::function<void(po::options_description&)> declare;
  std::function<std::string()> render;
  std::function<std::string()> parse;  // numbers: reads the text Boost stored; "" when valid, else what it must be
  std::function<std::string()> check;  // "" when valid, else what the value must be
  std::function<std::string()> text;   // the value as given (numbers) or rendered
};

// A string, bool or enum key, parsed by Boost (enums through validate() above).
// The shortest text that reads back as the same value.
template <class T>
std::string shortest_text(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    return ec == std::errc() ? std::string(buf, end) : format_value(v);
  } else {
    return format_value(v);
  }
}

// What a string, bool or enum key may be, for the reference.
template <class T>
std::string values_of() {
  if constexpr (std::is_same_v<T, bool>)
    return "true, false";
  else if constexpr (std::is_same_v<T, std::string>)
    return "text";
  else
    return join_names(EnumOption<T>::values, EnumOption<T>::name);
}

template <class T>
Binding bind_key(const char* key, T* field, const char* help, std::function<std::string(T)> check = nullptr) {
  Binding b;
  b.key = key;
  b.help = help;
  b.shortest = [=] { return shortest_text(*field); };
  b.values = values_of<T>();
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<T>(field)->default_value(*field, format_value(*field)), help);
  };
  b.render = [=] { return format_value(*field); };
  b.parse = [] { return std::string(); };
  b.check = [=] { return check ? check(*field) : std::string(); };
  b.text = b.render;
  return b;
}

// A numeric key: declared as text and parsed strictly (parse_number), then checked against its domain and `extra`.
template <class T>
Binding bind_number(const char* key, T* field, const char* help, Domain<T> domain,
                    std::function<std::string(T)> extra = nullptr) {
  Binding b;
  b.key = key;
  b.help = help;
  b.shortest = [=] { return shortest_text(*field); };
  b.values = describe_domain(domain).substr(std::string("must be ").size());
  auto text = std::make_shared<std::string>(format_value(*field));
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<std::string>(text.get())->default_value(*text), help);
  };
  b.render = [=] { return format_value(*field); };
  b.parse = [=] { return parse_number(*text, field) ? std::string() : describe_domain(domain); };
  b.check = [=] {
    if (!in_domain(*field, domain)) return describe_domain(domain);
    return extra ? extra(*field) : std::string();
  };
  b.text = [=] { return *text; };
  return b;
}

// A key whose text another key's value shapes (a per-layer list): kept as given, read by `read` once every key is
// parsed (it returns "" or what the text must be), rendered from what it resolved to.
Binding bind_text(const char* key, std::string initial, const char* help, const char* values,
                  std::function<std::string(const std::string&)> read, std::function<std::string()> render) {
  Binding b;
  b.key = key;
  b.help = help;
  b.shortest = render;
  b.values = values;
  auto text = std::make_shared<std::string>(std::move(initial));
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<std::string>(text.get())->default_value(*text), help);
  };
  b.render = render;
  b.parse = [] { return std::string(); };
  b.check = [=] { return read(*text); };
  b.text = [=] { return *text; };
  return b;
}

// A path: not empty (where `required`) and at most PATH_MAX long.
std::function<std::string(std::string)> path_value(bool required) {
  return [=](const std::string& v) -> std::string {
    if (required && v.empty()) return "must not be empty";
    if (v.size() > 4096) return "must be a path of at most 4096 characters";
    return "";
  };
}

// The domains. Sizes: a bound generous for any model this code can train (GPT-3 175B has 96 layers, 96 heads,
// n_embd 12288), tight enough that products of sizes cannot overflow before the memory estimate checks them.
constexpr int kMaxCount = 1000000000;  // steps, intervals: any run; keeps step * batch arithmetic far from overflow
Domain<int> ints(int lo, int hi) { return {lo, hi}; }
Domain<float> floats(float lo, float hi, bool lo_open = false, bool hi_open = false) {
  return {lo, hi, lo_open, hi_open};
}

std::vector<Binding> bindings(RunConfig& c) {
  std::vector<Binding> b;
  b.push_back(bind_number("model.n_layer", &c.model.n_layer, "transformer blocks", ints(1, 1024)));
  b.push_back(bind_number("model.n_head", &c.model.n_head, "attention heads per block", ints(1, 1024)));
  b.push_back(bind_number<int>("model.n_embd", &c.model.n_embd, "embedding width C (a multiple of n_head)",
                               ints(1, 65536), [&c](int v) {
                                 if (c.model.n_head >= 1 && v % c.model.n_head != 0)
                                   return "must be a multiple of model.n_head = " + std::to_string(c.model.n_head);
                                 return std::string();
                               }));
  b.push_back(bind_number("model.block_size", &c.model.block_size, "maximum sequence length", ints(1, 1 << 20)));
  b.push_back(bind_number("model.vocab_size", &c.model.vocab_size, "vocabulary size (256 for the byte tokenizer)",
                          ints(2, 65536)));
  b.push_back(bind_key<PositionEncoding>(
      "model.position", &c.model.position,
      "positions: learned (GPT-2's wpe table) or rope (rotary embeddings of q and k in every layer, no wpe)",
      [&c](PositionEncoding) { return rope_problem(c.model); }));
  b.push_back(bind_number("model.rope_theta", &c.model.rope_theta, "rotary base (position = rope)", floats(1, 1e9f)));
  // The windows' check runs before the slopes': a preset's slopes apply unless model.alibi_slopes is given.
  b.push_back(bind_text(
      "model.attention_windows", "full",
      "attention window per layer (comma-separated, one value for all): full, or N (each query sees itself and the N "
      "tokens before it); or a preset: tscale (window 1 first, then 64 with ALiBi 0.5 alternating with full), sssl "
      "(3 windows of block_size/2, then full; the last layer full)",
      "full, tscale, sssl, or n_layer entries each full or an integer >= 1",
      [&c](const std::string& text) {
        return parse_attention_windows(text, c.model.n_layer, c.model.block_size, &c.model.attention_windows,
                                       &c.model.alibi_slopes);
      },
      [&c] { return format_attention_windows(c.model.attention_windows); }));
  b.push_back(bind_text(
      "model.alibi_slopes", "",
      "ALiBi slope per layer (comma-separated, one value for all; 0: no bias): key j's score for query i gets "
      "-slope * (i - j). Empty: none, or the attention_windows preset's",
      "empty, or n_layer numbers >= 0",
      [&c](const std::string& text) {
        return text.empty() ? std::string() : parse_alibi_slopes(text, c.model.n_layer, &c.model.alibi_slopes);
      },
      [&c] { return format_alibi_slopes(c.model.alibi_slopes); }));
  b.push_back(bind_number("training.batch_size", &c.training.batch_size, "micro-batch size B", ints(1, 65536)));
  b.push_back(bind_number<int>("training.seq_len", &c.training.seq_len, "sequence length T (<= model.block_size)",
                               ints(1, 1 << 20), [&c](int v) {
                                 if (v > c.model.block_size)
                                   return "must be <= model.block_size = " + std::to_string(c.model.block_size);
                                 return std::string();
                               }));
  b.push_back(bind_number("training.grad_accum_steps", &c.training.grad_accum_steps, "micro-batches per optimizer step",
                          ints(1, 65536)));
  b.push_back(bind_number("training.steps", &c.training.steps, "optimizer steps of the whole run", ints(1, kMaxCount)));
  b.push_back(bind_number("training.seed", &c.training.seed, "seed of initialisation and data order",
                          Domain<uint64_t>{0, UINT64_MAX}));
  b.push_back(bind_number("training.max_norm", &c.training.max_norm, "clip gradients to this L2 norm (0: off)",
                          floats(0, 1e6f)));
  b.push_back(bind_number("training.threads", &c.training.threads, "CPU threads per rank (0: OpenMP default)",
                          ints(0, max_training_threads())));
  b.back().values = "an integer in [0, 4 x the machine's hardware threads]";  // the reference is the same anywhere
  b.push_back(
      bind_number("training.zero", &c.training.zero, "ZeRO stage: 0 (off) or 1 (shard optimizer state)", ints(0, 1)));
  b.push_back(bind_number("training.bucket_mb", &c.training.bucket_mb, "gradient all-reduce bucket size (MiB)",
                          floats(0, 4096, /*lo_open=*/true)));
  // The help of an enum option describes each value; its names, and what a bad value must be, come from the enum.
  b.push_back(bind_key("training.mode", &c.training.mode,
                       "sync (all-reduce data parallel) or async (rank 0 serves, ranks 1.. train)"));
  b.push_back(bind_key("training.device", &c.training.device,
                       "cpu, cuda (one GPU per rank) or auto (cuda when every rank sees a GPU, else cpu)"));
  b.push_back(bind_key("training.comm", &c.training.comm,
                       "gradient communicator: auto (nccl on cuda, mpi on cpu), nccl, or mpi (staged through host "
                       "memory on cuda)"));
  b.push_back(bind_key("training.recompute", &c.training.recompute,
                       "activation recomputation in backward: none, attention (each layer's attention half) or full "
                       "(whole layers; only layer outputs are kept)"));
  b.push_back(bind_key("training.precision", &c.training.precision,
                       "GEMM inputs: auto (bf16 on cuda, fp32 on cpu), fp32, bf16 (rounded to bf16, accumulated "
                       "in fp32; weights, gradients and AdamW stay fp32), int8 (bf16, with the dense layers' "
                       "products in int8) or fp8 (bf16, with all the dense layers' "
                       "products in fp8); int8 on cuda needs sm_75 or newer; fp8 on cpu only for now"));
  b.push_back(bind_key("training.int8_stochastic_rounding", &c.training.int8_stochastic_rounding,
                       "int8 (test-only switch): round the output gradients stochastically (dithered); false rounds "
                       "them to nearest"));
  b.push_back(bind_key("training.int8_weight_gradient", &c.training.int8_weight_gradient,
                       "int8: run the dense layers' weight-gradient products in int8 too (scales per channel and "
                       "tile of 256 tokens, gradients dithered); false runs them in bf16"));
  b.push_back(bind_key("training.fp8_scaling", &c.training.fp8_scaling,
                       "fp8 (test-only switch): scale each tensor into fp8's range; false casts the values unscaled"));
  b.push_back(bind_key("training.deterministic", &c.training.deterministic,
                       "bitwise-repeatable GPU results (false lets cuBLAS reduce with atomics; the CPU backend is "
                       "deterministic either way)"));
  b.push_back(bind_number("async.local_steps", &c.async.local_steps, "async: worker steps between syncs (H)",
                          ints(1, 1000000)));
  b.push_back(bind_number("async.block_size", &c.async.block_size, "async: values per fp32 scale of a 1-bit message",
                          ints(8, 1 << 24)));
  b.push_back(bind_key("async.compression", &c.async.compression,
                       "async: how deltas and updates travel: onebit (signs and a scale per block, with error "
                       "feedback) or none (fp32)"));
  b.push_back(bind_number("async.outer_lr", &c.async.outer_lr, "async: the center's learning rate on deltas",
                          floats(0, 10, /*lo_open=*/true)));
  b.push_back(bind_number("async.outer_momentum", &c.async.outer_momentum, "async: the center's Nesterov momentum",
                          floats(-1, 1, true, true)));
  b.push_back(bind_number("async.inner_beta1", &c.async.inner_beta1,
                          "async: the workers' AdamW beta1 (optimizer.beta1 is sync mode's)",
                          floats(-1, 1, true, true)));
  b.push_back(bind_number("async.center_timeout", &c.async.center_timeout,
                          "async: seconds a worker waits for the center before failing",
                          floats(0, 86400, /*lo_open=*/true)));  // a day: past it a job is dead, not waiting
  b.push_back(bind_number("async.worker_timeout", &c.async.worker_timeout,
                          "async: seconds without a sign of life (sent between local steps, at most once a second) "
                          "before the center drops a worker and the job goes on without it",
                          floats(0, 86400, /*lo_open=*/true)));
  b.push_back(bind_number("async.ranks_per_worker", &c.async.ranks_per_worker,
                          "async: ranks per worker, which train in sync among themselves (a box of GPUs); its first "
                          "rank alone exchanges with the center",
                          ints(1, 1 << 20)));
  b.push_back(bind_key("async.join", &c.async.join,
                       "async: join the job running in run.dir (started with --ompi-server, as this mpirun) as more "
                       "workers, rather than start one; it takes them in at its next barrier"));
  b.push_back(
      bind_key("async.error_feedback", &c.async.error_feedback,
               "async (test-only switch): keep what the 1-bit compression lost for the next message, up and down"));
  b.push_back(bind_number("async.test_slow_worker", &c.async.test_slow_worker,
                          "async (test-only): this worker rank trains test_slowdown times slower (0: none)",
                          ints(0, 1 << 20)));
  b.push_back(bind_number("async.test_slowdown", &c.async.test_slowdown, "async (test-only): slowdown factor",
                          floats(1, 1000)));
  b.push_back(bind_number("async.test_center_stall", &c.async.test_center_stall,
                          "async (test-only): the center stops serving after this many versions (0: never)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("dist.timeout", &c.dist.timeout,
                          "seconds a collective may wait without completing before the job ends with an error naming "
                          "it (a peer died, froze or lost its link)",
                          floats(0, 86400, /*lo_open=*/true)));
  b.push_back(
      bind_number("optimizer.lr", &c.optimizer.lr, "peak learning rate", floats(0, 10, /*lo_open=*/true, true)));
  b.push_back(bind_number<float>("optimizer.min_lr", &c.optimizer.min_lr,
                                 "learning rate at the end of the cosine decay", floats(0, 10),
                                 [&c](float v) { return v <= c.optimizer.lr ? "" : "must be in [0, optimizer.lr]"; }));
  b.push_back(
      bind_number("optimizer.warmup_steps", &c.optimizer.warmup_steps, "linear warm-up steps", ints(0, kMaxCount)));
  b.push_back(bind_number("optimizer.weight_decay", &c.optimizer.weight_decay, "AdamW weight decay (matrices only)",
                          floats(0, 10)));
  b.push_back(bind_number("optimizer.beta1", &c.optimizer.beta1, "AdamW beta1", floats(-1, 1, true, true)));
  b.push_back(bind_number("optimizer.beta2", &c.optimizer.beta2, "AdamW beta2", floats(-1, 1, true, true)));
  b.push_back(bind_number("optimizer.eps", &c.optimizer.eps, "AdamW epsilon", floats(0, 1, /*lo_open=*/true)));
  b.push_back(bind_key("data.dir", &c.data.dir, "directory of train_*.bin and val_*.bin shards (from `ember prep`)",
                       path_value(true)));
  b.push_back(bind_key("data.tokenizer", &c.data.tokenizer,
                       "tokenizer the shards were made with: auto (the one data.dir/prep.json records; bytes for "
                       "shards without one when model.vocab_size = 256), bytes, or a tokenizer folder or file "
                       "(tokenizer.json, or GPT-2's vocab.json + merges.txt)",
                       path_value(true)));
  b.push_back(bind_number("eval.every", &c.eval.every, "validation loss every N steps (0: at the end only)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("eval.batches", &c.eval.batches, "validation batches per evaluation", ints(1, 1000000)));
  b.push_back(bind_key("checkpoint.folder", &c.checkpoint.folder,
                       "checkpoint directory (default <run.dir>/checkpoints)", path_value(false)));
  b.push_back(bind_number("checkpoint.interval", &c.checkpoint.interval, "save every N steps (0: at the end only)",
                          ints(0, kMaxCount)));
  b.push_back(bind_number("checkpoint.keep_latest_k", &c.checkpoint.keep_latest_k, "checkpoints kept (0: all)",
                          ints(0, 1000000)));
  b.push_back(
      bind_key("checkpoint.resume", &c.checkpoint.resume, "\"\", \"auto\" or a checkpoint path", path_value(false)));
  b.push_back(bind_key("checkpoint.init_from", &c.checkpoint.init_from,
                       "a fresh run starts from this checkpoint's /model weights (fine-tuning; step 0, fresh "
                       "optimizer and data order; ignored when the run resumes)",
                       path_value(false)));
  b.push_back(bind_key("run.dir", &c.run.dir, "run directory: metrics.jsonl and checkpoints", path_value(true)));
  b.push_back(bind_number("run.log_every", &c.run.log_every, "progress line every N steps", ints(1, kMaxCount)));
  return b;
}

// A key given twice on the command line takes its last value, as with most command-line tools, so scripts can
// append overrides to a common argument list.
po::parsed_options last_occurrence_wins(po::parsed_options parsed) {
  std::vector<po::option> kept;
  for (auto it = parsed.options.rbegin(); it != parsed.options.rend(); ++it) {
    bool seen = false;
    for (const po::option& o : kept) seen = seen || (o.string_key == it->string_key && !o.string_key.empty());
    if (!seen) kept.insert(kept.begin(), *it);
  }
  parsed.options = std::move(kept);
  return parsed;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

std::string fix_hint(const std::string& key) {
  return "fix " + key + " in the config file or pass --" + key + "=VALUE";
}

}  // namespace

std::string render_config_ini(const RunConfig& config) {
  RunConfig copy = config;
  std::ostringstream out;
  std::string section;
  for (const Binding& b : bindings(copy)) {
    if (section_of(b.key) != section) {
      if (!section.empty()) out << "\n";
      section = section_of(b.key);
      out << "[" << section << "]\n";
    }
    out << b.key.substr(b.key.find('.') + 1) << " = " << b.render() << "\n";
  }
  return out.str();
}

std::string config_help() {
  RunConfig c;
  po::options_description desc("config keys (INI [section] key = value, or --section.key=value)");
  for (const Binding& b : bindings(c)) b.declare(desc);
  std::ostringstream out;
  out << desc;
  return out.str();
}

std::string config_reference_markdown() {
  RunConfig c;
  std::ostringstream out;
  out << "# Configuration keys\n\n"
         "<!-- Generated from the option table in src/app/options.cpp; do not edit. After changing the table:\n"
         "     EMBER_UPDATE_DOCS=1 build/tests/test_options --gtest_filter=Options.ConfigReference -->\n\n"
         "Every key of `ember train`. Values come from the defaults below, then the INI file given with `--config`\n"
         "(`[section]` lines, then `key = value`), then the command line as `--section.key=value`; a key given twice\n"
         "on the command line takes its last value. Unknown keys, values of the wrong type and values out of range\n"
         "stop the run before anything is written, with an error naming the key. The resolved configuration is\n"
         "printed at start and stored in every checkpoint. Every rank must resolve the same configuration: if a\n"
         "launcher gives ranks different files or overrides, all ranks stop at start-up naming the first rank and\n"
         "key that differ. `ember train --help` lists the same keys.\n";
  std::string section;
  for (const Binding& b : bindings(c)) {
    if (section_of(b.key) != section) {
      section = section_of(b.key);
      out << "\n## [" << section << "]\n\n| key | default | values | meaning |\n| --- | --- | --- | --- |\n";
    }
    std::string help;  // Markdown: | ends a cell, <...> would be taken for HTML
    for (char ch : b.help) help += ch == '|' ? "\\|" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : std::string(1, ch);
    const std::string value = b.shortest();
    out << "| `" << b.key.substr(b.key.find('.') + 1) << "` | " << (value.empty() ? "(empty)" : "`" + value + "`")
        << " | " << b.values << " | " << help << " |\n";
  }
  return out.str();
}

ParsedRun parse_train_args(int argc, char** argv) {
  ParsedRun parsed;
  RunConfig& c = parsed.config;
  std::vector<Binding> table = bindings(c);
  po::options_description keys("config keys");
  for (const Binding& b : table) b.declare(keys);
  std::string config_file, resume, init_from, stop_after, max_runtime;
  po::options_description cli("ember train options");
  cli.add_options()("help,h", "print this help")("config", po::value<std::string>(&config_file),
                                                 "INI file with [section] key = value lines (at most once)")(
      "resume", po::value<std::string>(&resume), "auto (newest valid checkpoint, if any) or a checkpoint path")(
      "init-from", po::value<std::string>(&init_from),
      "start a fresh run from this checkpoint's weights (checkpoint.init_from; a resume wins)")(
      "stop-after", po::value<std::string>(&stop_after),
      "stop after N >= 1 optimizer steps in this invocation, writing a checkpoint (exit code 0)")(
      "max-runtime", po::value<std::string>(&max_runtime),
      "stop after this many seconds (> 0) of wall clock at a step boundary, writing a checkpoint (exit code 3)")(
      "log-all-ranks", po::bool_switch(&parsed.log_all_ranks), "every rank logs, prefixed with [rank r]")(
      "overwrite", po::bool_switch(&parsed.overwrite),
      "a fresh start in a run.dir with earlier results moves them aside into previous-<time>/ and starts over");
  po::options_description all;
  all.add(cli).add(keys);

  po::variables_map vm;
  const char* source = "command line";
  const std::string see_help = "see `ember train --help` for every key, its type and its default";
  po::parsed_options given = parse_argv(argc, argv, all, "ember train", nullptr);
  // Two config files would silently drop one of them; keys may repeat (the last wins) so scripts can append overrides.
  std::vector<std::string> configs;
  for (const po::option& o : given.options)
    if (o.string_key == "config") configs.insert(configs.end(), o.value.begin(), o.value.end());
  if (configs.size() > 1)
    throw UsageError("ember train: --config given twice (" + configs[0] + ", " + configs[1] + ")",
                     "give one config file and override single keys with --section.key=value");
  try {
    po::store(last_occurrence_wins(std::move(given)), vm);
    if (vm.count("help")) {
      parsed.help = true;
      return parsed;
    }
    if (vm.count("config")) {
      config_file = vm["config"].as<std::string>();
      std::istringstream in(read_config_file(config_file));
      source = nullptr;
      po::store(po::parse_config_file(in, keys, /*allow_unregistered=*/false), vm);
    }
    po::notify(vm);
  } catch (const BadEnumValue& e) {
    // Reported as a value out of range is, from either source: "config: training.device = gpu must be one of: ...".
    const std::string name = e.get_option_name();
    const std::string key = name.substr(std::min(name.find_first_not_of('-'), name.size()));
    throw_error("config: " + key + " = " + e.value() + " " + e.problem(), fix_hint(key));
  } catch (const po::error& e) {
    throw_option_error(e, source ? "command line" : "config file " + config_file, see_help, source != nullptr);
  }
  if (vm.count("stop-after")) {
    const std::string problem = parse_in_domain(stop_after, &parsed.stop_after, Domain<int>{1, kMaxCount});
    if (!problem.empty())
      throw_error("--stop-after " + stop_after + " " + problem,
                  "give the optimizer steps to run, e.g. --stop-after 100");
  }
  if (vm.count("max-runtime")) {
    const std::string problem = parse_in_domain(max_runtime, &parsed.max_runtime, Domain<double>{0, 1e9, true});
    if (!problem.empty())
      throw_error("--max-runtime " + max_runtime + " " + problem, "give seconds, e.g. --max-runtime 3600");
  }
  if (vm.count("resume")) c.checkpoint.resume = resume;
  if (vm.count("init-from")) c.checkpoint.init_from = init_from;
  const auto from = [&](const Binding& b) {
    return vm.count(b.key) && !vm[b.key].defaulted() ? std::string() : std::string(" (default)");
  };
  // Every number is read in its type first, then every key checked, since some domains depend on other keys.
  for (const Binding& b : table) {
    const std::string problem = b.parse();
    if (!problem.empty()) throw_error("config: " + b.key + " = " + b.text() + from(b) + " " + problem, fix_hint(b.key));
  }
  for (const Binding& b : table) {
    const std::string problem = b.check();
    if (!problem.empty()) throw_error("config: " + b.key + " = " + b.text() + from(b) + " " + problem, fix_hint(b.key));
  }
  parsed.config_ini = render_config_ini(c);
  return parsed;
}

}  // namespace ember
