// Option definitions (implementation): a single table of bindings drives parsing, validation and rendering, so a
// key cannot be parsed under one name and rendered under another.
#include "app/options.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "core/enum_names.h"
#include "core/error.h"

namespace po = boost::program_options;

namespace ember {
namespace {

std::string format_value(int v) { return std::to_string(v); }
std::string format_value(bool v) { return v ? "true" : "false"; }
std::string format_value(uint64_t v) { return std::to_string(v); }
std::string format_value(float v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.9g", v);  // 9 significant digits round-trip any float
  return buf;
}
std::string format_value(const std::string& v) { return v; }

// The closed sets of values: every enumerator, its name and the module's parser, so that each option's value is
// parsed once, here, and rendered by the same name.
template <class E>
struct EnumOption;
template <>
struct EnumOption<TrainingMode> {
  static constexpr TrainingMode values[] = {TrainingMode::sync, TrainingMode::async};
  static std::string name(TrainingMode v) { return training_mode_name(v); }
  static std::optional<TrainingMode> parse(const std::string& s) { return parse_training_mode(s); }
};
template <>
struct EnumOption<DeviceRequest> {
  static constexpr const auto& values = kDeviceRequests;
  static std::string name(DeviceRequest v) { return device_request_name(v); }
  static std::optional<DeviceRequest> parse(const std::string& s) { return parse_device_request(s); }
};
template <>
struct EnumOption<CommRequest> {
  static constexpr const auto& values = kCommRequests;
  static std::string name(CommRequest v) { return comm_request_name(v); }
  static std::optional<CommRequest> parse(const std::string& s) { return parse_comm_request(s); }
};
template <>
struct EnumOption<Recompute> {
  static constexpr const auto& values = kRecomputes;
  static std::string name(Recompute v) { return recompute_name(v); }
  static std::optional<Recompute> parse(const std::string& s) { return parse_recompute(s); }
};
template <>
struct EnumOption<MatmulPrecision> {
  static constexpr const auto& values = kMatmulPrecisions;
  static std::string name(MatmulPrecision v) { return matmul_precision_name(v); }
  static std::optional<MatmulPrecision> parse(const std::string& s) { return parse_matmul_precision(s); }
};
template <>
struct EnumOption<TokenizerKind> {
  static constexpr const auto& values = kTokenizerKinds;
  static std::string name(TokenizerKind v) { return tokenizer_kind_name(v); }
  static std::optional<TokenizerKind> parse(const std::string& s) { return parse_tokenizer_kind(s); }
};

template <class E>
concept EnumOptionType = requires(E v) {
  EnumOption<E>::name(v);
};

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

// One bound key: how to declare it to Boost, render it, and check its range.
struct Binding {
  std::string key;  // "section.key"
  std::function<void(po::options_description&)> declare;
  std::function<std::string()> render;
  std::function<std::string()> check;  // "" when valid, else what the value must be
};

template <class T>
Binding bind_key(const char* key, T* field, const char* help, std::function<std::string(T)> check = nullptr) {
  Binding b;
  b.key = key;
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<T>(field)->default_value(*field, format_value(*field)), help);
  };
  b.render = [=] { return format_value(*field); };
  b.check = [=] { return check ? check(*field) : std::string(); };
  return b;
}

