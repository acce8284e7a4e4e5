// The corpus reader (implementation): one pass over each file with a bounded buffer, cutting pieces at chunk
// boundaries, placing the val cut, and leaving JSON parsing of whole lines to the encoder threads.
#include "data/corpus_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "data/jsonl_line.h"

namespace ember {

namespace {

// Input is read in blocks of this size.
constexpr size_t READ_BLOCK_BYTES = size_t(256) << 10;
// A cut is only trusted this far from the end of what has been read: a tokenizer decides a boundary from the
// characters around it, and 4 KiB is far more context than any pre-tokenizer pattern looks at.
constexpr size_t BOUNDARY_MARGIN = 4096;
// A document with no chunk boundary in this many bytes is cut here anyway (the tokens next to that cut may then differ
// from encoding the document whole); it keeps memory bounded on pathological input such as one huge word.
constexpr size_t MAX_PIECE_BYTES = size_t(64) << 20;

class Reader {
 public:
  Reader(const Tokenizer& tok, const CorpusReaderOptions& opt, const std::function<void(CorpusPiece&&)>& emit)
      : tok_(tok), opt_(opt), emit_(emit) {}

  void run(const CorpusPlan& plan) {
    uint64_t val_bytes = 0;
    if (opt_.val_fraction > 0.0 && plan.disk_bytes > 0) {
      // The 1e-9 keeps 0.1 * 1000 from rounding up to 101 in floating point.
      val_bytes = uint64_t(std::ceil(opt_.val_fraction * double(plan.disk_bytes) - 1e-9));
      val_bytes = std::clamp<uint64_t>(val_bytes, 1, plan.disk_bytes);
    }
    val_enabled_ = val_bytes > 0;
    cut_disk_ = plan.disk_bytes - val_bytes;
    for (const CorpusFile& f : plan.files) {
      if (f.binary) {
        log_debug("prep: skipping binary file %s", f.path.c_str());
        continue;
      }
      file_ = std::make_shared<const std::string>(f.path);
      in_ = open_byte_stream(f.path);
      pos_ = 0;
      disk_pos_ = file_start_;
      cut_off_.reset();
      if (val_enabled_ && file_start_ >= cut_disk_) cut_off_ = 0;
      if (f.format == CorpusFormat::enwik) {
        read_enwik();
      } else if (f.format == CorpusFormat::jsonl) {
        read_jsonl();
      } else {
        uint64_t left = UINT64_MAX;
        read_document(Split::train, left, true);
      }
      in_.reset();
      file_start_ += f.disk_bytes;
    }
  }

 private:
  // Appends up to `n` bytes (at most `left`) to `buf`; false at the end. Notes where the val cut falls once the bytes
  // read from disk reach it.
  bool read_more(std::string& buf, size_t n, uint64_t& left) {
    n = size_t(std::min<uint64_t>(n, left));
    if (n == 0) return false;
    const size_t old = buf.size();
    buf.resize(old + n);
    const size_t r = in_->read(buf.data() + old, n);
    buf.resize(old + r);
    const uint64_t before = pos_, disk_before = disk_pos_;
    pos_ += r;
    left -= r;
    disk_pos_ = file_start_ + in_->disk_pos();
    if (val_enabled_ && !cut_off_ && disk_pos_ >= cut_disk_) {
      // Where in these r bytes the file's disk bytes reached the cut, in proportion: exact for a plain file.
      const double frac = double(cut_disk_ - disk_before) / double(std::max<uint64_t>(disk_pos_ - disk_before, 1));
      cut_off_ = before + std::min<uint64_t>(r, uint64_t(std::llround(frac * double(r))));
    }
    return r > 0;
  }

  void emit(Split split, bool jsonl, bool doc_start, std::string text, uint64_t first_line) {
    CorpusPiece p;
    p.split = split;
    p.jsonl = jsonl;
    p.doc_start = doc_start;
    p.text = std::move(text);
    p.file = file_;
    p.first_line = first_line;
    p.disk_done = file_start_ + in_->disk_pos();
    emit_(std::move(p));
  }

