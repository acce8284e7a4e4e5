// The safetensors writer and reader: a round trip in each dtype, fp16 rounding at its edges, and every kind of
// malformed file refused with an error naming the file (and the tensor where there is one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "hf/safetensors.h"
#include "test_support.h"

namespace ember {
namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "/safetensors_" + name; }

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << file << header << data;
}

void expect_refused(const std::string& name, const std::string& header, const std::string& data,
                    const std::string& needle) {
  const std::string path = temp_path(name);
  write_raw(path, header, data);
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << name << ": accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << name << ": the error does not name the file";
    EXPECT_FALSE(e.hint().empty());
  }
}

TEST(Safetensors, RoundTripInEveryDtype) {
  const std::vector<float> v = {0.0f, -1.5f, 3.14159f, 1e-3f, -65504.0f, 1e-8f, 7.0f, -0.0f};
  std::vector<SafetensorsTensor> tensors;
  for (SafetensorsDtype d : {SafetensorsDtype::f32, SafetensorsDtype::bf16, SafetensorsDtype::f16})
    tensors.push_back({std::string("t.") + safetensors_dtype_name(d), d, {2, 4}, encode_floats(v.data(), 8, d)});
  tensors.push_back({"empty", SafetensorsDtype::f32, {0, 3}, ""});
  const std::string path = temp_path("roundtrip");
  write_safetensors(path, tensors, {{"format", "pt"}});
  // The data section starts 8-byte aligned (the header is padded with spaces).
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.entries().size(), 4u);
  EXPECT_EQ(f.entries().at("t.F32").shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(f.read_floats("t.F32"), v);
  const std::vector<float> b = f.read_floats("t.BF16"), h = f.read_floats("t.F16");
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(b[i], round_to_bf16(v[i])) << i;
    if (v[i] != 0.0f && std::fabs(v[i]) >= 6.1e-5f)  // normal halves: 11 significant bits
      EXPECT_NEAR(h[i], v[i], std::fabs(v[i]) * 0x1p-11) << i;
  }
  EXPECT_TRUE(f.read_floats("empty").empty());
  EXPECT_THROW(f.read_floats("absent"), Error);
}

TEST(Safetensors, HalfRoundsToNearestEvenAtItsEdges) {
  auto half_bits = [](float x) {
    const std::string s = encode_floats(&x, 1, SafetensorsDtype::f16);
    uint16_t h;
    std::memcpy(&h, s.data(), 2);
    return h;
  };
  EXPECT_EQ(half_bits(1.0f), 0x3C00);
  EXPECT_EQ(half_bits(-2.0f), 0xC000);
  EXPECT_EQ(half_bits(0.1f), 0x2E66);
  EXPECT_EQ(half_bits(65504.0f), 0x7BFF);         // the largest half
  EXPECT_EQ(half_bits(65519.0f), 0x7BFF);         // below the midpoint to 65536
  EXPECT_EQ(half_bits(65520.0f), 0x7C00);         // the midpoint rounds to even: infinity
  EXPECT_EQ(half_bits(0x1p-24f), 0x0001);         // the smallest subnormal
  EXPECT_EQ(half_bits(0x1p-25f), 0x0000);         // half of it: a tie, to even (zero)
  EXPECT_EQ(half_bits(0x1.8p-24f), 0x0002);       // 1.5 units: a tie, to even (2)
  EXPECT_EQ(half_bits(1.0f + 0x1p-11f), 0x3C00);  // a tie between 1 and 1 + 2^-10: to even
  EXPECT_EQ(half_bits(1.0f + 0x1.8p-11f), 0x3C01);
  EXPECT_EQ(half_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(half_bits(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(half_bits(std::nanf("")) & 0x03FF, 0);
  // Every half widens back exactly.
  for (uint32_t bits = 0; bits < 0x7C00; bits += 7) {
    std::string s(2, '\0');
    std::memcpy(s.data(), &bits, 2);
    float x;
    decode_floats(s, SafetensorsDtype::f16, &x);
    EXPECT_EQ(half_bits(x), bits) << bits;
  }
}

TEST(Safetensors, MalformedFilesAreRefused) {
  const std::string ok_data(8, '\0');  // two F32 values
  expect_refused("short", "", "", "header length");
  {
    const std::string path = temp_path("tiny");
    std::ofstream(path, std::ios::binary) << "abc";
    EXPECT_THROW(SafetensorsFile{path}, Error);
  }
  {  // a header length beyond the file
    const std::string path = temp_path("long");
    std::string file(8, '\0');
    file[5] = 1;
    std::ofstream(path, std::ios::binary) << file << "{}";
    EXPECT_THROW(SafetensorsFile{path}, Error);
  }
  expect_refused("notjson", "{\"a\": ", ok_data, "not valid JSON");
  expect_refused("nested", std::string(1000, '[') + std::string(1000, ']'), ok_data, "nests deeper than 64 levels");
  expect_refused("array", "[1, 2]", ok_data, "not a JSON object");
  expect_refused("fields", R"({"a": {"dtype": "F32", "shape": [2]}})", ok_data, "tensor a");
  expect_refused("dtype", R"({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", ok_data, "I64");
  expect_refused("shape", R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", ok_data, "shape");
  expect_refused("range", R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", ok_data, "outside");
  expect_refused("bytes", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}})", ok_data, "expected");
  expect_refused("overlap",
                 R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                 R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                 ok_data, "share bytes");
  expect_refused("metadata", R"({"__metadata__": [1]})", ok_data, "__metadata__");
}

}  // namespace
}  // namespace ember
