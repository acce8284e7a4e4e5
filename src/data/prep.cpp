// Corpus preparation (implementation): validate, stream the corpus through the pipeline into shards in a new folder
// beside the output, add the tokenizer's files and prep.json, and swap it in whole (core/output.h).
#include "data/prep.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/output.h"
#include "core/timer.h"
#include "data/corpus_input.h"
#include "data/prep_pipeline.h"
#include "data/shard.h"
#include "tokenizer/tokenizer.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

// Shards are written here first, inside the output directory so the final renames never cross file systems.
// The leading dot keeps list_shards and a later prep of a parent directory from seeing it.
constexpr double PROGRESS_SECONDS = 5.0;
constexpr double DEFAULT_VAL_FRACTION = 0.05;
const char* OUT_HINT = "check that the output directory is writable and has free space";

std::string shard_name(Split split, size_t index) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s_%06zu.bin", split_name(split), index);
  return buf;
}

// True for names this function writes ("train_000012.bin"), with the index; other files are the user's to keep.
bool parse_shard_name(const std::string& name, Split split, size_t& index) {
  const std::string head = std::string(split_name(split)) + "_", tail = ".bin";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  index = size_t(std::stoull(digits));
  return true;
}

bool is_shard_name(const std::string& name) {
  size_t index = 0;
  return std::any_of(std::begin(kSplits), std::end(kSplits), [&](Split s) { return parse_shard_name(name, s, index); });
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_error("prep output " + dir + ": cannot open to sync: " + std::strerror(errno), OUT_HINT);
  if (::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw_error("prep output " + dir + ": fsync failed: " + why, "check the disk and the output file system");
  }
  ::close(fd);
}

// The shards of one split, streamed into the staging folder: a new shard every shard_tokens tokens.
class SplitSink {
 public:
  SplitSink(Split split, std::string dir, size_t shard_tokens, int token_bytes)
      : split_(split), dir_(std::move(dir)), shard_tokens_(shard_tokens), token_bytes_(token_bytes) {}

  void append(const char* tokens, size_t n) {
    while (n > 0) {
      if (!current_) {
        names_.push_back(shard_name(split_, names_.size()));
        current_ = std::make_unique<ShardWriter>((fs::path(dir_) / names_.back()).string(), token_bytes_);
      }
      const size_t take = std::min(n, shard_tokens_ - current_->tokens());
      current_->append(tokens, take);
      tokens += take * size_t(token_bytes_);
      n -= take;
      count_.tokens += take;
      if (current_->tokens() == shard_tokens_) finish();
    }
  }
  void finish() {
    if (current_) current_->finish();
    current_.reset();
  }
  void add_documents(uint64_t n) { count_.documents += n; }
  const std::vector<std::string>& names() const { return names_; }
  PrepSplit counts() const { return {count_.tokens, count_.documents, int(names_.size())}; }

 private:
  Split split_;
  std::string dir_;
  size_t shard_tokens_;
  int token_bytes_;
  std::unique_ptr<ShardWriter> current_;
  std::vector<std::string> names_;
  PrepSplit count_;
};

// What prep writes, so --overwrite replaces nothing else: shards, prep.json and the tokenizer/ folder (a folder of
// llm.c's shards without prep.json counts too).
bool is_prep_folder(const std::string& dir) {
  return folder_holds_only(dir, [](const std::string& name, bool is_file, bool is_folder) {
    return name == PREP_MANIFEST_NAME   ? is_file
           : name == PREP_TOKENIZER_DIR ? is_folder
                                        : is_shard_name(name) && is_file;
  });
}

// A prep whose output lies inside its input folder would read its own shards the next time.
void check_output_outside_input(const PrepOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.input, ec)) return;
  const fs::path in = fs::weakly_canonical(options.input, ec), out = fs::weakly_canonical(options.output, ec);
  if (ec) return;
  const auto mismatch = std::mismatch(in.begin(), in.end(), out.begin(), out.end());
  if (mismatch.first == in.end())
    throw_error("prep: --output " + options.output + " lies inside --input " + options.input +
                    ": a later prep of that input would read these shards as text",
                "give --output a folder outside the input folder");
}

