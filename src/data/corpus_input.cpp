// The corpus input plan (implementation): walking the input, per-file format and compression, NUL sniffing, and
// whole documents for tokenizer train.
#include "data/corpus_input.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/enum_names.h"
#include "core/error.h"
#include "data/jsonl_line.h"
#include "data/text_files.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

const char* INPUT_HINT =
    "check the --input path (a file or a folder of text, JSONL or enwik files) and its permissions";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool file_looks_binary(const std::string& path) {
  const std::unique_ptr<ByteStream> in = open_byte_stream(path);
  char buf[BINARY_SNIFF_BYTES];
  size_t got = 0;
  while (got < sizeof(buf)) {
    const size_t r = in->read(buf + got, sizeof(buf) - got);
    if (r == 0) break;
    got += r;
  }
  return looks_binary(std::string_view(buf, got));
}

}  // namespace

const char* corpus_format_name(CorpusFormat f) {
  switch (f) {
    case CorpusFormat::text:
      return "text";
    case CorpusFormat::jsonl:
      return "jsonl";
    case CorpusFormat::enwik:
      return "enwik";
  }
  return "?";
}

CorpusFormat format_from_name(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  for (const char* suffix : {".gz", ".zst", ".zstd", ".zip"})
    if (ends_with(name, suffix)) {
      name.resize(name.size() - std::strlen(suffix));
      break;
    }
  if (ends_with(name, ".jsonl")) return CorpusFormat::jsonl;
  if (name == "enwik8" || name == "enwik9") return CorpusFormat::enwik;
  return CorpusFormat::text;
}

CorpusPlan plan_corpus(const std::string& input, const std::string& format, const char* command) {
  const std::string what = std::string(command) + " input";
  std::optional<CorpusFormat> forced;
  if (format != "auto") {
    forced = find_by_name(kCorpusFormats, corpus_format_name, format);
    if (!forced)
      throw_error(std::string(command) + ": unknown --format '" + format + "'",
                  "use auto or one of: " + join_names(kCorpusFormats, corpus_format_name));
  }

  CorpusPlan plan;
  for (const std::string& path : list_input_files(input, what, INPUT_HINT)) {
    CorpusFile f;
    f.path = path;
    f.format = forced ? *forced : format_from_name(path);
    f.compression = detect_compression(path);
    std::error_code ec;
    f.disk_bytes = uint64_t(fs::file_size(path, ec));
    if (ec) throw_error(what + " file " + path + ": cannot stat: " + ec.message(), INPUT_HINT);
    if (f.format == CorpusFormat::text && file_looks_binary(path)) {
      f.binary = true;
      ++plan.binary_files;
    } else {
      plan.disk_bytes += f.disk_bytes;
    }
    plan.files.push_back(std::move(f));
  }
  const bool any_enwik = std::any_of(plan.files.begin(), plan.files.end(),
                                     [](const CorpusFile& f) { return f.format == CorpusFormat::enwik; });
  if (any_enwik && plan.files.size() != 1)
    throw_error(
        what + " " + input + " mixes an enwik file with " + std::to_string(plan.files.size() - 1) + " other files",
        "pass the enwik8/enwik9 file itself as --input: its train/val/test split is defined on that file alone");
  return plan;
}

DocumentCounts read_documents(const CorpusFile& file, const std::string& jsonl_field, bool skip_bad_lines,
                              const char* command, const std::function<void(std::string&&)>& add) {
  DocumentCounts counts;
  std::optional<std::string> text = read_text_file(file.path);
  if (!text) {
    counts.binary = true;
    return counts;
  }
  const auto take = [&](std::string&& doc) {
    if (doc.empty()) return;
    ++counts.documents;
    counts.bytes += doc.size();
    add(std::move(doc));
  };
  if (file.format != CorpusFormat::jsonl) {
    take(std::move(*text));
    return counts;
  }
  for_each_jsonl_document(*text, jsonl_field, file.path, 1, command, skip_bad_lines, take,
                          [&](const Error&) { ++counts.bad_lines; });
  return counts;
}

}  // namespace ember
