// safetensors (implementation). The header is JSON (nlohmann-json); it is padded with spaces to a multiple of 8 bytes
// so the data section starts aligned, as the reference writer does. fp16 conversion rounds to nearest even.
#include "hf/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/regular_file.h"

namespace ember {

namespace {

constexpr const char* kHint = "the file is not a valid safetensors file; save the model again with save_pretrained";
// A header beyond this is not a model's: GPT-2 1.5B's is about 60 KB.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));  // inf, NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds beyond 65504: inf
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), in units of 2^-24
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;             // exact: a power of two
    const auto q = uint32_t(std::nearbyint(scaled));  // ties to even (default rounding mode)
    return uint16_t(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15), round the 23-bit mantissa to 10 bits, ties to even.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent correctly
  return uint16_t(sign | h);
}

float from_half(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = float(man) * (1.0f / 16777216.0f);  // subnormal or zero
    uint32_t b;
    std::memcpy(&b, &f, 4);
    b |= sign;
    std::memcpy(&f, &b, 4);
    return f;
  }
  const uint32_t bits = sign | (exp == 31 ? (0xffu << 23) | (man << 13) : ((exp + 112u) << 23) | (man << 13));
  std::memcpy(&f, &bits, 4);
  return f;
}

SafetensorsDtype parse_dtype(const std::string& s, const std::string& where) {
  if (s == "F32") return SafetensorsDtype::f32;
  if (s == "BF16") return SafetensorsDtype::bf16;
  if (s == "F16") return SafetensorsDtype::f16;
  throw_error(where + ": dtype " + s + " is not a floating-point type ember reads (F32, BF16, F16)",
              "save the model in float32, bfloat16 or float16");
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype d) {
  switch (d) {
    case SafetensorsDtype::f32:
      return "F32";
    case SafetensorsDtype::bf16:
      return "BF16";
    case SafetensorsDtype::f16:
      return "F16";
  }
  return "?";
}

size_t safetensors_dtype_size(SafetensorsDtype d) { return d == SafetensorsDtype::f32 ? 4 : 2; }

std::string encode_floats(const float* values, size_t n, SafetensorsDtype dtype) {
  std::string out(n * safetensors_dtype_size(dtype), '\0');
  char* p = out.data();
  for (size_t i = 0; i < n; ++i) {
    if (dtype == SafetensorsDtype::f32) {
      std::memcpy(p + 4 * i, &values[i], 4);  // little-endian hosts only (x86-64, aarch64)
    } else {
      const uint16_t h = dtype == SafetensorsDtype::bf16 ? to_bf16(values[i]).bits : to_half(values[i]);
      std::memcpy(p + 2 * i, &h, 2);
    }
  }
  return out;
}

void decode_floats(const std::string& bytes, SafetensorsDtype dtype, float* out) {
  const size_t n = bytes.size() / safetensors_dtype_size(dtype);
  const char* p = bytes.data();
  for (size_t i = 0; i < n; ++i) {
    if (dtype == SafetensorsDtype::f32) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = dtype == SafetensorsDtype::bf16 ? from_bf16(BFloat16{h}) : from_half(h);
    }
  }
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    EMBER_ASSERT(t.name != "__metadata__" && !header.contains(t.name), "safetensors: a repeated or reserved name");
    EMBER_ASSERT(t.data.size() == numel * safetensors_dtype_size(t.dtype), "safetensors: bytes do not match shape");
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((len >> (8 * i)) & 0xffu);
  file.reserve(8 + json.size() + offset);
  file += json;
  for (const SafetensorsTensor& t : tensors) file += t.data;
  write_file_atomically(path, file, "safetensors file " + path, "check that the folder is writable and has space");
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  refuse_special_file(path_, "safetensors file");
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) throw_error("safetensors file " + path_ + " cannot be opened", "check the path");
  const uint64_t size = uint64_t(in.tellg());
  unsigned char len_bytes[8];
  in.seekg(0);
  if (size < 8 || !in.read(reinterpret_cast<char*>(len_bytes), 8))
    throw_error("safetensors file " + path_ + " is shorter than its 8-byte header length", kHint);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  if (len < 2 || len > kMaxHeaderBytes || len > size - 8)
    throw_error("safetensors file " + path_ + ": header length " + std::to_string(len) + " does not fit the file of " +
                    std::to_string(size) + " bytes",
                kHint);
  std::string json(len, '\0');
  in.read(json.data(), std::streamsize(len));
  data_offset_ = 8 + len;
  const uint64_t data_size = size - data_offset_;
  const nlohmann::json header = parse_json_input(json, "safetensors file " + path_ + ": the header", kHint);
  if (!header.is_object()) throw_error("safetensors file " + path_ + ": the header is not a JSON object", kHint);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string where = "safetensors file " + path_ + ": tensor " + it.key();
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw_error("safetensors file " + path_ + ": __metadata__ is not an object", kHint);
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const nlohmann::json& t = *it;
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t["shape"].is_array() || !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      throw_error(where + " lacks a string dtype, a shape array or two data_offsets", kHint);
    Entry e;
    e.dtype = parse_dtype(t["dtype"].get<std::string>(), where);
    uint64_t numel = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
        throw_error(where + ": shape " + t["shape"].dump() + " is not a list of sizes", kHint);
      e.shape.push_back(int64_t(d.get<uint64_t>()));
      numel *= d.get<uint64_t>();
    }
    for (const auto& o : t["data_offsets"])
      if (!o.is_number_unsigned()) throw_error(where + ": data_offsets are not byte offsets", kHint);
    e.begin = t["data_offsets"][0].get<uint64_t>();
    e.end = t["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      throw_error(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      ") are outside the " + std::to_string(data_size) + " bytes of data",
                  kHint);
    if (e.end - e.begin != numel * safetensors_dtype_size(e.dtype))
      throw_error(where + ": " + std::to_string(e.end - e.begin) + " bytes for shape " + t["shape"].dump() + " of " +
                      safetensors_dtype_name(e.dtype) + " (" + std::to_string(numel * safetensors_dtype_size(e.dtype)) +
                      " expected)",
                  kHint);
    ranges.emplace_back(e.begin, e.end);
    entries_[it.key()] = std::move(e);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw_error(
          "safetensors file " + path_ + ": two tensors share bytes at offset " + std::to_string(ranges[i].first),
          kHint);
}

std::vector<float> SafetensorsFile::read_floats(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw_error("safetensors file " + path_ + " has no tensor " + name, kHint);
  const Entry& e = it->second;
  std::string bytes(e.end - e.begin, '\0');
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(data_offset_ + e.begin));
  if (!in.read(bytes.data(), std::streamsize(bytes.size())))
    throw_error("safetensors file " + path_ + ": tensor " + name + " cannot be read", kHint);
  std::vector<float> out(bytes.size() / safetensors_dtype_size(e.dtype));
  decode_floats(bytes, e.dtype, out.data());
  return out;
}

}  // namespace ember
