// Every option's domain: numbers are read whole in their type (no wrapped negatives, no overflow), floats are finite,
// thread counts stay near the hardware, config files are bounded regular files, and the command line takes only its
// options, each config file once. Each check names the key, the value and the allowed range.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "app/options.h"
#include "core/error.h"

namespace ember {
namespace {

namespace po = boost::program_options;

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/ember_domain_" + name; }

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return argv;
}

ParsedRun parse(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  std::vector<char*> argv = argv_of(args);
  return parse_train_args(int(argv.size()), argv.data());
}

// The error of these train args: its message, and whether it is a usage error. Fails the test when parsing succeeds.
std::pair<std::string, bool> error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty());
    return {e.what(), dynamic_cast<const UsageError*>(&e) != nullptr};
  }
  ADD_FAILURE() << "expected an ember::Error";
  return {"", false};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every numeric key of the rendered default config ("key = value" lines whose value reads as a number).
std::vector<std::string> numeric_keys() {
  std::istringstream in(render_config_ini(RunConfig()));
  std::vector<std::string> keys;
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[') section = line.substr(1, line.size() - 2);
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string value = line.substr(eq + 3);
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    if (!value.empty() && *end == '\0') keys.push_back(section + "." + line.substr(0, eq));
  }
  return keys;
}

TEST(OptionsDomain, EveryNumericKeyRefusesNonFiniteAndOutOfTypeValues) {
  const std::vector<std::string> keys = numeric_keys();
  EXPECT_GE(keys.size(), 30u);  // every int, unsigned and float key of the table
  for (const std::string& key : keys)
    for (const char* bad : {"nan", "inf", "-inf", "1e300", "-1e300", "99999999999999999999", "3x"}) {
      const auto [msg, usage] = error_of({"--" + key + "=" + bad});
      EXPECT_TRUE(contains(msg, "config: " + key + " = " + bad + " must be ")) << key << "=" << bad << ": " << msg;
      EXPECT_TRUE(contains(msg, "[") || contains(msg, "(")) << msg;  // the allowed range
      EXPECT_FALSE(usage) << msg;
    }
}

TEST(OptionsDomain, FloatsMustBeFiniteFromTheFileToo) {
  for (const char* bad : {"nan", "inf", "-inf"}) {
    const std::string ini = write_file("nan.ini", std::string("[optimizer]\neps = ") + bad + "\n");
    const std::string msg = error_of({"--config", ini}).first;
    EXPECT_EQ(msg, std::string("config: optimizer.eps = ") + bad + " must be a finite number in (0, 1]");
  }
  EXPECT_FLOAT_EQ(parse({"--optimizer.eps=1e-6"}).config.optimizer.eps, 1e-6f);
}

TEST(OptionsDomain, NegativeUnsignedIsRefusedNotWrapped) {
  EXPECT_EQ(error_of({"--training.seed=-1"}).first,
            "config: training.seed = -1 must be an integer in [0, 18446744073709551615]");
  const std::string ini = write_file("seed.ini", "[training]\nseed = -1\n");
  EXPECT_TRUE(contains(error_of({"--config", ini}).first, "training.seed = -1 must be an integer"));
  EXPECT_EQ(parse({"--training.seed=18446744073709551615"}).config.training.seed, 18446744073709551615ull);
  EXPECT_EQ(parse({"--training.seed=+7"}).config.training.seed, 7u);
}

TEST(OptionsDomain, IntegerOverflowIsRefusedWithTheRange) {
  EXPECT_EQ(error_of({"--training.steps=99999999999"}).first,
            "config: training.steps = 99999999999 must be an integer in [1, 1000000000]");
  EXPECT_TRUE(contains(error_of({"--model.n_layer=100000000"}).first, "model.n_layer = 100000000"));
}