// The options' values, checked before anything is read.
void check_options(const PrepOptions& options, double val_fraction) {
  if (options.input.empty()) throw_error("prep: no input given", "pass --input <text file or directory>");
  if (options.output.empty()) throw_error("prep: no output directory given", "pass --output <directory>");
  if (!(val_fraction >= 0.0 && val_fraction <= 0.5))  // also rejects NaN
    throw_error("prep: val_fraction " + std::to_string(val_fraction) + " is outside [0, 0.5]",
                "pass a val_fraction between 0 and 0.5 (0.05 is typical; 0 writes no val shards)");
  if (options.shard_tokens == 0 || options.shard_tokens > size_t(INT32_MAX))
    throw_error("prep: shard_tokens " + std::to_string(options.shard_tokens) + " is outside [1, " +
                    std::to_string(INT32_MAX) + "]",
                "the shard header stores the count as int32; 100000000 is the usual size");
  if (options.threads < 0 || options.threads > 1024)
    throw_error("prep: threads " + std::to_string(options.threads) + " is outside [0, 1024]",
                "pass --threads N with N >= 1, or leave it out to use every hardware thread");
  if (options.jsonl_field.empty()) throw_error("prep: empty --jsonl-field", "name the JSONL field, e.g. text");
}

// Streams the corpus through the pipeline into the sinks (train, val, test), logging progress.
void stream_corpus(const CorpusPlan& plan, const Tokenizer& tok, const PipelineOptions& popt, bool hold_last_train,
                   std::vector<SplitSink>& sinks, PrepResult& result) {
  // The last train token is held back until the end: if no val token came by then (the val bytes were all blank JSONL
  // lines, say), it becomes the val split, so val_fraction > 0 always gives a val shard when there is text.
  const size_t tb = size_t(result.token_bytes);
  std::vector<char> held;
  const double start = now_seconds();
  double last_log = start;
  uint64_t tokens = 0, warned = 0;
  run_prep_pipeline(plan, tok, popt, [&](EncodedPiece&& p) {
    SplitSink& sink = sinks[size_t(p.split)];
    sink.add_documents(p.documents);
    result.bad_lines += p.bad_lines;
    for (const std::string& m : p.bad_messages)
      if (warned++ < 3) log_warn("prep: skipped %s", m.c_str());
    tokens += p.n_tokens;
    if (p.n_tokens > 0) {
      if (p.split == Split::train && hold_last_train) {
        if (!held.empty()) sink.append(held.data(), 1);
        sink.append(p.tokens.data(), p.n_tokens - 1);
        held.assign(p.tokens.end() - std::ptrdiff_t(tb), p.tokens.end());
      } else {
        sink.append(p.tokens.data(), p.n_tokens);
      }
    }
    const double now = now_seconds();
    if (now - last_log >= PROGRESS_SECONDS) {
      last_log = now;
      const double mb = double(p.disk_done) / 1e6, total = double(plan.disk_bytes) / 1e6, rate = mb / (now - start);
      log_info("prep: %.0f / %.0f MB (%.1f%%), %llu tokens, %.1f MB/s, ETA %s", mb, total, 100.0 * mb / total,
               (unsigned long long)tokens, rate, format_hms(rate > 0 ? (total - mb) / rate : 0.0).c_str());
    }
  });
  if (!held.empty()) sinks[size_t(sinks[1].counts().tokens == 0 ? Split::val : Split::train)].append(held.data(), 1);
}

void write_manifest(const std::string& out, const PrepOptions& options, const Tokenizer& tok, const CorpusPlan& plan,
                    bool enwik, const std::vector<SplitSink>& sinks, const PrepResult& result) {
  PrepManifest m;
  m.tokenizer = record_of(tok);
  m.eot_id = tok.eot_id();
  m.token_bytes = result.token_bytes;
  m.input = options.input;
  m.format = enwik ? "enwik" : corpus_format_name(plan.files[0].format);
  for (const auto& f : plan.files)
    if (!enwik && f.format != plan.files[0].format) m.format = "mixed";
  for (Split s : kSplits)
    if (s != Split::test || enwik) m.splits[split_name(s)] = sinks[size_t(s)].counts();
  write_prep_manifest(out, m);
}

