// Regular files only (implementation).
#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace ember {
namespace {

const char* kind_of(mode_t mode) {
  return S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
         : S_ISFIFO(mode)               ? "a FIFO"
         : S_ISSOCK(mode)               ? "a socket"
                                        : "special";
}

}  // namespace

void refuse_special_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing: the caller's own check says so
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return;
  throw_error(what + " " + path + " is " + kind_of(st.st_mode) + ", not a file or folder",
              "give the path of a regular file or folder; ember never reads or writes special files");
}

bool file_starts_with(const std::string& path, const std::string& magic) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string head(magic.size(), '\0');
  in.read(head.data(), std::streamsize(head.size()));
  return in.gcount() == std::streamsize(magic.size()) && head == magic;
}

int open_regular_file(const std::string& path, const std::string& what, const std::string& hint) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw_error(what + " " + path + ": cannot open: " + std::strerror(errno), hint);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = S_ISDIR(st.st_mode) ? "a folder" : kind_of(st.st_mode);
    ::close(fd);
    throw_error(what + " " + path + " is " + kind + ", not a regular file", hint);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace ember
