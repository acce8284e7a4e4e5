// Small files replaced atomically (temp file beside, write, fsync, rename, fsync of the folder), so a reader sees the
// old contents or the new ones, never a mix, even after a crash. For manifests and tokenizer files.
#pragma once

#include <string>
#include <string_view>

namespace ember {

// Writes all of `data` to the open file `fd`, again after a short write or EINTR. Returns "" or what went wrong:
// strerror(errno), or "no space left" where write() took nothing without an error.
std::string write_all(int fd, std::string_view data);

// Writes `contents` to `path` atomically. Failure throws ember::Error naming `what` (e.g. "prep manifest") and the
// path, with `hint`; the old file is left as it was and the temp file is removed.
void write_file_atomically(const std::string& path, std::string_view contents, const std::string& what,
                           const std::string& hint);

// Reads a whole file of at most `max_bytes`; a missing, unreadable or larger file throws ember::Error naming `what`
// and the path, with `hint`.
std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what,
                            const std::string& hint);

}  // namespace ember
