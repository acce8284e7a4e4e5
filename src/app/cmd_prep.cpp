// `ember prep`: turns a text file or a directory of text files into train/val token shards.
#include <cstdint>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "data/prep.h"

namespace po = boost::program_options;

namespace ember {

int cmd_prep(int argc, char** argv) {
  PrepOptions opt;
  uint64_t shard_tokens = opt.shard_tokens;
  po::options_description desc("ember prep options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("input", po::value(&opt.input), "a text file or a directory")(
      "output", po::value(&opt.output), "output directory for train_*.bin and val_*.bin")(
      "tokenizer", po::value(&opt.tokenizer)->default_value("bytes"), "tokenizer: bytes")(
      "overwrite", po::bool_switch(&opt.overwrite), "replace the shards of an earlier prep in the output directory");
  numbers.add(desc, "val-fraction", &opt.val_fraction, {0.0, 0.5}, "fraction of tokens held out for validation");
  numbers.add(desc, "shard-tokens", &shard_tokens, {1, uint64_t(INT32_MAX)}, "tokens per shard at most");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember prep --input FILE|DIR --output DIR [--tokenizer bytes] [--overwrite]", vm, &numbers))
    return EXIT_CODE_OK;
  opt.shard_tokens = size_t(shard_tokens);
  require_option(vm, "input", "give a text file or directory, e.g. --input README.md");
  require_option(vm, "output", "give an output directory, e.g. --output data/demo");
  prepare_corpus(opt);  // logs its own summary line
  return EXIT_CODE_OK;
}

}  // namespace ember
