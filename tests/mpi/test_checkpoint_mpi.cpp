// Parallel checkpoint tests: all ranks write one file collectively (MPI-IO), each its ZeRO shard, and any split of
// the arena loads it back exactly; the file is plain HDF5 for one process; a failure on any rank fails every rank;
// the async layout (a center writing the arena and an extra set, workers only their own flat arrays) reads back exact.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "model/model_config.h"
#include "model/param_table.h"
#include "parallel/world.h"
#include "test_support.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

using test::world_rank;
using test::world_size;

// Every rank calls this at the same point, so a failure on any rank fails the test on all of them.
long long total_over_ranks(long long local) {
  long long total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

std::string broadcast_from_root(std::string s) {
  unsigned long long n = s.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  s.resize(size_t(n));
  if (n) MPI_Bcast(s.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

// True on every rank when `s` is the same string on every rank.
bool same_on_all_ranks(const std::string& s) { return total_over_ranks(broadcast_from_root(s) != s) == 0; }

ModelConfig test_config() { return test::padded_model_config(); }

// The values every rank stores, a function of the arena index only, exact in fp32.
float param_value(size_t i) { return float(i % 1000) * 0.25f + 1.0f; }
float exp_avg_value(size_t i) { return float(i % 777) * 0.5f - 100.0f; }
float exp_avg_sq_value(size_t i) { return float(i % 999) * 0.125f + 3.0f; }
constexpr float SENTINEL = -4242.0f;  // what the padding between tensors holds after a load: never written

bool inside_a_tensor(const ParamTable& t, size_t i) {
  return std::any_of(t.params().begin(), t.params().end(),
                     [&](const ParamInfo& p) { return i >= p.offset && i < p.offset + p.numel; });
}

// The first arena index >= i that lies strictly inside a row of a 2-d tensor (not at a row start), so shard
// boundaries cut rows and the writer's partial-row hyperslabs get exercised.
size_t mid_row_at_or_after(const ParamTable& t, size_t i) {
  for (size_t j = i; j < t.total_numel(); ++j)
    for (const ParamInfo& p : t.params())
      if (p.shape.size() == 2 && j > p.offset && j < p.offset + p.numel && (j - p.offset) % size_t(p.shape[1]) != 0)
        return j;
  return t.total_numel();
}

// Boundaries of `pieces` shards: cuts near total * weight_k / sum(weights), each moved to a mid-row index.
std::vector<size_t> split(const ParamTable& t, const std::vector<size_t>& weights) {
  size_t sum = 0;
  for (size_t w : weights) sum += w;
  std::vector<size_t> b = {0};
  size_t acc = 0;
  for (size_t k = 0; k + 1 < weights.size(); ++k) {
    acc += weights[k];
    b.push_back(std::max(b.back(), mid_row_at_or_after(t, t.total_numel() * acc / sum)));
  }
  b.push_back(t.total_numel());
  return b;
}

std::vector<size_t> even_split(const ParamTable& t, int pieces) {
  return split(t, std::vector<size_t>(size_t(pieces), 1));
}

struct RankArenas {
  std::vector<float> params, m, v;  // params: the whole arena; m, v: the shard [begin, end)
  size_t begin = 0, end = 0;
  // The weights whole, the moments of [begin, end), and that range to write.
  CheckpointContents contents() {
    return {{{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data(), begin, end}, {SET_EXP_AVG_SQ, v.data(), begin, end}},
            begin,
            end};
  }
};

RankArenas filled(const ParamTable& t, size_t begin, size_t end) {
  RankArenas a;
  a.begin = begin;
  a.end = end;
  a.params.resize(t.total_numel());
  for (size_t i = 0; i < a.params.size(); ++i) a.params[i] = param_value(i);
  for (size_t i = begin; i < end; ++i) {
    a.m.push_back(exp_avg_value(i));
    a.v.push_back(exp_avg_sq_value(i));
  }
  return a;
}

// Loads `path` with the moment shard [begin, end) and counts the elements that differ from what was saved.
long long load_and_check(const std::string& path, const ParamTable& t, size_t begin, size_t end, CheckpointMeta& meta) {
  std::vector<float> params(t.total_numel(), SENTINEL), m(end - begin, SENTINEL), v(end - begin, SENTINEL);
  load_checkpoint(
      path, t,
      {{SET_MODEL, params.data()}, {SET_EXP_AVG, m.data(), begin, end}, {SET_EXP_AVG_SQ, v.data(), begin, end}}, meta);
  long long bad = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const bool in = inside_a_tensor(t, i);
    const bool ok =
        params[i] == (in ? param_value(i) : SENTINEL) &&
        (i < begin || i >= end ||
         (m[i - begin] == (in ? exp_avg_value(i) : SENTINEL) && v[i - begin] == (in ? exp_avg_sq_value(i) : SENTINEL)));
    if (!ok && bad++ < 5)
      fprintf(stderr, "[rank %d] %s shard [%zu, %zu): arena index %zu differs\n", world_rank(), path.c_str(), begin,
              end, i);
  }
  return bad;
}

// MPI_COMM_WORLD as a World, described once (collectively, on the first call of every rank).
const World& test_world() {
  static const World world = make_world();
  return world;
}

CheckpointMeta make_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_seen = step * 4096;
  m.world_size = world_size();
  m.config_ini = "[model]\nn_layer = 2\n";
  m.model = c;
  m.optimizer_step = step;
  m.lr = 1e-3f;
  m.ranks.resize(size_t(world_size()));
  for (size_t r = 0; r < m.ranks.size(); ++r) m.ranks[r] = {100 + r, (uint64_t(1) << 40) + 7 * r};
  return m;
}

// Runs `fn`, which must throw ember::Error; returns its message, or "" (and fails) if it did not throw.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "[rank " << world_rank() << "] expected ember::Error";
  return "";
}

