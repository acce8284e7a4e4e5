// Token shards (implementation): atomic writes (temp file, fsync, rename, fsync of the directory) and validating
// reads. Every failure becomes one ember::Error line naming the shard, so a bad file is found without a debugger.
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

// Opens `path`, validates its header against the file size and returns the token count. The descriptor is left
// positioned just after the header so read_shard can read the body with the same open file.
size_t open_and_check(const std::string& path, Fd& file) {
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
  if (header[0] != SHARD_MAGIC)
    shard_error(path, "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(SHARD_MAGIC) + ")");
  if (header[1] != SHARD_VERSION)
    shard_error(
        path, "unsupported version " + std::to_string(header[1]) + " (expected " + std::to_string(SHARD_VERSION) + ")");
  if (header[2] < 0) shard_error(path, "negative token count " + std::to_string(header[2]) + " in header");
  const size_t n = size_t(header[2]);
  const size_t body = size - SHARD_HEADER_BYTES;
  if (body != n * sizeof(uint16_t)) {
    const char* kind = body < n * sizeof(uint16_t) ? "truncated" : "trailing bytes";
    shard_error(path, std::string(kind) + ": header says " + std::to_string(n) + " tokens (" +
                          std::to_string(n * sizeof(uint16_t)) + " bytes) but the body is " + std::to_string(body) +
                          " bytes");
  }
  return n;
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

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > size_t(INT32_MAX))
    throw_error("shard " + path + ": " + std::to_string(tokens.size()) + " tokens do not fit the int32 header count",
                "use a smaller shard_tokens (at most " + std::to_string(INT32_MAX) + ")");
  int32_t header[SHARD_HEADER_INTS] = {};
  header[0] = SHARD_MAGIC;
  header[1] = SHARD_VERSION;
  header[2] = int32_t(tokens.size());

  const std::string tmp = path + ".tmp";
  try {
    Fd file;
    file.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file.fd < 0)
      throw_error("shard " + path + ": cannot create " + tmp + ": " + errno_text(),
                  "check that the output directory exists and is writable");
    write_full(file.fd, header, SHARD_HEADER_BYTES, path);
    write_full(file.fd, tokens.data(), tokens.size() * sizeof(uint16_t), path);
    if (::fsync(file.fd) != 0)
      throw_error("shard " + path + ": fsync failed: " + errno_text(), "check the disk and free space");
    // close() can report a deferred write error (NFS), so it is checked rather than left to the destructor.
    const int fd = file.fd;
    file.fd = -1;
    if (::close(fd) != 0)
      throw_error("shard " + path + ": close failed: " + errno_text(), "check the disk and free space");
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw_error("shard " + path + ": rename from " + tmp + " failed: " + errno_text(),
                  "check permissions on the output directory");
  } catch (...) {
    ::unlink(tmp.c_str());  // best effort: never leave a half-written temp file behind
    throw;
  }
  std::string dir = fs::path(path).parent_path().string();
  fsync_dir(dir.empty() ? "." : dir, path);
}

size_t read_shard_header(const std::string& path) {
  Fd file;
  return open_and_check(path, file);
}

std::vector<uint16_t> read_shard(const std::string& path) {
  Fd file;
  const size_t n = open_and_check(path, file);
  std::vector<uint16_t> tokens(n);
  const size_t bytes = n * sizeof(uint16_t);
  if (read_full(file.fd, tokens.data(), bytes, path) != bytes) shard_error(path, "file shrank while reading its body");
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
