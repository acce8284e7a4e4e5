// ember: one executable, one subcommand per tool. MPI is initialised once here; any error on any rank is printed
// as "error: ..." plus "hint: ..." and ends every rank with a non-zero exit (MPI_Abort when there are several).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "app/commands.h"
#include "app/options.h"
#include "backend/cpu/blas_kernels.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/world.h"

namespace {

// Every subcommand once: its name, the lines `ember --help` gives it, and its entry point.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

const Command kCommands[] = {
    {"train",
     "train a GPT model from a config (ember train --config configs/tiny.ini);\n"
     "under mpirun/srun, synchronous data parallel over the ranks",
     ember::cmd_train},
    {"eval", "loss and bits per byte of a checkpoint on a data split", ember::cmd_eval},
    {"generate", "sample text from a checkpoint", ember::cmd_generate},
    {"serve", "an OpenAI-compatible completions server over a checkpoint", ember::cmd_serve},
    {"export", "a checkpoint as a Hugging Face GPT-2 folder (safetensors)", ember::cmd_export},
    {"import", "a Hugging Face GPT-2 folder as a checkpoint", ember::cmd_import},
    {"prep", "tokenize text, JSONL or enwik files into train/val shards", ember::cmd_prep},
    {"tokenizer", "train a BPE tokenizer, or encode/decode with one", ember::cmd_tokenizer},
    {"inspect", "print a checkpoint's metadata and verify its datasets", ember::cmd_inspect},
};

void print_usage(FILE* out) {
  fprintf(out, "usage: ember <command> [options]\n\ncommands:\n");
  for (const Command& c : kCommands) {
    // The summary's lines, the first beside the name, the others under it.
    const std::string summary = c.summary;
    size_t begin = 0;
    for (bool first = true; begin <= summary.size(); first = false) {
      const size_t end = std::min(summary.find('\n', begin), summary.size());
      fprintf(out, "  %-9s %s\n", first ? c.name : "", summary.substr(begin, end - begin).c_str());
      begin = end + 1;
    }
  }
  fprintf(out, "\n`ember <command> --help` lists a command's options.\n");
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return ember::EXIT_CODE_USAGE;
  }
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    print_usage(stdout);
    return ember::EXIT_CODE_OK;
  }
  if (cmd == "--version") {
    printf("ember %s\n", EMBER_VERSION);
    return ember::EXIT_CODE_OK;
  }
  for (const Command& c : kCommands)
    if (cmd == c.name) return c.run(argc - 1, argv + 1);
  fprintf(stderr, "error: unknown command '%s'\nhint: run `ember --help` for the list of commands\n", cmd.c_str());
  return ember::EXIT_CODE_USAGE;
}

}  // namespace

int main(int argc, char** argv) {
  ember::select_blas_kernels(argv);  // may run the program again with OpenBLAS's better kernels
  ember::MpiSession mpi(&argc, &argv);
  const int rank = mpi.rank(), size = mpi.size();
  ember::log_set_rank(rank, false);
  int code = ember::EXIT_CODE_OK;
  bool agreed = false;  // every rank holds the error
  try {
    code = dispatch(argc, argv);
  } catch (const ember::Error& e) {
    fprintf(stderr, "%serror: %s\nhint: %s\n", size > 1 ? ("[rank " + std::to_string(rank) + "] ").c_str() : "",
            e.what(), e.hint().c_str());
    code = dynamic_cast<const ember::UsageError*>(&e) ? ember::EXIT_CODE_USAGE : ember::EXIT_CODE_ERROR;
    agreed = dynamic_cast<const ember::AgreedError*>(&e) != nullptr;
  } catch (const std::exception& e) {
    fprintf(stderr, "error: %s\nhint: this is unexpected; please report it with the command line\n", e.what());
    code = ember::EXIT_CODE_ERROR;
  }
  fflush(stdout);
  fflush(stderr);
  // A failure on one rank must end every rank, never leave the others waiting in a collective. (An early stop
  // after a checkpoint is agreed by all ranks, so they all return EXIT_CODE_REQUEUE normally.)
  mpi.finish(code != ember::EXIT_CODE_OK && code != ember::EXIT_CODE_REQUEUE, code, agreed);
  return code;
}
