// The one Config: precedence (defaults < INI < command line), and the errors for unknown keys, wrong types and
// out-of-range values, each naming the key; docs/config.md generated from the option table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "app/options.h"
#include "core/error.h"
#include "train/run_config.h"

namespace ember {
namespace {

std::string write_ini(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/ember_options_" + name + ".ini";
  std::ofstream(path) << text;
  return path;
}

ParsedRun parse(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_args(int(argv.size()), argv.data());
}

// The error's message for these args; fails the test when parsing succeeds.
std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty());
    return e.what();
  }
  ADD_FAILURE() << "expected an ember::Error";
  return "";
}

TEST(Options, PrecedenceDefaultsIniCommandLine) {
  const std::string ini = write_ini("prec", "[model]\nn_layer = 3\nn_embd = 48\nn_head = 4\n[optimizer]\nlr = 0.002\n");
  ParsedRun r = parse({"--config", ini, "--optimizer.lr=0.001"});
  EXPECT_EQ(r.config.model.n_layer, 3);  // from the INI file
  EXPECT_EQ(r.config.model.n_embd, 48);
  EXPECT_FLOAT_EQ(r.config.optimizer.lr, 0.001f);                            // command line wins over the file
  EXPECT_EQ(r.config.training.batch_size, RunConfig().training.batch_size);  // default
  EXPECT_NE(r.config_ini.find("[optimizer]\nlr = 0.00100000005"), std::string::npos) << r.config_ini;
}

TEST(Options, LastCommandLineOccurrenceWins) {
  ParsedRun r = parse({"--training.steps=5", "--run.dir=a", "--training.steps=7"});
  EXPECT_EQ(r.config.training.steps, 7);
  EXPECT_EQ(r.config.run.dir, "a");
}

TEST(Options, RenderedIniParsesBackToTheSameConfig) {
  ParsedRun a = parse({"--model.n_layer=5", "--training.seed=99", "--optimizer.min_lr=1e-5", "--run.dir=x/y"});
  const std::string ini = write_ini("round", a.config_ini);
  ParsedRun b = parse({"--config", ini});
  EXPECT_EQ(a.config_ini, b.config_ini);
  EXPECT_EQ(b.config.model.n_layer, 5);
  EXPECT_EQ(b.config.training.seed, 99u);
}

