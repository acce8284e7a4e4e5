// Byte streams (implementation): plain reads, zlib inflate (gzip, concatenated members too), the zstd streaming API
// and libzip for one-member archives. Every failure is one ember::Error line naming the file.
#include "data/byte_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/regular_file.h"

namespace ember {

namespace {

// Compressed input is read in blocks of this size: large enough that syscalls cost nothing next to inflating.
constexpr size_t DISK_BLOCK_BYTES = size_t(256) << 10;

const char* CORRUPT_HINT = "the file is damaged or incomplete: download or decompress it again, or leave it out";

std::string input_error(const std::string& path) { return "prep input file " + path + ": "; }

// A plain file read with read(2); the base of the compressed streams, which read their input through it.
class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(const std::string& path) : path_(path) {
    fd_ = open_regular_file(path, "prep input file",
                            "check the path and its permissions; give regular files, not FIFOs or devices");
  }
  ~PlainStream() override { ::close(fd_); }  // read-only: a close error cannot lose data
  size_t read(char* buf, size_t n) override {
    for (;;) {
      const ssize_t r = ::read(fd_, buf, n);
      if (r >= 0) {
        pos_ += uint64_t(r);
        return size_t(r);
      }
      if (errno != EINTR)
        throw_error(input_error(path_) + "read failed: " + std::strerror(errno), "check the disk and the file");
    }
  }
  uint64_t disk_pos() const override { return pos_; }
  Compression compression() const override { return Compression::none; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t pos_ = 0;
};

class GzipStream final : public ByteStream {
 public:
  explicit GzipStream(const std::string& path) : path_(path), file_(path), in_(DISK_BLOCK_BYTES) {
    std::memset(&zs_, 0, sizeof(zs_));
    if (inflateInit2(&zs_, 15 + 32) != Z_OK)  // 15 + 32: any window size, gzip or zlib header detected
      throw_error(input_error(path) + "cannot start zlib", "out of memory?");
  }
  ~GzipStream() override { inflateEnd(&zs_); }
  size_t read(char* buf, size_t n) override {
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = uInt(std::min<size_t>(n, UINT32_MAX));
    while (zs_.avail_out == uInt(std::min<size_t>(n, UINT32_MAX))) {
      if (zs_.avail_in == 0) {
        const size_t got = file_.read(reinterpret_cast<char*>(in_.data()), in_.size());
        if (got == 0) {
          if (!ended_) throw_error(input_error(path_) + "truncated gzip stream", CORRUPT_HINT);
          break;
        }
        zs_.next_in = in_.data();
        zs_.avail_in = uInt(got);
      }
      if (ended_) {  // another member follows (gzip files may be concatenated)
        inflateReset(&zs_);
        ended_ = false;
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        ended_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw_error(input_error(path_) + "corrupt gzip stream (" + (zs_.msg ? zs_.msg : "zlib error") + ")",
                    CORRUPT_HINT);
      }
    }
    return size_t(reinterpret_cast<char*>(zs_.next_out) - buf);
  }
  uint64_t disk_pos() const override { return file_.disk_pos() - zs_.avail_in; }
  Compression compression() const override { return Compression::gzip; }

 private:
  std::string path_;
  PlainStream file_;
  std::vector<Bytef> in_;
  z_stream zs_;
  bool ended_ = false;
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(const std::string& path) : path_(path), file_(path), in_(ZSTD_DStreamInSize()) {
    ds_ = ZSTD_createDStream();
    if (ds_ == nullptr) throw_error(input_error(path) + "cannot start zstd", "out of memory?");
    ZSTD_initDStream(ds_);
  }
  ~ZstdStream() override { ZSTD_freeDStream(ds_); }
  size_t read(char* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      if (in_buf_.pos == in_buf_.size) {
        const size_t got = file_.read(in_.data(), in_.size());
        if (got == 0) {
          if (last_ != 0) throw_error(input_error(path_) + "truncated zstd stream", CORRUPT_HINT);
          break;
        }
        in_buf_ = {in_.data(), got, 0};
      }
      last_ = ZSTD_decompressStream(ds_, &out, &in_buf_);
      if (ZSTD_isError(last_))
        throw_error(input_error(path_) + "corrupt zstd stream (" + ZSTD_getErrorName(last_) + ")", CORRUPT_HINT);
    }
    return out.pos;
  }
  uint64_t disk_pos() const override { return file_.disk_pos() - (in_buf_.size - in_buf_.pos); }
  Compression compression() const override { return Compression::zstd; }

