// Corpus input files (implementation): the sorted walk and whole-file reads through the decompressing byte stream.
#include "data/text_files.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/byte_stream.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

}  // namespace

bool looks_binary(std::string_view first_bytes) {
  const size_t n = std::min(first_bytes.size(), BINARY_SNIFF_BYTES);
  return std::memchr(first_bytes.data(), 0, n) != nullptr;
}

std::vector<std::string> list_input_files(const std::string& input, const std::string& what, const std::string& hint) {
  std::error_code ec;
  const fs::file_status st = fs::status(input, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) throw_error(what + " " + input + ": " + ec.message(), hint);
  if (!fs::exists(st)) throw_error(what + " " + input + " does not exist", hint);
  if (fs::is_regular_file(st)) return {input};
  if (!fs::is_directory(st)) throw_error(what + " " + input + " is neither a file nor a folder", hint);

  std::vector<std::string> files;
  fs::recursive_directory_iterator it(input, ec), end;
  if (ec) throw_error(what + " " + input + ": cannot list: " + ec.message(), hint);
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
  if (ec) throw_error(what + " " + input + ": cannot walk the folder: " + ec.message(), hint);
  std::sort(files.begin(), files.end());
  return files;
}

std::optional<std::string> read_text_file(const std::string& path) {
  const std::unique_ptr<ByteStream> in = open_byte_stream(path);
  std::string text;
  char buf[1 << 16];
  bool sniffed = false;
  for (;;) {
    const size_t r = in->read(buf, sizeof(buf));
    text.append(buf, r);
    if (!sniffed && (r == 0 || text.size() >= BINARY_SNIFF_BYTES)) {
      sniffed = true;
      if (looks_binary(text)) return std::nullopt;
    }
    if (r == 0) break;
  }
  return text;
}

}  // namespace ember
