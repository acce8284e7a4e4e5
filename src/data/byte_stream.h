// Reading an input file as a stream of bytes, decompressing gzip, zstd or a one-member zip on the fly. The kind is
// told by the file's first bytes, never by its name, so a renamed file still reads right.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ember {

enum class Compression { none, gzip, zstd, zip };
const char* compression_name(Compression c);  // "plain", "gzip", "zstd", "zip"

// The compression of `path` by its magic bytes: 1f 8b (gzip), 28 b5 2f fd (zstd), "PK\3\4" (zip), else none.
// An unreadable file throws ember::Error naming it.
Compression detect_compression(const std::string& path);

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Reads up to `n` decompressed bytes into `buf`; returns 0 only at the end. A read failure or a truncated or corrupt
  // compressed stream throws ember::Error naming the file ("truncated gzip stream") with a hint.
  virtual size_t read(char* buf, size_t n) = 0;
  // Bytes of the file on disk consumed so far (for progress and the val split); for zip an estimate in proportion.
  virtual uint64_t disk_pos() const = 0;
  virtual Compression compression() const = 0;
};

// Opens `path` for reading, decompressing as detect_compression says. A zip archive must hold exactly one file.
std::unique_ptr<ByteStream> open_byte_stream(const std::string& path);

// The decompressed size of `path`: the file size when plain, the member's size for zip, else counted by reading the
// whole stream once.
uint64_t decompressed_size(const std::string& path);

}  // namespace ember