 private:
  std::string path_;
  PlainStream file_;
  std::vector<char> in_;
  ZSTD_inBuffer in_buf_{nullptr, 0, 0};
  ZSTD_DStream* ds_ = nullptr;
  size_t last_ = 0;  // 0: the last frame is complete
};

class ZipStream final : public ByteStream {
 public:
  explicit ZipStream(const std::string& path) : path_(path) {
    int err = 0;
    archive_ = zip_open(path.c_str(), ZIP_RDONLY, &err);
    if (archive_ == nullptr) {
      zip_error_t ze;
      zip_error_init_with_code(&ze, err);
      const std::string why = zip_error_strerror(&ze);
      zip_error_fini(&ze);
      throw_error(input_error(path) + "cannot open zip archive: " + why, CORRUPT_HINT);
    }
    try {
      open_single_member();
    } catch (...) {  // the destructor does not run for a constructor that throws
      zip_discard(archive_);
      throw;
    }
  }
  ~ZipStream() override {
    if (member_) zip_fclose(member_);
    zip_discard(archive_);  // read-only: nothing to write back
  }
  size_t read(char* buf, size_t n) override {
    const zip_int64_t r = zip_fread(member_, buf, n);
    if (r < 0) fail(std::string("corrupt zip member (") + zip_file_strerror(member_) + ")", CORRUPT_HINT);
    pos_ += uint64_t(r);
    if (r == 0 && pos_ != size_) fail("truncated zip member", CORRUPT_HINT);
    return size_t(r);
  }
  uint64_t disk_pos() const override { return size_ == 0 ? 0 : uint64_t(double(pos_) / double(size_) * comp_size_); }
  Compression compression() const override { return Compression::zip; }
  uint64_t size() const { return size_; }

 private:
  // Finds the archive's one file and opens it (member_); throws if it holds none or several.
  void open_single_member() {
    const zip_int64_t n = zip_get_num_entries(archive_, 0);
    zip_int64_t member = -1, files = 0;
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(archive_, zip_uint64_t(i), 0);
      if (name != nullptr && name[0] != '\0' && name[std::strlen(name) - 1] != '/') {
        member = i;
        ++files;
      }
    }
    if (files != 1)
      fail("holds " + std::to_string(files) + " files, not one",
           "unpack the archive and pass its folder as --input (a zip input must hold a single file, like enwik8.zip)");
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive_, zip_uint64_t(member), 0, &st) != 0) fail("cannot stat its member", CORRUPT_HINT);
    size_ = (st.valid & ZIP_STAT_SIZE) ? st.size : 0;
    comp_size_ = (st.valid & ZIP_STAT_COMP_SIZE) ? st.comp_size : 0;
    member_ = zip_fopen_index(archive_, zip_uint64_t(member), 0);
    if (member_ == nullptr) fail(std::string("cannot open its member: ") + zip_strerror(archive_), CORRUPT_HINT);
  }

  [[noreturn]] void fail(const std::string& what, const std::string& hint) {
    throw_error(input_error(path_) + "zip archive " + what, hint);
  }
  std::string path_;
  zip_t* archive_ = nullptr;
  zip_file_t* member_ = nullptr;
  uint64_t size_ = 0, comp_size_ = 0, pos_ = 0;
};

}  // namespace

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::none:
      return "plain";
    case Compression::gzip:
      return "gzip";
    case Compression::zstd:
      return "zstd";
    case Compression::zip:
      return "zip";
  }
  return "?";
}

Compression detect_compression(const std::string& path) {
  PlainStream file(path);
  unsigned char m[4] = {};
  size_t got = 0;
  while (got < sizeof(m)) {
    const size_t r = file.read(reinterpret_cast<char*>(m) + got, sizeof(m) - got);
    if (r == 0) break;
    got += r;
  }
  if (got >= 2 && m[0] == 0x1f && m[1] == 0x8b) return Compression::gzip;
  if (got == 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) return Compression::zstd;
  if (got == 4 && m[0] == 'P' && m[1] == 'K' && m[2] == 3 && m[3] == 4) return Compression::zip;
  return Compression::none;
}

std::unique_ptr<ByteStream> open_byte_stream(const std::string& path) {
  switch (detect_compression(path)) {
    case Compression::gzip:
      return std::make_unique<GzipStream>(path);
    case Compression::zstd:
      return std::make_unique<ZstdStream>(path);
    case Compression::zip:
      return std::make_unique<ZipStream>(path);
    case Compression::none:
      break;
  }
  return std::make_unique<PlainStream>(path);
}

uint64_t decompressed_size(const std::string& path) {
  const Compression c = detect_compression(path);
  if (c == Compression::none) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw_error(input_error(path) + "cannot stat: " + std::strerror(errno), "check the path and its permissions");
    return uint64_t(st.st_size);
  }
  if (c == Compression::zip) return ZipStream(path).size();
  const std::unique_ptr<ByteStream> in = open_byte_stream(path);
  std::vector<char> buf(DISK_BLOCK_BYTES);
  uint64_t total = 0;
  for (size_t r; (r = in->read(buf.data(), buf.size())) > 0;) total += r;
  return total;
}

}  // namespace ember
