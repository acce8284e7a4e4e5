// The checkpoint folder protocol (internal to src/checkpoint): temp files, fsync, rename, `latest`,
// keep-K pruning and the free-space check, so that a step_*.h5 on disk is always complete or absent.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ember::checkpoint_detail {

namespace fs = std::filesystem;

// Hints shared by every checkpoint message: damaged files, corrupted data, failed writes.
inline constexpr const char* HINT_DAMAGED =
    "the file is damaged or incomplete (interrupted copy, full disk?); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5) or start fresh";
inline constexpr const char* HINT_CORRUPT =
    "the file was damaged after it was written (disk, copy, transfer); resume from an earlier checkpoint "
    "(--resume <folder>/step_XXXXXXXX.h5)";
inline constexpr const char* HINT_WRITE =
    "check that the checkpoint folder is writable and that the disk has free space";

std::string errno_str();

// Removes a temp file unless the save succeeded. unlink(), not remove(): it never deletes a directory that happens
// to carry the temp name.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

// fsync of a written file, and of a folder after a rename in it (file systems that cannot fsync a folder are skipped).
void fsync_file(const std::string& path);
void fsync_dir(const fs::path& dir);
void rename_file(const std::string& from, const std::string& to);

// The checkpoint folder ("" means the working directory), and creating it with every parent.
fs::path folder_path(const std::string& folder);
void make_folder(const fs::path& dir);

// Step number of a file named step_<digits>.h5, or -1 for any other name.
int64_t parse_step(const std::string& name);

// (step, file name) of every step_*.h5 regular file in `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const fs::path& dir);

// The file name `latest` holds (trailing newline removed), or "" when it is missing, empty or names a path.
std::string read_latest(const fs::path& dir);

// Points `latest` at `name` atomically (latest.tmp, fsync, rename, fsync the folder).
void write_latest(const fs::path& dir, const std::string& name);

// Deletes all but the newest `keep` checkpoints by step number, never `current`, plus stale step_*.h5.tmp files.
// Failures only warn: the new checkpoint is already safe.
void prune(const fs::path& dir, int keep, const std::string& current);

// Throws a clear error when `need` bytes cannot fit (ulimit -f, free disk space) before a byte is written.
void check_room(const fs::path& dir, const std::string& file, uint64_t need);

}  // namespace ember::checkpoint_detail
