// Files from outside input are regular files or folders: a device, FIFO or socket is refused before anything reads
// from it (a FIFO would block the reader forever, a device stream without end) or writes to it.
#pragma once

#include <string>

namespace ember {

// Throws ember::Error naming `what` and the path, with a hint, when something exists at `path` that is neither a
// regular file nor a folder. A missing path passes: the caller's own check reports it.
void refuse_special_file(const std::string& path, const std::string& what);

// Opens `path` read-only, refusing anything but a regular file: opened non-blocking and checked with fstat, so a FIFO
// cannot block the open. Throws ember::Error "<what> <path>: cannot open: ..." or "... is a FIFO, not a regular file"
// with `hint`. The caller closes the descriptor.
int open_regular_file(const std::string& path, const std::string& what, const std::string& hint);

// Whether `path` is an existing regular file that starts with `magic`.
bool file_starts_with(const std::string& path, const std::string& magic);

}  // namespace ember
