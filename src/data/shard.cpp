// Token shards (implementation): streamed atomic writes (temp file, fsync, rename, fsync of the directory) and
// validating reads of both widths. Every failure becomes one ember::Error line naming the shard, so a bad file is found
// without a debugger.
#include "data/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ember {

// The format is little-endian on disk (llm.c writes it with numpy on x86); we copy raw memory, so say so.
static_assert(std::endian::native == std::endian::little, "shard I/O assumes a little-endian host");

namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

// Where the shard lives, for hints that tell the user which prep command to re-run.
std::string prep_hint(const std::string& path) {
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return "re-create the shards with `ember prep --input <corpus> --output " + dir + "`";
}

[[noreturn]] void shard_error(const std::string& path, const std::string& what) {
  throw_error("shard " + path + ": " + what, prep_hint(path));
}

// Closes on scope exit so every early throw below releases its descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at the current offset; returns the number read (< n only at end of file).
size_t read_full(int fd, void* buf, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, static_cast<char*>(buf) + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_error("shard " + path + ": read failed: " + errno_text(),
                  "check the disk and the file's permissions; " + prep_hint(path));
    }
    if (r == 0) break;
    done += size_t(r);
  }
  return done;
}

void write_full(int fd, const void* buf, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, static_cast<const char*>(buf) + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_error("shard " + path + ": write failed: " + errno_text(),
                  "check free disk space and write permission on the output directory");
    }
    done += size_t(w);
  }
}

// Opens `path`, validates its header against the file size and returns the count and width. The descriptor is left
// positioned just after the header so the body can be read with the same open file.
ShardInfo open_and_check(const std::string& path, Fd& file) {
  file.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block: refused below
  if (file.fd < 0) shard_error(path, "cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) shard_error(path, "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) shard_error(path, "not a regular file");
  const size_t size = size_t(st.st_size);
  if (size < SHARD_HEADER_BYTES)
    shard_error(path, "file is " + std::to_string(size) + " bytes, shorter than the " +
                          std::to_string(SHARD_HEADER_BYTES) + "-byte header");
  int32_t header[SHARD_HEADER_INTS];
  if (read_full(file.fd, header, SHARD_HEADER_BYTES, path) != SHARD_HEADER_BYTES)
    shard_error(path, "file shrank while reading its header");
  ShardInfo info;
  if (header[0] == SHARD_MAGIC) {
    info.token_bytes = 2;
    if (header[1] != SHARD_VERSION)
      shard_error(path, "unsupported version " + std::to_string(header[1]) + " (expected " +
                            std::to_string(SHARD_VERSION) + " for magic " + std::to_string(SHARD_MAGIC) + ")");
  } else if (header[0] == SHARD_MAGIC_U32) {
    info.token_bytes = 4;
    if (header[1] != SHARD_VERSION_U32)
      shard_error(path, "unsupported version " + std::to_string(header[1]) + " (expected " +
                            std::to_string(SHARD_VERSION_U32) + " for magic " + std::to_string(SHARD_MAGIC_U32) + ")");
  } else {
    shard_error(path, "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(SHARD_MAGIC) +
                          " for uint16 tokens or " + std::to_string(SHARD_MAGIC_U32) + " for uint32)");
  }
  if (header[2] < 0) shard_error(path, "negative token count " + std::to_string(header[2]) + " in header");
  info.tokens = size_t(header[2]);
  const size_t body = size - SHARD_HEADER_BYTES, want = info.tokens * size_t(info.token_bytes);
  if (body != want) {
    const char* kind = body < want ? "truncated" : "trailing bytes";
    shard_error(path, std::string(kind) + ": header says " + std::to_string(info.tokens) + " tokens (" +
                          std::to_string(want) + " bytes) but the body is " + std::to_string(body) + " bytes");
  }
  return info;
}

// fsync of the directory makes the rename itself durable, not just the file's bytes.
void fsync_dir(const std::string& dir, const std::string& path) {
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd < 0)
    throw_error("shard " + path + ": cannot open directory " + dir + " to sync it: " + errno_text(),
                "check permissions on the output directory");
  if (::fsync(d.fd) != 0)
    throw_error("shard " + path + ": fsync of directory " + dir + " failed: " + errno_text(),
                "check the disk and the output file system");
}

// Tokens are buffered up to this many bytes between writes: few syscalls, and memory independent of shard size.
constexpr size_t WRITE_BUFFER_BYTES = size_t(1) << 20;

template <typename T>
void write_whole_shard(const std::string& path, const std::vector<T>& tokens) {
  {
    ShardWriter w(path, int(sizeof(T)));
    w.append(tokens.data(), tokens.size());
    w.finish();
  }
  std::string dir = fs::path(path).parent_path().string();
  fsync_dir(dir.empty() ? "." : dir, path);
}

}  // namespace

