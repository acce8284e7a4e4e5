// Corpus preparation (implementation): walk, read and tokenize the whole input first, then write shards into a
// staging directory and move them in, so a failed or bad prep never leaves the output with a mix of old and new.
#include "data/prep.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/shard.h"
#include "data/text_files.h"
#include "data/tokenizer.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

// Tokenize in pieces of about this size so a 1 GB file never needs a 4 GB int32 id vector at once.
constexpr size_t ENCODE_CHUNK_BYTES = size_t(16) << 20;
// Shards are written here first, inside the output directory so the final renames never cross file systems.
// The leading dot keeps list_shards and a later prep of a parent directory from seeing it.
constexpr const char* STAGING_NAME = ".ember-prep.staging";

std::string errno_text() { return std::strerror(errno); }

// Appends the tokens of `text` to `stream`. Pieces end just after a newline that is followed by a non-space byte:
// GPT-2-style pre-tokenizers never merge across such a point, so chunking does not change the tokens.
void encode_into(const Tokenizer& tok, const std::string& text, const std::string& path,
                 std::vector<uint16_t>& stream) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.size();
    if (end - begin > ENCODE_CHUNK_BYTES) {
      size_t cut = text.find('\n', begin + ENCODE_CHUNK_BYTES);
      while (cut != std::string::npos && cut + 1 < text.size() &&
             std::isspace(static_cast<unsigned char>(text[cut + 1])))
        cut = text.find('\n', cut + 1);
      if (cut != std::string::npos) end = cut + 1;
    }
    for (int32_t id : tok.encode(std::string_view(text).substr(begin, end - begin))) {
      if (id < 0 || id > 65535)
        throw_error("prep input file " + path + ": tokenizer '" + tok.describe() + "' produced id " +
                        std::to_string(id) + ", which does not fit a uint16 shard",
                    "use a tokenizer with at most 65536 ids");
      stream.push_back(uint16_t(id));
    }
    begin = end;
  }
}

std::string shard_name(const char* split, size_t index) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s_%06zu.bin", split, index);
  return buf;
}

// True for names this function writes ("train_000012.bin"), with the index; other files are the user's to keep.
bool parse_shard_name(const std::string& name, const std::string& split, size_t& index) {
  const std::string head = split + "_", tail = ".bin";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  index = size_t(std::stoull(digits));
  return true;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw_error("prep output " + dir + ": cannot open to sync: " + errno_text(), "check the output permissions");
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw_error("prep output " + dir + ": fsync failed: " + why, "check the disk and the output file system");
  }
  ::close(fd);
}

// Writes stream[first, first + count) as shards of at most `per_shard` tokens into `dir`; returns their names.
std::vector<std::string> write_split(const std::string& dir, const char* split, const std::vector<uint16_t>& stream,
                                     size_t first, size_t count, size_t per_shard) {
  std::vector<std::string> names;
  for (size_t done = 0; done < count; done += per_shard) {
    const size_t n = std::min(per_shard, count - done);
    const auto begin = stream.begin() + std::ptrdiff_t(first + done);
    names.push_back(shard_name(split, names.size()));
    write_shard((fs::path(dir) / names.back()).string(), std::vector<uint16_t>(begin, begin + std::ptrdiff_t(n)));
  }
  return names;
}

}  // namespace

