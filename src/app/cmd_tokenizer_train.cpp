// `ember tokenizer train`: a byte-level BPE tokenizer trained on a corpus, written as Hugging Face files.
// Everything that can be checked is checked before the corpus is read; the files are only written at the end.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "app/cli.h"
#include "app/commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/run_threads.h"
#include "data/bpe_files.h"
#include "data/bpe_trainer.h"
#include "data/text_files.h"

namespace po = boost::program_options;

namespace ember {

namespace {

namespace fs = std::filesystem;

// Beyond a million ids the embedding table dwarfs any model this program trains; it also keeps ids far from int32's
// limit.
constexpr int MAX_VOCAB_SIZE = 1 << 20;
const char* WHAT = "tokenizer train input";

struct CorpusStats {
  size_t documents = 0, bytes = 0, binary_skipped = 0;
};

// Reads `files` on `threads` workers, each taking the next unread file, and adds each text file as one document.
CorpusStats add_corpus(BpeTrainer& trainer, const std::vector<std::string>& files, int threads) {
  std::atomic<size_t> next{0}, documents{0}, bytes{0}, skipped{0};
  const int n = std::max(1, std::min<int>(threads, int(files.size())));
  run_threads(
      n,
      [&](int) {
        for (size_t i; (i = next.fetch_add(1)) < files.size();) {
          const std::optional<std::string> text = read_text_file(files[i]);
          if (!text) {
            log_debug("tokenizer train: skipping binary file %s", files[i].c_str());
            ++skipped;
            continue;
          }
          if (text->empty()) continue;
          trainer.add_document(*text);
          ++documents;
          bytes += text->size();
        }
      },
      [&] { next = files.size(); });  // the others stop after their current file
  return {documents.load(), bytes.load(), skipped.load()};
}

}  // namespace

int cmd_tokenizer_train(int argc, char** argv) {
  std::string input, output;
  bool overwrite = false;
  int vocab_size = 0;
  BpeTrainOptions train;
  int threads = std::max(1, int(std::thread::hardware_concurrency()));
  po::options_description desc("ember tokenizer train options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("input", po::value(&input), "a text file or a folder of text files")(
      "output", po::value(&output), "folder for vocab.json, merges.txt, tokenizer.json, tokenizer_config.json")(
      "overwrite", po::bool_switch(&overwrite), "replace the tokenizer files of an earlier run in the output folder");
  const int min_vocab = 256 + int(train.special.size()) + 1;
  numbers.add(desc, "vocab-size", &vocab_size, {min_vocab, MAX_VOCAB_SIZE},
              "ids in all: 256 bytes + merges + <|endoftext|>");
  numbers.add(desc, "min-frequency", &train.min_frequency, {1, INT32_MAX}, "a pair seen fewer times is not merged");
  numbers.add(desc, "threads", &threads, {1, 1024}, "threads reading and pre-tokenizing the corpus");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember tokenizer train --input FILE|DIR --vocab-size N --output DIR [--min-frequency N] "
                     "[--threads N] [--overwrite]",
                     vm, &numbers))
    return EXIT_CODE_OK;
  require_option(vm, "input", "give a text file or folder, e.g. --input README.md");
  require_option(vm, "vocab-size", "give the number of ids, e.g. --vocab-size 32768");
  require_option(vm, "output", "give an output folder, e.g. --output tokenizers/mine");
  train.vocab_size = vocab_size;

  std::error_code ec;
  const fs::file_status st = fs::status(output, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw_error("tokenizer train output " + output + " exists and is not a folder",
                "pass a folder for --output (it is created if missing), or move the file away");
  if (!overwrite)
    for (const char* name : {"vocab.json", "merges.txt", "tokenizer.json"})
      if (fs::exists(fs::path(output) / name, ec))
        throw_error("tokenizer train output " + output + " already holds " + name,
                    "pass --overwrite to replace the tokenizer there, or choose another --output folder");
  const std::vector<std::string> files =
      list_input_files(input, WHAT,
                       "check the --input path (a text file or a folder of text files, optionally "
                       "gzip/zstd-compressed) and its permissions");

  const auto start = std::chrono::steady_clock::now();
  BpeTrainer trainer(train);
  const CorpusStats corpus = add_corpus(trainer, files, threads);
  if (corpus.bytes == 0)
    throw_error(std::string(WHAT) + " " + input + " holds no text (" + std::to_string(files.size()) + " files, " +
                    std::to_string(corpus.binary_skipped) + " of them binary)",
                "point --input at a text file or a folder that contains text files");
  const BpeVocab vocab = trainer.finish();
  const TokenizerFiles out = bpe_vocab_to_files(vocab);

  fs::create_directories(output, ec);
  if (ec)
    throw_error("tokenizer train output " + output + ": cannot create: " + ec.message(),
                "check that the output folder's parent is writable");
  for (const auto& [name, contents] : out)
    write_file_atomically((fs::path(output) / name).string(), contents, "tokenizer file",
                          "check that the output folder is writable and has free space");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info(
      "tokenizer train: %zu documents, %zu bytes, %zu distinct pieces, %zu merges, %zu ids -> %s (%.1f s, %zu "
      "binary files skipped)",
      corpus.documents, corpus.bytes, trainer.distinct_pieces(), vocab.merges.size(), vocab.tokens.size(),
      output.c_str(), seconds, corpus.binary_skipped);
  return EXIT_CODE_OK;
}

}  // namespace ember
