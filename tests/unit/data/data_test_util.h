// Helpers of the data-layer tests: a temporary folder per test, whole-file reads and writes, and the check that an
// ember::Error is one line naming what it should, with a hint.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/shard.h"

namespace ember {

// A fresh directory per test, removed afterwards; the pid and a counter keep parallel ctest runs apart.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("ember_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_suite()->name()) + "_" +
             std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs fn, expects an ember::Error whose one-line message contains every needle and which carries a hint.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const std::string& needle : needles)
      EXPECT_NE(msg.find(needle), std::string::npos) << msg << "\n  lacks: " << needle;
    EXPECT_FALSE(e.hint().empty()) << msg;
  }
}

// A shard file with an arbitrary header and body, to exercise the reader's checks.
inline void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                            size_t body_tokens) {
  std::vector<int32_t> header(SHARD_HEADER_INTS, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::string bytes(reinterpret_cast<const char*>(header.data()), SHARD_HEADER_BYTES);
  bytes.append(body_tokens * 2, '\x01');
  write_bytes(path, bytes);
}

}  // namespace ember