  // One document of at most `left` bytes from the current file, in pieces of about piece_bytes. `cuttable`: the val
  // cut may fall inside it (text files); enwik splits pass false.
  void read_document(Split split, uint64_t& left, bool cuttable) {
    std::string buf;
    uint64_t buf_off = pos_;  // file offset of buf[0]
    bool eof = false, first = true;
    size_t want = opt_.piece_bytes + BOUNDARY_MARGIN;
    for (;;) {
      while (!eof && buf.size() < want) eof = !read_more(buf, std::max(READ_BLOCK_BYTES, want - buf.size()), left);
      if (buf.empty()) return;
      const bool may_cut = cuttable && split == Split::train && cut_off_.has_value();
      if (may_cut && *cut_off_ <= buf_off) split = Split::val;
      size_t p = tok_.chunk_boundary(buf, std::min(opt_.piece_bytes, buf.size()));
      bool at_cut = false;
      if (split == Split::train && may_cut && *cut_off_ < buf_off + p) {
        p = tok_.chunk_boundary(buf, size_t(*cut_off_ - buf_off));  // the first boundary at or after the cut
        at_cut = true;
      }
      if (!eof && p + BOUNDARY_MARGIN > buf.size()) {
        if (buf.size() < MAX_PIECE_BYTES) {
          want = buf.size() * 2;  // no boundary far enough from the end yet: read on
          continue;
        }
        p = std::min(opt_.piece_bytes, buf.size());
        at_cut = false;
        log_warn("prep: %s has no chunk boundary in %zu MiB near byte %llu; cutting there", file_->c_str(),
                 MAX_PIECE_BYTES >> 20, (unsigned long long)buf_off);
      }
      if (p > 0) {
        emit(split, false, first, buf.substr(0, p), 0);
        first = false;
      }
      if (at_cut) split = Split::val;
      buf.erase(0, p);
      buf_off += p;
      want = opt_.piece_bytes + BOUNDARY_MARGIN;
      if (buf.empty() && eof) return;
    }
  }

  void read_enwik() {
    const uint64_t size = decompressed_size(*file_);
    uint64_t bytes[3];
    enwik_split_bytes(size, bytes);
    for (Split s : kSplits) {
      uint64_t left = bytes[int(s)];
      read_document(s, left, false);
    }
  }

  // A document parsed here, handed on in pieces of about piece_bytes cut at chunk boundaries, as a text file's are
  // (the tokens are those of the document encoded whole); `doc_start` marks its first piece.
  void emit_text(Split split, std::string_view doc, bool doc_start) {
    while (!doc.empty()) {
      size_t p = doc.size() <= opt_.piece_bytes ? doc.size() : tok_.chunk_boundary(doc, opt_.piece_bytes);
      if (p == 0 || p > MAX_PIECE_BYTES) {
        p = std::min(opt_.piece_bytes, doc.size());
        log_warn("prep: %s has a JSONL document with no chunk boundary in %zu MiB; cutting there", file_->c_str(),
                 MAX_PIECE_BYTES >> 20);
      }
      emit(split, false, doc_start, std::string(doc.substr(0, p)), 0);
      doc_start = false;
      doc.remove_prefix(p);
    }
  }

  // A JSONL line longer than a piece, or holding the val cut, is parsed here rather than by an encoder: its
  // document goes on in pieces (emit_text), so an encoder holds the tokens of one piece at a time, and the val cut
  // cuts it at the same fraction as the raw line, at the next chunk boundary. A bad line is left to the encoder,
  // which reports or skips it like any other.
  void own_line(Split split, std::string_view line, uint64_t line_start, uint64_t line_no, bool straddles) {
    std::optional<std::string> doc;
    try {
      doc = parse_jsonl_line(line, opt_.jsonl_field, *file_, line_no);
    } catch (const Error&) {
      std::string raw;
      raw.reserve(line.size() + 1);
      raw.append(line).push_back('\n');
      emit(straddles ? Split::val : split, true, false, std::move(raw), line_no);
      return;
    }
    if (!doc || doc->empty()) return;
    if (!straddles) return emit_text(split, *doc, true);
    const double frac = double(*cut_off_ - line_start) / double(line.size());
    const size_t at = tok_.chunk_boundary(*doc, size_t(std::ceil(frac * double(doc->size()))));
    const std::string_view whole(*doc);
    emit_text(Split::train, whole.substr(0, at), true);
    emit_text(Split::val, whole.substr(at), at == 0);
  }

