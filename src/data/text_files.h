// The text files of a corpus input: one file, or every regular file under a folder (sorted, hidden entries skipped),
// and reading one whole while telling binary files apart. For the commands that read a corpus: prep, tokenizer train.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ember {

// `input` itself if it is a file, else every regular file below it (recursively, symlinked folders not followed),
// sorted by path so results never depend on readdir order. Entries whose name starts with '.' are skipped.
// `what` names the input in errors ("tokenizer train input").
std::vector<std::string> list_text_files(const std::string& input, const std::string& what);

// The whole file, or nothing if it looks binary: a NUL byte in its first 8 KiB (git's heuristic).
std::optional<std::string> read_text_file(const std::string& path, const std::string& what);

}  // namespace ember
