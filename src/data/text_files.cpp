// The text files of a corpus input (implementation): a sorted recursive walk and whole-file reads that stop early
// at a NUL byte in the first 8 KiB.
#include "data/text_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

// Text never contains NUL; images, archives and token shards (their header holds zero bytes) all do early on.
constexpr size_t BINARY_SNIFF_BYTES = 8192;
const char* INPUT_HINT = "check the --input path (a text file or a folder of text files) and its permissions";

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

}  // namespace

std::vector<std::string> list_text_files(const std::string& input, const std::string& what) {
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw_error(what + " " + input + ": " + ec.message(), INPUT_HINT);
  if (!fs::exists(st)) throw_error(what + " " + input + " does not exist", INPUT_HINT);
  if (fs::is_regular_file(st)) return {input};
  if (!fs::is_directory(st)) throw_error(what + " " + input + " is neither a file nor a folder", INPUT_HINT);

  std::vector<std::string> files;
  fs::recursive_directory_iterator it(input, ec), end;
  if (ec) throw_error(what + " " + input + ": cannot list: " + ec.message(), INPUT_HINT);
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (is_hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      ec.clear();
      continue;
    }
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) files.push_back(it->path().string());
  }
  if (ec) throw_error(what + " " + input + ": cannot walk the folder: " + ec.message(), INPUT_HINT);
  std::sort(files.begin(), files.end());
  return files;
}

std::optional<std::string> read_text_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error(what + " file " + path + ": cannot open: " + std::strerror(errno), INPUT_HINT);
  std::string text;
  bool sniffed = false;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw_error(what + " file " + path + ": read failed: " + why, INPUT_HINT);
    }
    if (r > 0) text.append(buf, size_t(r));
    if (!sniffed && (r == 0 || text.size() >= BINARY_SNIFF_BYTES)) {
      sniffed = true;
      if (std::memchr(text.data(), 0, std::min(text.size(), BINARY_SNIFF_BYTES)) != nullptr) {
        ::close(fd);  // read-only descriptor: a close error cannot lose data
        return std::nullopt;
      }
    }
    if (r == 0) break;
  }
  ::close(fd);
  return text;
}

}  // namespace ember