std::function<std::string(int)> at_least(int lo) {
  return [=](int v) { return v >= lo ? "" : "must be >= " + std::to_string(lo); };
}
std::function<std::string(int)> in_range(int lo, int hi) {
  return [=](int v) {
    return v >= lo && v <= hi ? "" : "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  };
}

std::vector<Binding> bindings(RunConfig& c) {
  std::vector<Binding> b;
  b.push_back(bind_key("model.n_layer", &c.model.n_layer, "transformer blocks", at_least(1)));
  b.push_back(bind_key("model.n_head", &c.model.n_head, "attention heads per block", at_least(1)));
  b.push_back(bind_key<int>("model.n_embd", &c.model.n_embd, "embedding width C (a multiple of n_head)", [&c](int v) {
    if (v < 1) return std::string("must be >= 1");
    if (c.model.n_head >= 1 && v % c.model.n_head != 0)
      return "must be a multiple of model.n_head = " + std::to_string(c.model.n_head);
    return std::string();
  }));
  b.push_back(bind_key("model.block_size", &c.model.block_size, "maximum sequence length", in_range(1, 1 << 20)));
  b.push_back(bind_key("model.vocab_size", &c.model.vocab_size, "vocabulary size (256 for the byte tokenizer)",
                       in_range(2, 65536)));
  b.push_back(bind_key("training.batch_size", &c.training.batch_size, "micro-batch size B", at_least(1)));
  b.push_back(
      bind_key<int>("training.seq_len", &c.training.seq_len, "sequence length T (<= model.block_size)", [&c](int v) {
        if (v < 1) return std::string("must be >= 1");
        if (v > c.model.block_size) return "must be <= model.block_size = " + std::to_string(c.model.block_size);
        return std::string();
      }));
  b.push_back(bind_key("training.grad_accum_steps", &c.training.grad_accum_steps, "micro-batches per optimizer step",
                       at_least(1)));
  b.push_back(bind_key("training.steps", &c.training.steps, "optimizer steps of the whole run", at_least(1)));
  b.push_back(bind_key("training.seed", &c.training.seed, "seed of initialisation and data order"));
  b.push_back(bind_key<float>("training.max_norm", &c.training.max_norm, "clip gradients to this L2 norm (0: off)",
                              [](float v) { return v >= 0 ? "" : "must be >= 0"; }));
  b.push_back(
      bind_key("training.threads", &c.training.threads, "CPU threads per rank (0: OpenMP default)", at_least(0)));
  b.push_back(
      bind_key("training.zero", &c.training.zero, "ZeRO stage: 0 (off) or 1 (shard optimizer state)", in_range(0, 1)));
  b.push_back(bind_key<float>("training.bucket_mb", &c.training.bucket_mb, "gradient all-reduce bucket size (MiB)",
                              [](float v) { return v > 0 ? "" : "must be > 0"; }));
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
                       "GEMM inputs: fp32, or bf16 (rounded to bf16, accumulated in fp32; weights, gradients and "
                       "AdamW stay fp32)"));
  b.push_back(bind_key("training.deterministic", &c.training.deterministic,
                       "bitwise-repeatable GPU results (false lets cuBLAS reduce with atomics; the CPU backend is "
                       "deterministic either way)"));
  b.push_back(
      bind_key("async.local_steps", &c.async.local_steps, "async: worker steps between syncs (H)", at_least(1)));
  b.push_back(bind_key("async.block_size", &c.async.block_size, "async: values per fp32 scale of a 1-bit message",
                       in_range(8, 1 << 24)));
  b.push_back(bind_key<float>("async.outer_lr", &c.async.outer_lr, "async: the center's learning rate on deltas",
                              [](float v) { return v > 0 && v <= 10 ? "" : "must be in (0, 10]"; }));
  b.push_back(bind_key<float>("async.outer_momentum", &c.async.outer_momentum, "async: the center's Nesterov momentum",
                              [](float v) { return v > -1 && v < 1 ? "" : "must be in (-1, 1)"; }));
  b.push_back(bind_key<float>("async.center_timeout", &c.async.center_timeout,
                              "async: seconds a worker waits for the center before failing",
                              [](float v) { return v > 0 ? "" : "must be > 0"; }));
  b.push_back(bind_key("async.error_feedback", &c.async.error_feedback,
                       "async (test-only switch): keep what the 1-bit compression lost for the next message"));
  b.push_back(bind_key("async.test_slow_worker", &c.async.test_slow_worker,
                       "async (test-only): this worker rank trains test_slowdown times slower (0: none)", at_least(0)));
  b.push_back(bind_key<float>("async.test_slowdown", &c.async.test_slowdown, "async (test-only): slowdown factor",
                              [](float v) { return v >= 1 && v <= 1000 ? "" : "must be in [1, 1000]"; }));
  b.push_back(bind_key("async.test_center_stall", &c.async.test_center_stall,
                       "async (test-only): the center stops serving after this many versions (0: never)", at_least(0)));
  b.push_back(bind_key<float>("optimizer.lr", &c.optimizer.lr, "peak learning rate",
                              [](float v) { return v > 0 && v < 10 ? "" : "must be in (0, 10)"; }));
  b.push_back(
      bind_key<float>("optimizer.min_lr", &c.optimizer.min_lr, "learning rate at the end of the cosine decay",
                      [&c](float v) { return v >= 0 && v <= c.optimizer.lr ? "" : "must be in [0, optimizer.lr]"; }));
  b.push_back(bind_key("optimizer.warmup_steps", &c.optimizer.warmup_steps, "linear warm-up steps", at_least(0)));
  b.push_back(bind_key<float>("optimizer.weight_decay", &c.optimizer.weight_decay, "AdamW weight decay (matrices only)",
                              [](float v) { return v >= 0 ? "" : "must be >= 0"; }));
  auto beta = [](float v) { return v > -1 && v < 1 ? "" : "must be in (-1, 1)"; };
  b.push_back(bind_key<float>("optimizer.beta1", &c.optimizer.beta1, "AdamW beta1", beta));
  b.push_back(bind_key<float>("optimizer.beta2", &c.optimizer.beta2, "AdamW beta2", beta));
  b.push_back(bind_key<float>("optimizer.eps", &c.optimizer.eps, "AdamW epsilon",
                              [](float v) { return v > 0 ? "" : "must be > 0"; }));
  b.push_back(bind_key("data.dir", &c.data.dir, "directory of train_*.bin and val_*.bin shards (from `ember prep`)"));
  b.push_back(bind_key("data.tokenizer", &c.data.tokenizer, "tokenizer the shards were made with"));
  b.push_back(bind_key("eval.every", &c.eval.every, "validation loss every N steps (0: at the end only)", at_least(0)));
  b.push_back(bind_key("eval.batches", &c.eval.batches, "validation batches per evaluation", at_least(1)));
  b.push_back(
      bind_key("checkpoint.folder", &c.checkpoint.folder, "checkpoint directory (default <run.dir>/checkpoints)"));
  b.push_back(
      bind_key("checkpoint.interval", &c.checkpoint.interval, "save every N steps (0: at the end only)", at_least(0)));
  b.push_back(
      bind_key("checkpoint.keep_latest_k", &c.checkpoint.keep_latest_k, "checkpoints kept (0: all)", at_least(0)));
  b.push_back(bind_key("checkpoint.resume", &c.checkpoint.resume, "\"\", \"auto\" or a checkpoint path"));
  b.push_back(bind_key("run.dir", &c.run.dir, "run directory: metrics.jsonl and checkpoints"));
  b.push_back(bind_key("run.log_every", &c.run.log_every, "progress line every N steps", at_least(1)));
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