void log_result(const PrepResult& result, bool enwik, const std::string& out) {
  log_info(
      "prep: %zu files (%zu binary skipped%s) -> train %llu tokens / %llu docs / %d shards, val %llu / %llu / %d%s"
      " in %s",
      result.files, result.binary_files,
      result.bad_lines ? (", " + std::to_string(result.bad_lines) + " bad JSONL lines skipped").c_str() : "",
      (unsigned long long)result.train.tokens, (unsigned long long)result.train.documents, result.train.shards,
      (unsigned long long)result.val.tokens, (unsigned long long)result.val.documents, result.val.shards,
      enwik ? (", test " + std::to_string(result.test.tokens) + " / " + std::to_string(result.test.documents) + " / " +
               std::to_string(result.test.shards))
                  .c_str()
            : "",
      out.c_str());
}

}  // namespace

PrepResult prepare_corpus(const PrepOptions& options) {
  // --- 1. validate everything that can be checked before reading the corpus through ---
  const double val_fraction = options.val_fraction.value_or(DEFAULT_VAL_FRACTION);
  check_options(options, val_fraction);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(options.tokenizer);
  check_output_outside_input(options);
  const CorpusPlan plan = plan_corpus(options.input, options.format);
  if (plan.disk_bytes == 0)
    throw_error("prep input " + options.input + " holds no text (" + std::to_string(plan.files.size()) +
                    " files: all empty or binary)",
                "point --input at a text or JSONL file, or a directory that contains some");
  const bool enwik = plan.files.size() == 1 && plan.files[0].format == CorpusFormat::enwik;
  if (enwik && options.val_fraction)
    log_info("prep: --val-fraction does not apply to enwik input (fixed 90/5/5 train/val/test split)");

  // --- 2. stream the corpus into shards in a folder beside the output, swapped in whole at the end ---
  const OutputRule rule{.path = options.output,
                        .option = "--output",
                        .command = "ember prep",
                        .kind = OutputKind::folder,
                        .overwrite = options.overwrite,
                        .is_ours = is_prep_folder,
                        .looks_like = "a prep output (shards, prep.json, tokenizer/)"};
  StagedOutput out(rule);
  PrepResult result;
  result.files = plan.files.size() - plan.binary_files;
  result.binary_files = plan.binary_files;
  result.token_bytes = shard_token_bytes(tok->vocab_size());
  PipelineOptions popt;
  popt.reader.val_fraction = enwik ? 0.0 : val_fraction;
  popt.reader.jsonl_field = options.jsonl_field;
  popt.threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  popt.token_bytes = result.token_bytes;
  popt.skip_bad_lines = options.skip_bad_lines;
  std::vector<SplitSink> sinks;
  for (Split s : kSplits) sinks.emplace_back(s, out.staging(), options.shard_tokens, result.token_bytes);
  stream_corpus(plan, *tok, popt, val_fraction > 0.0 && !enwik, sinks, result);
  if (sinks[0].counts().tokens + sinks[1].counts().tokens + sinks[2].counts().tokens == 0)
    throw_error("prep input " + options.input + " holds no text (" + std::to_string(result.files) +
                    " files read, no tokens" +
                    (result.bad_lines ? ", " + std::to_string(result.bad_lines) + " bad lines skipped" : "") + ")",
                "point --input at text, or check --format and --jsonl-field");
  for (SplitSink& s : sinks) s.finish();
  result.train = sinks[0].counts();
  result.val = sinks[1].counts();
  result.test = sinks[2].counts();

  // --- 3. the tokenizer's files and prep.json into the new folder, then the swap ---
  if (!tok->files().empty()) write_tokenizer_files(*tok, (fs::path(out.staging()) / PREP_TOKENIZER_DIR).string());
  write_manifest(out.staging(), options, *tok, plan, enwik, sinks, result);
  fsync_dir(out.staging());
  out.commit();
  log_result(result, enwik, options.output);
  return result;
}

}  // namespace ember
