// The checkpoint folder: keep-K pruning, `latest`, and --resume resolution with fallback past damaged files.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "parallel/host_collectives.h"

#include "checkpoint_test_util.h"

namespace ember {
namespace {

class CheckpointFolder : public checkpoint_test::CheckpointTest {};

using namespace checkpoint_test;

TEST_F(CheckpointFolder, KeepsNewestKAndLatestNamesNewest) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 3);
  for (int64_t step : {100, 200, 300, 400, 500})
    save_checkpoint(dir_.string(), make_meta(c, step), t, a.contents(), 2, self_world());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000400.h5", "step_00000500.h5"}));
  EXPECT_EQ(read_text(dir_ / "latest"), "step_00000500.h5\n");

  // A resumed run saving a lower step than files left over keeps its own file: `latest` names it.
  save_checkpoint(dir_.string(), make_meta(c, 450), t, a.contents(), 1, self_world());
  EXPECT_TRUE(fs::exists(dir_ / "step_00000450.h5"));
  EXPECT_TRUE(fs::exists(dir_ / "step_00000500.h5"));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000400.h5"));
  EXPECT_EQ(read_text(dir_ / "latest"), "step_00000450.h5\n");

  // keep_latest_k <= 0 keeps everything; a stale temp file from an interrupted save is cleaned up.
  const fs::path all = dir_ / "all";
  fs::create_directories(all);
  write_text(all / "step_00000007.h5.tmp", "partial");
  for (int64_t step : {1, 2, 3}) save_checkpoint(all.string(), make_meta(c, step), t, a.contents(), 0, self_world());
  EXPECT_TRUE(fs::exists(all / "step_00000001.h5"));
  EXPECT_TRUE(fs::exists(all / "step_00000003.h5"));
  EXPECT_FALSE(fs::exists(all / "step_00000007.h5.tmp"));
  EXPECT_EQ(read_text(all / "latest"), "step_00000003.h5\n");
}

TEST_F(CheckpointFolder, ResolveResume) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 11);
  const std::string folder = (dir_ / "ckpt").string();
  EXPECT_EQ(resolve_resume(folder, ""), "");
  EXPECT_EQ(resolve_resume(folder, "auto"), "");  // folder does not exist yet: fresh start
  fs::create_directories(folder);
  EXPECT_EQ(resolve_resume(folder, "auto"), "");  // empty folder

  // Without `latest`, the highest step number wins (not the lexically last name: 9 digits past 99999999).
  for (int64_t step : {99999999, 100000000, 5})
    save_checkpoint(folder, make_meta(c, step), t, a.contents(), 0, self_world());
  fs::remove(fs::path(folder) / "latest");
  EXPECT_EQ(resolve_resume(folder, "auto"), (fs::path(folder) / "step_100000000.h5").string());

  write_text(fs::path(folder) / "latest", "step_00000005.h5\n");
  EXPECT_EQ(resolve_resume(folder, "auto"), (fs::path(folder) / "step_00000005.h5").string());

  write_text(fs::path(folder) / "latest", "step_00000077.h5\n");  // names a deleted file: fall back
  EXPECT_EQ(resolve_resume(folder, "auto"), (fs::path(folder) / "step_100000000.h5").string());

  const std::string explicit_path = (fs::path(folder) / "step_00000005.h5").string();
  EXPECT_EQ(resolve_resume(folder, explicit_path), explicit_path);
  const std::string missing = (dir_ / "nope" / "step_00000001.h5").string();
  expect_error([&] { resolve_resume(folder, missing); }, {missing, "does not exist"});
  expect_error([&] { resolve_resume(folder, folder); }, {folder, "not a file"});
  const std::string junk = (dir_ / "junk.h5").string();
  write_text(junk, "x");
  expect_error([&] { resolve_resume(folder, junk); }, {junk, "not an HDF5 file"});
}

// Saves steps 1, 2 and 3 into `folder` (keeping all) and returns the marker planted in step 3's wte.
std::string save_three(const fs::path& folder) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 14);
  save_checkpoint(folder.string(), make_meta(c, 1), t, a.contents(), 0, self_world());
  save_checkpoint(folder.string(), make_meta(c, 2), t, a.contents(), 0, self_world());
  const std::string marker = plant_marker(t, a, 3000.0f);
  save_checkpoint(folder.string(), make_meta(c, 3), t, a.contents(), 0, self_world());
  return marker;
}

TEST_F(CheckpointFolder, AutoResumeSkipsCorruptedNewest) {
  const fs::path folder = dir_ / "ckpt";
  const std::string marker = save_three(folder);
  const std::string s1 = (folder / "step_00000001.h5").string(), s2 = (folder / "step_00000002.h5").string(),
                    s3 = (folder / "step_00000003.h5").string();
  flip_marker(s3, marker);
  EXPECT_EQ(read_checkpoint_meta(s3).step, 3);  // the metadata still reads: only a full read notices

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), s2);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("checkpoint " + s3 +
                     " is unreadable (dataset /model/transformer/wte/weight is corrupted "
                     "(checksum mismatch)); falling back to " +
                     s2),
            std::string::npos)
      << log;

  // An explicit --resume of the damaged file fails with the clear error instead.
  expect_error([&] { resolve_resume(folder.string(), s3); }, {s3, "corrupted (checksum mismatch)"});

  // Fallbacks are older than the file `latest` names, never newer leftovers; with none readable, an error rather
  // than a silent fresh start.
  fs::resize_file(s2, fs::file_size(s2) / 2);
  write_text(folder / "latest", "step_00000002.h5\n");
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), s1);
  fs::resize_file(s1, 100);
  ::testing::internal::CaptureStderr();
  expect_error([&] { resolve_resume(folder.string(), "auto"); }, {folder.string(), "none of its"});
  const std::string log2 = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log2.find("checkpoint " + s1 + " is unreadable"), std::string::npos) << log2;
}

TEST_F(CheckpointFolder, AutoResumeSkipsTruncatedNewest) {
  const fs::path folder = dir_ / "ckpt";
  save_three(folder);
  const std::string s2 = (folder / "step_00000002.h5").string(), s3 = (folder / "step_00000003.h5").string();
  fs::resize_file(s3, fs::file_size(s3) - 1000);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), s2);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("checkpoint " + s3 + " is unreadable (truncated"), std::string::npos) << log;
  EXPECT_NE(log.find("falling back to " + s2), std::string::npos) << log;
}

TEST_F(CheckpointFolder, AutoResumeWhenLatestNamesMissingFile) {
  const fs::path folder = dir_ / "ckpt";
  save_three(folder);
  EXPECT_EQ(read_text(folder / "latest"), "step_00000003.h5\n");
  fs::remove(folder / "step_00000003.h5");
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), (folder / "step_00000002.h5").string());
  write_text(folder / "latest", "step_00000009.h5\n");
  EXPECT_EQ(resolve_resume(folder.string(), "auto"), (folder / "step_00000002.h5").string());
}

}  // namespace
}  // namespace ember
