// `ember tokenizer`: train a byte-level BPE tokenizer on a corpus, or encode/decode text with a tokenizer.
#include <cstdio>
#include <string>

#include "app/commands.h"

namespace ember {

namespace {

void print_tokenizer_usage(FILE* out) {
  fprintf(out,
          "usage: ember tokenizer <train|encode|decode> [options]\n\n"
          "  train   train a byte-level BPE tokenizer on a corpus and write vocab.json, merges.txt, tokenizer.json\n"
          "  encode  text on stdin -> token ids as a JSON array on stdout\n"
          "  decode  a JSON array of token ids on stdin -> text on stdout\n\n"
          "`ember tokenizer <sub> --help` lists its options.\n");
}

}  // namespace

int cmd_tokenizer(int argc, char** argv) {
  if (argc < 2) {
    print_tokenizer_usage(stderr);
    return EXIT_CODE_USAGE;
  }
  const std::string sub = argv[1];
  if (sub == "-h" || sub == "--help" || sub == "help") {
    print_tokenizer_usage(stdout);
    return EXIT_CODE_OK;
  }
  // The subcommand sees itself as "tokenizer <sub>", so its usage and errors say "ember tokenizer <sub>".
  std::string name = "tokenizer " + sub;
  argv[1] = name.data();
  if (sub == "train") return cmd_tokenizer_train(argc - 1, argv + 1);
  if (sub == "encode") return cmd_tokenizer_encode(argc - 1, argv + 1);
  if (sub == "decode") return cmd_tokenizer_decode(argc - 1, argv + 1);
  fprintf(stderr, "error: unknown tokenizer command '%s'\nhint: the tokenizer commands are train, encode and decode\n",
          sub.c_str());
  return EXIT_CODE_USAGE;
}

}  // namespace ember