// A fresh folder shared by all ranks (rank 0 picks the unique name), removed after the test.
class CheckpointMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name;
    if (world_rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "ember_ckpt_mpi_XXXXXX").string();
      if (::mkdtemp(tmpl.data()) != nullptr) name = tmpl;
    }
    dir_ = broadcast_from_root(name);
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0) fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

TEST_F(CheckpointMpiTest, CollectiveSaveLoadsAtAnySplit) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank(), n = world_size();
  const std::vector<size_t> bounds = even_split(t, n);
  RankArenas a = filled(t, bounds[size_t(rank)], bounds[size_t(rank) + 1]);
  CheckpointMeta meta = make_meta(c, 30);
  // The tokenizer's files (any bytes) go into the file once, whatever the number of ranks.
  meta.tokenizer = CheckpointTokenizer{
      "bpe", "0123456789abcdef", 300, {{"tokenizer.json", std::string("{\"a\": \"\xc4\xa0\"}\0\xff", 13)}}};
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

TEST_F(CheckpointMpiTest, FileIsPlainHdf5ForOneProcess) {
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
TEST_F(CheckpointMpiTest, WholeArenaOnEveryRankIsSplitByTheWriter) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  RankArenas a = filled(t, 0, t.total_numel());
  const CheckpointContents whole{
      {{SET_MODEL, a.params.data()}, {SET_EXP_AVG, a.m.data()}, {SET_EXP_AVG_SQ, a.v.data()}}};
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 3), t, whole, 0, test_world());
  CheckpointMeta got;
  EXPECT_EQ(total_over_ranks(load_and_check(path, t, 0, t.total_numel(), got)), 0);
}

