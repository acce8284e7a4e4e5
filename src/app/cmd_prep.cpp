// `ember prep`: turns a text file or a directory of text files into train/val token shards.
#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "data/prep.h"

namespace po = boost::program_options;

namespace ember {

int cmd_prep(int argc, char** argv) {
  PrepOptions opt;
  po::options_description desc("ember prep options");
  desc.add_options()("help,h", "print this help")("input", po::value(&opt.input), "a text file or a directory")(
      "output", po::value(&opt.output), "output directory for train_*.bin and val_*.bin")(
      "tokenizer", po::value(&opt.tokenizer)->default_value("bytes"), "tokenizer: bytes")(
      "val-fraction", po::value(&opt.val_fraction)->default_value(0.05), "fraction of tokens held out for validation")(
      "shard-tokens", po::value(&opt.shard_tokens)->default_value(100000000), "tokens per shard at most")(
      "overwrite", po::bool_switch(&opt.overwrite), "replace the shards of an earlier prep in the output directory");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember prep --input FILE|DIR --output DIR [--tokenizer bytes] [--overwrite]", vm))
    return EXIT_CODE_OK;
  require_option(vm, "input", "give a text file or directory, e.g. --input README.md");
  require_option(vm, "output", "give an output directory, e.g. --output data/demo");
  prepare_corpus(opt);  // logs its own summary line
  return EXIT_CODE_OK;
}

}  // namespace ember
