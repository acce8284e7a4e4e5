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
#include "core/output.h"
#include "core/run_threads.h"
#include "data/corpus_input.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_trainer.h"

namespace po = boost::program_options;

namespace ember {

namespace {

namespace fs = std::filesystem;

// Beyond a million ids the embedding table dwarfs any model this program trains; it also keeps ids far from int32's
// limit.
constexpr int MAX_VOCAB_SIZE = 1 << 20;
const char* WHAT = "tokenizer train input";

struct CorpusStats {
  size_t documents = 0, bytes = 0, binary_skipped = 0, bad_lines = 0;
};

// Reads the plan's files on `threads` workers, each taking the next unread file, and adds its documents (a text file
// whole, a JSONL file line by line: read_documents).
CorpusStats add_corpus(BpeTrainer& trainer, const CorpusPlan& plan, const std::string& jsonl_field, bool skip_bad_lines,
                       int threads) {
  const std::vector<CorpusFile>& files = plan.files;
  std::atomic<size_t> next{0}, documents{0}, bytes{0}, skipped{0}, bad_lines{0};
  const int n = std::max(1, std::min<int>(threads, int(files.size())));
  run_threads(
      n,
      [&](int) {
        for (size_t i; (i = next.fetch_add(1)) < files.size();) {
          DocumentCounts c;
          if (!files[i].binary)
            c = read_documents(files[i], jsonl_field, skip_bad_lines, "tokenizer train",
                               [&](std::string&& doc) { trainer.add_document(doc); });
          if (files[i].binary || c.binary) {
            log_debug("tokenizer train: skipping binary file %s", files[i].path.c_str());
            ++skipped;
          }
          documents += c.documents;
          bytes += c.bytes;
          bad_lines += c.bad_lines;
        }
      },
      [&] { next = files.size(); });  // the others stop after their current file
  return {documents.load(), bytes.load(), skipped.load(), bad_lines.load()};
}

// What tokenizer train writes (the files of bpe_vocab_to_files), so --overwrite replaces nothing else.
bool is_tokenizer_folder(const std::string& dir) {
  return folder_holds_only(dir, [](const std::string& name, bool is_file, bool) {
    return is_file && (name == "vocab.json" || name == "merges.txt" || name == "tokenizer.json" ||
                       name == "tokenizer_config.json");
  });
}

}  // namespace

int cmd_tokenizer_train(int argc, char** argv) {
  std::string input, output, format = "auto", jsonl_field = "text";
  bool overwrite = false, skip_bad_lines = false;
  int vocab_size = 0;
  BpeTrainOptions train;
  int threads = std::max(1, int(std::thread::hardware_concurrency()));
  po::options_description desc("ember tokenizer train options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")(
      "input", po::value(&input), "a file or a folder of text, JSONL or enwik files (as ember prep reads them)")(
      "format", po::value(&format)->default_value("auto"), "auto, text, jsonl or enwik (as ember prep)")(
      "jsonl-field", po::value(&jsonl_field)->default_value("text"), "the JSONL field that holds a document")(
      "skip-bad-lines", po::bool_switch(&skip_bad_lines), "skip and count JSONL lines without a document")(
      "output", po::value(&output), "folder for vocab.json, merges.txt, tokenizer.json, tokenizer_config.json")(
      "overwrite", po::bool_switch(&overwrite), "replace an earlier tokenizer folder (moved aside, not deleted)");
  const int min_vocab = 256 + int(train.special.size()) + 1;
  numbers.add(desc, "vocab-size", &vocab_size, {min_vocab, MAX_VOCAB_SIZE},
              "ids in all: 256 bytes + merges + <|endoftext|>");
  numbers.add(desc, "min-frequency", &train.min_frequency, {1, INT32_MAX}, "a pair seen fewer times is not merged");
  numbers.add(desc, "threads", &threads, {1, 1024}, "threads reading and pre-tokenizing the corpus");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember tokenizer train --input FILE|DIR --vocab-size N --output DIR [--format F] "
                     "[--jsonl-field NAME] [--skip-bad-lines] [--min-frequency N] [--threads N] [--overwrite]",
                     vm, &numbers))
    return EXIT_CODE_OK;
  require_option(vm, "input", "give a text file or folder, e.g. --input README.md");
  require_option(vm, "vocab-size", "give the number of ids, e.g. --vocab-size 32768");
  require_option(vm, "output", "give an output folder, e.g. --output tokenizers/mine");
  train.vocab_size = vocab_size;

  const OutputRule rule{
      .path = output,
      .option = "--output",
      .command = "ember tokenizer train",
      .kind = OutputKind::folder,
      .overwrite = overwrite,
      .is_ours = is_tokenizer_folder,
      .looks_like = "a tokenizer folder (vocab.json, merges.txt, tokenizer.json, tokenizer_config.json)"};
  StagedOutput staged(rule);
  const CorpusPlan plan = plan_corpus(input, format, "tokenizer train");

  const auto start = std::chrono::steady_clock::now();
  BpeTrainer trainer(train);
  const CorpusStats corpus = add_corpus(trainer, plan, jsonl_field, skip_bad_lines, threads);
  if (corpus.bytes == 0)
    throw_error(std::string(WHAT) + " " + input + " holds no text (" + std::to_string(plan.files.size()) + " files, " +
                    std::to_string(corpus.binary_skipped) + " of them binary)",
                "point --input at a text or JSONL file, or a folder that contains some");
  const BpeVocab vocab = trainer.finish();
  const TokenizerFiles out = bpe_vocab_to_files(vocab);

  for (const auto& [name, contents] : out)
    write_file_atomically((fs::path(staged.staging()) / name).string(), contents, "tokenizer file",
                          "check that the folder of --output is writable and has free space");
  staged.commit();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info(
      "tokenizer train: %zu documents, %zu bytes, %zu distinct pieces, %zu merges, %zu ids -> %s (%.1f s, %zu "
      "binary files skipped%s)",
      corpus.documents, corpus.bytes, trainer.distinct_pieces(), vocab.merges.size(), vocab.tokens.size(),
      output.c_str(), seconds, corpus.binary_skipped,
      corpus.bad_lines ? (", " + std::to_string(corpus.bad_lines) + " bad JSONL lines skipped").c_str() : "");
  return EXIT_CODE_OK;
}

}  // namespace ember
