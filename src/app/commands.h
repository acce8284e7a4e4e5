// The ember subcommands: each takes argv starting at its own name and returns the process exit code.
#pragma once

namespace ember {

int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_prep(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_tokenizer(int argc, char** argv);  // dispatches to the three below
int cmd_tokenizer_train(int argc, char** argv);
int cmd_tokenizer_encode(int argc, char** argv);
int cmd_tokenizer_decode(int argc, char** argv);

// Exit codes shared by every subcommand (documented in the README).
constexpr int EXIT_CODE_OK = 0;
constexpr int EXIT_CODE_ERROR = 1;  // bad input or a failed check; the message says which
constexpr int EXIT_CODE_USAGE = 2;  // a command line the command does not accept (app/options.h, UsageError)
// Training stopped early on SIGUSR1/SIGTERM or --max-runtime after writing a checkpoint: requeue to continue.
constexpr int EXIT_CODE_REQUEUE = 3;

}  // namespace ember