  void read_jsonl() {
    std::string buf, piece;
    uint64_t buf_off = 0, line_no = 1, piece_line = 1, left = UINT64_MAX;
    size_t line_start = 0, scan = 0;
    bool eof = false;
    Split split = cut_off_ == uint64_t(0) ? Split::val : Split::train;
    auto flush = [&] {
      if (!piece.empty()) emit(split, true, false, std::move(piece), piece_line);
      piece.clear();
    };
    for (;;) {
      const char* nl = static_cast<const char*>(std::memchr(buf.data() + scan, '\n', buf.size() - scan));
      if (nl == nullptr && !eof) {
        buf.erase(0, line_start);  // keep only the unfinished line
        buf_off += line_start;
        line_start = 0;
        scan = buf.size();
        if (buf.size() > kMaxJsonlLineBytes)
          throw_error("prep input " + *file_ + " line " + std::to_string(line_no) + ": longer than " +
                          std::to_string(kMaxJsonlLineBytes >> 20) + " MiB",
                      "split the document into smaller lines, or check that the file is really JSONL");
        eof = !read_more(buf, READ_BLOCK_BYTES, left);
        continue;
      }
      const size_t end = nl ? size_t(nl - buf.data()) : buf.size();
      if (end == line_start && nl == nullptr) break;  // end of file after a final newline
      const std::string_view line(buf.data() + line_start, end - line_start);
      const uint64_t start = buf_off + line_start;
      if (split == Split::train && cut_off_ && *cut_off_ <= start) {
        flush();
        split = Split::val;
      }
      if (split == Split::train && cut_off_ && *cut_off_ < start + line.size()) {
        flush();
        own_line(split, line, start, line_no, true);
        split = Split::val;
      } else if (line.size() > opt_.piece_bytes) {
        flush();
        own_line(split, line, start, line_no, false);
      } else {
        if (piece.empty()) piece_line = line_no;
        piece.append(line);
        piece.push_back('\n');
        if (piece.size() >= opt_.piece_bytes) flush();
      }
      ++line_no;
      line_start = scan = end + 1;
      if (nl == nullptr) break;
    }
    flush();
  }

  const Tokenizer& tok_;
  const CorpusReaderOptions& opt_;
  const std::function<void(CorpusPiece&&)>& emit_;
  std::shared_ptr<const std::string> file_;
  std::unique_ptr<ByteStream> in_;
  bool val_enabled_ = false;
  uint64_t cut_disk_ = 0;            // input offset on disk where val begins
  uint64_t file_start_ = 0;          // input offset on disk of the current file
  uint64_t pos_ = 0;                 // decompressed bytes of the current file read so far
  uint64_t disk_pos_ = 0;            // input offset on disk reached by the reads so far
  std::optional<uint64_t> cut_off_;  // decompressed offset in the current file where val begins, once known
};

}  // namespace

const char* split_name(Split s) {
  switch (s) {
    case Split::train:
      return "train";
    case Split::val:
      return "val";
    case Split::test:
      return "test";
  }
  return "?";
}

void enwik_split_bytes(uint64_t bytes, uint64_t out[3]) {
  out[0] = bytes / 10 * 9 + bytes % 10 * 9 / 10;  // floor(0.9 n) without overflow
  out[1] = bytes / 20;
  out[2] = bytes - out[0] - out[1];
}

void read_corpus(const CorpusPlan& plan, const Tokenizer& tok, const CorpusReaderOptions& options,
                 const std::function<void(CorpusPiece&&)>& emit) {
  Reader(tok, options, emit).run(plan);
}

}  // namespace ember