TEST_F(CheckpointMpiTest, FailuresThrowOnEveryRankWithoutHanging) {
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
TEST_F(CheckpointMpiTest, EmptyRangesBesideOneWholeRange) {
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

// Async values, a function of (rank, array, index) only, exact in fp32 and distinct across ranks and arrays.
float momentum_value(size_t i) { return float(i % 555) * 0.375f - 50.0f; }
float rank_array_value(size_t r, size_t k, size_t i) {
  return float((i * 31 + 7) % 2039) + 2048.0f * float(k) + 8192.0f * float(r) + 0.5f;
}
const std::vector<std::string> ASYNC_ARRAYS = {"exp_avg", "exp_avg_sq", "residual"};
constexpr size_t ASYNC_LEN = (size_t(1) << 20) + 3;  // two chunks, the second partial

// An async run's meta: rank 0 the center, every other rank a worker with its three arrays.
CheckpointMeta make_async_meta(const ModelConfig& c, int64_t step) {
  CheckpointMeta m = make_meta(c, step);
  m.mode = TrainingMode::async;
  m.async_version = (uint64_t(1) << 35) + 9;
  m.ranks[0].role = "center";
  for (size_t r = 1; r < m.ranks.size(); ++r) {
    m.ranks[r].role = "worker";
    m.ranks[r].optimizer_step = 1000 + int64_t(r);
    m.ranks[r].seq = (uint64_t(1) << 40) + r;
    m.ranks[r].arrays = ASYNC_ARRAYS;
  }
  return m;
}

// Counts the elements of worker r's arrays in `path` that differ from rank_array_value.
long long check_rank_arrays(const std::string& path, size_t r) {
  std::vector<std::vector<float>> got(ASYNC_ARRAYS.size(), std::vector<float>(ASYNC_LEN, SENTINEL));
  std::vector<RankArray> dst;
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) dst.push_back({ASYNC_ARRAYS[k], got[k].data(), ASYNC_LEN});
  if (!load_rank_arrays(path, int(r), dst)) {
    fprintf(stderr, "[rank %d] %s: no arrays for rank %zu\n", world_rank(), path.c_str(), r);
    return 1;
  }
  long long bad = 0;
  for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k)
    for (size_t i = 0; i < ASYNC_LEN; ++i)
      if (got[k][i] != rank_array_value(r, k, i) && bad++ < 5)
        fprintf(stderr, "[rank %d] %s: /ranks/%zu/%s[%zu] differs\n", world_rank(), path.c_str(), r,
                ASYNC_ARRAYS[k].c_str(), i);
  return bad;
}

TEST_F(CheckpointMpiTest, AsyncCenterAndWorkersRoundTrip) {
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank(), n = world_size();
  const size_t total = t.total_numel();
  const CheckpointMeta meta = make_async_meta(c, 60);

  // The center holds the global weights and the momentum; a worker's own weights differ and must not be written.
  std::vector<float> params(total), momentum;
  for (size_t i = 0; i < total; ++i) params[i] = rank == 0 ? param_value(i) : -1.0f - float(rank);
  std::vector<std::vector<float>> arrays;
  CheckpointContents tt;
  tt.write_begin = rank == 0 ? 0 : total;
  tt.write_end = total;
  if (rank == 0) {
    for (size_t i = 0; i < total; ++i) momentum.push_back(momentum_value(i));
    tt.sets = {{SET_MODEL, params.data()}, {SET_MOMENTUM, momentum.data()}};
  } else {
    tt.sets = {{SET_MODEL, params.data()}, {SET_MOMENTUM, nullptr}};
    for (size_t k = 0; k < ASYNC_ARRAYS.size(); ++k) {
      arrays.emplace_back(ASYNC_LEN);
      for (size_t i = 0; i < ASYNC_LEN; ++i) arrays[k][i] = rank_array_value(size_t(rank), k, i);
      tt.rank_arrays.push_back({ASYNC_ARRAYS[k], arrays[k].data(), ASYNC_LEN});
    }
  }
  const std::string path = save_checkpoint(dir_.string(), meta, t, tt, 0, test_world());
  EXPECT_TRUE(same_on_all_ranks(path));

  // Every rank reads the weights and the momentum whole, and the arrays of every worker.
  long long bad = 0;
  std::vector<float> w(total, SENTINEL), mom(total, SENTINEL);
  const std::vector<TensorSet> load = {{SET_MODEL, w.data()}, {SET_MOMENTUM, mom.data()}};
  CheckpointMeta got;
  load_checkpoint(path, t, load, got);
  for (size_t i = 0; i < total; ++i) {
    const bool in = inside_a_tensor(t, i);
    if ((w[i] != (in ? param_value(i) : SENTINEL) || mom[i] != (in ? momentum_value(i) : SENTINEL)) && bad++ < 5)
      fprintf(stderr, "[rank %d] arena index %zu differs\n", rank, i);
  }
  for (int r = 1; r < n; ++r) bad += check_rank_arrays(path, size_t(r));
  std::vector<float> unused(ASYNC_LEN, SENTINEL);
  EXPECT_FALSE(load_rank_arrays(path, n, {{"exp_avg", unused.data(), ASYNC_LEN}}));  // more workers than written
  EXPECT_FALSE(load_rank_arrays(path, 0, {{"exp_avg", unused.data(), ASYNC_LEN}}));  // the center has none
  EXPECT_EQ(total_over_ranks(bad), 0);

  EXPECT_EQ(got.mode, TrainingMode::async);
  EXPECT_EQ(got.async_version, meta.async_version);
  ASSERT_EQ(got.ranks.size(), size_t(n));
  EXPECT_EQ(got.ranks[0].role, "center");
  EXPECT_EQ(got.ranks[0].optimizer_step, 0);
  EXPECT_EQ(got.ranks[0].seq, 0u);
  EXPECT_TRUE(got.ranks[0].arrays.empty());
  for (size_t r = 1; r < got.ranks.size(); ++r) {
    EXPECT_EQ(got.ranks[r].role, "worker") << r;
    EXPECT_EQ(got.ranks[r].optimizer_step, 1000 + int64_t(r)) << r;
    EXPECT_EQ(got.ranks[r].seq, (uint64_t(1) << 40) + r) << r;
    EXPECT_EQ(got.ranks[r].arrays, ASYNC_ARRAYS) << r;
    EXPECT_EQ(got.ranks[r].data_cursor, 100 + r) << r;
  }

  // One process checks the whole file as `ember inspect` and --resume do: every dataset, the flat arrays included.
  long long damaged = 0;
  if (rank == 0) {
    verify_checkpoint(path);
    const std::vector<CheckpointDatasetReport> reports = scan_checkpoint(path);
    EXPECT_EQ(reports.size(), 1 + 2 * t.params().size() + ASYNC_ARRAYS.size() * size_t(n - 1));
    size_t flat = 0;
    for (const CheckpointDatasetReport& r : reports) {
      damaged += !r.ok;
      if (r.path.rfind("/ranks/", 0) != 0) continue;
      ++flat;
      EXPECT_EQ(r.dtype, "float32") << r.path;
      EXPECT_EQ(r.shape, (std::vector<uint64_t>{ASYNC_LEN})) << r.path;
    }
    EXPECT_EQ(flat, ASYNC_ARRAYS.size() * size_t(n - 1));
  }
  EXPECT_EQ(total_over_ranks(damaged), 0);
}

