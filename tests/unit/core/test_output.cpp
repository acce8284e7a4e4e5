// The output rule (core/output.h): nothing appears before commit, an existing output needs --overwrite and must be the
// command's own, the old one is moved aside and never deleted, special files are refused, a failure leaves the old
// output whole, and a second writer of one output is refused while the first holds its lock.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "core/output.h"

#include "../data/data_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

OutputRule folder_rule(const std::string& path, bool overwrite) {
  return {.path = path,
          .option = "--output",
          .command = "ember test",
          .kind = OutputKind::folder,
          .overwrite = overwrite,
          .is_ours = [](const std::string& p) { return fs::exists(fs::path(p) / "ours.txt"); },
          .looks_like = "a test output (ours.txt)"};
}

// The folders beside `path` that an overwrite moved aside.
std::vector<std::string> asides(const std::string& path) {
  std::vector<std::string> out;
  const std::string prefix = fs::path(path).filename().string() + ".previous-";
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path().string());
  return out;
}

TEST(Output, NewOutputAppearsWholeAtCommit) {
  TempDir dir;
  const std::string out = dir / "sub/out";
  {
    StagedOutput staged(folder_rule(out, false));
    write_bytes(staged.staging() + "/ours.txt", "new");
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(fs::exists(out + ".lock"));
    EXPECT_EQ(staged.commit(), "");
  }
  EXPECT_EQ(read_bytes(out + "/ours.txt"), "new");
  EXPECT_FALSE(fs::exists(out + ".lock"));
  for (const auto& e : fs::directory_iterator(dir / "sub")) EXPECT_EQ(e.path().string(), out);  // nothing left
}

TEST(Output, AnExistingOutputNeedsOverwriteAndIsMovedAside) {
  TempDir dir;
  const std::string out = dir / "out";
  write_bytes(out + "/ours.txt", "old");
  expect_error([&] { StagedOutput s(folder_rule(out, false)); }, {"--output " + out, "exists"});
  {
    StagedOutput staged(folder_rule(out, true));
    write_bytes(staged.staging() + "/ours.txt", "new");
    const std::string aside = staged.commit();
    EXPECT_EQ(read_bytes(aside + "/ours.txt"), "old");
  }
  EXPECT_EQ(read_bytes(out + "/ours.txt"), "new");
  EXPECT_EQ(asides(out).size(), 1u);
}

TEST(Output, WhatTheCommandDidNotWriteIsNeverReplaced) {
  TempDir dir;
  const std::string out = dir / "run";
  write_bytes(out + "/checkpoints/step_00000010.h5", "precious");
  expect_error([&] { StagedOutput s(folder_rule(out, true)); }, {out, "is not a test output"});
  write_bytes(dir / "file", "precious");  // a file where a folder is asked for
  expect_error([&] { StagedOutput s(folder_rule(dir / "file", true)); }, {"file", "is not a test output"});
  EXPECT_EQ(read_bytes(out + "/checkpoints/step_00000010.h5"), "precious");
  EXPECT_EQ(read_bytes(dir / "file"), "precious");
  EXPECT_TRUE(asides(out).empty());
}

TEST(Output, SpecialFilesAreRefused) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  for (const std::string path : {std::string("/dev/null"), std::string("/dev/full"), dir / "fifo"}) {
    OutputRule r = folder_rule(path, true);
    r.kind = OutputKind::file;
    expect_error([&] { StagedOutput s(r); }, {path});
  }
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
}

TEST(Output, AFailureBeforeCommitLeavesTheOldOutputWhole) {
  TempDir dir;
  const std::string out = dir / "out";
  write_bytes(out + "/ours.txt", "old");
  try {
    StagedOutput staged(folder_rule(out, true));
    write_bytes(staged.staging() + "/ours.txt", "half");
    throw Error("disk full", "");
  } catch (const Error&) {
  }
  EXPECT_EQ(read_bytes(out + "/ours.txt"), "old");
  for (const auto& e : fs::directory_iterator(dir.str())) EXPECT_EQ(e.path().string(), out);  // no temp, no lock
}

TEST(Output, OneWriterAtATime) {
  TempDir dir;
  const std::string out = dir / "out";
  StagedOutput first(folder_rule(out, false));
  expect_error([&] { StagedOutput second(folder_rule(out, true)); }, {out, "in use by another job"});
  write_bytes(first.staging() + "/ours.txt", "first");
  first.commit();
  EXPECT_EQ(read_bytes(out + "/ours.txt"), "first");
}

TEST(Output, AnEmptyFolderIsReplacedWithoutOverwrite) {
  TempDir dir;
  const std::string out = dir / "out";
  fs::create_directories(out);
  {
    StagedOutput staged(folder_rule(out, false));
    write_bytes(staged.staging() + "/ours.txt", "new");
    EXPECT_EQ(staged.commit(), "");
  }
  EXPECT_EQ(read_bytes(out + "/ours.txt"), "new");
  EXPECT_TRUE(asides(out).empty());
}

}  // namespace
}  // namespace ember