TEST(OptionsDomain, ThreadsAtMostFourTimesTheHardware) {
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) EXPECT_EQ(max_training_threads(), 4 * int(hw));
  const int most = max_training_threads();
  EXPECT_EQ(parse({"--training.threads=" + std::to_string(most)}).config.training.threads, most);
  const std::string msg = error_of({"--training.threads=" + std::to_string(most + 1)}).first;
  EXPECT_EQ(msg, "config: training.threads = " + std::to_string(most + 1) + " must be an integer in [0, " +
                     std::to_string(most) + "]");
  EXPECT_TRUE(contains(error_of({"--training.threads=10000"}).first, "training.threads"));
  EXPECT_TRUE(contains(error_of({"--training.threads=-1"}).first, "training.threads"));
}

TEST(OptionsDomain, ConfigMustBeARegularFile) {
  EXPECT_TRUE(contains(error_of({"--config", ::testing::TempDir()}).first, "not a regular file (a directory)"));
  EXPECT_TRUE(contains(error_of({"--config", "/dev/zero"}).first, "/dev/zero: not a regular file"));
  const std::string fifo = temp_path("fifo.ini");
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(contains(error_of({"--config", fifo}).first, fifo + ": not a regular file"));  // never opened: no hang
  std::remove(fifo.c_str());
}

TEST(OptionsDomain, ConfigAtMostOneMebibyte) {
  const std::string head = "[model]\nn_layer = 3\n";
  std::string text = head + "#" + std::string(kMaxConfigFileBytes - head.size() - 2, '-') + "\n";
  ASSERT_EQ(text.size(), kMaxConfigFileBytes);
  EXPECT_EQ(parse({"--config", write_file("limit.ini", text)}).config.model.n_layer, 3);
  const std::string over = write_file("over.ini", text + "\n");
  EXPECT_TRUE(contains(error_of({"--config", over}).first, "1048577 bytes, more than a config file's limit"));
}

TEST(OptionsDomain, SecondConfigIsAUsageError) {
  const std::string a = write_file("a.ini", "[model]\nn_layer = 3\n"),
                    b = write_file("b.ini", "[model]\nn_layer = 4\n");
  const auto [msg, usage] = error_of({"--config", a, "--config", b});
  EXPECT_TRUE(usage);
  EXPECT_TRUE(contains(msg, "--config given twice")) << msg;
  EXPECT_EQ(parse({"--config", a, "--model.n_layer=5", "--model.n_layer=6"}).config.model.n_layer, 6);  // keys: last
}

TEST(OptionsDomain, StrayArgumentsAndUnknownOptionsAreUsageErrors) {
  auto [msg, usage] = error_of({"--training.steps=5", "extra"});
  EXPECT_TRUE(usage);
  EXPECT_TRUE(contains(msg, "unexpected argument 'extra'")) << msg;
  std::tie(msg, usage) = error_of({"--training.stepz=5"});
  EXPECT_TRUE(usage);
  EXPECT_TRUE(contains(msg, "training.stepz")) << msg;
  std::tie(msg, usage) = error_of({"--training.step=5"});  // a prefix is not taken for the key it starts
  EXPECT_TRUE(usage) << msg;
  // An unknown key in a file is bad input (exit 1), not a usage error.
  std::tie(msg, usage) = error_of({"--config", write_file("unknown.ini", "[model]\nlayers = 3\n")});
  EXPECT_FALSE(usage);
  EXPECT_TRUE(contains(msg, "layers")) << msg;
}

TEST(OptionsDomain, StopAfterAndMaxRuntimeWhenGivenArePositive) {
  EXPECT_EQ(parse({}).stop_after, 0);
  EXPECT_EQ(parse({"--stop-after", "5"}).stop_after, 5);
  EXPECT_DOUBLE_EQ(parse({"--max-runtime", "2.5"}).max_runtime, 2.5);
  for (const char* bad : {"0", "-1", "x", "1e3"})
    EXPECT_TRUE(contains(error_of({"--stop-after", bad}).first, std::string("--stop-after ") + bad + " must be"));
  for (const char* bad : {"0", "-1", "nan", "inf"})
    EXPECT_TRUE(contains(error_of({"--max-runtime", bad}).first, std::string("--max-runtime ") + bad + " must be"));
}

