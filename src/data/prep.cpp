// Corpus preparation (implementation): validate, stream the corpus through the pipeline into shards in a staging
// folder, then publish: old prep.json out, shards in, stale shards out, tokenizer files, new prep.json last.
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
constexpr const char* STAGING_NAME = ".ember-prep.staging";
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

void check_output_folder(const std::string& output) {
  std::error_code ec;
  const fs::file_status st = fs::status(output, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw_error("prep output " + output + " exists and is not a directory",
                "pass a directory for --output (it is created if missing), or move the file away");
}

void check_no_shards(const std::string& output) {
  std::error_code ec;
  std::vector<std::string> shards;
  for (fs::directory_iterator it(output, ec), end; !ec && it != end; it.increment(ec))
    if (is_shard_name(it->path().filename().string())) shards.push_back(it->path().filename().string());
  if (!shards.empty()) {
    std::sort(shards.begin(), shards.end());
    throw_error("prep output " + output + " already holds " + std::to_string(shards.size()) +
                    " shards of an earlier prep (" + shards.front() + (shards.size() > 1 ? ", ...)" : ")"),
                "pass --overwrite to replace them, or choose another --output folder");
  }
}

// Moves the staged shards in. Readers see the old set or the new one shard by shard (each rename is atomic); the old
// prep.json goes first, so it never describes new shards, and the new one is written last, by the caller.
void publish(const std::string& out, const std::string& staging, const std::vector<const SplitSink*>& sinks,
             bool had_manifest, const Tokenizer& tok) {
  std::error_code ec;
  const fs::path manifest = fs::path(out) / PREP_MANIFEST_NAME;
  fs::remove(manifest, ec);
  if (ec)
    throw_error("prep output " + out + ": cannot remove the old " + manifest.string() + ": " + ec.message(), OUT_HINT);
  fsync_dir(out);
  for (const SplitSink* sink : sinks)
    for (const std::string& name : sink->names()) {
      fs::rename(fs::path(staging) / name, fs::path(out) / name, ec);
      if (ec)
        throw_error("prep output " + out + ": cannot move " + name + " in from " + staging + ": " + ec.message(),
                    OUT_HINT);
    }
  fsync_dir(out);

  // Stale shards from an earlier, larger prep would otherwise be read as part of this corpus. Collected first:
  // removing entries while a directory is being read may make readdir skip or repeat names.
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (size_t s = 0; s < sinks.size(); ++s) {
      size_t index = 0;
      if (parse_shard_name(name, kSplits[s], index) && index >= sinks[s]->names().size()) stale.push_back(it->path());
    }
  }
  if (ec) throw_error("prep output " + out + ": cannot list it to remove stale shards: " + ec.message(), OUT_HINT);
  for (const fs::path& path : stale) {
    fs::remove(path, ec);
    if (ec)
      throw_error(
          "prep output " + out + ": cannot remove stale shard " + path.filename().string() + ": " + ec.message(),
          "remove it by hand: it would be read as part of the new corpus");
  }
  const std::string tok_dir = (fs::path(out) / PREP_TOKENIZER_DIR).string();
  // An earlier prep's tokenizer files would contradict the new prep.json (a tokenizer.json left beside a new
  // vocab.json + merges.txt would even be read first). The tokenizer in use is already in memory, so this is safe
  // when it was read from this very folder.
  if (had_manifest) {
    fs::remove_all(tok_dir, ec);
    if (ec)
      throw_error(
          "prep output " + out + ": cannot remove the earlier tokenizer files in " + tok_dir + ": " + ec.message(),
          "remove the folder by hand, then run prep again");
  }
  if (!tok.files().empty()) write_tokenizer_files(tok, tok_dir);
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

// The output folder (made when missing) and a fresh staging folder inside it.
struct Staging {
  std::string out, dir;
  bool created = false;       // this prep made the output folder
  bool had_manifest = false;  // it held a prep.json before
};

Staging make_staging(const std::string& out) {
  Staging st{out, (fs::path(out) / STAGING_NAME).string()};
  std::error_code ec;
  st.created = !fs::exists(out, ec);
  st.had_manifest = fs::exists(fs::path(out) / PREP_MANIFEST_NAME, ec);
  fs::create_directories(out, ec);
  if (ec) throw_error("prep output " + out + ": cannot create: " + ec.message(), OUT_HINT);
  fs::remove_all(st.dir, ec);  // left over from a prep that was killed
  if (ec) throw_error("prep output " + out + ": cannot remove old " + st.dir + ": " + ec.message(), OUT_HINT);
  fs::create_directory(st.dir, ec);
  if (ec) throw_error("prep output " + out + ": cannot create " + st.dir + ": " + ec.message(), OUT_HINT);
  return st;
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
  check_output_folder(options.output);
  const CorpusPlan plan = plan_corpus(options.input, options.format);
  if (!options.overwrite) check_no_shards(options.output);
  if (plan.disk_bytes == 0)
    throw_error("prep input " + options.input + " holds no text (" + std::to_string(plan.files.size()) +
                    " files: all empty or binary)",
                "point --input at a text or JSONL file, or a directory that contains some");
  const bool enwik = plan.files.size() == 1 && plan.files[0].format == CorpusFormat::enwik;
  if (enwik && options.val_fraction)
    log_info("prep: --val-fraction does not apply to enwik input (fixed 90/5/5 train/val/test split)");

  // --- 2. stream the corpus into shards in the staging folder ---
  const Staging st = make_staging(options.output);
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
  for (Split s : kSplits) sinks.emplace_back(s, st.dir, options.shard_tokens, result.token_bytes);
  try {
    stream_corpus(plan, *tok, popt, val_fraction > 0.0 && !enwik, sinks, result);
    if (sinks[0].counts().tokens + sinks[1].counts().tokens + sinks[2].counts().tokens == 0)
      throw_error("prep input " + options.input + " holds no text (" + std::to_string(result.files) +
                      " files read, no tokens" +
                      (result.bad_lines ? ", " + std::to_string(result.bad_lines) + " bad lines skipped" : "") + ")",
                  "point --input at text, or check --format and --jsonl-field");
    for (SplitSink& s : sinks) s.finish();
    fsync_dir(st.dir);
    // --- 3. publish ---
    publish(st.out, st.dir, {&sinks[0], &sinks[1], &sinks[2]}, st.had_manifest, *tok);
  } catch (...) {
    std::error_code ignore;
    sinks.clear();  // closes and removes unfinished temp files
    fs::remove_all(st.dir, ignore);
    if (st.created)
      fs::remove(st.out, ignore);  // only when empty: a folder this prep made and nothing was published to
    throw;
  }
  std::error_code ec;
  fs::remove_all(st.dir, ec);
  if (ec) log_warn("prep: could not remove %s: %s", st.dir.c_str(), ec.message().c_str());

  result.train = sinks[0].counts();
  result.val = sinks[1].counts();
  result.test = sinks[2].counts();
  write_manifest(st.out, options, *tok, plan, enwik, sinks, result);
  log_result(result, enwik, st.out);
  return result;
}

}  // namespace ember
