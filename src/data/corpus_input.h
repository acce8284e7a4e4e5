// What `ember prep` reads: the input files (one file, or every file under a folder), the format of each (text,
// JSONL, enwik8/enwik9) and their sizes on disk, all found before anything is read or written.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/byte_stream.h"

namespace ember {

enum class CorpusFormat { text, jsonl, enwik };
inline constexpr CorpusFormat kCorpusFormats[] = {CorpusFormat::text, CorpusFormat::jsonl, CorpusFormat::enwik};
const char* corpus_format_name(CorpusFormat f);  // "text", "jsonl", "enwik"

struct CorpusFile {
  std::string path;
  CorpusFormat format = CorpusFormat::text;
  Compression compression = Compression::none;
  uint64_t disk_bytes = 0;  // size on disk
  bool binary = false;      // a text file with a NUL byte in its first 8 KiB (after decompression): skipped
};

struct CorpusPlan {
  std::vector<CorpusFile> files;  // sorted by path; binary ones included (marked) so they can be reported
  uint64_t disk_bytes = 0;        // of the files that will be read (binary ones left out)
  size_t binary_files = 0;
};

// The files of `input`: a file, or every regular file under a folder (recursive, sorted by path, hidden entries
// skipped, symlinked folders not followed). `format` is "auto", "text", "jsonl" or "enwik"; auto decides per file
// by its name without a .gz/.zst/.zip suffix: *.jsonl is JSONL, enwik8 and enwik9 are enwik, anything else text.
// Text files are sniffed for NUL bytes here. An enwik input must be the only file. Errors throw ember::Error naming
// the input ("<command> input ...", command "prep" or "tokenizer train") with a hint.
CorpusPlan plan_corpus(const std::string& input, const std::string& format, const char* command = "prep");

// The format a file name implies (auto), e.g. "data/part1.jsonl.zst" -> jsonl, "enwik8.zip" -> enwik.
CorpusFormat format_from_name(const std::string& path);

// The documents of one planned file, read whole (decompressed) into memory, for a consumer that takes documents
// rather than a stream (tokenizer train): a text or enwik file is one document; a JSONL file gives each line's
// `jsonl_field` (bad lines are errors, or skipped and counted with `skip_bad_lines`). A file that turns out binary
// gives none.
struct DocumentCounts {
  uint64_t documents = 0, bytes = 0, bad_lines = 0;
  bool binary = false;
};
DocumentCounts read_documents(const CorpusFile& file, const std::string& jsonl_field, bool skip_bad_lines,
                              const char* command, const std::function<void(std::string&&)>& add);

}  // namespace ember