TEST_F(CheckpointMpiTest, AsyncMistakeOnOneRankFailsEveryRank) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs a center and at least one worker (2 ranks)";
  const ModelConfig c = test_config();
  const ParamTable t(c);
  const int rank = world_rank();
  const size_t total = t.total_numel();
  std::vector<float> params(total, 1.0f), momentum(total, 2.0f), array(16, 3.0f);
  auto contents = [&](const std::string& array_name) {
    CheckpointContents tt;
    tt.sets = {{SET_MODEL, params.data()}, {SET_MOMENTUM, rank == 0 ? momentum.data() : nullptr}};
    tt.write_begin = rank == 0 ? 0 : total;
    tt.write_end = total;
    if (rank > 0)
      for (const std::string& name : ASYNC_ARRAYS)
        tt.rank_arrays.push_back({name == "residual" ? array_name : name, array.data(), array.size()});
    return tt;
  };
  // The last worker names an array differently from the metadata.
  std::string e = error_of([&] {
    save_checkpoint(dir_.string(), make_async_meta(c, 70), t, contents(rank == n - 1 ? "residue" : "residual"), 0,
                    test_world());
  });
  EXPECT_NE(e.find("rank_arrays"), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;

  // The last worker's copy of the metadata has another seq for rank 1.
  CheckpointMeta other = make_async_meta(c, 71);
  if (rank == n - 1) other.ranks[1].seq += 1;
  e = error_of([&] { save_checkpoint(dir_.string(), other, t, contents("residual"), 0, test_world()); });
  EXPECT_NE(e.find("other metadata"), std::string::npos) << e;
  EXPECT_TRUE(same_on_all_ranks(e)) << e;

  // Nothing half-written is left behind, and the correct save then works.
  MPI_Barrier(MPI_COMM_WORLD);
  for (int64_t step : {70, 71}) EXPECT_FALSE(fs::exists(checkpoint_path(dir_.string(), step) + ".tmp"));
  const std::string path =
      save_checkpoint(dir_.string(), make_async_meta(c, 72), t, contents("residual"), 0, test_world());
  std::vector<float> back(array.size(), 0.0f);
  EXPECT_TRUE(load_rank_arrays(path, n - 1, {{"residual", back.data(), array.size()}}));
  EXPECT_EQ(back, array);
}

}  // namespace
}  // namespace ember
