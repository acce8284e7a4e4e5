// Parallel checkpoint tests: all ranks write one file collectively (MPI-IO), each its ZeRO shard, and any split of
// the arena loads it back exactly; the file is plain HDF5 for one process; a failure on any rank fails every rank.
#include <gtest/gtest.h>

#include "checkpoint_mpi_test_util.h"

namespace ember {
namespace {

class CheckpointMpi : public CheckpointMpiFolder {};

TEST_F(CheckpointMpi, CollectiveSaveLoadsAtAnySplit) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank(), n = world_size();
  const std::vector<size_t> bounds = even_split(t, n);
  RankArenas a = filled(t, bounds[size_t(rank)], bounds[size_t(rank) + 1]);
  CheckpointMeta meta = make_meta(c, 30);
  // The tokenizer's files (any bytes) go into the file once, whatever the number of ranks.
  meta.tokenizer = CheckpointTokenizer{{"bpe", "0123456789abcdef", 300},
                                       {{"tokenizer.json", std::string("{\"a\": \"\xc4\xa0\"}\0\xff", 13)}}};
  const std::string folder = (dir_ / "ckpt").string();
  const std::string path = save_checkpoint(folder, meta, t, a.contents(), 2, test_world());
  EXPECT_EQ(path, checkpoint_path(folder, 30));
  EXPECT_TRUE(same_on_all_ranks(path));

  long long bad = 0;
  CheckpointMeta got;
  bad += load_and_check(path, t, a.begin, a.end, got);      // the split that wrote it
  bad += load_and_check(path, t, 0, t.total_numel(), got);  // one rank holding everything
  const std::vector<size_t> three = split(t, {1, 3, 2});    // three uneven pieces
  for (size_t k = 0; k < 3; ++k) bad += load_and_check(path, t, three[k], three[k + 1], got);
  EXPECT_EQ(total_over_ranks(bad), 0);

  EXPECT_EQ(got.step, 30);
  EXPECT_EQ(got.world_size, n);
  EXPECT_EQ(got.tokenizer, meta.tokenizer);
  ASSERT_EQ(got.ranks.size(), size_t(n));
  for (size_t r = 0; r < got.ranks.size(); ++r) {
    EXPECT_EQ(got.ranks[r].data_cursor, 100 + r);
    EXPECT_EQ(got.ranks[r].rng_offset, (uint64_t(1) << 40) + 7 * r);
  }
  EXPECT_EQ(got.config_ini, meta.config_ini);
  EXPECT_TRUE(same_on_all_ranks(got.created));

  // keep_latest_k = 2 across three collective saves: the oldest goes, `latest` names the newest.
  save_checkpoint(folder, make_meta(c, 40), t, a.contents(), 2, test_world());
  save_checkpoint(folder, make_meta(c, 50), t, a.contents(), 2, test_world());
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::exists(checkpoint_path(folder, 40)));
  EXPECT_EQ(resolve_resume(folder, "auto"), checkpoint_path(folder, 50));
}

TEST_F(CheckpointMpi, FileIsPlainHdf5ForOneProcess) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank(), n = world_size();
  const std::vector<size_t> bounds = even_split(t, n);
  RankArenas a = filled(t, bounds[size_t(rank)], bounds[size_t(rank) + 1]);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 7), t, a.contents(), 0, test_world());

  long long bad = 0;
  if (rank == 0) {  // one process, no MPI-IO: the sec2 driver and plain HDF5 calls
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    EXPECT_GE(f, 0);
    auto read_u64 = [&](const std::string& obj, const char* name) {
      uint64_t v = UINT64_MAX;
      hid_t attr = H5Aopen_by_name(f, obj.c_str(), name, H5P_DEFAULT, H5P_DEFAULT);
      EXPECT_GE(attr, 0) << obj << ":" << name;
      if (attr >= 0) {
        EXPECT_GE(H5Aread(attr, H5T_NATIVE_UINT64, &v), 0);
        H5Aclose(attr);
      }
      return v;
    };
    EXPECT_EQ(read_u64("/", "world_size"), uint64_t(n));
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(read_u64("/ranks/" + std::to_string(r), "data_cursor"), uint64_t(100 + r));
      EXPECT_EQ(read_u64("/ranks/" + std::to_string(r), "rng_offset"), (uint64_t(1) << 40) + 7 * uint64_t(r));
    }
    EXPECT_EQ(H5Lexists(f, ("/ranks/" + std::to_string(n)).c_str(), H5P_DEFAULT), 0);
    // A value straight from a dataset: exp_avg of c_attn.weight of block 1, row 2, column 5.
    const ParamInfo& qkv = t.block(1, BLOCK_PARAM_QKV_W);
    hid_t d = H5Dopen2(f, "/optimizer/exp_avg/transformer/h/1/attn/c_attn/weight", H5P_DEFAULT);
    EXPECT_GE(d, 0);
    std::vector<float> all(qkv.numel);
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()), 0);
    const size_t at = 2 * size_t(qkv.shape[1]) + 5;
    EXPECT_EQ(all[at], exp_avg_value(qkv.offset + at));
    H5Dclose(d);
    H5Fclose(f);

    verify_checkpoint(path);
    const std::vector<CheckpointDatasetReport> reports = scan_checkpoint(path);
    EXPECT_EQ(reports.size(), 1 + 3 * t.params().size());
    for (const CheckpointDatasetReport& r : reports) bad += !r.ok;
    CheckpointMeta got;
    bad += load_and_check(path, t, 0, t.total_numel(), got);
    EXPECT_EQ(got.ranks.size(), size_t(n));
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Plain data parallel: every rank holds everything and passes the default whole range; the writer splits it.
TEST_F(CheckpointMpi, WholeArenaOnEveryRankIsSplitByTheWriter) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  RankArenas a = filled(t, 0, t.total_numel());
  const CheckpointContents whole{
      {{SET_MODEL, a.params.data()}, {SET_EXP_AVG, a.m.data()}, {SET_EXP_AVG_SQ, a.v.data()}}};
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 3), t, whole, 0, test_world());
  CheckpointMeta got;
  EXPECT_EQ(total_over_ranks(load_and_check(path, t, 0, t.total_numel(), got)), 0);
}