TEST(Options, UnknownKeyInFileIsAnError) {
  const std::string ini = write_ini("unknown", "[model]\nn_layers = 3\n");
  const std::string msg = error_of({"--config", ini});
  EXPECT_NE(msg.find("n_layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find(ini), std::string::npos) << msg;
}

TEST(Options, UnknownKeyOnCommandLineIsAnError) {
  const std::string msg = error_of({"--optimizer.learning_rate=0.1"});
  EXPECT_NE(msg.find("learning_rate"), std::string::npos) << msg;
}

TEST(Options, WrongTypeIsAnError) {
  const std::string msg = error_of({"--training.batch_size=many"});
  EXPECT_NE(msg.find("batch_size"), std::string::npos) << msg;
}

TEST(Options, NegativeLearningRateIsAnError) {
  const std::string msg = error_of({"--optimizer.lr=-0.1"});
  EXPECT_NE(msg.find("optimizer.lr"), std::string::npos) << msg;
}

// The center's momentum may be negative (the async default is), but not reach -1 or 1, where it never decays.
TEST(Options, OuterMomentumRangeIsOpenMinusOneToOne) {
  EXPECT_FLOAT_EQ(parse({"--async.outer_momentum=-0.9"}).config.async.outer_momentum, -0.9f);
  EXPECT_LT(RunConfig().async.outer_momentum, 0.0f);
  for (const char* bad : {"--async.outer_momentum=1", "--async.outer_momentum=-1"}) {
    const std::string msg = error_of({bad});
    EXPECT_NE(msg.find("async.outer_momentum"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(-1, 1)"), std::string::npos) << msg;
  }
}

// The workers' AdamW beta1 in async mode: its own option, below sync's by default, leaving optimizer.beta1 alone;
// the range of any AdamW beta.
TEST(Options, InnerBeta1IsTheWorkersOwn) {
  const RunConfig d;
  EXPECT_LT(d.async.inner_beta1, d.optimizer.beta1);
  const RunConfig c = parse({"--async.inner_beta1=0.7"}).config;
  EXPECT_FLOAT_EQ(c.async.inner_beta1, 0.7f);
  EXPECT_FLOAT_EQ(c.optimizer.beta1, d.optimizer.beta1);
  for (const char* bad : {"--async.inner_beta1=1", "--async.inner_beta1=-1", "--async.inner_beta1=nan"}) {
    const std::string msg = error_of({bad});
    EXPECT_NE(msg.find("async.inner_beta1"), std::string::npos) << msg;
  }
}

// dist.timeout: a few minutes by default, in the resolved INI under [dist]; zero, negative, non-finite or over a day
// are errors naming it.
TEST(Options, DistTimeoutIsPositiveSecondsUnderADay) {
  EXPECT_FLOAT_EQ(RunConfig{}.dist.timeout, 300.0f);
  const ParsedRun p = parse({"--dist.timeout=45"});
  EXPECT_FLOAT_EQ(p.config.dist.timeout, 45.0f);
  EXPECT_NE(p.config_ini.find("[dist]\ntimeout = 45"), std::string::npos) << p.config_ini;
  for (const char* bad :
       {"--dist.timeout=0", "--dist.timeout=-5", "--dist.timeout=inf", "--dist.timeout=90000", "--dist.timeout=soon"}) {
    const std::string msg = error_of({bad});
    EXPECT_NE(msg.find("dist.timeout"), std::string::npos) << bad << ": " << msg;
  }
}

// async.worker_timeout: two minutes by default; the same bounds as the other timeouts, with errors naming it.
TEST(Options, WorkerTimeoutIsPositiveSecondsUnderADay) {
  EXPECT_FLOAT_EQ(RunConfig{}.async.worker_timeout, 120.0f);
  EXPECT_FLOAT_EQ(parse({"--async.worker_timeout=7.5"}).config.async.worker_timeout, 7.5f);
  for (const char* bad : {"--async.worker_timeout=0", "--async.worker_timeout=-1", "--async.worker_timeout=nan",
                          "--async.worker_timeout=86401", "--async.worker_timeout="}) {
    const std::string msg = error_of({bad});
    EXPECT_NE(msg.find("async.worker_timeout"), std::string::npos) << bad << ": " << msg;
  }
}

// training.deterministic: on unless switched off; a boolean, so anything but true/false (1/0) is an error naming it.
TEST(Options, DeterministicIsOnByDefaultAndBoolean) {
  EXPECT_TRUE(parse({}).config.training.deterministic);
  EXPECT_FALSE(parse({"--training.deterministic=false"}).config.training.deterministic);
  EXPECT_NE(parse({"--training.deterministic=false"}).config_ini.find("deterministic = false"), std::string::npos);
  const std::string msg = error_of({"--training.deterministic=sometimes"});
  EXPECT_NE(msg.find("training.deterministic"), std::string::npos) << msg;
}

TEST(Options, SequenceLongerThanBlockSizeIsAnError) {
  const std::string msg = error_of({"--model.block_size=16", "--training.seq_len=32"});
  EXPECT_NE(msg.find("training.seq_len"), std::string::npos) << msg;
  EXPECT_NE(msg.find("block_size"), std::string::npos) << msg;
}

TEST(Options, EmbeddingMustDivideIntoHeads) {
  const std::string msg = error_of({"--model.n_head=3", "--model.n_embd=32"});
  EXPECT_NE(msg.find("model.n_embd"), std::string::npos) << msg;
}

// The attention schedule: presets resolved for the model's depth, lists one per layer or one for all, and each bad
// value refused naming its key (model/attention_schedule.h).
TEST(Options, AttentionPresetsResolvePerLayer) {
  const ModelConfig t = parse({"--model.n_layer=12", "--model.attention_windows=tscale"}).config.model;
  EXPECT_EQ(t.attention_windows, (std::vector<int>{1, 1, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0}));
  EXPECT_EQ(t.alibi_slopes, (std::vector<float>{0, 0, 0.5f, 0, 0.5f, 0, 0.5f, 0, 0.5f, 0, 0.5f, 0}));
  const ModelConfig s =
      parse({"--model.n_layer=6", "--model.block_size=256", "--model.attention_windows=sssl"}).config.model;
  EXPECT_EQ(s.attention_windows, (std::vector<int>{128, 128, 128, 0, 128, 0}));
  EXPECT_TRUE(s.alibi_slopes.empty());
  // A preset's slopes give way to explicit ones; one value stands for every layer; all-full is GPT-2's.
  const ModelConfig o =
      parse({"--model.n_layer=4", "--model.attention_windows=tscale", "--model.alibi_slopes=0.25"}).config.model;
  EXPECT_EQ(o.alibi_slopes, (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}));
  EXPECT_TRUE(parse({"--model.n_layer=3", "--model.attention_windows=full,full,full"}).config.model.is_gpt2());
  const ModelConfig r = parse({"--model.position=rope", "--model.rope_theta=500000"}).config.model;
  EXPECT_EQ(r.attention(1).rope_theta, 500000.0f);
  EXPECT_FALSE(r.has_wpe());
}

TEST(Options, AttentionScheduleRoundTripsThroughTheRenderedIni) {
  const ParsedRun a = parse({"--model.n_layer=5", "--model.attention_windows=tscale", "--model.position=rope"});
  const ParsedRun b = parse({"--config", write_ini("schedule", a.config_ini)});
  EXPECT_EQ(a.config.model, b.config.model);
  EXPECT_EQ(a.config_ini, b.config_ini);
}

TEST(Options, BadAttentionSchedulesNameTheKey) {
  const struct {
    std::vector<std::string> args;
    const char* key;
    const char* says;
  } cases[] = {
      {{"--model.n_layer=3", "--model.attention_windows=1,full"}, "model.attention_windows", "one window per layer"},
      {{"--model.attention_windows=0"}, "model.attention_windows", "positive integer"},
      {{"--model.attention_windows=-4"}, "model.attention_windows", "positive integer"},
      {{"--model.attention_windows=ssl"}, "model.attention_windows", "'ssl'"},
      {{"--model.alibi_slopes=-0.5"}, "model.alibi_slopes", ">= 0"},
      {{"--model.n_layer=2", "--model.alibi_slopes=0,0.5,1"}, "model.alibi_slopes", "one slope per layer"},
      {{"--model.alibi_slopes=nan"}, "model.alibi_slopes", "finite"},
      {{"--model.n_head=2", "--model.n_embd=30", "--model.position=rope"}, "model.position", "even head size"},
      {{"--model.rope_theta=0.5"}, "model.rope_theta", ""},
      {{"--model.position=alibi"}, "model.position", "learned, rope"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.args);
    EXPECT_NE(msg.find(c.key), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

TEST(Options, MissingConfigFileIsAnError) {
  const std::string msg = error_of({"--config", "/nonexistent/ember.ini"});
  EXPECT_NE(msg.find("/nonexistent/ember.ini"), std::string::npos) << msg;
}

// Each closed set of values, spelled as the INI file and the command line spell it (independently of the enums' own
// name functions), with a value that is none of them.
struct EnumKey {
  const char* key;
  std::vector<const char*> names;
  const char* bad;
};
const std::vector<EnumKey> kEnumKeys = {
    {"training.mode", {"sync", "async"}, "asynchronous"},
    {"training.device", {"cpu", "cuda", "auto"}, "gpu"},
    {"training.comm", {"auto", "nccl", "mpi"}, "gloo"},
    {"training.recompute", {"none", "attention", "full"}, "selective"},
    {"training.precision", {"auto", "fp32", "bf16", "int8", "fp8"}, "fp16"},
    {"training.offload", {"none", "optimizer"}, "cpu"},
};

// "section.key = value" as the rendered INI writes it: "[section]\n...key = value\n".
bool renders(const std::string& ini, const std::string& key, const std::string& value) {
  const std::string section = "[" + key.substr(0, key.find('.')) + "]\n";
  const size_t at = ini.find(section);
  const size_t end = ini.find("\n[", at);
  const size_t line = ini.find("\n" + key.substr(key.find('.') + 1) + " = " + value + "\n", at);
  return at != std::string::npos && line != std::string::npos && line < end;
}

TEST(Options, EveryEnumNameParsesToItsValue) {
  const RunConfig defaults;
  EXPECT_EQ(defaults.training.mode, TrainingMode::sync);
  EXPECT_EQ(defaults.training.device, DeviceRequest::cpu);
  EXPECT_EQ(defaults.training.comm, CommRequest::automatic);
  EXPECT_EQ(defaults.training.recompute, Recompute::none);
  EXPECT_EQ(defaults.training.precision, PrecisionRequest::automatic);

  const auto with = [](const char* key, const char* value) { return parse({std::string("--") + key + "=" + value}); };
  EXPECT_EQ(with("training.mode", "sync").config.training.mode, TrainingMode::sync);
  EXPECT_EQ(with("training.mode", "async").config.training.mode, TrainingMode::async);
  EXPECT_EQ(with("training.device", "cpu").config.training.device, DeviceRequest::cpu);
  EXPECT_EQ(with("training.device", "cuda").config.training.device, DeviceRequest::cuda);
  EXPECT_EQ(with("training.device", "auto").config.training.device, DeviceRequest::automatic);
  EXPECT_EQ(with("training.comm", "auto").config.training.comm, CommRequest::automatic);
  EXPECT_EQ(with("training.comm", "nccl").config.training.comm, CommRequest::nccl);
  EXPECT_EQ(with("training.comm", "mpi").config.training.comm, CommRequest::mpi);
  EXPECT_EQ(with("training.recompute", "none").config.training.recompute, Recompute::none);
  EXPECT_EQ(with("training.recompute", "attention").config.training.recompute, Recompute::attention);
  EXPECT_EQ(with("training.recompute", "full").config.training.recompute, Recompute::full);
  EXPECT_EQ(with("training.precision", "auto").config.training.precision, PrecisionRequest::automatic);
  EXPECT_EQ(with("training.precision", "fp32").config.training.precision, PrecisionRequest::fp32);
  EXPECT_EQ(with("training.precision", "bf16").config.training.precision, PrecisionRequest::bf16);
  EXPECT_EQ(defaults.training.offload, Offload::none);
  EXPECT_EQ(with("training.offload", "none").config.training.offload, Offload::none);
  EXPECT_EQ(with("training.offload", "optimizer").config.training.offload, Offload::optimizer);

  // Every name is accepted from an INI file too, and rendered back as it was written.
  for (const EnumKey& k : kEnumKeys) {
    for (const char* name : k.names) {
      const std::string section = std::string(k.key).substr(0, std::string(k.key).find('.'));
      const std::string ini = write_ini(
          "enum", "[" + section + "]\n" + std::string(k.key).substr(section.size() + 1) + " = " + name + "\n");
      const ParsedRun r = parse({"--config", ini});
      EXPECT_TRUE(renders(r.config_ini, k.key, name)) << k.key << " = " << name << "\n" << r.config_ini;
      EXPECT_EQ(r.config_ini, with(k.key, name).config_ini) << k.key << " = " << name;
    }
  }
}

TEST(Options, RenderedIniRoundTripsEveryEnumName) {
  for (const EnumKey& k : kEnumKeys) {
    for (const char* name : k.names) {
      const std::string first = parse({std::string("--") + k.key + "=" + name}).config_ini;
      const std::string again = parse({"--config", write_ini("enum_round", first)}).config_ini;
      EXPECT_EQ(first, again) << k.key << " = " << name;
      EXPECT_EQ(render_config_ini(parse({"--config", write_ini("enum_round", first)}).config), first);
    }
  }
  // All at once, none of them the default.
  const ParsedRun a = parse({"--training.mode=async", "--training.device=auto", "--training.comm=mpi",
                             "--training.recompute=attention", "--training.precision=bf16"});
  for (auto [key, value] : {std::pair{"training.mode", "async"},
                            {"training.device", "auto"},
                            {"training.comm", "mpi"},
                            {"training.recompute", "attention"},
                            {"training.precision", "bf16"}})
    EXPECT_TRUE(renders(a.config_ini, key, value)) << key << " = " << value << "\n" << a.config_ini;
  EXPECT_EQ(parse({"--config", write_ini("enum_all", a.config_ini)}).config_ini, a.config_ini);
}

// data.tokenizer is a string: auto by default, and bytes or any path kept as given (old configs say bytes).
TEST(Options, TokenizerIsAutoBytesOrAPath) {
  EXPECT_EQ(RunConfig{}.data.tokenizer, "auto");
  for (const char* value : {"auto", "bytes", "data/gpt2-tokenizer", "/abs/tok/tokenizer.json"}) {
    const ParsedRun p = parse({std::string("--data.tokenizer=") + value});
    EXPECT_EQ(p.config.data.tokenizer, value);
    EXPECT_TRUE(renders(p.config_ini, "data.tokenizer", value)) << p.config_ini;
  }
  EXPECT_NE(error_of({"--data.tokenizer="}).find("data.tokenizer"), std::string::npos);
}

TEST(Options, BadEnumValueNamesTheKeyAndTheChoices) {
  for (const EnumKey& k : kEnumKeys) {
    std::string one_of = "must be one of: ";
    for (size_t i = 0; i < k.names.size(); ++i) one_of += (i ? ", " : "") + std::string(k.names[i]);
    const std::string expected = std::string("config: ") + k.key + " = " + k.bad + " " + one_of;
    EXPECT_EQ(error_of({std::string("--") + k.key + "=" + k.bad}), expected);

    const std::string section = std::string(k.key).substr(0, std::string(k.key).find('.'));
    const std::string ini = write_ini(
        "bad_enum", "[" + section + "]\n" + std::string(k.key).substr(section.size() + 1) + " = " + k.bad + "\n");
    EXPECT_EQ(error_of({"--config", ini}), expected);
  }
}

TEST(Options, ShippedConfigsParse) {
  for (const char* name : {"tiny", "demo", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"}) {
    const std::string path = std::string(EMBER_SOURCE_DIR) + "/configs/" + name + ".ini";
    EXPECT_NO_THROW(parse({"--config", path})) << path;
  }
}

}  // namespace
}  // namespace ember

namespace {

// Every config key, "section.key", as the rendered INI of the defaults holds them.
std::set<std::string> config_keys() {
  std::set<std::string> keys;
  std::istringstream ini(ember::render_config_ini(ember::RunConfig{}));
  std::string section;
  for (std::string line; std::getline(ini, line);) {
    if (line.empty()) continue;
    if (line[0] == '[')
      section = line.substr(1, line.size() - 2);
    else
      keys.insert(section + "." + line.substr(0, line.find(' ')));
  }
  return keys;
}

}  // namespace

// docs/config.md is generated from the option table: a key added, renamed or given another default or range without
// regenerating it fails here. EMBER_UPDATE_DOCS=1 rewrites the file instead.
TEST(Options, ConfigReference) {
  const std::string path = std::string(EMBER_SOURCE_DIR) + "/docs/config.md";
  const std::string generated = ember::config_reference_markdown();
  if (const char* update = std::getenv("EMBER_UPDATE_DOCS"); update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << generated;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing";
  const std::string on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(on_disk, generated)
      << path << " differs from the option table; regenerate it with\n"
      << "  EMBER_UPDATE_DOCS=1 build/tests/test_options --gtest_filter=Options.ConfigReference";
  // Every key the rendered INI holds has its row.
  for (const std::string& key : config_keys()) {
    const std::string name = key.substr(key.find('.') + 1);
    EXPECT_NE(generated.find("| `" + name + "` |"), std::string::npos) << key;
  }
}

// Every config key an error, a hint or a help text names ("set training.seq_len >= 1") is a real key: a message
// naming a key that does not exist sends the user after nothing. String literals of src/ and cuda/ are scanned for
// "<section>.<key>"; the JSON paths of tokenizer.json and Hugging Face's file name are the only other such words.
TEST(Options, EveryKeyAMessageNamesExists) {
  const std::set<std::string> keys = config_keys();
  const std::set<std::string> not_keys = {"model.safetensors", "model.vocab", "model.merges"};
  const std::regex literal(R"("(?:[^"\\\n]|\\.)*")");
  const std::regex named(
      R"((^|[^\w/.-])((model|training|async|dist|optimizer|data|eval|checkpoint|run)\.[a-z][a-z_0-9]*))");
  int scanned = 0;
  for (const char* folder : {"src", "cuda"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::string(EMBER_SOURCE_DIR) + "/" + folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ++scanned;
      for (std::sregex_iterator l(text.begin(), text.end(), literal), end; l != end; ++l) {
        const std::string s = l->str();
        for (std::sregex_iterator k(s.begin(), s.end(), named); k != end; ++k) {
          const std::string key = (*k)[2].str();
          EXPECT_TRUE(keys.count(key) || not_keys.count(key))
              << entry.path().string() << " names " << key << ", which is no config key, in " << s;
        }
      }
    }
  }
  EXPECT_GT(scanned, 100) << "the scan found too few sources under " << EMBER_SOURCE_DIR;
}
