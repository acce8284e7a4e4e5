// ember: one executable, one subcommand per tool. MPI is initialised once here; any error on any rank is printed
// as "error: ..." plus "hint: ..." and ends every rank with a non-zero exit (MPI_Abort when there are several).
#include <cstdio>
#include <cstring>
#include <string>

#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/world.h"

namespace {

void print_usage(FILE* out) {
  fprintf(out,
          "usage: ember <command> [options]\n\n"
          "commands:\n"
          "  train     train a GPT model from a config (ember train --config configs/tiny.ini);\n"
          "            under mpirun/srun, synchronous data parallel over the ranks\n"
          "  eval      loss and bits per byte of a checkpoint on a data split\n"
          "  generate  sample text from a checkpoint\n"
          "  serve     an OpenAI-compatible completions server over a checkpoint\n"
          "  export    a checkpoint as a Hugging Face GPT-2 folder (safetensors)\n"
          "  import    a Hugging Face GPT-2 folder as a checkpoint\n"
          "  prep      tokenize text, JSONL or enwik files into train/val shards\n"
          "  tokenizer train a BPE tokenizer, or encode/decode with one\n"
          "  inspect   print a checkpoint's metadata and verify its datasets\n\n"
          "`ember <command> --help` lists a command's options.\n");
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
  if (cmd == "train") return ember::cmd_train(argc - 1, argv + 1);
  if (cmd == "eval") return ember::cmd_eval(argc - 1, argv + 1);
  if (cmd == "generate") return ember::cmd_generate(argc - 1, argv + 1);
  if (cmd == "serve") return ember::cmd_serve(argc - 1, argv + 1);
  if (cmd == "export") return ember::cmd_export(argc - 1, argv + 1);
  if (cmd == "import") return ember::cmd_import(argc - 1, argv + 1);
  if (cmd == "prep") return ember::cmd_prep(argc - 1, argv + 1);
  if (cmd == "inspect") return ember::cmd_inspect(argc - 1, argv + 1);
  if (cmd == "tokenizer") return ember::cmd_tokenizer(argc - 1, argv + 1);
  fprintf(stderr, "error: unknown command '%s'\nhint: run `ember --help` for the list of commands\n", cmd.c_str());
  return ember::EXIT_CODE_USAGE;
}

}  // namespace

int main(int argc, char** argv) {
  ember::MpiSession mpi(&argc, &argv);
  const int rank = mpi.rank(), size = mpi.size();
  ember::log_set_rank(rank, false);
  int code = ember::EXIT_CODE_OK;
  try {
    code = dispatch(argc, argv);
  } catch (const ember::Error& e) {
    fprintf(stderr, "%serror: %s\nhint: %s\n", size > 1 ? ("[rank " + std::to_string(rank) + "] ").c_str() : "",
            e.what(), e.hint().c_str());
    code = dynamic_cast<const ember::UsageError*>(&e) ? ember::EXIT_CODE_USAGE : ember::EXIT_CODE_ERROR;
  } catch (const std::exception& e) {
    fprintf(stderr, "error: %s\nhint: this is unexpected; please report it with the command line\n", e.what());
    code = ember::EXIT_CODE_ERROR;
  }
  fflush(stdout);
  fflush(stderr);
  // A failure on one rank must end every rank, never leave the others waiting in a collective. (An early stop
  // after a checkpoint is agreed by all ranks, so they all return EXIT_CODE_REQUEUE normally.)
  mpi.finish(code != ember::EXIT_CODE_OK && code != ember::EXIT_CODE_REQUEUE, code);
  return code;
}
