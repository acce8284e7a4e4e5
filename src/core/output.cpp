// One rule for every output (implementation): the checks, the staging beside the output, the lock, and the swap
// (renameat2 RENAME_EXCHANGE where the file system has it, two renames where it has not).
#include "core/output.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace fs = std::filesystem;

namespace ember {
namespace {

std::string named(const OutputRule& r) { return r.option + " " + r.path; }

void fsync_folder(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// A free name <path>.previous-<UTC time>[-k] beside `path`.
fs::path aside_name(const fs::path& path) {
  std::string stamp = utc_timestamp();
  stamp.erase(std::remove(stamp.begin(), stamp.end(), ':'), stamp.end());
  std::error_code ec;
  for (int k = 1;; ++k) {
    std::string name = path.string() + ".previous-" + stamp;
    if (k > 1) name.append("-").append(std::to_string(k));
    if (!fs::exists(fs::symlink_status(name, ec))) return name;
  }
}

bool is_empty_folder(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_empty(path, ec) && !ec;
}

}  // namespace

bool folder_holds_only(const std::string& dir,
                       const std::function<bool(const std::string& name, bool is_file, bool is_folder)>& ours) {
  std::error_code ec;
  bool any = false;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (!ours(it->path().filename().string(), fs::is_regular_file(st), fs::is_directory(st))) return false;
    any = true;
  }
  return any && !ec;
}

StagedOutput::StagedOutput(OutputRule rule) : rule_(std::move(rule)) {
  const fs::path path = fs::path(rule_.path).lexically_normal();
  if (rule_.path.empty() || path.filename().empty() || path.filename() == "." || path.filename() == "..")
    throw_error(rule_.command + ": " + rule_.option + " '" + rule_.path + "' names no file or folder",
                "give a path ending in the name of the " +
                    std::string(rule_.kind == OutputKind::file ? "file" : "folder") + " to write");
  refuse_special_file(path.string(), rule_.command + ": " + rule_.option);
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  const bool exists = fs::exists(st);
  if (exists) {
    const bool wrong_kind =
        rule_.kind == OutputKind::file ? !fs::is_regular_file(path, ec) : !fs::is_directory(path, ec);
    if (wrong_kind || (!is_empty_folder(path) && !rule_.is_ours(path.string())))
      throw_error(rule_.command + ": " + named(rule_) + " exists and is not " + rule_.looks_like +
                      ": it is not replaced, --overwrite or not",
                  "give " + rule_.option + " a new path; ember replaces only what this command wrote");
    if (!is_empty_folder(path) && !rule_.overwrite)
      throw_error(rule_.command + ": " + named(rule_) + " exists",
                  "give a new path, or pass --overwrite to replace it (the old one is moved aside, not deleted)");
  }
  const fs::path parent = path.parent_path();
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec)
      throw_error(rule_.command + ": cannot create the folder of " + named(rule_) + ": " + ec.message(),
                  "check that the parent folder is writable");
  }
  lock_ = std::make_unique<FolderLock>(LockSpec{path.string(), rule_.command + " output", path.string() + ".lock",
                                                rule_.command, "give " + rule_.option + " another path"});
  staging_ = path.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(staging_, ec);  // left by an earlier process with this pid that was killed
  if (rule_.kind == OutputKind::folder) {
    fs::create_directory(staging_, ec);
    if (ec)
      throw_error(rule_.command + ": cannot create " + staging_ + ": " + ec.message(),
                  "check that the folder of " + rule_.path + " is writable");
  }
}

StagedOutput::~StagedOutput() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

std::string StagedOutput::commit() {
  const fs::path path = fs::path(rule_.path).lexically_normal();
  std::error_code ec;
  const std::string hint = "check the permissions of the folder of " + rule_.path;
  fs::path aside;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    if (::rename(staging_.c_str(), path.c_str()) != 0)
      throw_error(rule_.command + ": cannot move " + staging_ + " to " + path.string() + ": " + std::strerror(errno),
                  hint);
  } else if (is_empty_folder(path)) {
    if (::rmdir(path.c_str()) != 0 || ::rename(staging_.c_str(), path.c_str()) != 0)
      throw_error(rule_.command + ": cannot replace the empty folder " + path.string() + ": " + std::strerror(errno),
                  hint);
  } else {
    aside = aside_name(path);
    // One atomic exchange where the file system offers it: the path never lacks an output.
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
      if (::rename(staging_.c_str(), aside.c_str()) != 0)
        log_warn("%s: the old output is at %s (cannot rename it to %s: %s)", rule_.command.c_str(), staging_.c_str(),
                 aside.c_str(), std::strerror(errno));
    } else {
      if (::rename(path.c_str(), aside.c_str()) != 0)
        throw_error(rule_.command + ": cannot move " + path.string() + " aside: " + std::strerror(errno), hint);
      if (::rename(staging_.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        ::rename(aside.c_str(), path.c_str());
        throw_error(rule_.command + ": cannot move " + staging_ + " to " + path.string() + ": " + why, hint);
      }
    }
  }
  committed_ = true;
  fsync_folder(path.parent_path());
  if (!aside.empty())
    log_info("%s: the earlier %s moved aside to %s (nothing deleted)", rule_.command.c_str(), named(rule_).c_str(),
             aside.c_str());
  return aside.string();
}

}  // namespace ember
