// Atomic small-file writes and bounded reads (implementation): plain POSIX calls, each failure one ember::Error line.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/regular_file.h"

namespace ember {

std::string write_all(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return std::strerror(errno);
    if (w == 0) return std::strerror(ENOSPC);
    done += size_t(w);
  }
  return "";
}

void write_file_atomically(const std::string& path, std::string_view contents, const std::string& what,
                           const std::string& hint) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_error(what + " " + path + ": cannot create " + tmp + ": " + std::strerror(errno), hint);
  std::string problem = write_all(fd, contents);
  if (problem.empty() && ::fsync(fd) != 0) problem = std::strerror(errno);
  // close() can report a deferred write error (NFS), so it counts.
  if (::close(fd) != 0 && problem.empty()) problem = std::strerror(errno);
  if (problem.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) problem = std::strerror(errno);
  if (!problem.empty()) {
    ::unlink(tmp.c_str());
    throw_error(what + " " + path + ": cannot write: " + problem, hint);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // file systems that cannot fsync a folder still order the rename
    ::close(dfd);
  }
}

std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what,
                            const std::string& hint) {
  const int fd = open_regular_file(path, what, hint);
  struct stat st {};
  ::fstat(fd, &st);
  if (size_t(st.st_size) > max_bytes) {
    ::close(fd);
    throw_error(what + " " + path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " allowed",
                hint);
  }
  std::string text(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::read(fd, text.data() + done, text.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r < 0 ? std::strerror(errno) : "file shrank while reading";
      ::close(fd);
      throw_error(what + " " + path + ": read failed: " + why, hint);
    }
    done += size_t(r);
  }
  ::close(fd);
  return text;
}

}  // namespace ember