ParsedRun parse_train_args(int argc, char** argv) {
  ParsedRun parsed;
  RunConfig& c = parsed.config;
  std::vector<Binding> table = bindings(c);
  po::options_description keys("config keys");
  for (const Binding& b : table) b.declare(keys);
  std::string config_file, resume;
  po::options_description cli("ember train options");
  cli.add_options()("help,h", "print this help")("config", po::value<std::string>(&config_file),
                                                 "INI file with [section] key = value lines")(
      "resume", po::value<std::string>(&resume), "auto (newest valid checkpoint, if any) or a checkpoint path")(
      "stop-after", po::value<int>(&parsed.stop_after)->default_value(0),
      "stop after N optimizer steps in this invocation, writing a checkpoint")(
      "max-runtime", po::value<double>(&parsed.max_runtime)->default_value(0),
      "stop after this many seconds of wall clock at a step boundary, writing a checkpoint (exit code 3)")(
      "log-all-ranks", po::bool_switch(&parsed.log_all_ranks), "every rank logs, prefixed with [rank r]")(
      "overwrite", po::bool_switch(&parsed.overwrite),
      "a fresh start in a run.dir with earlier results moves them aside into previous-<time>/ and starts over");
  po::options_description all;
  all.add(cli).add(keys);

  po::variables_map vm;
  const char* source = "command line";
  try {
    po::store(last_occurrence_wins(po::command_line_parser(argc, argv).options(all).run()), vm);
    if (vm.count("help")) {
      parsed.help = true;
      return parsed;
    }
    if (vm.count("config")) {
      config_file = vm["config"].as<std::string>();
      std::ifstream in(config_file);
      if (!in)
        throw_error("config file " + config_file + ": cannot open",
                    "give an existing INI file, e.g. --config configs/tiny.ini");
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
    const std::string where = source ? "command line" : "config file " + config_file;
    throw_error(where + ": " + e.what(), "see `ember train --help` for every key, its type and its default");
  }
  if (parsed.stop_after < 0)
    throw_error("--stop-after " + std::to_string(parsed.stop_after) + ": must be >= 0", "give a step count");
  if (parsed.max_runtime < 0)
    throw_error("--max-runtime " + std::to_string(parsed.max_runtime) + ": must be >= 0", "give seconds, e.g. 3600");
  if (vm.count("resume")) c.checkpoint.resume = resume;
  for (const Binding& b : table) {
    const std::string problem = b.check();
    if (!problem.empty()) {
      const std::string from = vm.count(b.key) && !vm[b.key].defaulted() ? "" : " (default)";
      throw_error("config: " + b.key + " = " + b.render() + from + " " + problem, fix_hint(b.key));
    }
  }
  parsed.config_ini = render_config_ini(c);
  return parsed;
}

}  // namespace ember
