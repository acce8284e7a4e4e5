// `ember prep`: turns text, JSONL or enwik8/enwik9 input (plain, gzip, zstd or zip) into train/val(/test) shards.
#include <algorithm>
#include <cstdint>
#include <thread>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "data/prep.h"

namespace po = boost::program_options;

namespace ember {

int cmd_prep(int argc, char** argv) {
  PrepOptions opt;
  uint64_t shard_tokens = opt.shard_tokens;
  double val_fraction = 0.05;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  po::options_description desc("ember prep options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("input", po::value(&opt.input),
                                                  "a file or a directory (plain, .gz, .zst or one-file .zip)")(
      "output", po::value(&opt.output), "output directory for train_*.bin and val_*.bin (and test_*.bin for enwik)")(
      "tokenizer", po::value(&opt.tokenizer)->default_value("bytes"), "tokenizer: bytes, or a BPE tokenizer's path")(
      "format", po::value(&opt.format)->default_value("auto"),
      "input format: auto (by file name), text, jsonl or enwik")(
      "jsonl-field", po::value(&opt.jsonl_field)->default_value("text"), "the JSONL field that holds a document")(
      "skip-bad-lines", po::bool_switch(&opt.skip_bad_lines), "skip and count JSONL lines without a document")(
      "overwrite", po::bool_switch(&opt.overwrite),
      "replace an earlier prep's output folder (moved aside, not deleted)");
  numbers.add(desc, "val-fraction", &val_fraction, {0.0, 0.5}, "fraction of the input's bytes held out for validation");
  numbers.add(desc, "shard-tokens", &shard_tokens, {1, uint64_t(INT32_MAX)}, "tokens per shard at most");
  numbers.add(desc, "threads", &threads, {1, 1024}, "encoder threads (default: every hardware thread)");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember prep --input FILE|DIR --output DIR [--tokenizer bytes|SPEC] "
                     "[--format auto|text|jsonl|enwik] [--overwrite]",
                     vm, &numbers))
    return EXIT_CODE_OK;
  opt.shard_tokens = size_t(shard_tokens);
  if (vm.count("val-fraction") && !vm["val-fraction"].defaulted()) opt.val_fraction = val_fraction;
  opt.threads = threads;
  require_option(vm, "input", "give a text file or directory, e.g. --input README.md");
  require_option(vm, "output", "give an output directory, e.g. --output data/demo");
  prepare_corpus(opt);  // logs its own summary line
  return EXIT_CODE_OK;
}

}  // namespace ember
