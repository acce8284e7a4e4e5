// The safetensors file format (Hugging Face): an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the tensors' bytes back to back. Written and read here without Python, for
// `ember export` and `ember import`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ember {

enum class SafetensorsDtype { f32, bf16, f16 };
const char* safetensors_dtype_name(SafetensorsDtype d);  // "F32", "BF16", "F16", as the format spells them
size_t safetensors_dtype_size(SafetensorsDtype d);

// fp32 values stored as `dtype` (rounded to nearest even) and back (exact).
std::string encode_floats(const float* values, size_t n, SafetensorsDtype dtype);
void decode_floats(const std::string& bytes, SafetensorsDtype dtype, float* out);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  std::vector<int64_t> shape;
  std::string data;  // the stored bytes: numel * dtype size
};

// Writes `tensors` (in this order) and `metadata` (the header's "__metadata__", string values) to `path` atomically.
// Names must be distinct and not "__metadata__"; each tensor's bytes must match its shape and dtype.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// A safetensors file opened for reading: the header is read and checked in full (JSON, dtypes, shapes, byte ranges
// inside the file, not overlapping, covering the data exactly); tensors are read one at a time.
class SafetensorsFile {
 public:
  struct Entry {
    SafetensorsDtype dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;  // byte range within the data section
  };
  explicit SafetensorsFile(std::string path);
  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The values of tensor `name` widened to fp32 (ember::Error if absent or unreadable).
  std::vector<float> read_floats(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_offset_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ember