TEST_F(CheckpointMpi, FailuresThrowOnEveryRankWithoutHanging) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank(), n = world_size();
  const std::vector<size_t> bounds = even_split(t, n);
  RankArenas a = filled(t, bounds[size_t(rank)], bounds[size_t(rank) + 1]);
  const CheckpointMeta meta = make_meta(c, 20);

  // A folder that cannot be created: a regular file stands where a parent folder should be.
  if (rank == 0) std::ofstream(dir_ / "blocker") << "not a folder";
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string bad_folder = (dir_ / "blocker" / "ckpt").string();
  std::string e = error_of([&] { save_checkpoint(bad_folder, meta, t, a.contents(), 1, test_world()); });
  EXPECT_NE(e.find(bad_folder), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;

  // The file itself cannot be created (a folder squats on the temp name): the collective create fails everywhere.
  const fs::path folder = dir_ / "ckpt";
  if (rank == 0) fs::create_directories(folder / "step_00000020.h5.tmp" / "x");
  MPI_Barrier(MPI_COMM_WORLD);
  e = error_of([&] { save_checkpoint(folder.string(), meta, t, a.contents(), 1, test_world()); });
  EXPECT_NE(e.find("cannot create the file"), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;
  EXPECT_FALSE(fs::exists(folder / "latest"));
  EXPECT_FALSE(fs::exists(folder / "step_00000020.h5"));

  // Shards that do not cover the arena (rank 0 drops its first element).
  RankArenas gap = a;
  if (rank == 0) gap.begin = 1;
  e = error_of([&] {
    CheckpointContents tt = gap.contents();
    save_checkpoint(folder.string(), make_meta(c, 21), t, tt, 1, test_world());
  });
  EXPECT_NE(e.find(n == 1 ? "whole parameter arena" : "do not partition"), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;

  if (n > 1) {
    // A mistake on one rank only: the others must not hang in a collective call, and all report the same error.
    CheckpointContents broken = a.contents();
    if (rank == n - 1) broken.sets[0].data = nullptr;
    e = error_of([&] { save_checkpoint(folder.string(), make_meta(c, 22), t, broken, 1, test_world()); });
    EXPECT_NE(e.find("parameter arena"), std::string::npos) << e;
    EXPECT_TRUE(same_on_all_ranks(e)) << e;

    CheckpointMeta other = make_meta(c, 23);
    if (rank == n - 1) other.ranks[0].data_cursor += 1;
    e = error_of([&] { save_checkpoint(folder.string(), other, t, a.contents(), 1, test_world()); });
    EXPECT_NE(e.find("other metadata"), std::string::npos) << e;
    EXPECT_TRUE(same_on_all_ranks(e)) << e;
  }

  // Nothing half-written is left behind, and the next save in the same folder works.
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(folder / "step_00000020.h5.tmp");
  for (int64_t step : {21, 22, 23}) EXPECT_FALSE(fs::exists(checkpoint_path(folder.string(), step) + ".tmp"));
  const std::string path = save_checkpoint(folder.string(), meta, t, a.contents(), 1, test_world());
  CheckpointMeta got;
  EXPECT_EQ(total_over_ranks(load_and_check(path, t, a.begin, a.end, got)), 0);
}

// Ranks whose write range is empty are part of a partition: rank 0 writes the whole arena, rank 1 passes [0, 0)
// and the others [total, total).
TEST_F(CheckpointMpi, EmptyRangesBesideOneWholeRange) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank();
  const size_t total = t.total_numel();
  RankArenas a = rank == 0 ? filled(t, 0, total) : rank == 1 ? filled(t, 0, 0) : filled(t, total, total);
  a.m.reserve(1);  // an empty shard still passes moment arenas (non-null), as every rank must agree they exist
  a.v.reserve(1);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 4), t, a.contents(), 0, test_world());
  CheckpointMeta got;
  EXPECT_EQ(total_over_ranks(load_and_check(path, t, 0, total, got)), 0);
}

}  // namespace
}  // namespace ember