PrepResult prepare_corpus(const PrepOptions& options) {
  // --- 1. validate everything that can be checked without reading the corpus ---
  if (options.input.empty()) throw_error("prep: no input given", "pass --input <text file or directory>");
  if (options.output.empty()) throw_error("prep: no output directory given", "pass --output <directory>");
  if (!(options.val_fraction >= 0.0 && options.val_fraction <= 0.5))  // also rejects NaN
    throw_error("prep: val_fraction " + std::to_string(options.val_fraction) + " is outside [0, 0.5]",
                "pass a val_fraction between 0 and 0.5 (0.05 is typical; 0 writes no val shards)");
  if (options.shard_tokens == 0 || options.shard_tokens > size_t(INT32_MAX))
    throw_error("prep: shard_tokens " + std::to_string(options.shard_tokens) + " is outside [1, " +
                    std::to_string(INT32_MAX) + "]",
                "the shard header stores the count as int32; 100000000 is the usual size");
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(options.tokenizer);
  if (tok->vocab_size() > 65536)
    throw_error("prep: tokenizer '" + tok->describe() + "' has " + std::to_string(tok->vocab_size()) +
                    " ids, more than a uint16 shard can hold",
                "use a tokenizer with at most 65536 ids");
  {
    std::error_code ec;
    const fs::file_status st = fs::status(options.output, ec);
    if (fs::exists(st) && !fs::is_directory(st))
      throw_error("prep output " + options.output + " exists and is not a directory",
                  "pass a directory for --output (it is created if missing), or move the file away");
  }
  const std::vector<std::string> files = list_text_files(options.input, "prep input");
  if (!options.overwrite) {
    std::vector<std::string> shards;
    std::error_code ec;
    for (fs::directory_iterator it(options.output, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      size_t index = 0;
      if (parse_shard_name(name, "train", index) || parse_shard_name(name, "val", index)) shards.push_back(name);
    }
    if (!shards.empty()) {
      std::sort(shards.begin(), shards.end());
      throw_error("prep output " + options.output + " already holds " + std::to_string(shards.size()) +
                      " shards of an earlier prep (" + shards.front() + (shards.size() > 1 ? ", ...)" : ")"),
                  "pass --overwrite to replace them, or choose another --output folder");
    }
  }

  // --- 2. read and tokenize all of it before touching the output ---
  // Documents are concatenated in sorted path order with no separator (the byte tokenizer has no end-of-text id).
  std::vector<uint16_t> stream;
  PrepResult result;
  size_t skipped = 0;
  for (const std::string& path : files) {
    std::optional<std::string> text = read_text_file(path, "prep input");
    if (!text) {
      log_debug("prep: skipping binary file %s", path.c_str());
      ++skipped;
      continue;
    }
    ++result.files;
    encode_into(*tok, *text, path, stream);
  }
  if (stream.empty())
    throw_error("prep input " + options.input + " holds no text (" + std::to_string(result.files) +
                    " text files, all empty; " + std::to_string(skipped) + " binary files skipped)",
                "point --input at a text file or a directory that contains text files");

  // --- 3. split: the tail of the stream is val ---
  // val = the last ceil(val_fraction * n) tokens; the 1e-9 keeps 0.1 * 1000 from rounding up to 101 in floating
  // point. Any val_fraction > 0 gives at least one val token, so a val shard exists whenever there is text; with
  // val_fraction <= 0.5 train keeps at least half (rounded down), so it is empty only for a one-token corpus.
  const size_t n = stream.size();
  size_t n_val = 0;
  if (options.val_fraction > 0.0) {
    n_val = size_t(std::ceil(options.val_fraction * double(n) - 1e-9));
    n_val = std::clamp<size_t>(n_val, 1, n);
  }
  const size_t n_train = n - n_val;

  // --- 4. write into a staging directory, move the shards in, then drop stale shards with higher indices ---
  // Readers see either the old set or the new one shard by shard (each rename is atomic); a failure before the
  // moves leaves the old shards untouched, and the staging directory is removed on the way out.
  const std::string out = options.output;
  const std::string staging = (fs::path(out) / STAGING_NAME).string();
  const std::string out_hint = "check that the output directory is writable and has free space";
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw_error("prep output " + out + ": cannot create: " + ec.message(), out_hint);
  fs::remove_all(staging, ec);  // left over from a prep that was killed
  if (ec) throw_error("prep output " + out + ": cannot remove old " + staging + ": " + ec.message(), out_hint);
  fs::create_directory(staging, ec);
  if (ec) throw_error("prep output " + out + ": cannot create " + staging + ": " + ec.message(), out_hint);

  std::vector<std::string> train_names, val_names;
  try {
    train_names = write_split(staging, "train", stream, 0, n_train, options.shard_tokens);
    val_names = write_split(staging, "val", stream, n_train, n_val, options.shard_tokens);
    for (const auto* names : {&train_names, &val_names})
      for (const std::string& name : *names) {
        fs::rename(fs::path(staging) / name, fs::path(out) / name, ec);
        if (ec)
          throw_error("prep output " + out + ": cannot move " + name + " in from " + staging + ": " + ec.message(),
                      out_hint);
      }
    fsync_dir(out);
  } catch (...) {
    std::error_code ignore;
    fs::remove_all(staging, ignore);
    throw;
  }
  fs::remove_all(staging, ec);
  if (ec) log_warn("prep: could not remove %s: %s", staging.c_str(), ec.message().c_str());

  // Stale shards from an earlier, larger prep would otherwise be read as part of this corpus. Collected first:
  // removing entries while a directory is being read may make readdir skip or repeat names.
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    size_t index = 0;
    if ((parse_shard_name(name, "train", index) && index >= train_names.size()) ||
        (parse_shard_name(name, "val", index) && index >= val_names.size()))
      stale.push_back(it->path());
  }
  if (ec) throw_error("prep output " + out + ": cannot list it to remove stale shards: " + ec.message(), out_hint);
  for (const fs::path& path : stale) {
    fs::remove(path, ec);
    if (ec)
      throw_error(
          "prep output " + out + ": cannot remove stale shard " + path.filename().string() + ": " + ec.message(),
          "remove it by hand: it would be read as part of the new corpus");
  }

  result.train_tokens = n_train;
  result.val_tokens = n_val;
  result.train_shards = train_names.size();
  result.val_shards = val_names.size();
  log_info(
      "prep: %zu files (%zu binary skipped) -> %zu train tokens in %zu shards, %zu val tokens in %zu shards "
      "in %s",
      result.files, skipped, result.train_tokens, result.train_shards, result.val_tokens, result.val_shards,
      out.c_str());
  return result;
}

}  // namespace ember
