// The checkpoint folder protocol (implementation): POSIX calls with errno in every message, so a failed save says
// which file, which step of the protocol and why.
#include "checkpoint/folder.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"

namespace ember::checkpoint_detail {
namespace {

// Closes a POSIX descriptor on every path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) (void)::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int close() { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

}  // namespace

std::string errno_str() { return std::strerror(errno); }

TempFile::~TempFile() {
  if (!path_.empty()) (void)::unlink(path_.c_str());
}

void fsync_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error("checkpoint " + path + ": cannot reopen to fsync: " + errno_str(), HINT_WRITE);
  if (::fsync(fd.get()) != 0) throw Error("checkpoint " + path + ": fsync failed: " + errno_str(), HINT_WRITE);
  if (fd.close() != 0) throw Error("checkpoint " + path + ": close failed: " + errno_str(), HINT_WRITE);
}

// Makes a rename inside `dir` durable. File systems that cannot fsync a directory (EINVAL) order renames anyway.
void fsync_dir(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    throw Error("checkpoint folder " + dir.string() + ": cannot open to fsync: " + errno_str(), HINT_WRITE);
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != ENOTSUP)
    throw Error("checkpoint folder " + dir.string() + ": fsync failed: " + errno_str(), HINT_WRITE);
}

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw Error("checkpoint " + to + ": cannot rename " + from + " to it: " + errno_str(),
                "check that " + to + " is not a directory and that the folder is writable");
}

fs::path folder_path(const std::string& folder) { return folder.empty() ? fs::path(".") : fs::path(folder); }

void make_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec && !fs::is_directory(dir, ec)) ec = std::make_error_code(std::errc::not_a_directory);
  if (ec)
    throw Error("checkpoint folder " + dir.string() + " cannot be created: " + ec.message(),
                "check that every part of the path is a directory you can write to (permissions, free disk "
                "space), or set checkpoint.folder to another place");
}

int64_t parse_step(const std::string& name) {
  const std::string head = "step_", tail = ".h5";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const int64_t step = parse_step(name);
    std::error_code type_ec;
    if (step >= 0 && it->is_regular_file(type_ec)) out.emplace_back(step, name);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::string read_latest(const fs::path& dir) {
  FILE* f = std::fopen((dir / "latest").c_str(), "r");
  if (!f) return "";
  char buf[256] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string name(buf, n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  return name.find('/') == std::string::npos ? name : std::string();
}

void write_latest(const fs::path& dir, const std::string& name) {
  write_file_atomically((dir / "latest").string(), name + "\n", "checkpoint folder " + dir.string() + ": pointer",
                        HINT_WRITE);
}

// Deletes all but the newest `keep` checkpoints by step number; the one just written always stays (it is what
// `latest` names, even when a resumed run saves a lower step than files left over from a longer run). Temp files of
// interrupted saves go too. Failures only warn: the new checkpoint is already safe.
void prune(const fs::path& dir, int keep, const std::string& current) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0 &&
        parse_step(name.substr(0, name.size() - 4)) >= 0)
      if (::unlink(it->path().c_str()) != 0)
        log_warn("checkpoint: cannot delete stale %s: %s", it->path().c_str(), errno_str().c_str());
  }
  if (keep <= 0) return;
  const auto all = list_checkpoints(dir);
  for (size_t i = size_t(keep); i < all.size(); ++i) {
    if (all[i].second == current) continue;
    const fs::path p = dir / all[i].second;
    if (::unlink(p.c_str()) != 0) log_warn("checkpoint: cannot delete old %s: %s", p.c_str(), errno_str().c_str());
  }
}

namespace {

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

// Refuses a save that cannot fit before writing a byte, so that the usual failure (a full disk, a `ulimit -f`) is
// one clear message, and the rarer mid-write failure paths of HDF5 are seldom reached.
void check_room(const fs::path& dir, const std::string& file, uint64_t need) {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && need > uint64_t(lim.rlim_cur))
    throw Error("checkpoint " + file + ": needs about " + mib(need) + " but the file size limit (ulimit -f) is " +
                    mib(uint64_t(lim.rlim_cur)),
                "raise the limit (ulimit -f unlimited in the job script) or save a smaller model");
  struct statvfs vfs {};
  // Only trust file systems that report their size; some network mounts report zeros.
  if (::statvfs(dir.c_str(), &vfs) == 0 && vfs.f_blocks > 0) {
    const uint64_t free_bytes = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
    if (need > free_bytes)
      throw Error("checkpoint " + file + ": not enough free disk space in " + dir.string() + " (needs about " +
                      mib(need) + ", " + mib(free_bytes) + " free)",
                  "free some space, or set checkpoint.folder to a larger disk; old checkpoints are deleted only "
                  "after the new one is written, so the folder needs room for keep_latest_k + 1 of them");
  }
}

}  // namespace ember::checkpoint_detail

namespace ember {

std::string checkpoint_path(const std::string& folder, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return folder.empty() ? std::string(name) : (checkpoint_detail::fs::path(folder) / name).string();
}

}  // namespace ember