// The subcommands' options: the same strict parsing through NumericOptions and parse_command_line.
struct Command {
  po::options_description desc{"test options"};
  NumericOptions numbers;
  std::string prompt;
  int count = 3;
  uint64_t seed = 1;
  float temperature = 1.0f;
  double fraction = 0.5;
  Command() {
    desc.add_options()("prompt", po::value(&prompt), "text");
    numbers.add(desc, "count", &count, {0, 100}, "a count");
    numbers.add(desc, "seed", &seed, {0, UINT64_MAX}, "a seed");
    numbers.add(desc, "temperature", &temperature, {0.0f, 100.0f}, "a float");
    numbers.add(desc, "fraction", &fraction, {0.0, 1.0, true, false}, "a double");
  }
  // The error message of these arguments ("" when they parse), and whether it is a usage error.
  std::pair<std::string, bool> run(std::vector<std::string> args) {
    args.insert(args.begin(), "cmd");
    std::vector<char*> argv = argv_of(args);
    try {
      parse_command_line(int(argv.size()), argv.data(), desc, "ember cmd");
      numbers.parse("ember cmd: ", "see --help");
    } catch (const Error& e) {
      return {e.what(), dynamic_cast<const UsageError*>(&e) != nullptr};
    }
    return {"", false};
  }
};

TEST(OptionsDomain, SubcommandNumbersAreStrictAndInDomain) {
  Command c;
  EXPECT_EQ(c.run({"--count", "7", "--seed", "9", "--temperature", "0.5", "--fraction", "1"}).first, "");
  EXPECT_EQ(c.count, 7);
  EXPECT_EQ(c.seed, 9u);
  EXPECT_FLOAT_EQ(c.temperature, 0.5f);
  EXPECT_EQ(Command().run({"--temperature", "nan"}).first,
            "ember cmd: --temperature = nan must be a finite number in [0, 100]");
  EXPECT_EQ(Command().run({"--seed", "-1"}).first,
            "ember cmd: --seed = -1 must be an integer in [0, 18446744073709551615]");
  EXPECT_EQ(Command().run({"--count", "-1"}).first, "ember cmd: --count = -1 must be an integer in [0, 100]");
  EXPECT_EQ(Command().run({"--count", "101"}).first, "ember cmd: --count = 101 must be an integer in [0, 100]");
  EXPECT_EQ(Command().run({"--fraction", "0"}).first, "ember cmd: --fraction = 0 must be a finite number in (0, 1]");
  EXPECT_EQ(Command().run({"--fraction", "inf"}).first,
            "ember cmd: --fraction = inf must be a finite number in (0, 1]");
}

TEST(OptionsDomain, SubcommandUsageErrors) {
  auto [msg, usage] = Command().run({"--prompt", "hello", "world"});
  EXPECT_TRUE(usage);
  EXPECT_TRUE(contains(msg, "unexpected argument 'world'")) << msg;
  std::tie(msg, usage) = Command().run({"--verbose"});
  EXPECT_TRUE(usage);
  EXPECT_TRUE(contains(msg, "--verbose")) << msg;
  std::tie(msg, usage) = Command().run({"--temp", "0.5"});  // no prefix guessing
  EXPECT_TRUE(usage) << msg;
  std::tie(msg, usage) = Command().run({"--count", "1", "--count", "2"});
  EXPECT_TRUE(usage) << msg;
  EXPECT_TRUE(contains(msg, "count")) << msg;
  std::tie(msg, usage) = Command().run({"--count", "1", "--prompt"});  // a value missing
  EXPECT_TRUE(usage) << msg;
}

}  // namespace
}  // namespace ember
