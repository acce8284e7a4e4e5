// The files of a corpus input (one file, or every regular file under a folder: sorted, hidden entries skipped) and
// the binary-file test, shared by the commands that read a corpus: prep and tokenizer train.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// A text file's first BINARY_SNIFF_BYTES (after decompression) never contain NUL; images, archives and token shards
// (their header holds zero bytes) do (git's heuristic).
inline constexpr size_t BINARY_SNIFF_BYTES = 8192;
bool looks_binary(std::string_view first_bytes);  // a NUL among the first BINARY_SNIFF_BYTES

// `input` itself if it is a file, else every regular file below it (recursively, symlinked folders not followed),
// sorted by path so results never depend on readdir order. Entries whose name starts with '.' are skipped.
// Errors name `what` ("prep input") and the path, with `hint`.
std::vector<std::string> list_input_files(const std::string& input, const std::string& what, const std::string& hint);

// The whole file, decompressed when it is gzip, zstd or a one-member zip; nothing if it looks binary.
std::optional<std::string> read_text_file(const std::string& path);

}  // namespace ember
