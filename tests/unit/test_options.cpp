// The one Config: precedence (defaults < INI < command line), and the errors for unknown keys, wrong types and
// out-of-range values, each naming the key.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "app/options.h"
#include "core/error.h"

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

TEST(Options, MissingConfigFileIsAnError) {
  const std::string msg = error_of({"--config", "/nonexistent/ember.ini"});
  EXPECT_NE(msg.find("/nonexistent/ember.ini"), std::string::npos) << msg;
}

TEST(Options, ShippedConfigsParse) {
  for (const char* name : {"tiny", "demo", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"}) {
    const std::string path = std::string(EMBER_SOURCE_DIR) + "/configs/" + name + ".ini";
    EXPECT_NO_THROW(parse({"--config", path})) << path;
  }
}

}  // namespace
}  // namespace ember