ShardWriter::ShardWriter(std::string path, int token_bytes)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), token_bytes_(token_bytes) {
  EMBER_ASSERT(token_bytes == 2 || token_bytes == 4, "shard tokens are 2 or 4 bytes");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw_error("shard " + path_ + ": cannot create " + tmp_ + ": " + errno_text(),
                "check that the output directory exists and is writable");
  buf_.reserve(WRITE_BUFFER_BYTES);
  buf_.resize(SHARD_HEADER_BYTES, 0);  // magic 0 until finish(): no reader takes an unfinished file for a shard
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());  // best effort: never leave a half-written temp file behind
  }
}

void ShardWriter::flush() {
  write_full(fd_, buf_.data(), buf_.size(), path_);
  buf_.clear();
}

void ShardWriter::append(const void* tokens, size_t n) {
  if (count_ + n > size_t(INT32_MAX))
    throw_error("shard " + path_ + ": " + std::to_string(count_ + n) + " tokens do not fit the int32 header count",
                "use a smaller shard_tokens (at most " + std::to_string(INT32_MAX) + ")");
  const char* p = static_cast<const char*>(tokens);
  size_t bytes = n * size_t(token_bytes_);
  count_ += n;
  while (bytes > 0) {
    const size_t take = std::min(bytes, WRITE_BUFFER_BYTES - std::min(buf_.size(), WRITE_BUFFER_BYTES));
    if (take == 0) {
      flush();
      continue;
    }
    buf_.insert(buf_.end(), p, p + take);
    p += take;
    bytes -= take;
  }
}

void ShardWriter::finish() {
  EMBER_ASSERT(fd_ >= 0, "ShardWriter::finish called twice");
  flush();
  int32_t header[SHARD_HEADER_INTS] = {};
  header[0] = token_bytes_ == 2 ? SHARD_MAGIC : SHARD_MAGIC_U32;
  header[1] = token_bytes_ == 2 ? SHARD_VERSION : SHARD_VERSION_U32;
  header[2] = int32_t(count_);
  if (::pwrite(fd_, header, SHARD_HEADER_BYTES, 0) != ssize_t(SHARD_HEADER_BYTES))
    throw_error("shard " + path_ + ": writing the header failed: " + errno_text(),
                "check free disk space and write permission on the output directory");
  if (::fsync(fd_) != 0)
    throw_error("shard " + path_ + ": fsync failed: " + errno_text(), "check the disk and free space");
  // close() can report a deferred write error (NFS), so it is checked rather than left to the destructor.
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    throw_error("shard " + path_ + ": close failed: " + errno_text(), "check the disk and free space");
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp_.c_str());
    throw_error("shard " + path_ + ": rename from " + tmp_ + " failed: " + why,
                "check permissions on the output directory");
  }
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) { write_whole_shard(path, tokens); }

void write_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens) { write_whole_shard(path, tokens); }

ShardInfo read_shard_info(const std::string& path) {
  Fd file;
  return open_and_check(path, file);
}

size_t read_shard_header(const std::string& path) { return read_shard_info(path).tokens; }

std::vector<uint16_t> read_shard(const std::string& path) {
  Fd file;
  const ShardInfo info = open_and_check(path, file);
  if (info.token_bytes != 2) shard_error(path, "holds uint32 tokens where uint16 ones were expected");
  std::vector<uint16_t> tokens(info.tokens);
  const size_t bytes = info.tokens * sizeof(uint16_t);
  if (read_full(file.fd, tokens.data(), bytes, path) != bytes) shard_error(path, "file shrank while reading its body");
  return tokens;
}

std::vector<uint32_t> read_shard_tokens(const std::string& path) {
  Fd file;
  const ShardInfo info = open_and_check(path, file);
  std::vector<uint32_t> tokens(info.tokens);
  const size_t bytes = info.tokens * size_t(info.token_bytes);
  if (info.token_bytes == 4) {
    if (read_full(file.fd, tokens.data(), bytes, path) != bytes)
      shard_error(path, "file shrank while reading its body");
    return tokens;
  }
  std::vector<uint16_t> narrow(info.tokens);
  if (read_full(file.fd, narrow.data(), bytes, path) != bytes) shard_error(path, "file shrank while reading its body");
  std::copy(narrow.begin(), narrow.end(), tokens.begin());
  return tokens;
}

std::vector<std::string> list_shards(const std::string& dir, const std::string& prefix) {
  const std::string hint = "run `ember prep --input <corpus> --output " + dir + "` to create the shards";
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st)) {
    if (!ec || ec == std::errc::no_such_file_or_directory)
      throw_error("shard directory " + dir + " does not exist", hint);
    throw_error("shard directory " + dir + ": " + ec.message(), "check the path and its permissions");
  }
  if (!fs::is_directory(st)) throw_error("shard directory " + dir + " is not a directory", hint);

  std::vector<std::string> paths;
  fs::directory_iterator it(dir, ec);
  if (ec) throw_error("shard directory " + dir + ": cannot list: " + ec.message(), "check its permissions");
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (name.size() < prefix.size() + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".bin") != 0)
      continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;  // follows symlinks, so linked shards still count
    paths.push_back(it->path().string());
  }
  if (ec) throw_error("shard directory " + dir + ": cannot list: " + ec.message(), "check its permissions");
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace ember
